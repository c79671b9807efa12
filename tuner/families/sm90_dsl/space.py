"""The sm90_dsl family's space: persistent, warp-specialized Hopper kernels written in the CuTe DSL
(tuner/families/sm90_dsl/kernel.py), one compiled per problem, and the limits that can be checked
without building them. A 1x1, stride-1, unpadded layer runs as a GEMM on the NHWC buffers; any other
layer as an implicit GEMM whose A operand is, per filter tap, one TMA box of the input."""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from tuner.core.epilogue import Epilogue
from tuner.families.base import (LaunchArgs, SearchSpace, Shape3, check_keys, enum_list, int_list, pad_channels, param,
                                 shape_list, whole)
from tuner.families.sm90_dsl.residency import resident_clusters
from tuner.families.sm90_dsl.spec import (EPILOGUE_BUFFER_CHOICES, EPILOGUE_BUFFERS, EPILOGUE_COLUMN_CHOICES,
                                          EPILOGUE_COLUMNS, GATHER_BELOW_CHANNELS, L2_HINTS, SMEM_CAPACITY,
                                          SPLIT_REDUCES, STREAM_K,
                                          TMA_ROW_BYTES, BuildSpec, EpilogueSpec, ProblemSpec, TileSpec,
                                          epilogue_columns, residual_ring_slots, scheduled_tiles,
                                          split_k_workspace_bytes)
from tuner.families.sm90_dsl.box import ConvBox, conv_box, phase_extents
from tuner.families.sm90_dsl.im2col import TILE_Q_IM2COL
from tuner.families.sm90_dsl.stream_plan import StreamKPlan, stream_k_plan
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.problem import ConvProblem

FAMILY = "sm90_dsl"
CHANNEL_MULTIPLE = 8      # TMA rows of 16 bytes in 16-bit elements
INPUT_TYPES = (DataType.f16, DataType.bf16, DataType.e4m3, DataType.tf32)  # spec.ELEMENTS: the element of x and w
AUTO_STAGES = 0
# mbarriers and the scheduler's state, and the 1024-byte alignment of the buffers: geometry.Geometry.smem_bytes's
# slack, so that a configuration these checks pass is one the kernel builds (with 1 KB, a pingpong 128x128
# residual kernel passed here and failed to build: 235520 bytes for 4 stages)
BARRIER_BYTES = 4096
SWIZZLES = (1, 2, 4, 8)
TILE_QS = (8, 16, 32, 64, 128)
AUTO_TILE_Q = 0  # the box width that computes the fewest padded pixels; the only value a GEMM takes
MAX_SPLIT_K = 32
MIN_K_TILES_PER_SPLIT = 2  # fewer leave a split's mainloop too short to pay for its partials' round trip


# The static checks ask for a configuration's box and stream-K plan several times each, and a layer's space holds
# 200 K configurations over a few hundred distinct boxes and plans: computing each once took 10-40 % off the checks.
cached_conv_box = functools.lru_cache(maxsize=4096)(conv_box)
cached_stream_k_plan = functools.lru_cache(maxsize=4096)(stream_k_plan)


class Schedule(enum.Enum):
    single = "single"            # one consumer warpgroup
    cooperative = "cooperative"  # two consumer warpgroups split each tile's M
    pingpong = "pingpong"        # two consumer warpgroups on alternate tiles


class Raster(enum.Enum):
    m = "m"
    n = "n"


class EpilogueStore(enum.Enum):  # spec.EPILOGUE_STORES
    tma = "tma"        # staged subtiles, stored by TMA
    direct = "direct"  # each thread's registers straight into y: nothing staged, no barrier


class L2Hints(enum.Enum):  # spec.L2_HINTS
    none = "none"      # the TMA copies' default L2 eviction priority
    stream = "stream"  # the input, the residual and the output evict-first, the filter evict-last


class SplitReduce(enum.Enum):  # spec.SPLIT_REDUCES
    workspace = "workspace"  # partials through global memory, summed by the tile's last unit to finish
    cluster = "cluster"      # the splits are a 1 x split_k cluster's CTAs; the first sums the others' in its smem


assert tuple(r.value for r in SplitReduce) == SPLIT_REDUCES
assert tuple(h.value for h in L2Hints) == L2_HINTS
CONSUMER_WARPGROUPS = {Schedule.single: 1, Schedule.cooperative: 2, Schedule.pingpong: 2}
# the refined knobs (the epilogue's staging, the L2 hints) at the values every kernel had before they existed: a space
# file or a stored trial that leaves them out means these
REFINED_DEFAULTS = {"epi_columns": EPILOGUE_COLUMNS, "epi_buffers": EPILOGUE_BUFFERS,
                    "epi_store": EpilogueStore.tma.value, "l2_hints": L2Hints.none.value}


def threads(schedule: Schedule) -> int:
    """The consumers and one producer warpgroup."""
    return 128 * (CONSUMER_WARPGROUPS[schedule] + 1)


@dataclass(frozen=True, order=True)
class Sm90DslConfig:
    tile: Shape3
    cluster: Shape3
    schedule: Schedule
    stages: int      # 0: as many as fit
    raster: Raster
    swizzle: int
    tile_q: int      # the knob: output columns of a conv tile's box of pixels, AUTO_TILE_Q to pick; 0 in a GEMM
    shape: ProblemSpec  # the kernel's problem (C padded): every extent is compiled in
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()
    # work units a tile, each summing a range of its k tiles, the last to finish storing it; STREAM_K (0): each
    # persistent cluster sums an equal share of all tiles' k tiles laid end to end (spec.StreamKPlan)
    split_k: int = 1
    # where the splits' partials are summed (make_config holds it at workspace without a split: one value names one
    # kernel)
    split_reduce: SplitReduce = SplitReduce.workspace
    # the epilogue's staging (spec.TileSpec): 64 only where it divides tile N (make_config), so that no two values
    # name one kernel
    epi_columns: int = EPILOGUE_COLUMNS
    epi_buffers: int = EPILOGUE_BUFFERS
    # "direct" stages nothing, so it holds the default staging (make_config)
    epi_store: EpilogueStore = EpilogueStore.tma
    l2_hints: L2Hints = L2Hints.none
    # no knob: built with programmatic dependent launch (spec.BuildSpec.pdl) for a caller that chains kernels
    # (tuner.torch_ops.optimize(pdl=True)); the tuner times kernels without it
    pdl: bool = False

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def compiled(self) -> "Sm90DslConfig":
        return self  # every knob is compiled in

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def name(self) -> str:
        stages = "auto" if self.stages == AUTO_STAGES else str(self.stages)
        box = ("_gather" if self.shape.gathers else "" if self.shape.is_gemm else "_qim2col" if self.im2col
               else f"_q{self.tile_q or 'auto'}")
        s = self.shape
        split = ("_skstream" if self.stream_k else f"_sk{self.split_k}{'c' if self.cluster_reduce else ''}"
                 if self.split_k > 1 else "")
        staging = f"_e{self.staging}" if self.staging else ""
        hints = "_l2s" if self.l2_hints is L2Hints.stream else ""
        return (f"dsl_{self.tile.text}{box}_c{self.cluster.m}x{self.cluster.n}_{self.schedule.value}_s{stages}"
                f"_r{self.raster.value}_sw{self.swizzle}{split}{staging}{hints}_{self.dtype_key}{self.fusion.short}"
                f"_{s.key}{'_pdl' if self.pdl else ''}")

    @property
    def staging(self) -> str | None:
        """The epilogue's store as the kernel name says it ("direct", or columns x buffers: "64x4"); None for the
        default staging, which the name leaves out."""
        if self.epi_store is EpilogueStore.direct:
            return EpilogueStore.direct.value
        if (self.epi_columns, self.epi_buffers) == (EPILOGUE_COLUMNS, EPILOGUE_BUFFERS):
            return None
        return f"{self.epi_columns}x{self.epi_buffers}"

    @property
    def search_params(self) -> dict:
        return {"tile": self.tile.text, "cluster": self.cluster.text, "schedule": self.schedule.value,
                "stages": self.stages, "raster": self.raster.value, "swizzle": self.swizzle, "tile_q": self.tile_q,
                "split_k": self.split_k, "split_reduce": self.split_reduce.value, "epi_columns": self.epi_columns,
                "epi_buffers": self.epi_buffers, "epi_store": self.epi_store.value, "l2_hints": self.l2_hints.value}

    @property
    def persistent(self) -> bool:
        return True

    @property
    def columns(self) -> int:
        """The box's output columns the kernel is built with (tile_q, or the automatic choice)."""
        return self.tile_q or auto_tile_q(self.shape, self.tile.m)

    @property
    def im2col(self) -> bool:
        """A conv's A by TMA im2col loads (im2col.py), not boxes a tap."""
        return self.tile_q == TILE_Q_IM2COL

    @property
    def tiles_pixels(self) -> bool:
        """M tiles run over the n*p*q output pixels in order (a GEMM, a gathering kernel, im2col loads), not boxes."""
        return self.shape.is_gemm or self.shape.gathers or self.im2col

    @property
    def box(self) -> ConvBox | None:
        return None if self.tiles_pixels else cached_conv_box(self.shape, self.tile.m, self.columns)

    @property
    def m_tiles(self) -> int:
        if self.box is None:
            return -(-(self.shape.n * self.shape.p * self.shape.q) // self.tile.m)
        return self.box.tiles(self.shape)

    @property
    def work_tiles(self) -> int:
        return self.m_tiles * -(-self.shape.k // self.tile.n)

    @property
    def cluster_tiles(self) -> int:
        """CTAs the output tiles occupy: both tile counts rounded up to whole clusters."""
        m, n = scheduled_tiles(self.m_tiles, -(-self.shape.k // self.tile.n), self.cluster.m, self.cluster.n, 1, True)
        return m * n

    @property
    def stream_k(self) -> bool:
        return self.split_k == STREAM_K

    @property
    def cluster_reduce(self) -> bool:
        """The splits reduced within a 1 x split_k cluster (cluster_split.py), not through the workspace."""
        return self.split_reduce is SplitReduce.cluster

    @property
    def launch_cluster(self) -> Shape3:
        """The cluster the kernel launches: the multicast one, or the tile's splits (geometry.Geometry's)."""
        return Shape3(1, self.split_k, 1) if self.cluster_reduce else self.cluster

    @property
    def exchange_bytes(self) -> int:
        """Split 0's buffer of the other splits' f32 partials, with the splits reduced in the cluster."""
        return (self.split_k - 1) * self.tile.m * self.tile.n * 4 if self.cluster_reduce else 0

    @property
    def workspace_tiles(self) -> int:
        """The tiles the scheduler hands out: whole clusters and swizzle groups (as geometry.Geometry's)."""
        m, n = scheduled_tiles(self.m_tiles, -(-self.shape.k // self.tile.n), self.cluster.m, self.cluster.n,
                               self.swizzle, self.raster is Raster.m)
        return m * n

    @property
    def stream_plan(self) -> StreamKPlan:
        """Stream-K's shares, as geometry.Geometry.stream_plan lays them out for the kernel."""
        size = self.cluster.m * self.cluster.n
        return cached_stream_k_plan(self.workspace_tiles, size, self.k_steps, resident_clusters(size))

    @property
    def workspace_bytes(self) -> int:
        """The split-K workspace: a partial a (tile, split) and a counter a tile, over every tile the scheduler
        hands out (whole clusters and swizzle groups); with stream-K a partial a unit of the tile that has most."""
        if self.cluster_reduce:
            return 0
        slots = self.stream_plan.slots if self.stream_k else self.split_k
        return split_k_workspace_bytes(self.workspace_tiles, slots, self.tile.m, self.tile.n)

    @property
    def k_steps(self) -> int:
        """Main-loop iterations of one tile: each filter tap walks C in tile K steps; a gathering kernel walks
        every (r, s, c) at once."""
        if self.shape.gathers:
            return -(-self.shape.gemm_k // self.tile.k)
        return self.shape.r * self.shape.s * -(-self.shape.c // self.tile.k)

    @property
    def stage_bytes(self) -> int:
        if self.shape.gathers:  # B is the resident filter, not a stage's
            return self.input_type.bytes * self.tile.k * self.tile.m
        return self.input_type.bytes * self.tile.k * (self.tile.m + self.tile.n)

    @property
    def filter_bytes(self) -> int:
        """A gathering kernel's resident filter: one N tile by every k tile."""
        return self.input_type.bytes * self.tile.n * self.tile.k * self.k_steps if self.shape.gathers else 0

    def epilogue_bytes(self) -> int:
        """The output subtiles staged for the TMA store, the residual's ring of subtiles and the vectors; in
        pingpong each consumer warpgroup has its own."""
        groups = 2 if self.schedule is Schedule.pingpong else 1
        subtile = self.tile.m * epilogue_columns(self.tile.n, self.epi_columns) * self.output_type.bytes
        ring = residual_ring_slots(self.tile.n, self.epi_columns) if self.fusion.residual else 0
        vectors = 2 * self.tile.n * 4  # scale and bias, staged per tile (allocated with or without them)
        return (subtile * (self.epi_buffers + ring) + vectors) * groups + self.exchange_bytes

    @property
    def auto_stage_count(self) -> int:
        return (SMEM_CAPACITY - BARRIER_BYTES - self.epilogue_bytes() - self.filter_bytes) // self.stage_bytes

    @property
    def stage_count(self) -> int:
        return self.auto_stage_count if self.stages == AUTO_STAGES else self.stages

    @property
    def smem_bytes(self) -> int:
        return self.stage_count * self.stage_bytes + self.epilogue_bytes() + self.filter_bytes + BARRIER_BYTES

    def build_spec(self) -> BuildSpec:
        f = self.fusion
        return BuildSpec(
            problem=self.shape,
            epilogue=EpilogueSpec(scale=f.scale, bias=f.bias, residual=f.residual, beta=float(f.residual_scale),
                                  activation=f.activation.value),
            tile=TileSpec(tile_m=self.tile.m, tile_n=self.tile.n, tile_k=self.tile.k, cluster_m=self.cluster.m,
                          cluster_n=self.cluster.n, schedule=self.schedule.value, stages=self.stages,
                          raster=self.raster.value, swizzle=self.swizzle,
                          tile_q=TILE_Q_IM2COL if self.im2col else 0 if self.tiles_pixels else self.columns,
                          split_k=self.split_k, split_reduce=self.split_reduce.value, epi_columns=self.epi_columns,
                          epi_buffers=self.epi_buffers, epi_store=self.epi_store.value,
                          l2_hints=self.l2_hints.value),
            element=self.input_type.value, pdl=self.pdl)


def parse_space(document: object) -> SearchSpace:
    if isinstance(document, dict):  # the refined knobs and the split's reduction may be left out
        document = {**{knob: [value] for knob, value in REFINED_DEFAULTS.items()},
                    "split_reduce": [SplitReduce.workspace.value], **document}
    document = check_keys(FAMILY, document, {"family", "tile", "cluster", "schedule", "stages", "raster", "swizzle",
                                             "tile_q", "split_k", "split_reduce", "epi_columns", "epi_buffers",
                                             "epi_store", "l2_hints"})
    return SearchSpace(FAMILY, (
        ("tile", tuple(t.text for t in shape_list(FAMILY, "tile", document["tile"]))),
        ("cluster", tuple(c.text for c in shape_list(FAMILY, "cluster", document["cluster"]))),
        ("schedule", tuple(s.value for s in enum_list(FAMILY, "schedule", document["schedule"], Schedule))),
        ("stages", int_list(FAMILY, "stages", document["stages"], lambda v: v == 0 or 2 <= v <= 16,
                            "0 for as many as fit, or 2 to 16")),
        ("raster", tuple(r.value for r in enum_list(FAMILY, "raster", document["raster"], Raster))),
        ("swizzle", int_list(FAMILY, "swizzle", document["swizzle"], lambda v: v in SWIZZLES, "1, 2, 4 or 8")),
        # 0 (automatic) is always a choice: it is the value every GEMM's configuration holds
        ("tile_q", tuple(sorted({AUTO_TILE_Q, *int_list(FAMILY, "tile_q", document["tile_q"],
                                                         lambda v: v in (TILE_Q_IM2COL, AUTO_TILE_Q) or v in TILE_QS,
                                                         f"output columns of a conv tile: {TILE_Q_IM2COL} for im2col "
                                                         "loads, 0 for automatic, or " + ", ".join(map(str, TILE_QS)))}))),
        ("split_k", int_list(FAMILY, "split_k", document["split_k"],
                             lambda v: v == STREAM_K or 1 <= v <= MAX_SPLIT_K,
                             f"1 to {MAX_SPLIT_K}, or {STREAM_K} for stream-K")),
        ("split_reduce", tuple(r.value for r in enum_list(FAMILY, "split_reduce", document["split_reduce"],
                                                          SplitReduce))),
        ("epi_columns", int_list(FAMILY, "epi_columns", document["epi_columns"], EPILOGUE_COLUMN_CHOICES.__contains__,
                                 " or ".join(map(str, EPILOGUE_COLUMN_CHOICES)))),
        ("epi_buffers", int_list(FAMILY, "epi_buffers", document["epi_buffers"], EPILOGUE_BUFFER_CHOICES.__contains__,
                                 " to ".join(map(str, EPILOGUE_BUFFER_CHOICES[::2])))),
        # the first is what a study holds (the knobs are refined on its finalists)
        ("epi_store", tuple(s.value for s in enum_list(FAMILY, "epi_store", document["epi_store"], EpilogueStore))),
        ("l2_hints", tuple(h.value for h in enum_list(FAMILY, "l2_hints", document["l2_hints"], L2Hints))),
    ))


@functools.lru_cache(maxsize=1024)
def auto_tile_q(shape: ProblemSpec, tile_m: int) -> int:
    """The box width whose boxes compute the fewest padded pixels (wider on a tie), of those the kernel
    builds: dividing tile M, and no side equal to the input's W or H."""
    def waste(q: int) -> tuple[float, int]:
        box = conv_box(shape, tile_m, q)
        return (-box.useful_fraction(shape), -q)
    widths, heights = phase_extents(shape.w, shape.stride_w), phase_extents(shape.h, shape.stride_h)
    usable = [q for q in TILE_QS if tile_m % q == 0 and q not in widths
              and conv_box(shape, tile_m, q).rows_p not in heights]
    return min(usable, key=waste) if usable else TILE_QS[0]


def kernel_problem(problem: ConvProblem) -> ConvProblem:
    """Channels zero-padded to 16-byte TMA rows (8 in 16 bits, 16 in e4m3), and to 8 in tf32 (the builder's rule for
    C, spec.BuildSpec.check, though 4 would fill a TMA row); fewer than 8 16-bit ones are gathered."""
    if problem.c < GATHER_BELOW_CHANNELS and problem.input_type.bytes == 2:
        return problem
    return pad_channels(problem, max(CHANNEL_MULTIPLE, TMA_ROW_BYTES // problem.input_type.bytes))


@functools.lru_cache(maxsize=256)  # every configuration of a layer's space asks, twice (make_config, the checks)
def problem_spec(problem: ConvProblem) -> ProblemSpec:
    p = kernel_problem(problem)
    return ProblemSpec(n=p.n, h=p.h, w=p.w, c=p.c, k=p.k, r=p.r, s=p.s, pad_h=p.pad_h, pad_w=p.pad_w,
                       stride_h=p.stride_h, stride_w=p.stride_w, dilation_h=p.dilation_h, dilation_w=p.dilation_w)


def make_config(problem: ConvProblem, params: dict) -> Sm90DslConfig:
    shape = problem_spec(problem)
    tile = param(params, "tile", Shape3.parse)
    refined = {**REFINED_DEFAULTS, **params}  # trials stored before the refined knobs existed ran with these
    epi_columns = param(refined, "epi_columns", whole)
    epi_buffers = param(refined, "epi_buffers", whole)
    epi_store = param(refined, "epi_store", EpilogueStore)
    if epi_store is EpilogueStore.direct:  # nothing staged: one kernel whatever the staging says
        epi_columns, epi_buffers = EPILOGUE_COLUMNS, EPILOGUE_BUFFERS
    split_k = param(params, "split_k", whole) if "split_k" in params else 1
    return Sm90DslConfig(
        tile=tile,
        cluster=param(params, "cluster", Shape3.parse),
        schedule=param(params, "schedule", Schedule),
        stages=param(params, "stages", whole),
        raster=param(params, "raster", Raster),
        swizzle=param(params, "swizzle", whole),
        # a GEMM (or a gathering kernel) has no box of pixels: every tile_q is the same kernel there
        tile_q=0 if shape.is_gemm or shape.gathers else param(params, "tile_q", whole),
        # trials stored before the knob existed ran without a split
        split_k=split_k,
        # trials stored before it reduced through the workspace; without a split nothing is reduced
        split_reduce=(param(params, "split_reduce", SplitReduce) if split_k > 1 and "split_reduce" in params
                      else SplitReduce.workspace),
        # wider subtiles than tile N allows are the kernel of the default width: one value names it
        epi_columns=epi_columns if tile.n % epi_columns == 0 else EPILOGUE_COLUMNS,
        epi_buffers=epi_buffers,
        epi_store=epi_store,
        l2_hints=param(refined, "l2_hints", L2Hints),
        shape=shape,
        input_type=problem.input_type, filter_type=problem.filter_type,
        output_type=problem.output_type, accumulator_type=problem.accumulator_type,
        fusion=problem.epilogue,
    )


def launch_args(config: Sm90DslConfig, problem: ConvProblem) -> LaunchArgs:
    # a stream-K kernel is launched as one without a split: it works its units out itself
    return LaunchArgs(kernel_problem(problem).c, split_k=max(config.split_k, 1))
