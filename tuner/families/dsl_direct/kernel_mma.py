"""dsl_direct's "mma" mapping: groups of 8 channels on tensor cores, one mma.sync.m16n8k8 a filter tap.

A group of 8 is a block-diagonal GEMM: y[m, 8g+n] = sum over taps t and k < 8 of x[pixel(m, t), 8g+k] * w[8g+n, t, k].
One m16n8k8 instruction is one tap of 16 output pixels x the group's 8 outputs x its 8 inputs, and each of its
operand fragments is a 32-bit word of two adjacent channels, which NHWC and the K x R x S x 8 filter hold
contiguously, so a lane loads its fragments straight from global memory:

    lane (gid = lane / 4, tig = lane % 4)   A: x[pixel gid][2tig, 2tig+1] and x[pixel gid+8][...]
                                            B: w[output gid][tap][2tig, 2tig+1]   (every tap's, in registers)
                                            C: y[pixel gid][2tig, 2tig+1] and y[pixel gid+8][...]

A CTA's warps take the same pixels for each of its groups, so together they read whole pixel vectors and L1
serves the taps' overlap; there is no shared memory and no barrier. Where the CUDA-core mapping (kernel.py) spends
64 multiply-adds a tap a pixel on a group of 8, this spends one instruction a tap on 16 pixels. Positions outside
the image load index 0 and are multiplied by zero, so every load issues unpredicated."""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .kernel_common import channel_vectors, cta_tile_origin, epilogue_value
from .spec import MMA_PIXELS, VECTOR, WARP, DirectBuildSpec

HALF = MMA_PIXELS // 2  # the A and C fragments' second row block: pixels gid + 8


@dsl_user_op
def mma_16x8x8(a0, a1, b0, acc, element_name: str, *, loc=None, ip=None):
    """D = A * B + C for one warp: A's two words, B's word and C's four floats of this lane; D's four floats."""
    operands = [cutlass.Int32(v).ir_value(loc=loc, ip=ip) for v in (a0, a1, b0)]
    operands += [cutlass.Float32(v).ir_value(loc=loc, ip=ip) for v in acc]
    result = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4), operands,
        f"mma.sync.aligned.m16n8k8.row.col.f32.{element_name}.{element_name}.f32 "
        "{$0,$1,$2,$3}, {$4,$5}, {$6}, {$7,$8,$9,$10};",
        "=f,=f,=f,=f,r,r,r,f,f,f,f", has_side_effects=False, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)
    return [cutlass.Float32(llvm.extractvalue(T.f32(), result, [i], loc=loc, ip=ip)) for i in range(4)]


class MmaKernel:
    def __init__(self, spec: DirectBuildSpec, element):
        self.spec = spec
        self.element = element
        self.element_name = "bf16" if spec.element == "bf16" else "f16"
        self.threads = spec.tile.threads()
        self.grid = spec.grid()

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, scale: cute.Tensor, bias: cute.Tensor,
                 stream: cuda.CUstream):
        self.kernel(x, w, y, scale, bias).launch(grid=list(self.grid), block=[self.threads, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, mScale: cute.Tensor, mBias: cute.Tensor):
        spec = self.spec
        pr, t, e = spec.problem, spec.tile, spec.epilogue
        i32, f32 = cutlass.Int32, cutlass.Float32
        taps = pr.r * pr.s
        words = pr.c // 2            # 32-bit words of one pixel's channels
        group_words = VECTOR // 2    # a group's 8 channels: 4 words, one a lane of a quad
        groups_a_cta = t.channels // VECTOR
        xi = cute.recast_tensor(mX, i32)
        wi = cute.recast_tensor(mW, i32)
        yi = cute.recast_tensor(mY, i32)

        tidx, _, _ = cute.arch.thread_idx()
        _, by, _ = cute.arch.block_idx()
        n, p0, q0 = cta_tile_origin(pr, t)
        warp = tidx // WARP
        lane = tidx % WARP
        gid = lane // 4
        tig = lane % 4
        group = by * groups_a_cta + warp % groups_a_cta
        first_pixel = (warp // groups_a_cta) * (t.columns * MMA_PIXELS)  # in the CTA's tile, row-major
        channel_word = group * group_words + tig

        b = cute.make_rmem_tensor((taps,), i32)
        for tap in cutlass.range_constexpr(taps):
            b[tap] = wi[((group * VECTOR + gid) * taps + tap) * group_words + tig]
        # the output pixel (p, q) of each of this lane's fragment rows: tile by tile, rows gid and gid + 8
        rows = []
        for tile in cutlass.range_constexpr(t.columns):
            for half in cutlass.range_constexpr(2):
                pixel = first_pixel + tile * MMA_PIXELS + half * HALF + gid
                rows.append((p0 + pixel // t.tile_q, q0 + pixel % t.tile_q))
        a = cute.make_rmem_tensor((t.columns * 2 * taps,), i32)
        for tile in cutlass.range_constexpr(t.columns):
            for half in cutlass.range_constexpr(2):
                p, q = rows[tile * 2 + half]
                for r in cutlass.range_constexpr(pr.r):
                    hh = p * pr.stride_h - pr.pad_h + r * pr.dilation_h
                    row_inside = i32(hh >= 0) * i32(hh < pr.h)
                    for s in cutlass.range_constexpr(pr.s):
                        ww = q * pr.stride_w - pr.pad_w + s * pr.dilation_w
                        inside = row_inside * i32(ww >= 0) * i32(ww < pr.w)
                        index = (((n * pr.h + hh) * pr.w + ww) * words + channel_word) * inside
                        a[(tile * 2 + half) * taps + r * pr.s + s] = xi[index] * inside

        scales, biases = channel_vectors(e, mScale, mBias, group * VECTOR + 2 * tig, 2)
        packed = cute.make_rmem_tensor((2,), self.element)
        packed_word = cute.recast_tensor(packed, i32)
        for tile in cutlass.range_constexpr(t.columns):
            acc = [f32(0.0)] * 4
            for tap in cutlass.range_constexpr(taps):
                acc = mma_16x8x8(a[(tile * 2) * taps + tap], a[(tile * 2 + 1) * taps + tap], b[tap], acc,
                                 self.element_name)
            for half in cutlass.range_constexpr(2):
                p, q = rows[tile * 2 + half]
                if p < pr.p:
                    if q < pr.q:
                        for j in cutlass.range_constexpr(2):
                            packed[j] = self.element(epilogue_value(acc[2 * half + j], e, scales, biases, j))
                        yi[((n * pr.p + p) * pr.q + q) * words + channel_word] = packed_word[0]
