"""What the CuTe DSL builder is asked to build: one kernel for one problem, as a frozen record that
crosses the process boundary as JSON. The tuner side (the family) writes it; tuner/families/sm90_dsl/
build.py reads it in a child process, where the DSL is imported. Nothing here imports the DSL."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tuner.core.axes import axes_key, output_extent
from tuner.families.sm90_dsl.im2col import TILE_Q_IM2COL

SPEC_VERSION = 2  # 2: pad, stride and dilation per axis
SCHEDULES = ("single", "cooperative", "pingpong")  # one consumer warpgroup, two on one tile, two alternating
ACTIVATIONS = ("none", "relu", "gelu", "silu")
RASTERS = ("m", "n")
EPILOGUE_COLUMNS = 32      # the epilogue's subtile: tile_m rows x this many columns (16 where 32 do not divide tile_n)
EPILOGUE_COLUMN_CHOICES = (32, 64)  # the knob: 64-column subtiles where they divide tile_n, else 32 (or 16)
EPILOGUE_BUFFERS = 2       # output subtiles a consumer group stages for the TMA store
EPILOGUE_BUFFER_CHOICES = (2, 3, 4)
# the output's store: staged subtiles stored by TMA, or each thread's registers straight into y (no staging, no
# barriers: for the memory-bound tiles that wait on the staging's rhythm)
EPILOGUE_STORES = ("tma", "direct")
# the L2 eviction priority of the TMA copies (CUTLASS's CacheHintSm90 policies): the default for every operand, or
# "stream": the input and the residual loaded and the output stored evict-first (a GEMM's tiles read their rows
# once), the filter loaded evict-last (every M tile reads it). docs/dsl.md: on an H200 the C64 K64 1x1 at batch 32
# 8.59 -> 7.88 us
L2_HINTS = ("none", "stream")
L2_EVICT_FIRST = 0x12F0000000000000
L2_EVICT_LAST = 0x14F0000000000000
RESIDUAL_RING_SLOTS = 4    # residual subtiles a consumer group's ring holds at most
# the element of x and w (tuner/core/dtypes.py DataType's names): a 16-bit one is y's and the residual's too; e4m3
# kernels write f16 and take the operands' per-tensor scales; tf32 kernels (fp32 models) write f32
ELEMENTS = ("f16", "bf16", "e4m3", "tf32")
OUTPUT_ELEMENTS = {"f16": "f16", "bf16": "bf16", "e4m3": "f16", "tf32": "f32"}
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1, "tf32": 4, "f32": 4}  # f32: a tf32 kernel's output
TMA_ROW_BYTES = 16         # a TMA box's inner dimension: C and K rows are multiples of it
MMA_K = 32                 # tile_k is a multiple of it: two 16-bit wgmmas (K 16), one fp8 (K 32), four tf32 (K 8)
SWIZZLE_ROW_BYTES = (32, 64, 128)  # a stage's row of A or B, tile_k elements, is one swizzle's row
MAX_TMA_BOX = 256          # elements along any dimension of a TMA box
SMEM_CAPACITY = 232448     # the opt-in shared memory of an sm_90 CTA, less the 1 KB the driver reserves
CLUSTER_SIDES = (1, 2, 4)  # CTAs of a cluster along M and along N
MAX_CLUSTER = 8            # CTAs a cluster: the portable maximum (cuDNN runs 8 and 12 on the small-M and wide layers)
GATHER_BELOW_CHANNELS = 8  # channels of one 16-byte TMA row in f16: fewer are gathered (ProblemSpec.gathers)
STREAM_K = 0               # the split_k value that asks for stream-K (stream_plan.StreamKPlan)
# where a split tile's f32 partials are summed: in a global workspace by the tile's last unit to finish (any cluster,
# single or cooperative), or in the first CTA's shared memory within a cluster of the tile's splits, one a CTA, through
# distributed shared memory (no global round trip, no gpu-scope fence)
SPLIT_REDUCES = ("workspace", "cluster")


DIRECT_GATHER_PROBLEM = "a gathering kernel (C < 8) stores its output by TMA: epi_store direct is not built for it"


class SpecError(ValueError):
    """A build request that does not describe a kernel the builder can make."""


@dataclass(frozen=True)
class ProblemSpec:
    """The NHWC convolution, static in the compiled kernel: x[n,h,w,c] * w[k,r,s,c] -> y[n,p,q,k]; pad (each
    side), stride and dilation per axis (height _h, width _w)."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int

    @classmethod
    def symmetric(cls, n: int, h: int, w: int, c: int, k: int, r: int, s: int, pad: int, stride: int,
                  dilation: int) -> "ProblemSpec":
        """One pad, stride and dilation on both axes."""
        return cls(n, h, w, c, k, r, s, pad, pad, stride, stride, dilation, dilation)

    @property
    def p(self) -> int:
        return output_extent(self.h, self.r, self.pad_h, self.stride_h, self.dilation_h)

    @property
    def q(self) -> int:
        return output_extent(self.w, self.s, self.pad_w, self.stride_w, self.dilation_w)

    @property
    def is_gemm(self) -> bool:
        """A 1x1, stride-1, unpadded conv is a GEMM on the NHWC buffers (M = n*p*q, N = k, K = c)."""
        return (self.r, self.s, self.stride_h, self.stride_w, self.pad_h, self.pad_w) == (1, 1, 1, 1, 0, 0) and \
            not self.gathers

    @property
    def key(self) -> str:
        """As ConvProblem.key: 'n1h56w56c64k64r3s3p1u1d1'."""
        axes = axes_key((self.pad_h, self.pad_w), (self.stride_h, self.stride_w), (self.dilation_h, self.dilation_w))
        return f"n{self.n}h{self.h}w{self.w}c{self.c}k{self.k}r{self.r}s{self.s}{axes}"

    @property
    def gathers(self) -> bool:
        """Fewer channels than one 16-byte TMA row (the C=3 stems): the producer warpgroup gathers A and B
        element by element, with K running over (r, s, c) unpadded, instead of TMA boxes of C padded to 8
        (a tap a k tile: 5 of 8 products of zeros for C=3, and a 7x7 stem ran 4.95x cuDNN that way)."""
        return self.c < GATHER_BELOW_CHANNELS

    @property
    def stores_elements(self) -> bool:
        """K not a multiple of 8 (a classifier's 21 classes): y's rows are not 16 bytes apart, so no TMA store;
        the consumers write the output subtiles from shared memory element by element, clipped at K."""
        return self.k % GATHER_BELOW_CHANNELS != 0

    @property
    def gemm_k(self) -> int:
        """The implicit GEMM's K: every (r, s, c) of the filter."""
        return self.r * self.s * self.c


@dataclass(frozen=True)
class EpilogueSpec:
    """y = act(scale[k] * acc + bias[k] + beta * residual); scale and bias f32[k], residual like y."""

    scale: bool = False
    bias: bool = False
    residual: bool = False
    beta: float = 1.0
    activation: str = "none"


@dataclass(frozen=True)
class TileSpec:
    """The kernel's knobs. The output tile is tile_m x tile_n; in a conv (not a GEMM) the tile_m output
    pixels are a box of tile_q columns x (tile_m / tile_q) rows of one or more images, so that each filter
    tap's operand is one TMA box of the NHWC input (out-of-bounds fill gives the padding)."""

    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"
    stages: int = 0          # 0: as many as shared memory holds
    raster: str = "m"        # the persistent scheduler walks tiles along M first, or along N
    swizzle: int = 1         # tiles walked in groups of this many along the other axis
    tile_q: int = 0          # conv only: output columns of the M box (0 in a GEMM); im2col.TILE_Q_IM2COL: im2col loads
    # GEMM-K split over this many work units a tile, summed in the kernel (1: no split); STREAM_K: stream-K (each
    # persistent cluster sums an equal share of every tile's k tiles, stream_plan.StreamKPlan)
    split_k: int = 1
    split_reduce: str = SPLIT_REDUCES[0]  # SPLIT_REDUCES: "cluster" launches 1 x split_k clusters (no multicast)
    # the epilogue's staging: subtiles of up to epi_columns columns (epilogue_columns), epi_buffers of them in flight
    # to the TMA store a consumer group (the memory-bound 1x1s wait on the store rhythm; docs/dsl.md)
    epi_columns: int = EPILOGUE_COLUMNS
    epi_buffers: int = EPILOGUE_BUFFERS
    epi_store: str = EPILOGUE_STORES[0]
    l2_hints: str = L2_HINTS[0]  # L2_HINTS: the TMA copies' L2 eviction priorities


@dataclass(frozen=True)
class BuildSpec:
    problem: ProblemSpec
    epilogue: EpilogueSpec
    tile: TileSpec
    version: int = SPEC_VERSION
    element: str = "f16"
    # programmatic dependent launch: launched with the stream-serialization attribute, the kernel waits
    # (griddepcontrol.wait) for the kernel before it to finish before it touches global memory, and lets the next
    # one launch as soon as it has (griddepcontrol.launch_dependents): the launch and the set-up of one overlap
    # the tail of the other
    pdl: bool = False

    @property
    def output_element(self) -> str:
        """The element of y and the residual."""
        return OUTPUT_ELEMENTS[self.element]

    @property
    def scaled(self) -> bool:
        """An fp8 kernel: its epilogue multiplies by the input's and the filter's per-tensor scales."""
        return self.element == "e4m3"

    @property
    def channel_multiple(self) -> int:
        """C of a TMA-loaded input is a multiple of this: 16-byte rows of the element."""
        return TMA_ROW_BYTES // ELEMENT_BYTES[self.element]

    @property
    def stages_by_element(self) -> bool:
        """A 32-bit output (tf32 kernels write f32): stmatrix moves only 16-bit elements, so the consumers write each
        epilogue subtile into shared memory element by element (st.shared through the swizzled layout), from where it
        is stored as a 16-bit one is."""
        return OUTPUT_ELEMENTS[self.element] == "f32"

    def to_json(self) -> str:
        document = asdict(self)
        if self.element == "f16":  # written as before the field existed: f16 kernels keep their cache keys
            del document["element"]
        if not self.pdl:  # likewise
            del document["pdl"]
        for knob, default in (("epi_columns", EPILOGUE_COLUMNS), ("epi_buffers", EPILOGUE_BUFFERS),
                              ("epi_store", EPILOGUE_STORES[0]), ("split_reduce", SPLIT_REDUCES[0]),
                              ("l2_hints", L2_HINTS[0])):
            if document["tile"][knob] == default:  # likewise
                del document["tile"][knob]
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BuildSpec":
        try:
            data = json.loads(text)
            if data.get("version") != SPEC_VERSION:
                raise SpecError(f"build spec version {data.get('version')!r}, expected {SPEC_VERSION}")
            spec = cls(ProblemSpec(**data["problem"]), EpilogueSpec(**data["epilogue"]), TileSpec(**data["tile"]),
                       element=data.get("element", "f16"), pdl=data.get("pdl", False))
        except (TypeError, KeyError, json.JSONDecodeError) as error:
            raise SpecError(f"malformed build spec: {error}") from None
        spec.check()
        return spec

    def check(self) -> None:
        """The rules that hold for any kernel the builder makes (the family's static checks go further)."""
        t, p = self.tile, self.problem
        if self.element not in ELEMENTS:
            raise SpecError(f"element {self.element!r} is not one of {', '.join(ELEMENTS)}")
        if t.schedule not in SCHEDULES:
            raise SpecError(f"schedule {t.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.epilogue.activation not in ACTIVATIONS:
            raise SpecError(f"activation {self.epilogue.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if t.raster not in RASTERS:
            raise SpecError(f"raster {t.raster!r} is not one of {', '.join(RASTERS)}")
        for name in ("n", "h", "w", "c", "k", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w"):
            if not isinstance(getattr(p, name), int) or getattr(p, name) < 1:
                raise SpecError(f"problem {name}={getattr(p, name)!r} must be a whole number >= 1")
        if p.c % 8 and not p.gathers:
            raise SpecError("C must be a multiple of 8 (16-byte TMA rows of 16-bit elements) unless under 8 (gathered)")
        if self.scaled and p.c % self.channel_multiple:
            raise SpecError(f"C must be a multiple of {self.channel_multiple} in {self.element} (16-byte TMA rows; its "
                            "kernels gather none)")
        if self.stages_by_element and (p.gathers or self.epilogue.residual):
            raise SpecError(f"a {self.element} kernel writes f32: it gathers no C under {GATHER_BELOW_CHANNELS} and "
                            "loads no residual (both move 16-bit elements)")
        if p.stores_elements and (p.gathers or self.epilogue.residual):
            raise SpecError(f"K={p.k} (not a multiple of 8) is stored element by element: not with a gathered C or a "
                            "residual (both need TMA rows of K)")
        if not p.is_gemm and not p.gathers and t.tile_q != TILE_Q_IM2COL and (t.tile_q < 1 or t.tile_m % t.tile_q):
            raise SpecError(f"a conv kernel needs tile_q dividing tile_m or {TILE_Q_IM2COL}, got {t.tile_q}")
        if p.gathers and (t.cluster_m, t.cluster_n, t.split_k) != (1, 1, 1):
            raise SpecError("a gathering kernel (C < 8) runs without a cluster and without split-K")
        if p.gathers and self.epilogue.residual:
            raise SpecError("a gathering kernel (C < 8) has no residual load: its producer warps all gather")
        if not isinstance(t.split_k, int) or t.split_k < 0:
            raise SpecError(f"split_k {t.split_k!r} must be a whole number >= 1, or {STREAM_K} for stream-K")
        for knob, choices in (("epi_columns", EPILOGUE_COLUMN_CHOICES), ("epi_buffers", EPILOGUE_BUFFER_CHOICES),
                              ("epi_store", EPILOGUE_STORES), ("split_reduce", SPLIT_REDUCES),
                              ("l2_hints", L2_HINTS)):
            if getattr(t, knob) not in choices:
                raise SpecError(f"{knob} {getattr(t, knob)!r} is not one of {', '.join(map(str, choices))}")
        if (reason := cluster_reduce_problem(t.split_k, t.split_reduce, t.cluster_m, t.cluster_n)):
            raise SpecError(reason)
        if t.epi_store == "direct" and p.gathers:
            raise SpecError(DIRECT_GATHER_PROBLEM)


# rows of a tile each consumer warpgroup may hold, by schedule: one 64-row wgmma block, or two (a pingpong group's
# whole 128-row tile; a cooperative warpgroup's half of a 256-row tile, as cuDNN's 256x64 xmma kernels run the
# C=64 3x3 layers)
WARPGROUP_ROWS = {"single": (64,), "cooperative": (64, 128), "pingpong": (64, 128)}
MAX_WARPGROUP_TILE = 128 * 128  # f32 accumulators of one warpgroup: 128 a thread
GATHER_MAX_TILE_M = 128         # the gathering producer writes a tile row a thread, with its warpgroup's 128


def tile_m_problem(tile_m: int, tile_n: int, schedule: str, gathers: bool) -> str | None:
    """Why a tile of tile_m rows cannot run with `schedule`, or None: the one statement of the rule, raised by
    geometry.geometry and reported by the family's static checks."""
    per_group = 2 if schedule == "cooperative" else 1  # warpgroups that share one tile
    rows = tile_m // per_group
    allowed = WARPGROUP_ROWS[schedule]
    if tile_m % per_group or rows not in allowed:
        sizes = " or ".join(str(r * per_group) for r in allowed)
        blocks = "one 64-row wgmma block" if allowed == (64,) else "one or two 64-row wgmma blocks"
        return f"tile M={tile_m} must be {sizes} with the {schedule} schedule: a consumer warpgroup holds {blocks}"
    if rows * tile_n > MAX_WARPGROUP_TILE:
        return (f"tile {tile_m}x{tile_n} with the {schedule} schedule gives a consumer warpgroup {rows}x{tile_n} "
                f"accumulators, {rows * tile_n // 128} a thread (more than {MAX_WARPGROUP_TILE // 128}): it spills")
    if gathers and tile_m > GATHER_MAX_TILE_M:
        return f"tile M={tile_m}: a gathering kernel writes one tile row a producer thread, {GATHER_MAX_TILE_M} at most"
    return None


def cluster_problem(cluster_m: int, cluster_n: int) -> str | None:
    """Why a cluster of cluster_m x cluster_n CTAs (along M and N) cannot run, or None: the one statement of the rule,
    raised by geometry.geometry and reported by the family's static checks."""
    if cluster_m not in CLUSTER_SIDES or cluster_n not in CLUSTER_SIDES or cluster_m * cluster_n > MAX_CLUSTER:
        return f"cluster {cluster_m}x{cluster_n}: 1, 2 or 4 CTAs along M and N, at most {MAX_CLUSTER} in all"
    return None


def cluster_reduce_problem(split_k: int, split_reduce: str, cluster_m: int, cluster_n: int) -> str | None:
    """Why split-K cannot be reduced in the cluster, or None: the one statement of the rule, raised by
    BuildSpec.check and reported by the family's static checks. The tile's splits are the cluster's CTAs, so the
    cluster is 1 x split_k, not a multicast one. (Pingpong is refused with any split, by split-K's own rule.)"""
    if split_reduce != "cluster":
        return None
    if not 2 <= split_k <= MAX_CLUSTER:
        return (f"split_k {split_k} reduced in the cluster: 2 to {MAX_CLUSTER} splits (one CTA a split, "
                f"{MAX_CLUSTER} CTAs a portable cluster)")
    if (cluster_m, cluster_n) != (1, 1):
        return (f"split-K reduced in the cluster launches its {split_k} splits as the cluster: no multicast "
                f"cluster {cluster_m}x{cluster_n} beside it")
    return None


def element_tile_problem(tile_n: int, tile_k: int, element: str) -> str | None:
    """Why a tile of tile_n columns and tile_k deep stages cannot run in `element`, or None: the one statement of the
    rule, raised by geometry.geometry and reported by the family's static checks."""
    if ELEMENT_BYTES[element] == 4 and tile_n % 32 == 16 and tile_n > 16:
        # measured: every such tf32 tile (N 48, 80, ..., 240) aborts the DSL 4.8.1's compiler; 16, 96, 160 build
        return f"tile N={tile_n} in {element}: N of 16 past a nonzero multiple of 32 aborts the DSL's compiler"
    if tile_k % MMA_K == 0 and tile_k * ELEMENT_BYTES[element] in SWIZZLE_ROW_BYTES:
        return None
    if ELEMENT_BYTES[element] == 2:
        return f"tile K={tile_k} must be 32 or 64 (one 64- or 128-byte swizzled row of 16-bit elements)"
    if ELEMENT_BYTES[element] == 4:
        return f"tile K={tile_k} must be 32 in {element} (one 128-byte swizzled row)"
    return (f"tile K={tile_k} must be 32, 64 or 128 in {element} (fp8 wgmma's K is 32; a swizzled row is 128 bytes "
            "at most)")


def split_k_range(k_tiles: int, splits: int, split: int) -> tuple[int, int]:
    """The k tiles [begin, end) that split `split` of `splits` sums, of a tile's `k_tiles` (the kernel's
    producer and consumers compute the same, on the global k tile index over phases, taps and channel blocks)."""
    return split * k_tiles // splits, (split + 1) * k_tiles // splits


def scheduled_tiles(m_tiles: int, n_tiles: int, cluster_m: int, cluster_n: int, swizzle: int,
                    raster_m: bool) -> tuple[int, int]:
    """The (m, n) tile extents the persistent scheduler hands out: whole clusters, and along the axis it walks
    second whole swizzle groups of clusters (utils.PersistentTileSchedulerParams). The tiles past the output
    are computed on TMA's zero fill and their stores clipped; a split-K workspace has a slot for each."""
    clusters_m, clusters_n = -(-m_tiles // cluster_m), -(-n_tiles // cluster_n)
    if swizzle > 1:
        if raster_m:
            clusters_n = -(-clusters_n // swizzle) * swizzle
        else:
            clusters_m = -(-clusters_m // swizzle) * swizzle
    return clusters_m * cluster_m, clusters_n * cluster_n


def split_k_workspace_bytes(tiles: int, splits: int, tile_m: int, tile_n: int) -> int:
    """Split-K's global workspace: each (tile, split)'s f32 partial accumulators, then one int32 arrival
    counter a tile (zero before the first launch; the last unit of a tile to arrive sets it back to zero).
    Nothing without a split."""
    if splits == 1:
        return 0
    return splits * tiles * tile_m * tile_n * 4 + tiles * 4


def epilogue_columns(tile_n: int, wanted: int = EPILOGUE_COLUMNS) -> int:
    """The columns of an epilogue subtile: the widest of `wanted`, 32 and 16 that divides tile_n (16 for 16, 48,
    80 ...; a subtile's columns are whole stmatrix groups of 16)."""
    return next((columns for columns in (wanted, EPILOGUE_COLUMNS) if columns <= wanted and tile_n % columns == 0), 16)


def tile_n_problem(tile_n: int) -> str | None:
    """Why a tile cannot be tile_n output channels wide, or None: the one statement of the rule, raised by
    geometry.geometry and reported by the family's static checks."""
    if tile_n % 16 or not 16 <= tile_n <= MAX_TMA_BOX:
        return (f"tile N={tile_n} must be a multiple of 16 up to {MAX_TMA_BOX} (the epilogue's stmatrix groups of 16 "
                "columns; a TMA box spans at most 256)")
    return None


def residual_ring_slots(tile_n: int, epi_columns: int = EPILOGUE_COLUMNS) -> int:
    """The residual subtiles in flight for one consumer group: a tile's subtiles, at most RESIDUAL_RING_SLOTS.
    At most the whole residual tile the kernel once kept, so a kernel that fitted it fits the ring."""
    return min(tile_n // epilogue_columns(tile_n, epi_columns), RESIDUAL_RING_SLOTS)
