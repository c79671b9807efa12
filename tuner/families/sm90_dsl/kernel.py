"""The sm90 CuTe DSL kernel: a persistent, warp-specialised implicit-GEMM convolution (and GEMM) for Hopper.

One kernel per problem: every extent is static. Layout (NHWC, f16 or bf16 in and out, e4m3 in and f16 out, or fp32 in
and out with TF32 math; f32 accumulate):
    x[n, h, w, c] * w[k, r, s, c] -> y[n, p, q, k],  y = act(scale[k] * alpha * acc + bias[k] + beta * residual)
alpha is 1, or of an e4m3 kernel the product of the input's and the filter's per-tensor scales (read from device
memory, as cuBLASLt's fp8 GEMM reads its A and B scales).

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
handed out by a static persistent scheduler (grid = min(tiles, SMs / cluster) clusters, raster m|n, swizzle groups),
or with stream-K (stream_k.py) each cluster takes an equal share of all tiles' k tiles laid end to end.

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

from .cluster_split import ClusterExchange
from .consumers import Consumers
from .epilogue import EpilogueSteps
from .geometry import Geometry, geometry
from .im2col import im2col_axis
from .mainloop import Mainloop
from .producers import Producers
from .residency import resident_clusters
from .spec import BuildSpec
from .tf32 import make_tf32_tiled_mma

PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
# a gathering producer holds a pixel's coordinates and predicates. setmaxnreg only moves the registers the launch
# gave the CTA (168 a thread x 384 threads): 128 x 96 + 256 x 200 stays within them, where 208 made the consumers'
# increase wait forever (the H100 hung)
GATHER_PRODUCER_REGISTERS = 96
GATHER_CONSUMER_REGISTERS = 200


class ConvKernel(Mainloop, Consumers, Producers, EpilogueSteps, ClusterExchange):
    """Builds the launch function for one Geometry. __call__ is the @cute.jit host function, kernel the device
    entry that sets up shared memory and the pipelines and hands each warp its role: the TMA producer (mainloop.py),
    the consumer warpgroups (consumers.py), the gathering producer and the residual's load warp (producers.py);
    epilogue.py holds the consumers' epilogue steps, cluster_split.py split-K's reduction within a cluster."""

    def __init__(self, g: Geometry, element=None, operand_element=None):
        self.g = g
        # the element of y and the residual (Float16 or BFloat16, or a tf32 kernel's Float32)
        self.dtype = element or cutlass.Float16
        # the element of x and w: the same, Float8E4M3FN in an e4m3 kernel (which writes Float16), or TFloat32
        self.ab_dtype = operand_element or self.dtype
        # the 16-bit element of the epilogue's stmatrix layout, which also maps a tf32 kernel's f32 registers (each
        # written to shared memory by element)
        self.staged_dtype = cutlass.Float16 if g.stages_by_element else self.dtype
        self.acc_dtype = cutlass.Float32
        self.num_mma_threads = 128 * g.consumers
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)

    # ----------------------------------------------------------------------------------------- host

    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, scale: cute.Tensor,
                 bias: cute.Tensor, residual: cute.Tensor, partials: cute.Tensor, counters: cute.Tensor,
                 input_scale: cute.Tensor, filter_scale: cute.Tensor, stream: cuda.CUstream):
        g = self.g
        f16, ab = self.dtype, self.ab_dtype
        tile_mnk = (g.tile_m, g.tile_n, g.tile_k)
        kmaj = utils.LayoutEnum.ROW_MAJOR  # A (m, k) and B (n, k) both K-major; D (m, n) N-major

        mma_groups = (1 if g.pingpong else g.consumers, 1, 1)
        if cutlass.const_expr(ab is cutlass.TFloat32):
            tiled_mma = make_tf32_tiled_mma(mma_groups, (64, g.tile_n))
        else:
            tiled_mma = sm90_utils.make_trivial_tiled_mma(
                ab, ab, cute.nvgpu.warpgroup.OperandMajorMode.K, cute.nvgpu.warpgroup.OperandMajorMode.K,
                self.acc_dtype, mma_groups, tiler_mn=(64, g.tile_n))
        a_smem = sm90_utils.make_smem_layout_a(kmaj, tile_mnk, ab, g.stages)
        # a gathering kernel keeps the whole filter (its one N tile, every k tile) in shared memory
        b_smem = sm90_utils.make_smem_layout_b(kmaj, tile_mnk, ab, g.k_tiles if g.gather else g.stages)
        epi_tile = (g.tile_m, g.epi_n)
        epi_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, g.epi_stages * g.groups)
        # the stmatrix layout that maps the registers of a kernel that stages by element (never allocated)
        map_smem = sm90_utils.make_smem_layout_epi(self.staged_dtype, kmaj, epi_tile, g.epi_stages * g.groups)

        # global views: x as ((W, H, N), C), w as (K, R*S*C), y and residual as ((Q, P, N), K)
        c, k = g.c, g.k
        y_layout = cute.make_layout(((g.yq, g.yp, g.xn), k), stride=((k, g.yq * k, g.yq * g.yp * k), 1))
        my = cute.make_tensor(y.iterator, y_layout)
        box_m = (g.tile_q, g.bp, g.bn)
        if cutlass.const_expr(not g.stores_by_thread):
            tma_d, tma_y = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), my, cute.slice_(epi_smem, (None, None, 0)),
                (box_m, g.epi_n))
        if cutlass.const_expr(g.gather):
            # no TMA view of x or w (rows of fewer than 16 bytes): the kernel's A and B atoms are unused stand-ins
            a_atoms = [(tma_d, tma_y)] * 4
            tma_b, tma_w = tma_d, tma_y
        elif cutlass.const_expr(g.im2col):
            a_atoms, tma_b, tma_w = self.im2col_atoms(x, w, a_smem, b_smem)
            if cutlass.const_expr(g.stores_by_thread):
                tma_d, tma_y = tma_b, my
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
            if cutlass.const_expr(g.stores_by_thread):
                # no TMA view of y (rows of K, not 16 bytes apart): the consumers store into y itself; the atom is
                # an unused stand-in
                tma_d, tma_y = tma_b, my

        # the residual ring: res_stages subtiles per consumer group, each the TMA box of one epilogue subtile
        res_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, max(g.res_stages, 1) * g.groups)
        my_res = cute.make_tensor(residual.iterator, y_layout)
        tma_r, tma_res = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), my_res, cute.slice_(res_smem, (None, None, 0)),
            (box_m, g.epi_n))

        if cutlass.const_expr(g.cluster_reduce):  # a tile's splits side by side along N, one cluster (cluster_split.py)
            sched = utils.PersistentTileSchedulerParams(
                (g.m_tiles, g.n_tiles * g.split_k, 1), (1, g.split_k, 1), g.swizzle, g.raster_m)
        else:
            sched = utils.PersistentTileSchedulerParams(
                (g.m_tiles, g.n_tiles, g.split_k), (g.cluster_m, g.cluster_n, 1), g.swizzle, g.raster_m)
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched, resident_clusters(g.cluster_size))
        if cutlass.const_expr(g.stream_k):
            grid = g.grid  # one cluster a share of the k tiles (stream_plan.StreamKPlan), not one a tile

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, g.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(b_smem)], 1024]
            sD: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(epi_smem)], 1024]
            sScale: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n * g.groups], 16]
            sBias: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n * g.groups], 16]
            ring_barriers: cute.struct.MemRange[cutlass.Int64, max(2 * g.res_stages, 1) * g.groups]
            order_barrier: cute.struct.MemRange[cutlass.Int64, 2]
            split_arrivals: cute.struct.MemRange[cutlass.Int32, g.groups]
            exchange_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            sExchange: cute.struct.Align[cute.struct.MemRange[cutlass.Int32, g.exchange_slots], 16]
            sR: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(res_smem) if g.residual else 8], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()
        self.kernel(a_atoms[0][0], a_atoms[0][1], a_atoms[1][0], a_atoms[1][1], a_atoms[2][0], a_atoms[2][1],
                    a_atoms[3][0], a_atoms[3][1], tma_b, tma_w, tma_d, tma_y, tma_r, tma_res, tiled_mma, a_smem, b_smem, epi_smem,
                    map_smem, res_smem, sched, scale, bias, partials, counters, x, w, input_scale, filter_scale).launch(
            grid=grid, block=[g.threads, 1, 1], cluster=(*g.launch_cluster, 1),
            min_blocks_per_mp=1, stream=stream, use_pdl=g.pdl)

    def im2col_atoms(self, x: cute.Tensor, w: cute.Tensor, a_smem, b_smem):
        """A's im2col atom on x viewed as ((W, H, N), C), its corners from im2col.im2col_axes (four entries, the
        kernel's signature; the three unused repeat), and B's atom on the filter viewed as (K, (C, S, R)), so that
        both walk the k tiles as (channel block, s, r)."""
        g = self.g
        c, k = g.c, g.k
        axis_w = im2col_axis(g.src_w, g.out_q, g.s, g.pad_w, g.stride_w, g.dilation_w)
        axis_h = im2col_axis(g.src_h, g.out_p, g.r, g.pad_h, g.stride_h, g.dilation_h)
        mx = cute.make_tensor(x.iterator, cute.make_layout(((g.src_w, g.src_h, g.src_n), c),
                                                           stride=((c, g.src_w * c, g.src_h * g.src_w * c), 1)))
        a_op = (cute.nvgpu.cpasync.CopyBulkTensorIm2ColG2SMulticastOp() if g.cluster_n > 1
                else cute.nvgpu.cpasync.CopyBulkTensorIm2ColG2SOp())
        atom_a, view_a = cute.nvgpu.cpasync.make_im2col_tma_atom(
            a_op, mx, cute.slice_(a_smem, (None, None, 0)), (g.tile_m, (g.tile_k,)),
            (axis_w.lower_corner, axis_h.lower_corner), (axis_w.upper_corner, axis_h.upper_corner),
            (axis_w.lower_padding, axis_h.lower_padding), (axis_w.upper_padding, axis_h.upper_padding),
            (axis_w.stride, axis_h.stride), (0, 0), (axis_w.dilation, axis_h.dilation), num_multicast=g.cluster_n)
        mw = cute.make_tensor(w.iterator, cute.make_layout((k, (c, g.s, g.r)), stride=(g.r * g.s * c, (1, c, g.s * c))))
        b_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if g.cluster_m > 1
                else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
        tma_b, tma_w = cute.nvgpu.cpasync.make_tiled_tma_atom(
            b_op, mw, cute.slice_(b_smem, (None, None, 0)), (g.tile_n, (g.tile_k,)), num_multicast=g.cluster_m)
        return [(atom_a, view_a)] * 4, tma_b, tma_w

    # --------------------------------------------------------------------------------------- device

    @cute.kernel
    def kernel(self, tma_a0: cute.CopyAtom, mX0: cute.Tensor, tma_a1: cute.CopyAtom, mX1: cute.Tensor,
               tma_a2: cute.CopyAtom, mX2: cute.Tensor, tma_a3: cute.CopyAtom, mX3: cute.Tensor, tma_b: cute.CopyAtom, mW: cute.Tensor,
               tma_d: cute.CopyAtom, mY: cute.Tensor, tma_r: cute.CopyAtom, mR: cute.Tensor,
               tiled_mma: cute.TiledMma, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               epi_smem: cute.ComposedLayout, map_smem: cute.ComposedLayout, res_smem: cute.ComposedLayout,
               sched: utils.PersistentTileSchedulerParams, mScale: cute.Tensor, mBias: cute.Tensor,
               mPart: cute.Tensor, mCount: cute.Tensor, mXflat: cute.Tensor, mWflat: cute.Tensor,
               mInputScale: cute.Tensor, mFilterScale: cute.Tensor):
        g = self.g
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            if cutlass.const_expr(not g.gather):
                for i, atom in enumerate((tma_a0, tma_a1, tma_a2, tma_a3)):
                    if cutlass.const_expr(i < (1 if g.im2col else len(g.phases()))):
                        cute.nvgpu.cpasync.prefetch_descriptor(atom)
                cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(not g.stores_by_thread):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_d)
            if cutlass.const_expr(g.residual):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_r)

        cluster_layout = cute.make_layout((g.cluster_m, g.cluster_n, 1))
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        if cutlass.const_expr(g.cluster_reduce):
            rank = 0  # the cluster is the tile's splits: every CTA loads alone, as the first of a 1x1 cluster
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
            tx_bytes = (g.tile_m + g.tile_n) * g.tile_k * g.operand_bytes
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
        # The cluster exchange (split-K reduced in the cluster, cluster_split.py): full (split 0's own arrival and the
        # peers' bytes) and free (split 0's remote arrival once it has read the slot).
        order_barrier = storage.order_barrier.data_ptr()
        exchange_full = storage.exchange_barriers.data_ptr()
        for pair, arrivals, present in ((order_barrier, 128, g.pingpong), (exchange_full, 1, g.cluster_reduce)):
            if cutlass.const_expr(present):
                if warp_idx == 4:
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_init(pair, arrivals)
                        cute.arch.mbarrier_init(pair + 1, arrivals)
        # with a cluster, every CTA's barriers are initialised before any CTA may arrive on them remotely
        pipeline.pipeline_init_arrive(cluster_shape_mn=g.launch_cluster, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(epi_smem.outer, swizzle=epi_smem.inner)
        sD_map = sD
        if cutlass.const_expr(g.stages_by_element):
            # a view for the register mapping only (never written): A's stages are larger than the subtiles
            sD_map = storage.sA.get_tensor(map_smem.outer, swizzle=map_smem.inner, dtype=self.staged_dtype)
        sScale = storage.sScale.get_tensor(cute.make_layout(g.tile_n * g.groups))
        sBias = storage.sBias.get_tensor(cute.make_layout(g.tile_n * g.groups))
        sR = sD
        if cutlass.const_expr(g.residual):
            sR = storage.sR.get_tensor(res_smem.outer, swizzle=res_smem.inner)

        if cutlass.const_expr(g.pdl):
            # everything above set up shared memory alone; every global read and write comes after the kernel
            # before this one has finished (its output may be x or the residual, its input may be y's buffer). The
            # next kernel may then launch: it waits likewise before it touches memory.
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        if cutlass.const_expr(g.gather):
            self.load_filter(mWflat, sB, tidx)

        wg_idx = cute.arch.make_warp_uniform(tidx // 128)

        pipeline.pipeline_init_wait(cluster_shape_mn=g.launch_cluster)

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(GATHER_PRODUCER_REGISTERS if g.gather else PRODUCER_REGISTERS)
        if cutlass.const_expr(g.gather):
            if wg_idx == 0:
                self.gather_pixels(mXflat, sA, mainloop, sched, tidx)
        elif warp_idx == 0:
            if cutlass.const_expr(g.im2col):
                self.load_operands_im2col(tma_a0, mX0, tma_b, mW, sA, sB, mainloop, sched, cl_coord, a_mask, b_mask)
            else:
                self.load_operands(((tma_a0, mX0), (tma_a1, mX1), (tma_a2, mX2), (tma_a3, mX3)), tma_b, mW, sA, sB,
                                   mainloop, sched, cl_coord, a_mask, b_mask)
        if cutlass.const_expr(g.residual):
            if warp_idx == 1:
                self.load_residual(tma_r, mR, sR, ring_full, ring_empty, sched)

        if wg_idx > 0:
            cute.arch.setmaxregister_increase(GATHER_CONSUMER_REGISTERS if g.gather else CONSUMER_REGISTERS)
            self.consume(tiled_mma, mainloop, sA, sB, sD, sD_map, tma_d, mY, sched, mScale, mBias, sScale, sBias,
                         sR, ring_full, ring_empty, order_barrier, tidx, warp_idx, mPart, mCount,
                         storage.split_arrivals.get_tensor(cute.make_layout(g.groups)), mInputScale, mFilterScale,
                         storage.sExchange.get_tensor(cute.make_layout(g.exchange_slots)), exchange_full)
        if cutlass.const_expr(g.cluster_reduce):
            # no CTA leaves while a peer may still store into its shared memory or arrive on its barriers
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()


def build_launcher(spec: BuildSpec):
    """The (jit function, fake arguments, geometry) that cute.compile takes for one spec."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    g = geometry(spec)
    p = spec.problem
    elements = {"f16": cutlass.Float16, "bf16": cutlass.BFloat16, "e4m3": cutlass.Float8E4M3FN,
                "tf32": cutlass.TFloat32, "f32": cutlass.Float32}
    ab, f16, f32 = elements[spec.element], elements[spec.output_element], cutlass.Float32
    x = make_fake_compact_tensor(ab, (p.n * p.h * p.w * p.c,), assumed_align=16)
    w = make_fake_compact_tensor(ab, (p.k * p.r * p.s * p.c,), assumed_align=16)
    y = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    scale = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    bias = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    residual = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    partials = make_fake_compact_tensor(f32, (max(g.partial_elements, 4),), assumed_align=16)
    counters = make_fake_compact_tensor(cutlass.Int32, (g.workspace_tiles,), assumed_align=4)
    # an e4m3 kernel's per-tensor scales, one f32 each (the others are handed y and never read it)
    input_scale = make_fake_compact_tensor(f32, (1,), assumed_align=4)
    filter_scale = make_fake_compact_tensor(f32, (1,), assumed_align=4)
    return (ConvKernel(g, f16, ab), (x, w, y, scale, bias, residual, partials, counters, input_scale, filter_scale),
            g)
