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

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .spec import (BuildSpec, SpecError, box_problem, conv_box, epilogue_columns, residual_ring_slots,
                    scheduled_tiles, split_k_workspace_bytes)

SM_COUNT = 132                 # H100 SXM
SMEM_CAPACITY = 232448         # sm_90 opt-in shared memory per block (227 KiB)
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
# a gathering producer holds a pixel's coordinates and predicates. setmaxnreg only moves the registers the launch
# gave the CTA (168 a thread x 384 threads): 128 x 96 + 256 x 200 stays within them, where 208 made the consumers'
# increase wait forever (the H100 hung)
GATHER_PRODUCER_REGISTERS = 96
GATHER_CONSUMER_REGISTERS = 200
LOG2_E = 1.4426950408889634
GELU_K = 0.7978845608028654   # sqrt(2 / pi)



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
    pad_h: int
    pad_w: int
    dilation_h: int
    dilation_w: int
    stride_h: int
    stride_w: int
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
    pingpong: bool             # two consumer warpgroups, each on its own tile (alternate tiles)
    stages: int
    epi_n: int
    epi_stages: int
    res_stages: int            # residual ring slots per consumer group (0 without a residual)
    raster_m: bool
    swizzle: int
    split_k: int               # work units a tile: each sums a contiguous range of its k tiles
    # epilogue
    scale: bool
    bias: bool
    residual: bool
    beta: float
    activation: str
    # a gathering kernel (spec.ProblemSpec.gathers): the producer warpgroup loads A and B element by element; the
    # M tiles run over the n*p*q output pixels as in a GEMM (xw = yq = n*p*q), and these are the conv's own extents
    gather: bool = False
    stores_elements: bool = False  # spec.ProblemSpec.stores_elements: K % 8, the output stored without TMA
    src_n: int = 0
    src_h: int = 0
    src_w: int = 0
    out_p: int = 0
    out_q: int = 0

    @property
    def epi_count(self) -> int:
        """Epilogue subtiles (tile_m x epi_n) of one tile."""
        return self.tile_n // self.epi_n

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
        if self.gather:
            return -(-(self.r * self.s * self.c) // self.tile_k)
        return self.r * self.s * self.k_blocks_per_tap

    def phases(self) -> list["Phase"]:
        """The input's stride-phase views the filter taps read: one for stride 1, up to four for stride 2."""
        return tap_phases(self)

    @property
    def groups(self) -> int:
        """Consumer groups with their own tile (and epilogue buffers): 2 in pingpong, else 1."""
        return 2 if self.pingpong else 1

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
    def scheduled_tiles(self) -> tuple[int, int]:
        """The (m, n) tile extents the scheduler hands out (clusters and swizzle groups rounded up)."""
        return scheduled_tiles(self.m_tiles, self.n_tiles, self.cluster_m, self.cluster_n, self.swizzle,
                               self.raster_m)

    @property
    def workspace_tiles(self) -> int:
        m, n = self.scheduled_tiles
        return m * n

    @property
    def partial_elements(self) -> int:
        """f32 partial accumulators in the split-K workspace, before the tiles' counters."""
        return self.split_k * self.workspace_tiles * self.tile_m * self.tile_n if self.split_k > 1 else 0

    @property
    def workspace_bytes(self) -> int:
        return split_k_workspace_bytes(self.workspace_tiles, self.split_k, self.tile_m, self.tile_n)

    def phase_k_offsets(self) -> list[int]:
        """The global k tile index of each phase's first k tile: phase by phase, tap by tap, channel block."""
        offsets, total = [], 0
        for ph in self.phases():
            offsets.append(total)
            total += ph.nr * ph.ns * self.k_blocks_per_tap
        assert total == self.k_tiles, (total, self.k_tiles)
        return offsets

    @property
    def grid(self) -> tuple[int, int, int]:
        clusters = min(self.tiles * self.split_k // self.cluster_size, SM_COUNT // self.cluster_size)
        return (self.cluster_m, self.cluster_n, clusters)  # refined by the scheduler's own rule

    def smem_bytes(self, stages: int | None = None) -> int:
        stages = self.stages if stages is None else stages
        if self.gather:  # the stages hold A; the filter stays, every k tile of it
            return (stages * self.tile_m * self.tile_k * 2 + self.tile_n * self.tile_k * self.k_tiles * 2
                    + self.tile_m * self.epi_n * 2 * self.epi_stages + 2 * self.tile_n * 4 + 1024 + 3 * 1024)
        ab = (self.tile_m + self.tile_n) * self.tile_k * 2
        epi = self.tile_m * self.epi_n * 2 * (self.epi_stages + self.res_stages) * self.groups
        extra = 2 * self.tile_n * 4 * self.groups
        return stages * ab + epi + extra + 1024 + 3 * 1024  # barriers, alignment slack


@dataclass(frozen=True)
class Phase:
    """The taps of one stride phase (ph, pw): input rows h = sh*h' + ph and columns w = sw*w' + pw, viewed as a
    (W', H', N, C) tensor from element (ph*W + pw)*C with strides (sw*C, sh*W*C, H*W*C, 1), so that a strided
    convolution reads, for each of these taps, one dense TMA box of the view: output (q, p) and tap (r, s) read
    w' = q + wo0 + si*wstep, h' = p + ho0 + ri*hstep (out of bounds of the view: zero, the padding).
    Taps r = r0 + ri*rstep (ri < nr), s = s0 + si*sstep (si < ns)."""

    ph: int
    pw: int
    view_w: int
    view_h: int
    r0: int
    rstep: int
    nr: int
    ho0: int
    hstep: int
    s0: int
    sstep: int
    ns: int
    wo0: int
    wstep: int


def _axis_phases(taps: int, dilation: int, pad: int, stride: int, extent: int):
    """Per phase of one axis: (phase, view extent, first tap, tap step, taps, first view offset, view step)."""
    out = []
    for phase in range(stride):
        chosen = [t for t in range(taps) if (t * dilation - pad) % stride == phase]
        if not chosen:
            continue
        step = chosen[1] - chosen[0] if len(chosen) > 1 else 1
        if any(b - a != step for a, b in zip(chosen, chosen[1:])):
            raise SpecError(f"taps {chosen} of stride phase {phase} are not evenly spaced")
        out.append((phase, -(-(extent - phase) // stride), chosen[0], step, len(chosen),
                    (chosen[0] * dilation - pad - phase) // stride, step * dilation // stride))
    return out


def tap_phases(g) -> list[Phase]:
    return [Phase(ph, pw, vh_w, vh_h, r0, rstep, nr, ho0, hstep, s0, sstep, ns, wo0, wstep)
            for (ph, vh_h, r0, rstep, nr, ho0, hstep) in _axis_phases(g.r, g.dilation_h, g.pad_h, g.stride_h, g.xh)
            for (pw, vh_w, s0, sstep, ns, wo0, wstep) in _axis_phases(g.s, g.dilation_w, g.pad_w, g.stride_w, g.xw)]


def geometry(spec: BuildSpec) -> Geometry:
    """Check the spec against what this kernel implements and lay it out; SpecError otherwise."""
    spec.check()
    p, t, e = spec.problem, spec.tile, spec.epilogue
    consumers = 1 if t.schedule == "single" else 2
    pingpong = t.schedule == "pingpong"
    if pingpong:
        # each consumer warpgroup holds a whole tile's accumulators: 64 or 128 rows, at most 128 f32 a thread
        if t.tile_m not in (64, 128):
            raise SpecError(f"schedule 'pingpong' needs tile_m 64 or 128 (one warpgroup's tile), got {t.tile_m}")
        if t.tile_m * t.tile_n > 128 * 128:
            raise SpecError(f"pingpong tile {t.tile_m}x{t.tile_n}: one warpgroup holds at most 128x128 accumulators")
    elif t.tile_m != 64 * consumers:
        raise SpecError(f"schedule {t.schedule!r} needs tile_m {64 * consumers} (64 per consumer warpgroup), "
                        f"got {t.tile_m}")
    if t.tile_n != 16 and not (t.tile_n % 32 == 0 and 32 <= t.tile_n <= 256):
        # the epilogue stores 32-column subtiles: a 48-column tile would leave its last 16 columns unstored
        raise SpecError(f"tile_n {t.tile_n} must be 16 or a multiple of 32 in 32..256")
    if t.tile_k not in (32, 64):
        raise SpecError(f"tile_k {t.tile_k} must be 32 or 64")
    if t.cluster_m not in (1, 2) or t.cluster_n not in (1, 2):
        raise SpecError(f"cluster {t.cluster_m}x{t.cluster_n}: each side must be 1 or 2")
    if t.swizzle < 1:
        raise SpecError(f"swizzle {t.swizzle} must be >= 1")
    if t.split_k > 1 and pingpong:
        # a pingpong group skips the other group's k tiles by count, which split-K makes vary by unit
        raise SpecError("split_k > 1 is not built with the pingpong schedule (single or cooperative are)")
    if not p.gathers and (p.stride_h not in (1, 2) or p.stride_w not in (1, 2)):
        raise SpecError(f"stride {p.stride_h}x{p.stride_w} is not built in the sm90 DSL kernel's TMA loads (strides 1 "
                        "and 2 on each axis are)")
    if p.is_gemm:
        xw, xh, xn, yq, yp = p.n * p.h * p.w, 1, 1, p.n * p.h * p.w, 1
        tile_q, bp, bn = t.tile_m, 1, 1
    elif p.gathers:
        xw, xh, xn, yq, yp = p.n * p.p * p.q, 1, 1, p.n * p.p * p.q, 1
        tile_q, bp, bn = t.tile_m, 1, 1
        if pingpong:
            raise SpecError("a gathering kernel (C < 8) is built with the single or cooperative schedule")
        if t.tile_n < p.k:
            raise SpecError(f"a gathering kernel keeps the whole filter: tile_n {t.tile_n} must hold K={p.k}")
    else:
        xw, xh, xn, yq, yp = p.w, p.h, p.n, p.q, p.p
        tile_q = t.tile_q
        if (reason := box_problem(p, t.tile_m, tile_q)):
            raise SpecError(reason)
        box = conv_box(p, t.tile_m, tile_q)  # rows = bp output rows x bn images
        bp, bn = box.rows_p, box.images_n
    if p.p < 1 or p.q < 1:
        raise SpecError("the convolution has an empty output")
    for name, value in (("W", xw), ("H", xh), ("N", xn)):
        if value >= 1 << 31:
            raise SpecError(f"{name} {value} is too large for TMA coordinates")
    tile_n = t.tile_n
    epi_n = epilogue_columns(tile_n)
    epi_stages = 2
    res_stages = residual_ring_slots(tile_n) if e.residual else 0
    g = Geometry(xw=xw, xh=xh, xn=xn, c=p.c, k=p.k, yq=yq, yp=yp, r=p.r, s=p.s, pad_h=p.pad_h, pad_w=p.pad_w,
                 dilation_h=p.dilation_h, dilation_w=p.dilation_w, stride_h=p.stride_h, stride_w=p.stride_w,
                 tile_q=tile_q, bp=bp, bn=bn, tile_m=t.tile_m, tile_n=tile_n,
                 tile_k=t.tile_k, cluster_m=t.cluster_m, cluster_n=t.cluster_n, consumers=consumers, pingpong=pingpong,
                 stages=max(t.stages, 1), epi_n=epi_n, epi_stages=epi_stages, res_stages=res_stages,
                 raster_m=t.raster == "m", swizzle=t.swizzle, split_k=t.split_k, scale=e.scale, bias=e.bias,
                 residual=e.residual, beta=float(e.beta), activation=e.activation, gather=p.gathers,
                 stores_elements=p.stores_elements,
                 src_n=p.n, src_h=p.h, src_w=p.w, out_p=p.p, out_q=p.q)
    if g.split_k > g.k_tiles:
        raise SpecError(f"split_k {g.split_k} exceeds the {g.k_tiles} k tiles of a tile: a unit would have none")
    fit = (SMEM_CAPACITY - g.smem_bytes(0)) // (((0 if g.gather else g.tile_n) + g.tile_m) * g.tile_k * 2)
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

    @cute.jit
    def store_elements(self, mY: cute.Tensor, sD: cute.Tensor, buf, q0, p0, n0, col0, wtid,
                       group_threads: cutlass.Constexpr, outside):
        """One epilogue subtile (tile_m pixels x epi_n channels from col0), staged in sD[buf], written into y element
        by element by the group's threads, where TMA cannot store it (K not a multiple of 8): pixel m of the box is
        (q0 + m mod tile_q, p0 + (m / tile_q) mod bp, n0 + m / (tile_q bp)); pixels past the output, channels past K
        and a split-K unit that is not its tile's last (outside) write nothing. Consecutive threads take consecutive
        channels of one pixel."""
        g = self.g
        for i in cutlass.range_constexpr(g.tile_m * g.epi_n // group_threads):
            index = wtid + i * group_threads
            m = index // g.epi_n
            col = index - m * g.epi_n
            q = q0 + m % g.tile_q
            p = p0 + (m // g.tile_q) % g.bp
            n = n0 + m // (g.tile_q * g.bp)
            kk = col0 + col
            inside = (cutlass.Int32(q < g.yq) * cutlass.Int32(p < g.yp) * cutlass.Int32(n < g.xn)
                      * cutlass.Int32(kk < g.k) * (1 - outside))
            if inside > 0:
                mY[((q, p, n), kk)] = sD[(m, col, buf)]

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
        scheduler = utils.StaticPersistentTileScheduler.create(sched, cute.arch.block_idx(), cute.arch.grid_dim())
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
        scheduler = utils.StaticPersistentTileScheduler.create(sched, cute.arch.block_idx(), cute.arch.grid_dim())
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
                cute.copy(tma_r, bR_g[(None, (0, e))], bR_s[(None, slot)], tma_bar_ptr=ring_full + slot)
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()

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

    @cute.jit
    def reduce_splits(self, acc: cute.Tensor, mPart: cute.Tensor, mCount: cute.Tensor, sArrivals: cute.Tensor,
                      tile, split, wtid, group_threads: cutlass.Constexpr, epi_barrier, grp):
        """Split-K's fixup, with no wait on another CTA: the unit stores its f32 accumulators in its workspace
        slot (tile, split), element-major across the group's threads (16 bytes a thread, coalesced), and after
        a barrier and a gpu-scope release one thread counts the arrival on the tile's counter. The unit that
        counts last (split_k - 1 arrived before it) acquires, sums the split_k partials, its own included, in
        split order (the same sum whichever unit arrives last) and sets the counter back to zero for the next
        launch. Returns 0 for that unit, 1 for the others (which must not store the tile)."""
        g = self.g
        f32 = self.acc_dtype
        vectors = cute.size(acc) // 4
        frag = cute.make_tensor(acc.iterator, cute.make_layout((4, vectors), stride=(1, 4)))
        slot = g.tile_m * g.tile_n
        thread_layout = cute.make_layout((4, vectors), stride=(1, group_threads * 4))
        store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), f32, num_bits_per_copy=128)
        # partials written by other CTAs in this launch: read from L2 (.cg), never from a stale L1 line
        load = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), f32, num_bits_per_copy=128,
                                   load_cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL)
        base = tile * (g.split_k * slot) + wtid * 4
        cute.copy(store, frag, cute.make_tensor(mPart.iterator + cute.assume(base + split * slot, divby=4),
                                                thread_layout))
        epi_barrier.arrive_and_wait()  # every thread's partial stored before the release below
        if wtid == 0:
            cute.arch.fence_acq_rel_gpu()
            sArrivals[grp] = cute.arch.atomic_add(mCount.iterator + tile, cutlass.Int32(1), sem="acq_rel",
                                                  scope="gpu")
            cute.arch.fence_acq_rel_gpu()
        epi_barrier.arrive_and_wait()
        arrived = sArrivals[grp]
        if arrived == g.split_k - 1:
            cute.copy(load, cute.make_tensor(mPart.iterator + cute.assume(base, divby=4), thread_layout), frag)
            other = cute.make_rmem_tensor((4, vectors), f32)
            for s in cutlass.range(1, g.split_k, unroll=1):
                cute.copy(load, cute.make_tensor(mPart.iterator + cute.assume(base + s * slot, divby=4),
                                                 thread_layout), other)
                frag.store(frag.load() + other.load())
            if wtid == 0:
                mCount[tile] = cutlass.Int32(0)
        return cutlass.min(g.split_k - 1 - arrived, 1)

    def acc_index(self, sub: int, v: int, n_sub: int) -> int:
        """The accumulator register (flat index into r2s.retile(acc)) of value v of epilogue sub-tile `sub`.

        r2s.retile(acc) is ((8, tile_n/16), m_rep, 1): 8 values (one stmatrix x4: 16 columns of the thread's
        rows) per 16-column group, the groups of one 64-row wgmma block, then the m_rep = tile_m/64 row blocks a
        warpgroup holds (2 in a 128-row pingpong tile, else 1). A sub-tile's registers rD are
        ((8), m_rep, epi_n/16) in that order (value, row block, column group): v = a + 8 (m + m_rep j).
        (The earlier formula took the row block as the outer index of rD, swapping row blocks and column groups
        of 128-row pingpong tiles.)"""
        g = self.g
        m_rep = g.tile_m // 64 if g.pingpong else 1
        groups = g.epi_n // 16
        assert n_sub == 8 * m_rep * groups, (n_sub, m_rep, groups)
        a, m, j = v % 8, (v // 8) % m_rep, v // (8 * m_rep)
        return a + 8 * (sub * groups + j) + (g.tile_n // 2) * m

    def consumer_state_at(self, count):
        """The consumer's pipeline state after `count` k tiles (index count mod stages, phase flipping per lap)."""
        count = cutlass.Int32(count)
        return pipeline.PipelineState(self.g.stages, count, count % self.g.stages, (count // self.g.stages) % 2)

    @cute.jit
    def epilogue_ops(self, rD: cute.Tensor, crd: cute.Tensor, count: cutlass.Constexpr,
                     sub: cutlass.Constexpr, sScale: cute.Tensor, sBias: cute.Tensor, grp, rR: cute.Tensor):
        """y = act(scale[k] * acc + bias[k] + beta * residual) on one epilogue sub-tile's registers. scale and
        bias come from shared memory (staged per tile) at each element's (m, n) coordinate in the tile; the
        residual `rR` is sub-tile `sub`, TMA-loaded into a slot of the residual ring and read by ldmatrix through
        the stmatrix layout, so in rD's order."""
        g = self.g
        f32 = self.acc_dtype
        if cutlass.const_expr(g.scale or g.bias):
            for v in cutlass.range_constexpr(count):
                col = crd[self.acc_index(sub, v, count)][1] + grp * g.tile_n
                value = rD[v]
                if cutlass.const_expr(g.scale):
                    value = value * sScale[col]
                if cutlass.const_expr(g.bias):
                    value = value + sBias[col]
                rD[v] = value
        if cutlass.const_expr(g.residual):
            res = rR.load().to(f32)  # the sub-tile's residual, ldmatrix'd in rD's order
            if cutlass.const_expr(g.beta == 1.0):
                rD.store(rD.load() + res)
            else:
                rD.store(rD.load() + f32(g.beta) * res)
        if cutlass.const_expr(g.activation == "relu"):
            vec = rD.load()
            rD.store(cute.where(vec > f32(0.0), vec, cute.full_like(vec, 0.0)))
        elif cutlass.const_expr(g.activation == "silu"):
            # x sigmoid(x) = h + h tanh(h), h = x/2: one tanh.approx.f16x2 (one MUFU op) per two elements
            # (was ex2 + rcp per element: four times the MUFU work, 16 ops/clk/SM, +2.8 us on a 28x28 layer)
            for v in cutlass.range_constexpr(0, count, 2):
                h0 = rD[v] * f32(0.5)
                h1 = rD[v + 1] * f32(0.5)
                rD[v], rD[v + 1] = half_plus_half_tanh2(h0, h1, h0, h1)
        elif cutlass.const_expr(g.activation == "gelu"):
            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (|error| < 5e-4 of the erf form, far under
            # the f16 output's rounding at the sizes that matter): one tanh.approx.f16x2 per two elements
            for v in cutlass.range_constexpr(0, count, 2):
                x0 = rD[v]
                x1 = rD[v + 1]
                u0 = x0 * (f32(GELU_K) + f32(GELU_K * 0.044715) * x0 * x0)
                u1 = x1 * (f32(GELU_K) + f32(GELU_K * 0.044715) * x1 * x1)
                rD[v], rD[v + 1] = half_plus_half_tanh2(x0 * f32(0.5), x1 * f32(0.5), u0, u1)


@dsl_user_op
def half_plus_half_tanh2(h0, h1, u0, u1, *, loc=None, ip=None):
    """(h0 + h0 tanh(u0), h1 + h1 tanh(u1)) in f32, the two tanh by one tanh.approx.f16x2 (relative error
    about 2^-11, the f16 output's own rounding)."""
    args = [cutlass.Float32(v).ir_value(loc=loc, ip=ip) for v in (h0, h1, u0, u1)]
    pair = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32(), T.f32()]), args,
        "{\n\t.reg .b32 p, t;\n\t.reg .f16 tl, th;\n\t.reg .f32 fl, fh;\n\t"
        "cvt.rn.f16x2.f32 p, $5, $4;\n\t"
        "tanh.approx.f16x2 t, p;\n\t"
        "mov.b32 {tl, th}, t;\n\t"
        "cvt.f32.f16 fl, tl;\n\t"
        "cvt.f32.f16 fh, th;\n\t"
        "fma.rn.f32 $0, $2, fl, $2;\n\t"
        "fma.rn.f32 $1, $3, fh, $3;\n\t}",
        "=f,=f,f,f,f,f", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)
    return (cutlass.Float32(llvm.extractvalue(T.f32(), pair, [0], loc=loc, ip=ip)),
            cutlass.Float32(llvm.extractvalue(T.f32(), pair, [1], loc=loc, ip=ip)))


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
