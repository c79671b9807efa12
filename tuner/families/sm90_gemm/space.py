"""The sm90_gemm family's space: CUTLASS 3.x GEMM (TMA + wgmma) configurations for 1x1, stride-1,
unpadded layers, and every limit of CUTLASS 4.2 that can be checked without compiling. Each rule
names where CUTLASS asserts it (paths under cutlass_library/source/include); the numbers were checked
by compiling (docs/sm90-limits.md)."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from tuner.core.device import DeviceFacts
from tuner.families.base import (LaunchArgs, SearchSpace, Shape3, check_keys, enum_list, flag, flag_list, int_list,
                                 output_alignment, param, shape_list, types_problem, whole)
from tuner.core.epilogue import Epilogue
# The sm90 epilogue schedules (the TMA one matched to the kernel schedule here: codegen.epilogue_tag).
from tuner.families.sm90_common.space import (INPUT_TYPES, SMEM_CAPACITY, EpilogueSchedule, fusion_problem,
                                             kernel_problem)
from tuner.core.axes import pair_text
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.problem import ConvProblem

FAMILY = "sm90_gemm"
MAX_ACCUMULATORS = 128   # f32 accumulators a consumer thread holds before the tile spills (pingpong 128x256: 4.7 KB)
MAX_CLUSTER_SIZE = 8     # the portable cluster size
AUTO_STAGES = 0
RASTERS = (0, 1, 2)      # heuristic, along M, along N
SWIZZLES = (1, 2, 4, 8)


class Schedule(enum.Enum):
    ws = "ws"                    # KernelTmaWarpSpecialized: one consumer warpgroup, one tile per CTA
    cooperative = "cooperative"  # two consumer warpgroups split each tile's M; persistent
    pingpong = "pingpong"        # two consumer warpgroups on alternate tiles; persistent


class Scheduler(enum.Enum):
    persistent = "persistent"  # the default tile scheduler
    stream_k = "stream_k"      # StreamKScheduler: tiles' K split among CTAs, fixed up through a workspace


THREADS = {Schedule.ws: 256, Schedule.cooperative: 384, Schedule.pingpong: 384}
CONSUMER_WARPGROUPS = {Schedule.ws: 1, Schedule.cooperative: 2, Schedule.pingpong: 2}


@dataclass(frozen=True, order=True)
class Sm90GemmConfig:
    tile: Shape3
    cluster: Shape3
    schedule: Schedule
    scheduler: Scheduler
    epilogue: EpilogueSchedule
    stages: int   # 0: auto carveout
    raster: int   # run-time
    swizzle: int  # run-time
    split_k: int  # run-time: stream-K splits (1: the heuristic decides)
    alignment_c: int
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()  # the layer's epilogue, compiled in
    # The GEMM transposed, as cuBLAS runs a row-major product: M along the output channels (A the
    # filter), N along N*P*Q (B the activations), D column-major: the same buffers. It changes which
    # dimension the tile's M, the cluster's M and the wave count fall on.
    swap_ab: bool = False
    # Columns of the TMA epilogue's subtile (its rows are 128 cooperative, 64 otherwise); 0: CUTLASS's
    # auto choice, gcd(min(32, tile N), tile N) (sm90_builder.inl:117-127). Only narrow space files offer
    # it: explicit subtiles won no ResNet-50 1x1 layer on the H100 (docs/narrow-spaces.md).
    epilogue_n: int = 0

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def compiled(self) -> "Sm90GemmConfig":
        return replace(self, raster=0, swizzle=1, split_k=1)

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def name(self) -> str:
        stages = "auto" if self.stages == AUTO_STAGES else str(self.stages)
        swapped = "_swab" if self.swap_ab else ""  # the names of unswapped kernels stay as they were
        subtile = f"_e{self.epilogue_n}" if self.epilogue_n else ""  # so do those of auto-subtile ones
        return (f"sm90g_{self.tile.text}{swapped}_c{self.cluster.text}_{self.schedule.value}_{self.scheduler.value}"
                f"_{self.epilogue.value}{subtile}_s{stages}_r{self.raster}_sw{self.swizzle}_sk{self.split_k}"
                f"_a{self.alignment_c}_{self.dtype_key}{self.fusion.short}")

    @property
    def search_params(self) -> dict:
        return {"tile": self.tile.text, "cluster": self.cluster.text, "schedule": self.schedule.value,
                "scheduler": self.scheduler.value, "epilogue": self.epilogue.value, "stages": self.stages,
                "raster": self.raster, "swizzle": self.swizzle, "split_k": self.split_k, "swap_ab": self.swap_ab,
                "epilogue_n": self.epilogue_n}

    @property
    def layer_tile(self) -> Shape3:
        """The tile along the layer's implicit GEMM (N*P*Q, K, C), whichever way the kernel runs it."""
        return Shape3(self.tile.n, self.tile.m, self.tile.k) if self.swap_ab else self.tile

    @property
    def layer_cluster(self) -> tuple[int, int]:
        return (self.cluster.n, self.cluster.m) if self.swap_ab else (self.cluster.m, self.cluster.n)

    @property
    def persistent(self) -> bool:
        return self.schedule is not Schedule.ws

    @property
    def accumulators_per_thread(self) -> int:
        """Pingpong and ws warpgroups each hold a whole tile; cooperative ones split its M."""
        per_warpgroup = self.tile.m * self.tile.n // (2 if self.schedule is Schedule.cooperative else 1)
        return per_warpgroup // 128

    # --- shared memory (builders/sm90_gmma_builder.inl:69-85; matches 243 compiled configurations) ---
    def epilogue_smem(self) -> int:
        if self.epilogue is EpilogueSchedule.nosmem:
            return 1
        rows, cols = self.epilogue_subtile
        tiles = (self.tile.m // rows) * (self.tile.n // cols)
        subtiles = min(tiles, 2) * rows * cols * self.output_type.bytes * (2 if self.fusion.residual else 1)
        vectors = 3 * self.tile.n * 4 if self.fusion.fused else 0  # as sm90_conv's epilogue_smem says
        return subtiles + vectors + 512 * self.output_type.bytes

    @property
    def epilogue_subtile(self) -> tuple[int, int]:
        """Rows and columns of the TMA epilogue's subtile (sm90_builder.inl:117-127 when auto)."""
        rows = min(128 if self.schedule is Schedule.cooperative else 64, self.tile.m)
        return rows, self.epilogue_n or math.gcd(min(32, self.tile.n), self.tile.n)

    @property
    def stage_bytes(self) -> int:
        return _round_up(self.input_type.bytes * self.tile.k * (self.tile.m + self.tile.n), 128) + 16

    @property
    def auto_stage_count(self) -> int:
        return (SMEM_CAPACITY - _round_up(self.epilogue_smem(), 128)) // self.stage_bytes

    @property
    def stage_count(self) -> int:
        return self.auto_stage_count if self.stages == AUTO_STAGES else self.stages

    @property
    def smem_bytes(self) -> int:
        """An estimate of the kernel's shared storage (mainloop stages plus the epilogue's carveout)."""
        return self.stage_count * self.stage_bytes + _round_up(self.epilogue_smem(), 128)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def parse_space(document: object) -> SearchSpace:
    # spaces written before a knob existed: the value every kernel had then
    defaults = {"swap_ab": [False], "epilogue_n": [0]}
    if isinstance(document, dict):
        document = {**{knob: value for knob, value in defaults.items() if knob not in document}, **document}
    document = check_keys(FAMILY, document, {"family", "tile", "cluster", "schedule", "scheduler", "epilogue",
                                             "stages", "raster", "swizzle", "split_k", "swap_ab", "epilogue_n"})
    return SearchSpace(FAMILY, (
        ("tile", tuple(t.text for t in shape_list(FAMILY, "tile", document["tile"]))),
        ("cluster", tuple(c.text for c in shape_list(FAMILY, "cluster", document["cluster"]))),
        ("schedule", tuple(s.value for s in enum_list(FAMILY, "schedule", document["schedule"], Schedule))),
        ("scheduler", tuple(s.value for s in enum_list(FAMILY, "scheduler", document["scheduler"], Scheduler))),
        ("epilogue", tuple(e.value for e in enum_list(FAMILY, "epilogue", document["epilogue"], EpilogueSchedule))),
        ("stages", int_list(FAMILY, "stages", document["stages"], lambda v: v == 0 or 2 <= v <= 32,
                            "0 for auto, or 2 to 32")),
        ("raster", int_list(FAMILY, "raster", document["raster"], lambda v: v in RASTERS,
                            "0 heuristic, 1 along M, 2 along N")),
        ("swizzle", int_list(FAMILY, "swizzle", document["swizzle"], lambda v: v in SWIZZLES, "1, 2, 4 or 8")),
        ("split_k", int_list(FAMILY, "split_k", document["split_k"], lambda v: 1 <= v <= 64, "1 to 64")),
        ("swap_ab", flag_list(FAMILY, "swap_ab", document["swap_ab"])),
        ("epilogue_n", int_list(FAMILY, "epilogue_n", document["epilogue_n"], lambda v: v == 0 or 16 <= v <= 256,
                                "0 for CUTLASS's choice, or 16 to 256 columns")),
    ))


def make_config(problem: ConvProblem, params: dict) -> Sm90GemmConfig:
    return Sm90GemmConfig(
        tile=param(params, "tile", Shape3.parse),
        cluster=param(params, "cluster", Shape3.parse),
        schedule=param(params, "schedule", Schedule),
        scheduler=param(params, "scheduler", Scheduler),
        epilogue=param(params, "epilogue", EpilogueSchedule),
        stages=param(params, "stages", whole),
        raster=param(params, "raster", whole),
        swizzle=param(params, "swizzle", whole),
        split_k=param(params, "split_k", whole),
        alignment_c=output_alignment(problem),
        input_type=problem.input_type, filter_type=problem.filter_type,
        output_type=problem.output_type, accumulator_type=problem.accumulator_type,
        fusion=problem.epilogue,
        # absent from what was stored before the knob existed: those kernels ran unswapped
        swap_ab=param(params, "swap_ab", flag) if "swap_ab" in params else False,
        epilogue_n=param(params, "epilogue_n", whole) if "epilogue_n" in params else 0,  # likewise: auto
    )


def launch_args(config: Sm90GemmConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(kernel_problem(problem).c, split_k=config.split_k, raster=config.raster,
                      swizzle=config.swizzle)


def layer_problem(problem: ConvProblem) -> str | None:
    """Only a 1x1, stride-1, unpadded conv is a GEMM on the NHWC buffers as they are."""
    if (problem.r, problem.s, problem.strides, problem.pads, problem.dilations) != (1, 1, (1, 1), (0, 0), (1, 1)):
        return (f"sm90_gemm runs 1x1, stride-1, unpadded convolutions only (a GEMM on the NHWC buffers); this is "
                f"{problem.r}x{problem.s}, stride {pair_text(problem.strides)}, pad {pair_text(problem.pads)}, "
                f"dilation {pair_text(problem.dilations)}")
    return types_problem(FAMILY, problem, INPUT_TYPES)  # an M beyond int32 never gets here: ConvProblem refuses it for every family


# Each rule returns why the configuration cannot run, or None.
def _check_tile(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    m, n, k = config.tile.m, config.tile.n, config.tile.k
    if m % 64 or not 64 <= m <= 256:
        return f"tile M={m} must be 64, 128, 192 or 256 (wgmma is 64 rows a warpgroup, cute/arch/mma_sm90.hpp:370)"
    if n % 8 or not 8 <= n <= 256:
        return f"tile N={n} must be a multiple of 8 up to 256 (mma_sm90.hpp:525; the TMA box is at most 256)"
    if k % 16 or not 16 <= k <= 256:
        return f"tile K={k} must be a multiple of 16 up to 256 (mma_sm90.hpp:378)"
    if config.schedule is Schedule.cooperative and m % 128:
        return (f"the cooperative schedule splits tile M={m} over two warpgroups of 64 rows: it needs a multiple "
                "of 128 (sm90_gemm_tma_warpspecialized_cooperative.hpp:357)")
    # CUTLASS's auto epilogue tile is gcd(min(32, tile N), tile N) columns (sm90_builder.inl:120): 128x56 made
    # it 8 and failed to compile ("Stride Divisibility Condition"); 16, with 128x112, compiled
    # (search_spaces/narrow/gemm_swapped_pixels.yaml).
    epilogue_cols = config.epilogue_subtile[1]
    if config.epilogue is EpilogueSchedule.tma and not config.epilogue_n and epilogue_cols % 16:
        return (f"tile N={n} gives the TMA epilogue subtiles {epilogue_cols} columns wide: it needs a "
                "multiple of 16 (pick a tile N that is a multiple of 16, or the no-smem epilogue)")
    if config.epilogue_n:
        if config.epilogue is not EpilogueSchedule.tma:
            return "epilogue_n sets the TMA epilogue's subtile: the no-smem epilogue has none (use epilogue_n 0)"
        if epilogue_cols % 16 or n % epilogue_cols:
            return (f"epilogue_n={epilogue_cols} must be a multiple of 16 that divides tile N={n} "
                    "(sm90_builder.inl:162)")
        # Row-major D (unswapped): 112 and 208 failed to compile ("Divisibility condition", "Fragment size")
        # where 16 to 256 in powers of two built; swapped 48, 96 built
        # (search_spaces/narrow/gemm_epilogue_subtile*.yaml).
        if not config.swap_ab and epilogue_cols & (epilogue_cols - 1):
            return (f"epilogue_n={epilogue_cols} with a row-major output (swap_ab false) must be a power of two: "
                    "CUTLASS 4.2 did not compile 112 or 208")
    if config.accumulators_per_thread > MAX_ACCUMULATORS:
        return (f"tile {m}x{n} with the {config.schedule.value} schedule holds {config.accumulators_per_thread} "
                f"accumulators a thread (> {MAX_ACCUMULATORS}): it spills")
    return None


def _check_schedule(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.scheduler is Scheduler.stream_k and config.schedule is not Schedule.cooperative:
        return (f"the stream-K scheduler runs with the cooperative schedule only ({config.schedule.value}: "
                "sm90_gemm_tma_warpspecialized_pingpong.hpp:105, sm90_gemm_tma_warpspecialized.hpp:111)")
    if config.split_k > 1 and config.scheduler is not Scheduler.stream_k:
        return "split_k > 1 needs the stream-K scheduler"
    if not config.persistent and (config.raster, config.swizzle) != (0, 1):
        return "the non-persistent ws schedule ignores raster order and swizzle: only their defaults are measured"
    return None


def _check_cluster(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    cm, cn, ck = config.cluster.m, config.cluster.n, config.cluster.k
    if ck != 1 or cm not in (1, 2, 4, 8) or cn not in (1, 2, 4, 8) or cm * cn > MAX_CLUSTER_SIZE:
        return f"cluster {config.cluster.text}: powers of two in M and N, K 1, at most {MAX_CLUSTER_SIZE} CTAs"
    if config.tile.m % cn or config.tile.n % cm:
        return f"multicast splits the tile across the cluster: tile {config.tile.text} does not divide by it"
    return None


def _check_shared_memory(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    fits = config.auto_stage_count
    if fits < 2:
        return f"only {fits} pipeline stage(s) of {config.stage_bytes} bytes fit beside the epilogue"
    if config.stages != AUTO_STAGES and config.stages > fits:
        return (f"{config.stages} stages of {config.stage_bytes} bytes do not fit in {SMEM_CAPACITY} bytes beside "
                f"the epilogue (at most {fits}; it would compile, then fail in initialize)")
    return None


def _check_output(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    need = 16 // problem.output_type.bytes
    if config.epilogue is EpilogueSchedule.tma and problem.k % need:
        return (f"the TMA epilogue stores rows of K={problem.k} outputs: it needs a multiple of {need} for "
                f"{problem.output_type.value} output (the no-smem epilogue does not)")
    return types_problem(FAMILY, config, INPUT_TYPES)


def _check_fusion(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    return fusion_problem(config.epilogue, config.fusion)


RULES = (_check_tile, _check_schedule, _check_cluster, _check_shared_memory, _check_output, _check_fusion)


def static_problems(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    if (reason := layer_problem(problem)):
        return [reason]
    return [reason for rule in RULES if (reason := rule(config, problem, device))]


def k_steps(config: Sm90GemmConfig, problem: ConvProblem) -> int:
    return -(-kernel_problem(problem).c // config.tile.k)
