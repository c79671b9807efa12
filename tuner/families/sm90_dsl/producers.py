"""The sm90 CuTe DSL kernel's loads that are not the TMA mainloop: the gathering producer of a kernel over fewer than
8 channels and its resident filter, and the residual's epilogue-load warp. A mixin of kernel.ConvKernel (self.g is
its geometry.Geometry)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils


class Producers:
    @cute.jit
    def load_filter(self, mW: cute.Tensor, sB: cute.Tensor, tidx):
        """A gathering kernel's B: the whole filter as [K, R*S*C] (row-major, K within the one N tile), every k tile
        of it, written once by all the CTA's threads before the roles split; zero past K and past R*S*C."""
        g = self.g
        f16 = self.dtype
        rsc = g.r * g.s * g.c
        per_tile = g.tile_n * g.tile_k
        for i in cutlass.range_constexpr(-(-(per_tile * g.k_tiles) // g.threads)):
            element = tidx + i * g.threads
            if element < per_tile * g.k_tiles:
                kt = element // per_tile
                rest = element - kt * per_tile
                row = rest // g.tile_k
                kk = rest - row * g.tile_k
                kg = kt * g.tile_k + kk
                inside = cutlass.Int32(row < g.k) * cutlass.Int32(kg < rsc)
                sB[(row, kk, kt)] = mW[(row * rsc + kg) * inside] * f16(inside)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier()

    @cute.jit
    def gather_pixels(self, mX: cute.Tensor, sA: cute.Tensor, mainloop, sched: utils.PersistentTileSchedulerParams,
                      tidx):
        """The gathering producer (C < 8): the warpgroup's 128 threads walk the CTA's tiles as the TMA producer
        does and write each k tile's A themselves. K runs over the filter's (r, s, c) unpadded, so a k tile holds
        taps of several filter positions: thread t writes row t (output pixel m0 + t; its (r, s, c) are
        compile-time per column, its bounds checks one per filter row and column), eight columns at a time as
        one 16-byte store (a swizzle keeps 16-byte chunks whole). Out of bounds (padding, past the last pixel,
        past R*S*C) reads element 0 and writes zero. The stores are the generic proxy's: fenced for wgmma's
        async proxy before the arrival."""
        g = self.g
        f16 = self.dtype
        pq = g.out_p * g.out_q
        rsc = g.r * g.s * g.c
        chunk = cute.make_rmem_tensor((8,), f16)
        store16 = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), f16, num_bits_per_copy=128)
        scheduler = self.make_scheduler(sched)
        work = scheduler.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, g.stages)
        while work.is_valid_tile:
            pixel = work.tile_idx[0] * g.tile_m + tidx
            n = pixel // pq
            rest = pixel - n * pq
            p = rest // g.out_q
            h0 = p * g.stride_h - g.pad_h
            w0 = (rest - p * g.out_q) * g.stride_w - g.pad_w
            base = ((n * g.src_h + h0) * g.src_w + w0) * g.c
            # 1 where the pixel is real and the filter row (column) falls inside the input, else 0
            in_pixel = cutlass.Int32(pixel < g.src_n * pq)
            rows_in = [in_pixel * cutlass.Int32(h0 + r * g.dilation_h >= 0)
                       * cutlass.Int32(h0 + r * g.dilation_h < g.src_h) for r in range(g.r)]
            cols_in = [cutlass.Int32(w0 + s * g.dilation_w >= 0) * cutlass.Int32(w0 + s * g.dilation_w < g.src_w)
                       for s in range(g.s)]
            for kt in cutlass.range_constexpr(g.k_tiles):
                mainloop.producer_acquire(state)
                if tidx < g.tile_m:
                    row = cute.zipped_divide(sA[(tidx, None, state.index)], (8,))
                    for j in cutlass.range_constexpr(g.tile_k // 8):
                        for i in cutlass.range_constexpr(8):
                            kg = kt * g.tile_k + j * 8 + i
                            if cutlass.const_expr(kg < rsc):
                                r, rs_rest = divmod(kg, g.s * g.c)
                                s, c = divmod(rs_rest, g.c)
                                inside = rows_in[r] * cols_in[s]
                                offset = (r * g.dilation_h * g.src_w + s * g.dilation_w) * g.c + c
                                chunk[i] = mX[(base + offset) * inside] * f16(inside)
                            else:
                                chunk[i] = f16(0.0)
                        cute.copy(store16, chunk, row[(None, j)])
                cute.arch.fence_proxy("async.shared", space="cta")
                mainloop.producer_commit(state)
                state.advance()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        mainloop.producer_tail(state)

    @cute.jit
    def load_residual(self, tma_r: cute.CopyAtom, mR: cute.Tensor, sR: cute.Tensor, ring_full, ring_empty,
                      sched: utils.PersistentTileSchedulerParams):
        """The epilogue-load warp: walks the CTA's tiles as the mainloop producer does and loads each tile's
        residual, one epilogue subtile a TMA box, into the ring of the consumer group that takes the tile (in
        pingpong group (tile count) mod 2), as its slots are released. Each group has its own ring: one ring
        shared by groups that run apart would let a parity wait match a phase two laps behind (see
        order_barrier). The residual is the CTA's own, never multicast."""
        g = self.g
        box_m = (g.tile_q, g.bp, g.bn)
        scheduler = self.make_scheduler(sched)
        work = scheduler.initial_work_tile_info()
        while work.is_valid_tile:
            gR = self.output_tile(mR, work)
            bR_s, bR_g = cute.nvgpu.cpasync.tma_partition(
                tma_r, 0, cute.make_layout(1), cute.group_modes(sR, 0, 2), cute.zipped_divide(gR, (box_m, g.epi_n)))
            grp = scheduler.num_tiles_executed % g.groups
            group_tiles = scheduler.num_tiles_executed // g.groups
            for e in cutlass.range_constexpr(g.epi_count):
                slot, phase = self.ring_position(group_tiles, e)
                slot = slot + grp * g.res_stages
                cute.arch.mbarrier_wait(ring_empty + slot, phase ^ 1)  # the first lap passes at once
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(ring_full + slot, g.tile_m * g.epi_n * 2)
                cute.copy(tma_r, bR_g[(None, (0, e))], bR_s[(None, slot)], tma_bar_ptr=ring_full + slot,
                          **self.l2_policy("residual"))
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
