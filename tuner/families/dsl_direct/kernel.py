"""The dsl_direct kernel: a direct (not implicit-GEMM) convolution of depthwise layers and of groups of 8 channels,
on CUDA cores, written in the CuTe DSL. One kernel per problem: every extent is static.

    x[n, h, w, c] * w[k, r, s, g] -> y[n, p, q, k],  y = act(scale[k] * acc + bias[k]),  k = c, g in {1, 8}

A CTA computes tile_p x tile_q output pixels of one image for `channels` channels (a slice of whole groups). It
stages the tile's input window once in shared memory, zero-filled where it falls outside the image (the padding),
in 16-byte vectors of 8 channels, and its channels' filter as f32, tap-major ([tap][k] depthwise, [tap][k][g]
grouped). Each thread then owns one vector of 8 output channels (a group, when g is 8) and `columns` consecutive
output pixels of one row: for each filter row it loads the input vectors its outputs read into registers (as f32)
and adds every tap of that row to its f32 accumulators, so a loaded input vector serves all of the row's taps
that read it. The epilogue scales, adds the bias, applies the activation and stores each pixel's vector.
Where CUTLASS's direct kernel (sm80_depthwise) reloads each tile's window per stage and its epilogue goes through
shared memory, here there is one barrier a CTA and none in the loop."""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils as utils

from .kernel_common import channel_vectors, cta_tile_origin, epilogue_value
from .spec import VECTOR, DirectBuildSpec


class DirectKernel:
    def __init__(self, spec: DirectBuildSpec, element):
        self.spec = spec
        self.element = element
        self.threads = spec.tile.threads()
        self.smem_bytes = spec.smem_bytes()
        self.window = spec.window()
        self.grid = spec.grid()

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, scale: cute.Tensor, bias: cute.Tensor,
                 stream: cuda.CUstream):
        self.kernel(x, w, y, scale, bias).launch(grid=list(self.grid), block=[self.threads, 1, 1],
                                                 smem=self.smem_bytes, stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, mScale: cute.Tensor, mBias: cute.Tensor):
        spec = self.spec
        pr, t, e = spec.problem, spec.tile, spec.epilogue
        el, f32 = self.element, cutlass.Float32
        gw = pr.group_width
        lanes = t.channels // VECTOR
        win_h, win_w = self.window
        taps = pr.r * pr.s

        tidx, _, _ = cute.arch.thread_idx()
        _, by, _ = cute.arch.block_idx()
        n, p0, q0 = cta_tile_origin(pr, t)
        c0 = by * t.channels
        h0 = p0 * pr.stride_h - pr.pad_h
        w0 = q0 * pr.stride_w - pr.pad_w

        smem = utils.SmemAllocator()
        s_win = smem.allocate_tensor(el, cute.make_layout(win_h * win_w * t.channels), 16)
        s_fil = smem.allocate_tensor(f32, cute.make_layout(taps * t.channels * gw), 16)
        win_vectors = cute.zipped_divide(s_win, (VECTOR,))
        x_vectors = cute.zipped_divide(mX, (VECTOR,))
        y_vectors = cute.zipped_divide(mY, (VECTOR,))
        copy16 = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), el, num_bits_per_copy=128)
        copy_async = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), el, num_bits_per_copy=128)
        chunk = cute.make_rmem_tensor((VECTOR,), el)
        zeros = cute.make_rmem_tensor((VECTOR,), el)
        zeros.fill(0.0)

        # The window: a 16-byte vector a thread a round, by cp.async so that every round's load is in flight at
        # once (synchronous loads cost a memory latency a round: most of a one-warp CTA's time); zeros where the
        # window falls outside the image.
        n_vectors = win_h * win_w * lanes
        for i in cutlass.range_constexpr(-(-n_vectors // self.threads)):
            vector = tidx + i * self.threads
            if vector < n_vectors:
                pixel = vector // lanes
                lane = vector - pixel * lanes
                row = pixel // win_w
                hh = h0 + row
                ww = w0 + pixel - row * win_w
                inside = (cutlass.Int32(hh >= 0) * cutlass.Int32(hh < pr.h) * cutlass.Int32(ww >= 0)
                          * cutlass.Int32(ww < pr.w))
                if inside > 0:
                    source = (((n * pr.h + hh) * pr.w + ww) * pr.c + c0) // VECTOR + lane
                    cute.copy(copy_async, x_vectors[(None, source)], win_vectors[(None, vector)])
                else:
                    cute.copy(copy16, zeros, win_vectors[(None, vector)])
        cute.arch.cp_async_commit_group()
        # The filter, f32, tap-major: element (tap, k, g) of the CTA at (tap * channels + k) * gw + g. Every round
        # loads (the last from a clamped index) before any store is predicated, so the loads issue together.
        per_tap = t.channels * gw
        filter_size = taps * per_tap
        for i in cutlass.range_constexpr(-(-filter_size // self.threads)):
            index = tidx + i * self.threads
            last = cutlass.const_expr((i + 1) * self.threads > filter_size)  # a round some threads sit out
            clamped = cutlass.min(index, filter_size - 1) if last else index
            tap = clamped // per_tap
            kg = clamped - tap * per_tap
            value = f32(mW[((c0 + kg // gw) * taps + tap) * gw + kg % gw])
            if cutlass.const_expr(last):
                if index < filter_size:
                    s_fil[index] = value
            else:
                s_fil[index] = value
        cute.arch.cp_async_wait_group(0)
        cute.arch.barrier()

        lane = tidx % lanes
        group = tidx // lanes
        segments = t.tile_q // t.columns
        row = group // segments
        segment = group - row * segments
        cols = spec.window_columns_a_thread()
        acc = cute.make_rmem_tensor((t.columns * VECTOR,), f32)
        acc.fill(0.0)
        xin = cute.make_rmem_tensor((cols * VECTOR,), f32)
        taps_row = cute.make_rmem_tensor((VECTOR * gw,), f32)
        for r in cutlass.range_constexpr(pr.r):
            first = ((row * pr.stride_h + r * pr.dilation_h) * win_w + segment * t.columns * pr.stride_w) * lanes + lane
            for j in cutlass.range_constexpr(cols):
                cute.copy(copy16, win_vectors[(None, first + j * lanes)], chunk)
                for i in cutlass.range_constexpr(VECTOR):
                    xin[j * VECTOR + i] = f32(chunk[i])
            for s in cutlass.range_constexpr(pr.s):
                for i in cutlass.range_constexpr(VECTOR * gw):
                    taps_row[i] = s_fil[((r * pr.s + s) * t.channels + lane * VECTOR) * gw + i]
                for o in cutlass.range_constexpr(t.columns):
                    column = o * pr.stride_w + s * pr.dilation_w
                    for i in cutlass.range_constexpr(VECTOR):
                        for g in cutlass.range_constexpr(gw):
                            # depthwise: channel i by its own tap; a group of 8: output i sums the group's 8 inputs
                            xi = xin[column * VECTOR + (i if gw == 1 else g)]
                            acc[o * VECTOR + i] = acc[o * VECTOR + i] + xi * taps_row[i * gw + g]

        scales, biases = channel_vectors(e, mScale, mBias, c0 + lane * VECTOR, VECTOR)
        p = p0 + row
        for o in cutlass.range_constexpr(t.columns):
            q = q0 + segment * t.columns + o
            if p < pr.p:
                if q < pr.q:
                    for i in cutlass.range_constexpr(VECTOR):
                        chunk[i] = el(epilogue_value(acc[o * VECTOR + i], e, scales, biases, i))
                    target = (((n * pr.p + p) * pr.q + q) * pr.c + c0) // VECTOR + lane
                    cute.copy(copy16, chunk, y_vectors[(None, target)])
