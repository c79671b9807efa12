"""The sm90 CuTe DSL kernel: a persistent, warp-specialised implicit-GEMM convolution (and GEMM) for Hopper.

One kernel per problem: every extent is static. Layout (NHWC, f16 or bf16 in and out, f32 accumulate):
    x[n, h, w, c] * w[k, r, s, c] -> y[n, p, q, k],  y = act(scale[k] * acc + bias[k] + beta * residual)

GEMM view. M runs over output pixels, N over output channels, K over (filter tap r, s) x (channel c).
The M tile of tile_m pixels is a box of tile_q output columns x bp output rows x bn images
(tile_m = tile_q * bp * bn), so that for each filter tap (r, s) the A operand is ONE TMA box of the
NHWC input viewed as the 4-D tensor (c, w, h, n), at (c0, q0 + s*dil - pad, p0 + r*dil - pad, n0):
TMA fills out-of-bounds elements with zeros, which is the convolution's padding, and the store of y
is a box of the same shape, clipped by TMA at P, Q and N. A 1x1 unpadded stride-1 problem (a GEMM)
is the special case W' = n*h*w, H' = N' = 1, tile_q = tile_m.

B is the filter viewed as [k, r*s*c] (K-major): the k-block of tap (r, s) and channel c0 starts at
column (r*S + s)*C + c0. When tile_k does not divide C the box runs into the next tap's weights; the
A box is zero there (c >= C is out of bounds), so the product is unchanged.

Warp specialisation: warp 0 of warpgroup 0 is the producer (TMA loads into a multi-stage mbarrier
pipeline, multicast across the cluster: A along cluster N, B along cluster M); one ('single') or
two ('cooperative', the M tile split between them) consumer warpgroups issue wgmma and run the fused
epilogue, then store through shared memory with TMA; or ('pingpong') two consumer warpgroups on alternate
tiles, each a whole 64- or 128-row tile with its own epilogue buffers, taking turns on the mainloop (an
mbarrier pair, CUTLASS's OrderedSequenceBarrier) so that one's epilogue runs under the other's wgmma. Tiles are
handed out by a static persistent scheduler (grid = min(tiles, SMs / cluster) clusters, raster m|n, swizzle groups).

The residual, when the epilogue has one, comes in as CUTLASS's TMA warp-specialised epilogue loads its source C:
warp 1 of warpgroup 0 walks the same tiles and loads each tile's residual one epilogue subtile (tile_m x epi_n)
a TMA box into a ring of res_stages subtiles per consumer group (full/empty mbarriers a slot), as the consumers
free the slots; the consumers read each subtile by ldmatrix when their epilogue reaches it.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils

from .epilogue import EpilogueSteps
from .geometry import SM_COUNT, Geometry, Phase, geometry
from .producers import Producers
from .spec import BuildSpec

PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
# a gathering producer holds a pixel's coordinates and predicates. setmaxnreg only moves the registers the launch
# gave the CTA (168 a thread x 384 threads): 128 x 96 + 256 x 200 stays within them, where 208 made the consumers'
# increase wait forever (the H100 hung)
GATHER_PRODUCER_REGISTERS = 96
GATHER_CONSUMER_REGISTERS = 200


class ConvKernel(Producers, EpilogueSteps):
    """Builds the launch function for one Geometry. __call__ is the @cute.jit host function."""

    def __init__(self, g: Geometry, element=None):
        self.g = g
        # the 16-bit element of x, w, y and the residual (Float16 or BFloat16); the code calls it f16
        self.dtype = element or cutlass.Float16
        self.acc_dtype = cutlass.Float32
        self.num_mma_threads = 128 * g.consumers
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)

    # ----------------------------------------------------------------------------------------- host

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, scale: cute.Tensor,
                 bias: cute.Tensor, residual: cute.Tensor, partials: cute.Tensor, counters: cute.Tensor,
                 stream: cuda.CUstream):
        g = self.g
        f16 = self.dtype
        tile_mnk = (g.tile_m, g.tile_n, g.tile_k)
        kmaj = utils.LayoutEnum.ROW_MAJOR  # A (m, k) and B (n, k) both K-major; D (m, n) N-major

        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            f16, f16, cute.nvgpu.warpgroup.OperandMajorMode.K, cute.nvgpu.warpgroup.OperandMajorMode.K,
            self.acc_dtype, (1 if g.pingpong else g.consumers, 1, 1), tiler_mn=(64, g.tile_n))
        a_smem = sm90_utils.make_smem_layout_a(kmaj, tile_mnk, f16, g.stages)
        # a gathering kernel keeps the whole filter (its one N tile, every k tile) in shared memory
        b_smem = sm90_utils.make_smem_layout_b(kmaj, tile_mnk, f16, g.k_tiles if g.gather else g.stages)
        epi_tile = (g.tile_m, g.epi_n)
        epi_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, g.epi_stages * g.groups)

        # global views: x as ((W, H, N), C), w as (K, R*S*C), y and residual as ((Q, P, N), K)
        c, k = g.c, g.k
        y_layout = cute.make_layout(((g.yq, g.yp, g.xn), k), stride=((k, g.yq * k, g.yq * g.yp * k), 1))
        my = cute.make_tensor(y.iterator, y_layout)
        box_m = (g.tile_q, g.bp, g.bn)
        if cutlass.const_expr(not g.stores_elements):
            tma_d, tma_y = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), my, cute.slice_(epi_smem, (None, None, 0)),
                (box_m, g.epi_n))
        if cutlass.const_expr(g.gather):
            # no TMA view of x or w (rows of fewer than 16 bytes): the kernel's A and B atoms are unused stand-ins
            a_atoms = [(tma_d, tma_y)] * 4
            tma_b, tma_w = tma_d, tma_y
        else:
            phases = g.phases()
            mxs = [cute.make_tensor(x.iterator + (ph.ph * g.xw + ph.pw) * c, cute.make_layout(
                ((ph.view_w, ph.view_h, g.xn), c),
                stride=((g.stride_w * c, g.stride_h * g.xw * c, g.xw * g.xh * c), 1))) for ph in phases]
            rsc = g.r * g.s * c
            mw = cute.make_tensor(w.iterator, cute.make_layout((k, rsc), stride=(rsc, 1)))
            a_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if g.cluster_n > 1
                    else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
            b_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if g.cluster_m > 1
                    else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
            a_atoms = [cute.nvgpu.cpasync.make_tiled_tma_atom(
                a_op, mx, cute.slice_(a_smem, (None, None, 0)), (box_m, g.tile_k), num_multicast=g.cluster_n)
                for mx in mxs]
            a_atoms = a_atoms + [a_atoms[0]] * (4 - len(a_atoms))  # the kernel takes four (unused ones repeat)
            tma_b, tma_w = cute.nvgpu.cpasync.make_tiled_tma_atom(
                b_op, mw, cute.slice_(b_smem, (None, None, 0)), (g.tile_n, g.tile_k), num_multicast=g.cluster_m)
            if cutlass.const_expr(g.stores_elements):
                # no TMA view of y (rows of K, not 16 bytes apart): the consumers store into y itself; the atom is
                # an unused stand-in
                tma_d, tma_y = tma_b, my

        # the residual ring: res_stages subtiles per consumer group, each the TMA box of one epilogue subtile
        res_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, max(g.res_stages, 1) * g.groups)
        my_res = cute.make_tensor(residual.iterator, y_layout)
        tma_r, tma_res = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), my_res, cute.slice_(res_smem, (None, None, 0)),
            (box_m, g.epi_n))

        sched = utils.PersistentTileSchedulerParams(
            (g.m_tiles, g.n_tiles, g.split_k), (g.cluster_m, g.cluster_n, 1), g.swizzle, g.raster_m)
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched, SM_COUNT // g.cluster_size)

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, g.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(b_smem)], 1024]
            sD: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(epi_smem)], 1024]
            sScale: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n * g.groups], 16]
            sBias: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n * g.groups], 16]
            ring_barriers: cute.struct.MemRange[cutlass.Int64, max(2 * g.res_stages, 1) * g.groups]
            order_barrier: cute.struct.MemRange[cutlass.Int64, 2]
            split_arrivals: cute.struct.MemRange[cutlass.Int32, g.groups]
            sR: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(res_smem) if g.residual else 8], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()
        self.kernel(a_atoms[0][0], a_atoms[0][1], a_atoms[1][0], a_atoms[1][1], a_atoms[2][0], a_atoms[2][1],
                    a_atoms[3][0], a_atoms[3][1], tma_b, tma_w, tma_d, tma_y, tma_r, tma_res, tiled_mma, a_smem, b_smem, epi_smem,
                    res_smem, sched, scale, bias, partials, counters, x, w).launch(
            grid=grid, block=[g.threads, 1, 1], cluster=(g.cluster_m, g.cluster_n, 1),
            min_blocks_per_mp=1, stream=stream)

    # --------------------------------------------------------------------------------------- device

    @cute.kernel
    def kernel(self, tma_a0: cute.CopyAtom, mX0: cute.Tensor, tma_a1: cute.CopyAtom, mX1: cute.Tensor,
               tma_a2: cute.CopyAtom, mX2: cute.Tensor, tma_a3: cute.CopyAtom, mX3: cute.Tensor, tma_b: cute.CopyAtom, mW: cute.Tensor,
               tma_d: cute.CopyAtom, mY: cute.Tensor, tma_r: cute.CopyAtom, mR: cute.Tensor,
               tiled_mma: cute.TiledMma, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               epi_smem: cute.ComposedLayout, res_smem: cute.ComposedLayout,
               sched: utils.PersistentTileSchedulerParams, mScale: cute.Tensor, mBias: cute.Tensor,
               mPart: cute.Tensor, mCount: cute.Tensor, mXflat: cute.Tensor, mWflat: cute.Tensor):
        g = self.g
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            if cutlass.const_expr(not g.gather):
                for i, atom in enumerate((tma_a0, tma_a1, tma_a2, tma_a3)):
                    if cutlass.const_expr(i < len(g.phases())):
                        cute.nvgpu.cpasync.prefetch_descriptor(atom)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(not g.stores_elements):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_d)
            if cutlass.const_expr(g.residual):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_r)

        cluster_layout = cute.make_layout((g.cluster_m, g.cluster_n, 1))
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cl_coord = cluster_layout.get_flat_coord(rank)
        a_mask = cute.make_layout_image_mask(cluster_layout, cl_coord, mode=1) if g.cluster_n > 1 else 0
        b_mask = cute.make_layout_image_mask(cluster_layout, cl_coord, mode=0) if g.cluster_m > 1 else 0

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        if cutlass.const_expr(g.gather):
            # the producer warpgroup's 128 threads each arrive once they have written their part of a stage; every
            # consumer thread releases it
            mainloop = pipeline.PipelineAsync.create(
                barrier_storage=storage.barriers.data_ptr(), num_stages=g.stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 128),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads),
                defer_sync=True)
        else:
            tx_bytes = (g.tile_m + g.tile_n) * g.tile_k * 2
            # every consumer warp that reads a stage releases it, in each CTA whose loads multicast into it
            consumer_arrivals = (g.cluster_m + g.cluster_n - 1) * (1 if g.pingpong else g.consumers) * 4
            mainloop = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.barriers.data_ptr(), num_stages=g.stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrivals),
                tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, g.cluster_m, g.cluster_n, 1)),
                defer_sync=True)
        # the residual ring's barriers, slot i of group grp at grp * res_stages + i: full (the load warp's arrival
        # and the TMA's bytes) and empty (every consumer thread of the group, once it has read the subtile)
        ring_full = storage.ring_barriers.data_ptr()
        ring_empty = ring_full + g.res_stages * g.groups
        if cutlass.const_expr(g.residual):
            if warp_idx == 4:
                with cute.arch.elect_one():
                    for i in cutlass.range_constexpr(g.res_stages * g.groups):
                        cute.arch.mbarrier_init(ring_full + i, 1)
                        cute.arch.mbarrier_init(ring_empty + i, self.num_mma_threads // g.groups)
        # pingpong: the two consumer warpgroups take turns on the mainloop (CUTLASS's OrderedSequenceBarrier in
        # sm90_gemm_tma_warpspecialized_pingpong.hpp): group g waits on order_barrier[g] before its mainloop and
        # arrives on the other group's after its last k tile's wait. Without it group 1 waited on the stage of
        # its first k tile (count k_tiles) by parity alone, and the parity of an mbarrier two or more laps
        # behind matches: it read (and released) tile 0's stages, which broke the pipeline (launch failures on
        # the H100, or wrong results).
        order_barrier = storage.order_barrier.data_ptr()
        if cutlass.const_expr(g.pingpong):
            if warp_idx == 4:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_init(order_barrier, 128)
                    cute.arch.mbarrier_init(order_barrier + 1, 128)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(g.cluster_m, g.cluster_n), is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(epi_smem.outer, swizzle=epi_smem.inner)
        sScale = storage.sScale.get_tensor(cute.make_layout(g.tile_n * g.groups))
        sBias = storage.sBias.get_tensor(cute.make_layout(g.tile_n * g.groups))
        sR = sD
        if cutlass.const_expr(g.residual):
            sR = storage.sR.get_tensor(res_smem.outer, swizzle=res_smem.inner)

        if cutlass.const_expr(g.gather):
            self.load_filter(mWflat, sB, tidx)
        box_m = (g.tile_q, g.bp, g.bn)
        a_cta_layout = cute.make_layout(g.cluster_n)
        b_cta_layout = cute.make_layout(g.cluster_m)

        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        kb = g.k_blocks_per_tap

        pipeline.pipeline_init_wait(cluster_shape_mn=(g.cluster_m, g.cluster_n))

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(GATHER_PRODUCER_REGISTERS if g.gather else PRODUCER_REGISTERS)
        if cutlass.const_expr(g.gather):
            if wg_idx == 0:
                self.gather_pixels(mXflat, sA, mainloop, sched, tidx)
        elif warp_idx == 0:
            scheduler = utils.StaticPersistentTileScheduler.create(
                sched, cute.arch.block_idx(), cute.arch.grid_dim())
            work = scheduler.initial_work_tile_info()
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, g.stages)
            while work.is_valid_tile:
                q0, p0, n0, k0 = self.tile_origin(work)
                k_begin, k_end = self.split_k_range(work.tile_idx[2])
                # k tiles phase by phase (the order of the sum does not matter; A and B of a k tile match),
                # in each phase tap by tap, tile_k channels a time
                for pi, ph in enumerate(g.phases()):
                    tma_a, mX = ((tma_a0, mX0), (tma_a1, mX1), (tma_a2, mX2), (tma_a3, mX3))[pi]
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
                        cute.copy(tma_a, tAgA, tAsA[(None, state.index)], tma_bar_ptr=barrier, mcast_mask=a_mask)
                        cute.copy(tma_b, tBgB, tBsB[(None, state.index)], tma_bar_ptr=barrier, mcast_mask=b_mask)
                        mainloop.producer_commit(state)
                        state.advance()
                scheduler.advance_to_next_work()
                work = scheduler.get_current_work()
            mainloop.producer_tail(state)
        if cutlass.const_expr(g.residual):
            if warp_idx == 1:
                self.load_residual(tma_r, mR, sR, ring_full, ring_empty, sched)

        if wg_idx > 0:
            cute.arch.setmaxregister_increase(GATHER_CONSUMER_REGISTERS if g.gather else CONSUMER_REGISTERS)
            self.consume(tiled_mma, mainloop, sA, sB, sD, tma_d, mY, sched, mScale, mBias, sScale, sBias,
                         sR, ring_full, ring_empty, order_barrier, tidx, warp_idx, mPart, mCount,
                         storage.split_arrivals.get_tensor(cute.make_layout(g.groups)))

    @cute.jit
    def consume(self, tiled_mma: cute.TiledMma, mainloop, sA: cute.Tensor, sB: cute.Tensor, sD: cute.Tensor,
                tma_d: cute.CopyAtom, mY: cute.Tensor, sched: utils.PersistentTileSchedulerParams,
                mScale: cute.Tensor, mBias: cute.Tensor, sScale: cute.Tensor, sBias: cute.Tensor,
                sR: cute.Tensor, ring_full, ring_empty, order_barrier, tidx, warp_idx, mPart: cute.Tensor,
                mCount: cute.Tensor, sArrivals: cute.Tensor):
        g = self.g
        f16, f32 = self.dtype, self.acc_dtype
        ctid = tidx - 128
        # pingpong: consumer warpgroup `grp` takes the CTA's tiles grp, grp + 2, ... alone (its own tile_m x
        # tile_n accumulators, epilogue buffers, scale/bias copies, residual ring and named barrier); its epilogue
        # runs while the other warpgroup's mainloop uses the tensor cores. Otherwise grp is 0 and the
        # consumers share each tile.
        grp = 0
        wtid = ctid
        group_threads = self.num_mma_threads
        if cutlass.const_expr(g.pingpong):
            grp = cute.arch.make_warp_uniform(ctid // 128)
            wtid = ctid - grp * 128
            group_threads = 128
            thr_mma = tiled_mma.get_slice(0)
        else:
            thr_mma = tiled_mma.get_slice((ctid // 128) * 128)  # A/B: one slice per warpgroup
        epi_barrier = pipeline.NamedBarrier(barrier_id=1 + grp, num_threads=group_threads)
        lead_warp = warp_idx == 4 + grp * 4  # issues the group's TMA stores
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        cTile = cute.make_identity_tensor((g.tile_m, g.tile_n))
        tCcC = tiled_mma.get_slice(wtid).partition_C(cTile)  # C: this thread's elements
        acc = cute.make_rmem_tensor(tCcC.shape, f32)
        k_blocks = cute.size(tCrA, mode=[2])

        # epilogue: accumulators -> registers (f16) -> shared (stmatrix) -> TMA store, epi_n columns a time
        kmaj = utils.LayoutEnum.ROW_MAJOR
        r2s_atom = sm90_utils.get_smem_store_op(kmaj, elem_ty_d=f16, elem_ty_acc=f32)
        st_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), f16)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(st_atom, tiled_mma))
        thr_r2s = r2s.get_slice(wtid)
        tRS_sD = thr_r2s.partition_D(sD)
        tRS_acc = r2s.retile(acc)
        tRS_crd = r2s.retile(tCcC)
        rD_shape = cute.shape(thr_r2s.partition_S(sD))
        rD = cute.make_rmem_tensor(rD_shape[:3], f32)
        rD_out = cute.make_rmem_tensor(rD_shape[:3], f16)
        n_sub = cute.size(rD)
        # the residual is read back by ldmatrix through the stmatrix layout (CUTLASS's S2R of the epilogue
        # source): its registers come in rD's order, one ldmatrix.x4 per 8 values instead of a scalar load by
        # (m, n) coordinate from the swizzled copy each (H100: 2048x1568x512 GEMM + residual 16.21 -> 14.75 us)
        rR = rD_out
        tSR_sR = tRS_sD
        tSR_rR = rD_out
        s2r = r2s
        if cutlass.const_expr(g.residual):
            ld_atom = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), f16)
            s2r = cute.make_tiled_copy_S(ld_atom, cute.make_tiled_copy_C_atom(st_atom, tiled_mma))
            tSR_sR = s2r.get_slice(wtid).partition_S(sR)
            rR = cute.make_rmem_tensor(rD_shape[:3], f16)
            tSR_rR = s2r.retile(rR)
        epi_count = g.epi_count

        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=g.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, group_threads))
        # the producer loads every tile's k tiles in order; a pingpong group starts past the other group's
        # first tile (group 1) and skips the other's k tiles after each of its own
        read_state = self.consumer_state_at(grp * g.k_tiles)
        release_state = self.consumer_state_at(grp * g.k_tiles)
        box_m = (g.tile_q, g.bp, g.bn)
        tile_step = g.groups
        order_phase = cutlass.Int32(1) - grp  # group 0's first wait passes, group 1's waits for group 0

        scheduler = utils.StaticPersistentTileScheduler.create(sched, cute.arch.block_idx(), cute.arch.grid_dim())
        if cutlass.const_expr(g.pingpong):
            scheduler._current_work_linear_idx += grp * scheduler.num_persistent_clusters
        work = scheduler.initial_work_tile_info()
        while work.is_valid_tile:
            q0, p0, n0, k0 = self.tile_origin(work)
            k_begin, k_end = self.split_k_range(work.tile_idx[2])
            gD = self.output_tile(mY, work)
            if cutlass.const_expr(g.scale or g.bias):
                for i in cutlass.range_constexpr(-(-g.tile_n // (self.num_mma_threads // g.groups))):
                    col = wtid + i * (self.num_mma_threads // g.groups)
                    if col < g.tile_n:
                        kk = k0 + col
                        if cutlass.const_expr(g.k % g.tile_n != 0):
                            if kk >= g.k:
                                kk = k0 * 0 + (g.k - 1)  # a column past K: any value, TMA clips its store
                        if cutlass.const_expr(g.scale):
                            sScale[col + grp * g.tile_n] = mScale[kk]
                        if cutlass.const_expr(g.bias):
                            sBias[col + grp * g.tile_n] = mBias[kk]

            if cutlass.const_expr(g.pingpong):
                cute.arch.mbarrier_wait(order_barrier + grp, order_phase)
                order_phase = order_phase ^ 1
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            cute.nvgpu.warpgroup.fence()
            # first k tile: no earlier wgmma to wait for
            mainloop.consumer_wait(read_state)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                          tCrB[(None, None, kb, 0 if g.gather else read_state.index)], acc)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            cute.nvgpu.warpgroup.commit_group()
            read_state.advance()
            for kt in cutlass.range(1, k_end - k_begin, unroll=1):
                mainloop.consumer_wait(read_state)
                b_index = read_state.index
                if cutlass.const_expr(g.gather):
                    b_index = kt  # the resident filter's k tile
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                              tCrB[(None, None, kb, b_index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop.consumer_release(release_state)
                release_state.advance()
                read_state.advance()
            if cutlass.const_expr(g.pingpong):
                # every k tile of this one waited for: the other group's mainloop may start
                cute.arch.mbarrier_arrive(order_barrier + (1 - grp))
            cute.nvgpu.warpgroup.wait_group(0)
            mainloop.consumer_release(release_state)
            release_state.advance()
            if cutlass.const_expr(g.pingpong):
                read_state = self.consumer_state_at(read_state.count + g.k_tiles)
                release_state = self.consumer_state_at(release_state.count + g.k_tiles)
            if cutlass.const_expr(g.split_k > 1):
                # every unit runs the epilogue (the residual and store pipelines keep their rhythm), but only the
                # tile's last unit to arrive, holding the full sum, stores: the others' store boxes are moved
                # past the output (q and n beyond it, out of bounds however TMA merges the modes) and clipped
                tile = work.tile_idx[0] * g.scheduled_tiles[1] + work.tile_idx[1]
                outside = self.reduce_splits(acc, mPart, mCount, sArrivals, tile, work.tile_idx[2], wtid,
                                             group_threads, epi_barrier, grp)
                gD = cute.local_tile(cute.domain_offset(((q0 + outside * g.yq, p0, n0 + outside * g.xn), k0), mY),
                                     (box_m, g.tile_n), (0, 0))

            if cutlass.const_expr(g.scale or g.bias):
                epi_barrier.arrive_and_wait()  # scale and bias are in shared memory
            gD_epi = cute.zipped_divide(gD, (box_m, g.epi_n))
            bSG_sD, bSG_gD = sD, gD_epi
            if cutlass.const_expr(not g.stores_elements):
                bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
                    tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi)
            base = scheduler.num_tiles_executed * epi_count
            for e in cutlass.range_constexpr(epi_count):
                for v in cutlass.range_constexpr(n_sub):
                    rD[v] = tRS_acc[self.acc_index(e, v, n_sub)]
                if cutlass.const_expr(g.residual):
                    slot, phase = self.ring_position(scheduler.num_tiles_executed, e)
                    slot = slot + grp * g.res_stages
                    cute.arch.mbarrier_wait(ring_full + slot, phase)
                    cute.copy(s2r, tSR_sR[(None, None, None, slot)], tSR_rR)
                    # the registers hold the subtile: the load warp may refill its slot
                    cute.arch.mbarrier_arrive(ring_empty + slot)
                self.epilogue_ops(rD, tRS_crd, n_sub, e, sScale, sBias, grp, rR)
                rD_out.store(rD.load().to(f16))
                buf = grp * g.epi_stages + (base + e) % g.epi_stages
                cute.copy(r2s, rD_out, tRS_sD[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                epi_barrier.arrive_and_wait()
                if cutlass.const_expr(g.stores_elements):
                    self.store_elements(mY, sD, buf, q0, p0, n0, k0 + e * g.epi_n, wtid, group_threads,
                                        outside if g.split_k > 1 else 0)
                elif lead_warp:
                    cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, (0, e))])
                    store_pipe.producer_commit()
                    store_pipe.producer_acquire()
                epi_barrier.arrive_and_wait()
            scheduler.advance_to_next_work(advance_count=tile_step)
            work = scheduler.get_current_work()
        store_pipe.producer_tail()

    def tile_origin(self, work):
        """The work tile's first output column q0, row p0, image n0 and channel k0."""
        g = self.g
        mi, ni = work.tile_idx[0], work.tile_idx[1]
        q0 = (mi % g.m_tiles_q) * g.tile_q
        p0 = ((mi // g.m_tiles_q) % g.m_tiles_p) * g.bp
        n0 = (mi // (g.m_tiles_q * g.m_tiles_p)) * g.bn
        return q0, p0, n0, ni * g.tile_n

    def output_tile(self, tensor: cute.Tensor, work) -> cute.Tensor:
        """The work tile's (box of pixels) x tile_n channels of an output-shaped tensor (y or the residual)."""
        g = self.g
        q0, p0, n0, k0 = self.tile_origin(work)
        return cute.local_tile(cute.domain_offset(((q0, p0, n0), k0), tensor), ((g.tile_q, g.bp, g.bn), g.tile_n),
                               (0, 0))

    def ring_position(self, group_tiles, sub: int):
        """(slot, phase) of epilogue subtile `sub` of a consumer group's tile number `group_tiles` (counted from 0)
        in the group's residual ring: the group's subtiles go round the ring in order, position
        group_tiles * epi_count + sub, slot = position mod res_stages, and the mbarriers' phase flips a lap."""
        g = self.g
        if g.epi_count % g.res_stages == 0:  # the slot is static
            laps = group_tiles * (g.epi_count // g.res_stages) + sub // g.res_stages
            return sub % g.res_stages, laps % 2
        position = group_tiles * g.epi_count + sub
        return position % g.res_stages, (position // g.res_stages) % 2

    def split_k_range(self, split):
        """The k tiles [begin, end) of split `split` of a tile (spec.split_k_range): all of them without a split."""
        g = self.g
        if cutlass.const_expr(g.split_k == 1):
            return 0, g.k_tiles
        return split * g.k_tiles // g.split_k, (split + 1) * g.k_tiles // g.split_k

    def phase_k_bounds(self, pi: int, ph: Phase, k_begin, k_end) -> tuple:
        """cutlass.range's bounds over phase pi's own k tiles for the unit's global k tiles [k_begin, k_end):
        the phase holds global k tiles [offset, offset + count); an empty intersection runs no iteration."""
        g = self.g
        count = ph.nr * ph.ns * g.k_blocks_per_tap
        if cutlass.const_expr(g.split_k == 1):
            return 0, count
        offset = g.phase_k_offsets()[pi]
        return (cutlass.max(k_begin, offset) - offset, cutlass.min(k_end, offset + count) - offset)

    def consumer_state_at(self, count):
        """The consumer's pipeline state after `count` k tiles (index count mod stages, phase flipping per lap)."""
        count = cutlass.Int32(count)
        return pipeline.PipelineState(self.g.stages, count, count % self.g.stages, (count // self.g.stages) % 2)


def build_launcher(spec: BuildSpec):
    """The (jit function, fake arguments, geometry) that cute.compile takes for one spec."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    g = geometry(spec)
    p = spec.problem
    f16, f32 = {"f16": cutlass.Float16, "bf16": cutlass.BFloat16}[spec.element], cutlass.Float32
    x = make_fake_compact_tensor(f16, (p.n * p.h * p.w * p.c,), assumed_align=16)
    w = make_fake_compact_tensor(f16, (p.k * p.r * p.s * p.c,), assumed_align=16)
    y = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    scale = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    bias = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    residual = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    partials = make_fake_compact_tensor(f32, (max(g.partial_elements, 4),), assumed_align=16)
    counters = make_fake_compact_tensor(cutlass.Int32, (g.workspace_tiles,), assumed_align=4)
    return ConvKernel(g, f16), (x, w, y, scale, bias, residual, partials, counters), g
