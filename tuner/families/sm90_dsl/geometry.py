"""The static shape of one sm90 CuTe DSL kernel (tuner/families/sm90_dsl/kernel.py), derived from a BuildSpec in plain
Python: the M box of output pixels, the stride phases of the input the taps read, the tiles the persistent scheduler hands
out, the split-K workspace and the shared memory. No DSL import: the family's checks and the tests use it as it is."""
from __future__ import annotations

from dataclasses import dataclass

from .spec import (ELEMENT_BYTES, SMEM_CAPACITY, STREAM_K, BuildSpec, SpecError, cluster_problem,
                   element_tile_problem, epilogue_columns, residual_ring_slots, scheduled_tiles,
                   split_k_workspace_bytes, tile_m_problem, tile_n_problem)
from .box import box_problem, conv_box
from .im2col import TILE_Q_IM2COL, im2col_problem
from .residency import resident_clusters
from .stream_plan import StreamKPlan, stream_k_plan, stream_k_problem


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
    stores_direct: bool = False    # spec.TileSpec.epi_store "direct": each thread's registers stored into y
    src_n: int = 0
    src_h: int = 0
    src_w: int = 0
    out_p: int = 0
    out_q: int = 0
    operand_bytes: int = 2         # bytes of an element of x and w (1: e4m3, 4: tf32)
    output_bytes: int = 2          # bytes of an element of y and the residual (4: a tf32 kernel's f32, no residual)
    scaled: bool = False           # e4m3: the accumulators times alpha, the input's x the filter's per-tensor scale
    pdl: bool = False              # spec.BuildSpec.pdl: programmatic dependent launch
    l2_stream: bool = False        # spec.TileSpec.l2_hints "stream": A and y evict-first, the filter evict-last
    stream_k: bool = False         # spec.STREAM_K: the clusters share all tiles' k tiles evenly (split_k is then 1)
    # im2col.TILE_Q_IM2COL: A by TMA im2col loads; the M tiles run over the n*p*q output pixels in order (xw = yq =
    # n*p*q, as in a GEMM) and src_*, out_* hold the conv's own extents
    im2col: bool = False
    # spec.TileSpec.split_reduce "cluster": the split_k splits of a tile are the CTAs of a 1 x split_k cluster (no
    # multicast: cluster_m and cluster_n are 1), and split 0 sums the others' partials in its shared memory
    cluster_reduce: bool = False

    @property
    def launch_cluster(self) -> tuple[int, int]:
        """The CTAs of a launched cluster along M and N: the multicast cluster, or a tile's splits."""
        return (1, self.split_k) if self.cluster_reduce else (self.cluster_m, self.cluster_n)

    @property
    def exchange_elements(self) -> int:
        """f32 partials split 0 of a cluster-reduced tile receives: every other split's tile_m x tile_n."""
        return (self.split_k - 1) * self.tile_m * self.tile_n if self.cluster_reduce else 0

    @property
    def exchange_slots(self) -> int:
        """The Int32 words the kernel's exchange buffer holds: exchange_elements, and 4 (one aligned 16 bytes) in a
        kernel that exchanges nothing, since the shared-storage struct declares the buffer in every kernel."""
        return max(self.exchange_elements, 4)

    @property
    def stages_by_element(self) -> bool:
        """spec.BuildSpec.stages_by_element: a 32-bit output, staged by st.shared, not stmatrix."""
        return self.output_bytes == 4

    @property
    def stores_by_thread(self) -> bool:
        """The consumers write y themselves (element by element from shared memory, or from their registers): no
        TMA store, and y's view is memory, not a TMA coordinate tensor."""
        return self.stores_elements or self.stores_direct

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
        """The input's stride-phase views the filter taps read: one for stride 1, up to four for stride 2 (none
        with im2col loads, which stride in the TMA unit)."""
        assert not self.im2col, "an im2col kernel reads no stride-phase views"
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
        """CTAs a launched cluster."""
        return self.launch_cluster[0] * self.launch_cluster[1]

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
    def splits(self) -> bool:
        """Whether a tile may be summed by several work units (split-K or stream-K), with the fixup after them."""
        return self.split_k > 1 or self.stream_k

    @property
    def uses_workspace(self) -> bool:
        """Whether the splits' partials go through the global workspace (not summed within the cluster)."""
        return self.splits and not self.cluster_reduce

    @property
    def stream_plan(self) -> StreamKPlan:
        return stream_k_plan(self.workspace_tiles, self.cluster_size, self.k_tiles,
                             resident_clusters(self.cluster_size))

    @property
    def split_slots(self) -> int:
        """Partials a tile in the workspace: split-K's splits, or stream-K's most units of one tile."""
        return self.stream_plan.slots if self.stream_k else self.split_k

    @property
    def partial_elements(self) -> int:
        """f32 partial accumulators in the split-K workspace, before the tiles' counters."""
        return self.split_slots * self.workspace_tiles * self.tile_m * self.tile_n if self.uses_workspace else 0

    @property
    def workspace_bytes(self) -> int:
        if not self.uses_workspace:
            return 0
        return split_k_workspace_bytes(self.workspace_tiles, self.split_slots, self.tile_m, self.tile_n)

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
        if self.stream_k:
            return (self.cluster_m, self.cluster_n, self.stream_plan.clusters)
        clusters = min(self.tiles * self.split_k // self.cluster_size, resident_clusters(self.cluster_size))
        return (*self.launch_cluster, clusters)  # refined by the scheduler's own rule

    def smem_bytes(self, stages: int | None = None) -> int:
        stages = self.stages if stages is None else stages
        if self.gather:  # the stages hold A; the filter stays, every k tile of it
            return (stages * self.tile_m * self.tile_k * 2 + self.tile_n * self.tile_k * self.k_tiles * 2
                    + self.tile_m * self.epi_n * 2 * self.epi_stages + 2 * self.tile_n * 4 + 1024 + 3 * 1024)
        ab = (self.tile_m + self.tile_n) * self.tile_k * self.operand_bytes
        epi = self.tile_m * self.epi_n * (self.output_bytes * self.epi_stages + 2 * self.res_stages) * self.groups
        extra = 2 * self.tile_n * 4 * self.groups + self.exchange_elements * 4
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
    if (reason := tile_n_problem(t.tile_n)):
        raise SpecError(reason)
    if (reason := tile_m_problem(t.tile_m, t.tile_n, t.schedule, p.gathers)):
        raise SpecError(reason)
    operand_bytes = ELEMENT_BYTES[spec.element]
    if (reason := element_tile_problem(t.tile_n, t.tile_k, spec.element)):
        raise SpecError(reason)
    if (reason := cluster_problem(t.cluster_m, t.cluster_n)):
        raise SpecError(reason)
    if t.swizzle < 1:
        raise SpecError(f"swizzle {t.swizzle} must be >= 1")
    if t.split_k > 1 and pingpong:
        # a pingpong group skips the other group's k tiles by count, which split-K makes vary by unit
        raise SpecError("split_k > 1 is not built with the pingpong schedule (single or cooperative are)")
    if not p.gathers and t.tile_q != TILE_Q_IM2COL and (p.stride_h not in (1, 2) or p.stride_w not in (1, 2)):
        raise SpecError(f"stride {p.stride_h}x{p.stride_w} is not built in the sm90 DSL kernel's TMA loads (strides 1 "
                        "and 2 on each axis are)")
    if p.is_gemm:
        xw, xh, xn, yq, yp = p.n * p.h * p.w, 1, 1, p.n * p.h * p.w, 1
        tile_q, bp, bn = t.tile_m, 1, 1
    elif p.gathers or t.tile_q == TILE_Q_IM2COL:  # M tiles over the n*p*q output pixels in order
        xw, xh, xn, yq, yp = p.n * p.p * p.q, 1, 1, p.n * p.p * p.q, 1
        tile_q, bp, bn = t.tile_m, 1, 1
        if not p.gathers and (reason := im2col_problem(p)):
            raise SpecError(reason)
        if p.gathers and pingpong:
            raise SpecError("a gathering kernel (C < 8) is built with the single or cooperative schedule")
        if p.gathers and t.tile_n < p.k:
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
    epi_n = epilogue_columns(tile_n, t.epi_columns)
    epi_stages = t.epi_buffers
    res_stages = residual_ring_slots(tile_n, t.epi_columns) if e.residual else 0
    g = Geometry(xw=xw, xh=xh, xn=xn, c=p.c, k=p.k, yq=yq, yp=yp, r=p.r, s=p.s, pad_h=p.pad_h, pad_w=p.pad_w,
                 dilation_h=p.dilation_h, dilation_w=p.dilation_w, stride_h=p.stride_h, stride_w=p.stride_w,
                 tile_q=tile_q, bp=bp, bn=bn, tile_m=t.tile_m, tile_n=tile_n,
                 tile_k=t.tile_k, cluster_m=t.cluster_m, cluster_n=t.cluster_n, consumers=consumers, pingpong=pingpong,
                 stages=max(t.stages, 1), epi_n=epi_n, epi_stages=epi_stages, res_stages=res_stages,
                 raster_m=t.raster == "m", swizzle=t.swizzle, split_k=t.split_k, scale=e.scale, bias=e.bias,
                 residual=e.residual, beta=float(e.beta), activation=e.activation, gather=p.gathers,
                 stores_elements=p.stores_elements and t.epi_store != "direct", stores_direct=t.epi_store == "direct",
                 src_n=p.n, src_h=p.h, src_w=p.w, out_p=p.p, out_q=p.q, operand_bytes=operand_bytes,
                 output_bytes=ELEMENT_BYTES[spec.output_element],
                 scaled=spec.scaled, pdl=spec.pdl, l2_stream=t.l2_hints == "stream",
                 im2col=not p.is_gemm and not p.gathers and t.tile_q == TILE_Q_IM2COL,
                 cluster_reduce=t.split_reduce == "cluster")
    if t.split_k == STREAM_K:
        g = Geometry(**{**g.__dict__, "split_k": 1, "stream_k": True})
        if (reason := stream_k_problem(g.stream_plan, t.schedule, p.gathers)):
            raise SpecError(reason)
    if g.split_k > g.k_tiles:
        raise SpecError(f"split_k {g.split_k} exceeds the {g.k_tiles} k tiles of a tile: a unit would have none")
    fit = (SMEM_CAPACITY - g.smem_bytes(0)) // (((0 if g.gather else g.tile_n) + g.tile_m) * g.tile_k * operand_bytes)
    stages = fit if t.stages == 0 else t.stages
    if stages < 2:
        raise SpecError(f"{stages} pipeline stage(s) fit in shared memory; at least 2 are needed")
    if stages > fit:
        raise SpecError(f"{stages} stages need {g.smem_bytes(stages)} bytes of shared memory, "
                        f"more than {SMEM_CAPACITY}")
    stages = min(stages, 8)
    g = Geometry(**{**g.__dict__, "stages": stages})
    return g
