"""The sm90 CuTe DSL kernel: a persistent, warp-specialised implicit-GEMM convolution (and GEMM) for Hopper.

One kernel per problem: every extent is static. Layout (NHWC, f16 in and out, f32 accumulate):
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
epilogue, then store through shared memory with TMA. Tiles are handed out by a static persistent
scheduler (grid = min(tiles, SMs / cluster) clusters, raster m|n, swizzle groups).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils

from .spec import BuildSpec, SpecError, conv_box

SM_COUNT = 132                 # H100 SXM
SMEM_CAPACITY = 232448         # sm_90 opt-in shared memory per block (227 KiB)
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
LOG2_E = 1.4426950408889634



@dataclass(frozen=True)
class Geometry:
    """The static shape of one kernel, derived from a BuildSpec in plain Python (no DSL types)."""

    # input viewed as (W', H', N', C), output as (Q', P', N', K)
    xw: int
    xh: int
    xn: int
    c: int
    k: int
    yq: int
    yp: int
    r: int
    s: int
    pad: int
    dilation: int
    # M box over (q, p, n)
    tile_q: int
    bp: int
    bn: int
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    consumers: int             # consumer warpgroups
    stages: int
    epi_n: int
    epi_stages: int
    raster_m: bool
    swizzle: int
    # epilogue
    scale: bool
    bias: bool
    residual: bool
    beta: float
    activation: str

    @property
    def m_tiles_q(self) -> int:
        return -(-self.yq // self.tile_q)

    @property
    def m_tiles_p(self) -> int:
        return -(-self.yp // self.bp)

    @property
    def m_tiles_n(self) -> int:
        return -(-self.xn // self.bn)

    @property
    def m_tiles(self) -> int:
        return self.m_tiles_q * self.m_tiles_p * self.m_tiles_n

    @property
    def n_tiles(self) -> int:
        return -(-self.k // self.tile_n)

    @property
    def k_blocks_per_tap(self) -> int:
        return -(-self.c // self.tile_k)

    @property
    def k_tiles(self) -> int:
        return self.r * self.s * self.k_blocks_per_tap

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def tiles(self) -> int:
        # the scheduler works in whole clusters
        mt = -(-self.m_tiles // self.cluster_m) * self.cluster_m
        nt = -(-self.n_tiles // self.cluster_n) * self.cluster_n
        return mt * nt

    @property
    def grid(self) -> tuple[int, int, int]:
        clusters = min(self.tiles // self.cluster_size, SM_COUNT // self.cluster_size)
        return (self.cluster_m, self.cluster_n, clusters)  # refined by the scheduler's own rule

    def smem_bytes(self, stages: int | None = None) -> int:
        stages = self.stages if stages is None else stages
        ab = (self.tile_m + self.tile_n) * self.tile_k * 2
        epi = self.tile_m * self.epi_n * 2 * self.epi_stages
        extra = 2 * self.tile_n * 4 + (self.tile_m * self.tile_n * 2 if self.residual else 0)
        return stages * ab + epi + extra + 1024 + 3 * 1024  # barriers, alignment slack


def geometry(spec: BuildSpec) -> Geometry:
    """Check the spec against what this kernel implements and lay it out; SpecError otherwise."""
    spec.check()
    p, t, e = spec.problem, spec.tile, spec.epilogue
    if t.schedule == "pingpong":
        raise SpecError("schedule 'pingpong' is not built yet in the sm90 DSL kernel (single, cooperative are)")
    consumers = 1 if t.schedule == "single" else 2
    if t.tile_m != 64 * consumers:
        raise SpecError(f"schedule {t.schedule!r} needs tile_m {64 * consumers} (64 per consumer warpgroup), "
                        f"got {t.tile_m}")
    if t.tile_n not in (64, 128, 256) and not (t.tile_n % 16 == 0 and 16 <= t.tile_n <= 256):
        raise SpecError(f"tile_n {t.tile_n} must be a multiple of 16 in 16..256")
    if t.tile_k not in (32, 64):
        raise SpecError(f"tile_k {t.tile_k} must be 32 or 64")
    if t.cluster_m not in (1, 2) or t.cluster_n not in (1, 2):
        raise SpecError(f"cluster {t.cluster_m}x{t.cluster_n}: each side must be 1 or 2")
    if t.swizzle < 1:
        raise SpecError(f"swizzle {t.swizzle} must be >= 1")
    if p.stride != 1:
        raise SpecError(f"stride {p.stride} is not built yet in the sm90 DSL kernel (stride 1 only)")
    if p.is_gemm:
        xw, xh, xn, yq, yp = p.n * p.h * p.w, 1, 1, p.n * p.h * p.w, 1
        tile_q, bp, bn = t.tile_m, 1, 1
    else:
        xw, xh, xn, yq, yp = p.w, p.h, p.n, p.q, p.p
        tile_q = t.tile_q
        if tile_q < 8 or tile_q % 8:
            raise SpecError(f"tile_q {tile_q} must be a multiple of 8 (TMA boxes of whole swizzle rows)")
        if tile_q > 256 or t.tile_m // tile_q > 256:
            raise SpecError(f"tile_q {tile_q}: TMA box sides are at most 256")
        rows = t.tile_m // tile_q
        if rows & (rows - 1):
            raise SpecError(f"tile_m/tile_q = {rows} rows must be a power of two (output rows x images)")
        # A box side equal to its tensor's extent lets CuTe merge that mode with the next one into one TMA
        # dimension, whose bounds then no longer zero-fill the padding: the taps read the neighbouring row
        # (or image) instead. Measured on the H100: W=16 with tile_q 16 gave relative error 0.21, 8 and 32
        # validated.
        if tile_q == xw:
            raise SpecError(f"tile_q {tile_q} equals the input width W: pick another (the TMA box would merge W "
                            "with H and lose the padding)")
        box = conv_box(p, t.tile_m, tile_q)  # rows = bp output rows x bn images
        bp, bn = box.rows_p, box.images_n
        if bp == xh:
            raise SpecError(f"tile_m/tile_q = {rows} rows cannot be split into output rows other than H={xh}")
    if p.p < 1 or p.q < 1:
        raise SpecError("the convolution has an empty output")
    for name, value in (("W", xw), ("H", xh), ("N", xn)):
        if value >= 1 << 31:
            raise SpecError(f"{name} {value} is too large for TMA coordinates")
    tile_n = t.tile_n
    epi_n = min(32, tile_n)
    epi_stages = 2
    g = Geometry(xw=xw, xh=xh, xn=xn, c=p.c, k=p.k, yq=yq, yp=yp, r=p.r, s=p.s, pad=p.pad,
                 dilation=p.dilation, tile_q=tile_q, bp=bp, bn=bn, tile_m=t.tile_m, tile_n=tile_n,
                 tile_k=t.tile_k, cluster_m=t.cluster_m, cluster_n=t.cluster_n, consumers=consumers,
                 stages=max(t.stages, 1), epi_n=epi_n, epi_stages=epi_stages, raster_m=t.raster == "m",
                 swizzle=t.swizzle, scale=e.scale, bias=e.bias, residual=e.residual, beta=float(e.beta),
                 activation=e.activation)
    fit = (SMEM_CAPACITY - g.smem_bytes(0)) // ((g.tile_m + g.tile_n) * g.tile_k * 2)
    stages = fit if t.stages == 0 else t.stages
    if stages < 2:
        raise SpecError(f"{stages} pipeline stage(s) fit in shared memory; at least 2 are needed")
    if stages > fit:
        raise SpecError(f"{stages} stages need {g.smem_bytes(stages)} bytes of shared memory, "
                        f"more than {SMEM_CAPACITY}")
    stages = min(stages, 8)
    g = Geometry(**{**g.__dict__, "stages": stages})
    return g


class ConvKernel:
    """Builds the launch function for one Geometry. __call__ is the @cute.jit host function."""

    def __init__(self, g: Geometry):
        self.g = g
        self.dtype = cutlass.Float16
        self.acc_dtype = cutlass.Float32
        self.num_mma_threads = 128 * g.consumers
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)

    # ----------------------------------------------------------------------------------------- host
    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, y: cute.Tensor, scale: cute.Tensor,
                 bias: cute.Tensor, residual: cute.Tensor, stream: cuda.CUstream):
        g = self.g
        f16 = self.dtype
        tile_mnk = (g.tile_m, g.tile_n, g.tile_k)
        kmaj = utils.LayoutEnum.ROW_MAJOR  # A (m, k) and B (n, k) both K-major; D (m, n) N-major

        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            f16, f16, cute.nvgpu.warpgroup.OperandMajorMode.K, cute.nvgpu.warpgroup.OperandMajorMode.K,
            self.acc_dtype, (g.consumers, 1, 1), tiler_mn=(64, g.tile_n))
        a_smem = sm90_utils.make_smem_layout_a(kmaj, tile_mnk, f16, g.stages)
        b_smem = sm90_utils.make_smem_layout_b(kmaj, tile_mnk, f16, g.stages)
        epi_tile = (g.tile_m, g.epi_n)
        epi_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, g.epi_stages)

        # global views: x as ((W, H, N), C), w as (K, R*S*C), y and residual as ((Q, P, N), K)
        c, k = g.c, g.k
        mx = cute.make_tensor(x.iterator, cute.make_layout(
            ((g.xw, g.xh, g.xn), c), stride=((c, g.xw * c, g.xw * g.xh * c), 1)))
        rsc = g.r * g.s * c
        mw = cute.make_tensor(w.iterator, cute.make_layout((k, rsc), stride=(rsc, 1)))
        y_layout = cute.make_layout(((g.yq, g.yp, g.xn), k), stride=((k, g.yq * k, g.yq * g.yp * k), 1))
        my = cute.make_tensor(y.iterator, y_layout)

        box_m = (g.tile_q, g.bp, g.bn)
        a_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if g.cluster_n > 1
                else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
        b_op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if g.cluster_m > 1
                else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp())
        tma_a, tma_x = cute.nvgpu.cpasync.make_tiled_tma_atom(
            a_op, mx, cute.slice_(a_smem, (None, None, 0)), (box_m, g.tile_k), num_multicast=g.cluster_n)
        tma_b, tma_w = cute.nvgpu.cpasync.make_tiled_tma_atom(
            b_op, mw, cute.slice_(b_smem, (None, None, 0)), (g.tile_n, g.tile_k), num_multicast=g.cluster_m)
        tma_d, tma_y = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), my, cute.slice_(epi_smem, (None, None, 0)),
            (box_m, g.epi_n))

        res_smem = sm90_utils.make_smem_layout_epi(f16, kmaj, epi_tile, g.tile_n // g.epi_n)
        my_res = cute.make_tensor(residual.iterator, y_layout)
        tma_r, tma_res = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), my_res, cute.slice_(res_smem, (None, None, 0)),
            (box_m, g.epi_n))

        sched = utils.PersistentTileSchedulerParams(
            (g.m_tiles, g.n_tiles, 1), (g.cluster_m, g.cluster_n, 1), g.swizzle, g.raster_m)
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched, SM_COUNT // g.cluster_size)

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, g.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(b_smem)], 1024]
            sD: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(epi_smem)], 1024]
            sScale: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n], 16]
            sBias: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, g.tile_n], 16]
            res_barrier: cute.struct.MemRange[cutlass.Int64, 1]
            sR: cute.struct.Align[cute.struct.MemRange[f16, cute.cosize(res_smem) if g.residual else 8], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()
        self.kernel(tma_a, tma_x, tma_b, tma_w, tma_d, tma_y, tma_r, tma_res, tiled_mma, a_smem, b_smem, epi_smem,
                    res_smem, sched, scale, bias).launch(
            grid=grid, block=[g.threads, 1, 1], cluster=(g.cluster_m, g.cluster_n, 1),
            min_blocks_per_mp=1, stream=stream)

    # --------------------------------------------------------------------------------------- device
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mX: cute.Tensor, tma_b: cute.CopyAtom, mW: cute.Tensor,
               tma_d: cute.CopyAtom, mY: cute.Tensor, tma_r: cute.CopyAtom, mR: cute.Tensor,
               tiled_mma: cute.TiledMma, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
               epi_smem: cute.ComposedLayout, res_smem: cute.ComposedLayout,
               sched: utils.PersistentTileSchedulerParams, mScale: cute.Tensor, mBias: cute.Tensor):
        g = self.g
        f16, f32 = self.dtype, self.acc_dtype
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
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
        tx_bytes = (g.tile_m + g.tile_n) * g.tile_k * 2
        consumer_arrivals = (g.cluster_m + g.cluster_n - 1) * g.consumers * 4
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.barriers.data_ptr(), num_stages=g.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrivals),
            tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, g.cluster_m, g.cluster_n, 1)),
            defer_sync=True)
        res_barrier = storage.res_barrier.data_ptr()
        if cutlass.const_expr(g.residual):
            if warp_idx == 4:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_init(res_barrier, 1)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(g.cluster_m, g.cluster_n), is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(epi_smem.outer, swizzle=epi_smem.inner)
        sScale = storage.sScale.get_tensor(cute.make_layout(g.tile_n))
        sBias = storage.sBias.get_tensor(cute.make_layout(g.tile_n))
        sR = sD
        if cutlass.const_expr(g.residual):
            sR = storage.sR.get_tensor(res_smem.outer, swizzle=res_smem.inner)

        box_m = (g.tile_q, g.bp, g.bn)
        a_cta_layout = cute.make_layout(g.cluster_n)
        b_cta_layout = cute.make_layout(g.cluster_m)

        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        k_tiles = g.k_tiles
        kb = g.k_blocks_per_tap

        pipeline.pipeline_init_wait(cluster_shape_mn=(g.cluster_m, g.cluster_n))

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
        if warp_idx == 0:
            scheduler = utils.StaticPersistentTileScheduler.create(
                sched, cute.arch.block_idx(), cute.arch.grid_dim())
            work = scheduler.initial_work_tile_info()
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, g.stages)
            while work.is_valid_tile:
                mi, ni = work.tile_idx[0], work.tile_idx[1]
                q0 = (mi % g.m_tiles_q) * g.tile_q
                p0 = ((mi // g.m_tiles_q) % g.m_tiles_p) * g.bp
                n0 = (mi // (g.m_tiles_q * g.m_tiles_p)) * g.bn
                k0 = ni * g.tile_n
                for kt in cutlass.range(k_tiles, unroll=1):
                    tap = kt // kb
                    c0 = (kt - tap * kb) * g.tile_k
                    rr = tap // g.s
                    ss = tap - rr * g.s
                    wq = q0 + ss * g.dilation - g.pad
                    hp = p0 + rr * g.dilation - g.pad
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

        if wg_idx > 0:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self.consume(tiled_mma, mainloop, sA, sB, sD, tma_d, mY, sched, mScale, mBias, sScale, sBias,
                         tma_r, mR, sR, res_barrier, tidx, warp_idx)

    @cute.jit
    def consume(self, tiled_mma: cute.TiledMma, mainloop, sA: cute.Tensor, sB: cute.Tensor, sD: cute.Tensor,
                tma_d: cute.CopyAtom, mY: cute.Tensor, sched: utils.PersistentTileSchedulerParams,
                mScale: cute.Tensor, mBias: cute.Tensor, sScale: cute.Tensor, sBias: cute.Tensor,
                tma_r: cute.CopyAtom, mR: cute.Tensor, sR: cute.Tensor, res_barrier, tidx, warp_idx):
        g = self.g
        f16, f32 = self.dtype, self.acc_dtype
        ctid = tidx - 128
        thr_mma = tiled_mma.get_slice((ctid // 128) * 128)  # A/B: one slice per warpgroup
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        cTile = cute.make_identity_tensor((g.tile_m, g.tile_n))
        tCcC = tiled_mma.get_slice(ctid).partition_C(cTile)  # C: this thread's elements
        acc = cute.make_rmem_tensor(tCcC.shape, f32)
        k_blocks = cute.size(tCrA, mode=[2])

        # epilogue: accumulators -> registers (f16) -> shared (stmatrix) -> TMA store, epi_n columns a time
        kmaj = utils.LayoutEnum.ROW_MAJOR
        r2s_atom = sm90_utils.get_smem_store_op(kmaj, elem_ty_d=f16, elem_ty_acc=f32)
        st_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), f16)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(st_atom, tiled_mma))
        thr_r2s = r2s.get_slice(ctid)
        tRS_sD = thr_r2s.partition_D(sD)
        tRS_acc = r2s.retile(acc)
        tRS_crd = r2s.retile(tCcC)
        rD_shape = cute.shape(thr_r2s.partition_S(sD))
        rD = cute.make_rmem_tensor(rD_shape[:3], f32)
        rD_out = cute.make_rmem_tensor(rD_shape[:3], f16)
        n_sub = cute.size(rD)
        epi_count = g.tile_n // g.epi_n

        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=g.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads))
        read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, g.stages)
        release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, g.stages)
        box_m = (g.tile_q, g.bp, g.bn)

        scheduler = utils.StaticPersistentTileScheduler.create(sched, cute.arch.block_idx(), cute.arch.grid_dim())
        work = scheduler.initial_work_tile_info()
        while work.is_valid_tile:
            mi, ni = work.tile_idx[0], work.tile_idx[1]
            q0 = (mi % g.m_tiles_q) * g.tile_q
            p0 = ((mi // g.m_tiles_q) % g.m_tiles_p) * g.bp
            n0 = (mi // (g.m_tiles_q * g.m_tiles_p)) * g.bn
            k0 = ni * g.tile_n
            gD = cute.local_tile(cute.domain_offset(((q0, p0, n0), k0), mY), (box_m, g.tile_n), (0, 0))
            if cutlass.const_expr(g.residual):
                # the residual tile comes in by TMA while the mainloop runs (the previous tile's epilogue
                # has read its copy: every consumer thread passed the last epilogue barrier)
                if warp_idx == 4:
                    gR = cute.local_tile(cute.domain_offset(((q0, p0, n0), k0), mR), (box_m, g.tile_n), (0, 0))
                    bR_s, bR_g = cute.nvgpu.cpasync.tma_partition(
                        tma_r, 0, cute.make_layout(1), cute.group_modes(sR, 0, 2),
                        cute.zipped_divide(gR, (box_m, g.epi_n)))
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_arrive_and_expect_tx(res_barrier, g.tile_m * g.tile_n * 2)
                    for e in cutlass.range_constexpr(epi_count):
                        cute.copy(tma_r, bR_g[(None, (0, e))], bR_s[(None, e)], tma_bar_ptr=res_barrier)
            if cutlass.const_expr(g.scale or g.bias):
                for i in cutlass.range_constexpr(-(-g.tile_n // self.num_mma_threads)):
                    col = ctid + i * self.num_mma_threads
                    if col < g.tile_n:
                        kk = k0 + col
                        if cutlass.const_expr(g.k % g.tile_n != 0):
                            if kk >= g.k:
                                kk = k0 * 0 + (g.k - 1)  # a column past K: any value, TMA clips its store
                        if cutlass.const_expr(g.scale):
                            sScale[col] = mScale[kk]
                        if cutlass.const_expr(g.bias):
                            sBias[col] = mBias[kk]

            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            cute.nvgpu.warpgroup.fence()
            # first k tile: no earlier wgmma to wait for
            mainloop.consumer_wait(read_state)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                          tCrB[(None, None, kb, read_state.index)], acc)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            cute.nvgpu.warpgroup.commit_group()
            read_state.advance()
            for kt in cutlass.range(1, g.k_tiles, unroll=1):
                mainloop.consumer_wait(read_state)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                              tCrB[(None, None, kb, read_state.index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop.consumer_release(release_state)
                release_state.advance()
                read_state.advance()
            cute.nvgpu.warpgroup.wait_group(0)
            mainloop.consumer_release(release_state)
            release_state.advance()

            if cutlass.const_expr(g.scale or g.bias):
                self.epi_barrier.arrive_and_wait()  # scale and bias are in shared memory
            if cutlass.const_expr(g.residual):
                cute.arch.mbarrier_wait(res_barrier, scheduler.num_tiles_executed % 2)
            gD_epi = cute.zipped_divide(gD, (box_m, g.epi_n))
            bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
                tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi)
            base = scheduler.num_tiles_executed * epi_count
            for e in cutlass.range_constexpr(epi_count):
                for v in cutlass.range_constexpr(n_sub):
                    rD[v] = tRS_acc[e * n_sub + v]
                self.epilogue_ops(rD, tRS_crd, e * n_sub, n_sub, e, sScale, sBias, sR)
                rD_out.store(rD.load().to(f16))
                buf = (base + e) % g.epi_stages
                cute.copy(r2s, rD_out, tRS_sD[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                self.epi_barrier.arrive_and_wait()
                if warp_idx == 4:
                    cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, (0, e))])
                    store_pipe.producer_commit()
                    store_pipe.producer_acquire()
                self.epi_barrier.arrive_and_wait()
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        store_pipe.producer_tail()

    @cute.jit
    def epilogue_ops(self, rD: cute.Tensor, crd: cute.Tensor, offset: cutlass.Constexpr, count: cutlass.Constexpr,
                     sub: cutlass.Constexpr, sScale: cute.Tensor, sBias: cute.Tensor, sR: cute.Tensor):
        """y = act(scale[k] * acc + bias[k] + beta * residual) on one epilogue sub-tile's registers. scale and
        bias come from shared memory (staged per tile), the residual from its TMA-loaded shared copy (sub-tile
        `sub` of the tile), each element at its (m, n) coordinate in the tile. (stmatrix's partition of shared
        memory is not the registers' element order, so the residual is not read through it.)"""
        g = self.g
        f32 = self.acc_dtype
        if cutlass.const_expr(g.scale or g.bias):
            for v in cutlass.range_constexpr(count):
                col = crd[offset + v][1]
                value = rD[v]
                if cutlass.const_expr(g.scale):
                    value = value * sScale[col]
                if cutlass.const_expr(g.bias):
                    value = value + sBias[col]
                rD[v] = value
        if cutlass.const_expr(g.residual):
            for v in cutlass.range_constexpr(count):
                mm, nn = crd[offset + v]
                rv = sR[(mm, nn - sub * g.epi_n, sub)].to(f32)
                if cutlass.const_expr(g.beta == 1.0):
                    rD[v] = rD[v] + rv
                else:
                    rD[v] = rD[v] + f32(g.beta) * rv
        if cutlass.const_expr(g.activation == "relu"):
            vec = rD.load()
            rD.store(cute.where(vec > f32(0.0), vec, cute.full_like(vec, 0.0)))
        elif cutlass.const_expr(g.activation == "silu"):
            # x * sigmoid(x) = x * rcp(1 + 2^(-x log2 e)): one ex2.approx and one rcp.approx per element
            for v in cutlass.range_constexpr(count):
                x = rD[v]
                rD[v] = x * cute.arch.rcp_approx(cute.math.exp2(x * f32(-LOG2_E), fastmath=True) + f32(1.0))
        elif cutlass.const_expr(g.activation == "gelu"):
            # 0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7):
            # erf(z) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-z^2), t = 1 / (1 + 0.3275911 z), z >= 0
            for v in cutlass.range_constexpr(count):
                x = rD[v]
                z = cute.math.abs(x) * f32(0.7071067811865476)
                t = cute.arch.rcp_approx(f32(1.0) + f32(0.3275911) * z)
                poly = t * (f32(0.254829592) + t * (f32(-0.284496736) + t * (f32(1.421413741)
                            + t * (f32(-1.453152027) + t * f32(1.061405429)))))
                erf_abs = f32(1.0) - poly * cute.math.exp2(z * z * f32(-LOG2_E), fastmath=True)
                # 0.5 x (1 + sign(x) erf|z|) = 0.5 (x + |x| erf|z|)
                rD[v] = f32(0.5) * (x + cute.math.abs(x) * erf_abs)


def build_launcher(spec: BuildSpec):
    """The (jit function, fake arguments, geometry) that cute.compile takes for one spec."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    g = geometry(spec)
    p = spec.problem
    f16, f32 = cutlass.Float16, cutlass.Float32
    x = make_fake_compact_tensor(f16, (p.n * p.h * p.w * p.c,), assumed_align=16)
    w = make_fake_compact_tensor(f16, (p.k * p.r * p.s * p.c,), assumed_align=16)
    y = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    scale = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    bias = make_fake_compact_tensor(f32, (p.k,), assumed_align=16)
    residual = make_fake_compact_tensor(f16, (p.n * p.p * p.q * p.k,), assumed_align=16)
    return ConvKernel(g), (x, w, y, scale, bias, residual), g
