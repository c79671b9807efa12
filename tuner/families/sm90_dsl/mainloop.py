"""The sm90 CuTe DSL kernel's TMA mainloop: the producer warp's loads of every work tile's k tiles, A box and B box
a k tile, into the stage pipeline that the consumers read; and the positions in the work and in that pipeline
which the producers and the consumers share. A mixin of kernel.ConvKernel (self.g is its geometry.Geometry)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils

from .cluster_split import ClusterSplitScheduler
from .geometry import Phase
from .spec import L2_EVICT_FIRST, L2_EVICT_LAST
from .stream_k import StreamKScheduler


class Mainloop:
    @cute.jit
    def load_operands(self, a_operands: tuple, tma_b: cute.CopyAtom, mW: cute.Tensor, sA: cute.Tensor,
                      sB: cute.Tensor, mainloop, sched: utils.PersistentTileSchedulerParams, cl_coord, a_mask, b_mask):
        """The TMA producer (warp 0): for each of the CTA's work tiles, its k tiles phase by phase, A from the
        phase's view of x (a_operands[pi], a (TMA atom, tensor) pair) and B from the filter, multicast across the
        cluster (A along cluster N, B along cluster M)."""
        g = self.g
        box_m = (g.tile_q, g.bp, g.bn)
        a_cta_layout = cute.make_layout(g.cluster_n)
        b_cta_layout = cute.make_layout(g.cluster_m)
        kb = g.k_blocks_per_tap
        scheduler = self.make_scheduler(sched)
        work = scheduler.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, g.stages)
        while work.is_valid_tile:
            q0, p0, n0, k0 = self.tile_origin(work)
            k_begin, k_end = self.unit_k_range(scheduler, work)
            # k tiles phase by phase (the order of the sum does not matter; A and B of a k tile match),
            # in each phase tap by tap, tile_k channels a time
            for pi, ph in enumerate(g.phases()):
                tma_a, mX = a_operands[pi]
                kt_first, kt_stop = self.phase_k_bounds(pi, ph, k_begin, k_end)
                for kt in cutlass.range(kt_first, kt_stop, unroll=1):
                    tap_i = kt // kb
                    c0 = (kt - tap_i * kb) * g.tile_k
                    ri = tap_i // ph.ns
                    si = tap_i - ri * ph.ns
                    tap = (ph.r0 + ri * ph.rstep) * g.s + ph.s0 + si * ph.sstep
                    wq = q0 + ph.wo0 + si * ph.wstep
                    hp = p0 + ph.ho0 + ri * ph.hstep
                    gA = cute.local_tile(cute.domain_offset(((wq, hp, n0), c0), mX), (box_m, g.tile_k), (0, 0))
                    gB = cute.local_tile(cute.domain_offset((k0, tap * g.c + c0), mW), (g.tile_n, g.tile_k),
                                         (0, 0))
                    tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
                        tma_a, cl_coord[1], a_cta_layout, cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
                    tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                        tma_b, cl_coord[0], b_cta_layout, cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
                    mainloop.producer_acquire(state)
                    barrier = mainloop.producer_get_barrier(state)
                    cute.copy(tma_a, tAgA, tAsA[(None, state.index)], tma_bar_ptr=barrier, mcast_mask=a_mask,
                              **self.l2_policy("x"))
                    cute.copy(tma_b, tBgB, tBsB[(None, state.index)], tma_bar_ptr=barrier, mcast_mask=b_mask,
                              **self.l2_policy("w"))
                    mainloop.producer_commit(state)
                    state.advance()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        mainloop.producer_tail(state)

    @cute.jit
    def load_operands_im2col(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mW: cute.Tensor,
                             sA: cute.Tensor, sB: cute.Tensor, mainloop, sched: utils.PersistentTileSchedulerParams,
                             cl_coord, a_mask, b_mask):
        """The TMA producer of an im2col kernel (im2col.py): for each work unit, its k tiles [begin, end) of the
        (channel block, s, r) order; A is the im2col view's tile of tile_m output pixels from the unit's first (the
        TMA unit finds each pixel's input and zero-fills the padding), B the filter's (K, (C, S, R)) view's tile."""
        g = self.g
        gA = cute.local_tile(mA, (g.tile_m, (g.tile_k,)), (None, None))  # (tile_m, (tile_k), m tiles, k tiles)
        gB = cute.local_tile(mW, (g.tile_n, (g.tile_k,)), (None, None))  # (tile_n, (tile_k), n tiles, k tiles)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a, cl_coord[1], cute.make_layout(g.cluster_n), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b, cl_coord[0], cute.make_layout(g.cluster_m), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        scheduler = self.make_scheduler(sched)
        work = scheduler.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, g.stages)
        while work.is_valid_tile:
            k_begin, k_end = self.unit_k_range(scheduler, work)
            mi, ni = work.tile_idx[0], work.tile_idx[1]
            for kt in cutlass.range(k_begin, k_end, unroll=1):
                mainloop.producer_acquire(state)
                barrier = mainloop.producer_get_barrier(state)
                cute.copy(tma_a, tAgA[(None, mi, kt)], tAsA[(None, state.index)], tma_bar_ptr=barrier,
                          mcast_mask=a_mask, **self.l2_policy("x"))
                cute.copy(tma_b, tBgB[(None, ni, kt)], tBsB[(None, state.index)], tma_bar_ptr=barrier,
                          mcast_mask=b_mask, **self.l2_policy("w"))
                mainloop.producer_commit(state)
                state.advance()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        mainloop.producer_tail(state)

    def l2_policy(self, operand: str) -> dict:
        """The keyword that sets a TMA copy's L2 eviction priority (spec.L2_HINTS) for the operand ("x", "w", "y",
        "residual"), read as the kernel is traced: none by default; with "stream" the filter evict-last (every M tile
        reads it) and the others, each read or written once, evict-first."""
        if not self.g.l2_stream:
            return {}
        return {"cache_policy": cutlass.Int64(L2_EVICT_LAST if operand == "w" else L2_EVICT_FIRST)}

    def tile_origin(self, work):
        """The work tile's first output column q0, row p0, image n0 and channel k0.

        A cluster or a swizzle rounds the scheduled M tiles up, and the tiles past the last must land outside y,
        where TMA clips their stores: the index runs on in the outermost mode longer than 1, since TMA drops a mode
        of extent 1 and would wrap such a tile onto the first (an im2col kernel's eighth tile of seven, computed from
        other pixels, overwrote the first on the H200)."""
        g = self.g
        mi, ni = work.tile_idx[0], work.tile_idx[1]
        if cutlass.const_expr(g.xn > 1):
            q0 = (mi % g.m_tiles_q) * g.tile_q
            p0 = ((mi // g.m_tiles_q) % g.m_tiles_p) * g.bp
            n0 = (mi // (g.m_tiles_q * g.m_tiles_p)) * g.bn
        elif cutlass.const_expr(g.yp > 1):
            q0 = (mi % g.m_tiles_q) * g.tile_q
            p0 = (mi // g.m_tiles_q) * g.bp
            n0 = 0
        else:
            q0, p0, n0 = mi * g.tile_q, 0, 0
        return q0, p0, n0, ni * g.tile_n

    def output_tile(self, tensor: cute.Tensor, work) -> cute.Tensor:
        """The work tile's (box of pixels) x tile_n channels of an output-shaped tensor (y or the residual)."""
        g = self.g
        q0, p0, n0, k0 = self.tile_origin(work)
        return cute.local_tile(cute.domain_offset(((q0, p0, n0), k0), tensor), ((g.tile_q, g.bp, g.bn), g.tile_n),
                               (0, 0))

    def make_scheduler(self, sched: utils.PersistentTileSchedulerParams):
        """The persistent scheduler every role walks its work with: tiles (with split-K, (tile, split) units, also
        when a cluster's CTAs are a tile's splits: cluster_split.ClusterSplitScheduler), or stream-K's units
        (stream_k.StreamKScheduler)."""
        if cutlass.const_expr(self.g.stream_k):
            return StreamKScheduler.create_for(sched, cute.arch.block_idx(), cute.arch.grid_dim(), self.g.stream_plan)
        if cutlass.const_expr(self.g.cluster_reduce):
            return ClusterSplitScheduler.create_for(sched, cute.arch.block_idx(), cute.arch.grid_dim(), self.g.split_k)
        return utils.StaticPersistentTileScheduler.create(sched, cute.arch.block_idx(), cute.arch.grid_dim())

    def unit_k_range(self, scheduler, work):
        """The k tiles [begin, end) of the current work unit's tile: all of them without a split; of split
        work.tile_idx[2] with split-K (spec.split_k_range); the unit's with stream-K."""
        g = self.g
        if cutlass.const_expr(g.stream_k):
            return scheduler.k_range()
        if cutlass.const_expr(g.split_k == 1):
            return 0, g.k_tiles
        split = work.tile_idx[2]
        return split * g.k_tiles // g.split_k, (split + 1) * g.k_tiles // g.split_k

    def phase_k_bounds(self, pi: int, ph: Phase, k_begin, k_end) -> tuple:
        """cutlass.range's bounds over phase pi's own k tiles for the unit's global k tiles [k_begin, k_end):
        the phase holds global k tiles [offset, offset + count); an empty intersection runs no iteration."""
        g = self.g
        count = ph.nr * ph.ns * g.k_blocks_per_tap
        if cutlass.const_expr(not g.splits):
            return 0, count
        offset = g.phase_k_offsets()[pi]
        return (cutlass.max(k_begin, offset) - offset, cutlass.min(k_end, offset + count) - offset)

    def consumer_state_at(self, count):
        """The consumer's pipeline state after `count` k tiles (index count mod stages, phase flipping per lap)."""
        count = cutlass.Int32(count)
        return pipeline.PipelineState(self.g.stages, count, count % self.g.stages, (count // self.g.stages) % 2)
