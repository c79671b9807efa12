"""What the CUTLASS 3.x sm90 families share of their space. The conv kernel that sm90_conv runs on the layer and
sm90_s2d on a space-to-depth fold of it: CUTLASS 3.x implicit-GEMM fprop (TMA im2col + wgmma) configurations and
every limit of CUTLASS 4.2's sm90 conv that can be checked without compiling. Each rule names where CUTLASS
asserts it (paths under cutlass_library/source/include); the numbers were checked by compiling the
configurations and calling their host entry points (docs/sm90-limits.md). With sm90_gemm too: the input types,
the epilogue schedules and what the 3.x fusion operations fuse."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from tuner.core.device import DeviceFacts
from tuner.families.base import (SearchSpace, Shape3, check_keys, enum_list, int_list, output_alignment, pad_channels,
                                 param, shape_list, types_problem, whole)
from tuner.core.epilogue import Epilogue
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.problem import ConvProblem

CONV_KERNEL = "sm90_conv"  # how reasons name the conv kernel, whichever family runs it
# cutlass/gemm/collective/builders/sm90_common.inl:57: the shared memory a CTA may opt into on sm90.
SMEM_CAPACITY = 232448
# Channels are zero-padded to a multiple of this: TMA needs 16-byte aligned strides of A and B
# (conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:352-354, and for sm90_gemm, where the channels
# are the GEMM's K, gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp:244-255), 8 f16 elements.
CHANNEL_MULTIPLE = 8
# One consumer warpgroup holds the whole tile's f32 accumulators: M*N/128 registers a thread. 128x128
# and 64x256 compile to 154 registers; 128x256 and 256x128 reach 255 and spill 2.5-4.6 KB.
MAX_TILE_MN = 128 * 128
THREADS_PER_BLOCK = 256  # a producer and a consumer warpgroup (sm90_gemm_tma_warpspecialized.hpp:140)
MAX_CLUSTER_SIZE = 8     # the portable cluster size
AUTO_STAGES = 0          # StageCountAutoCarveout: as many stages as fit beside the epilogue
# The wgmma operand types the builder is given. tf32 wgmma reads both operands K-major only
# (gemm/collective/builders/sm90_common.inl:60-85): the NHWC activations and KRSC filters are, C contiguous.
INPUT_TYPES = (DataType.f16, DataType.bf16, DataType.tf32)
# Through the 3.x fusion operations (codegen.fusion_tag), TMA epilogue only; not SiLU (SLOW_SILU).
FUSABLE = frozenset({"scale", "bias", "residual", "relu", "gelu"})
# CUTLASS 4.2's sm90 SiLU epilogue: in the cold studies of the layers outside the ResNet-50 table (H100,
# 2026-11-23), every sm90 SiLU kernel ran about 9 µs slower than the same tile with ReLU, and an sm80 kernel
# won; sm90_dsl fuses SiLU at 1.03x its ReLU (docs/fusion.md).
SLOW_SILU = ("{family} does not fuse silu: CUTLASS 4.2's sm90 SiLU epilogue ran about 9 µs slower than ReLU on "
             "the same tile (docs/fusion.md); sm90_dsl or sm80 fuse it")
REFUSED_PARTS = (("silu", SLOW_SILU),)


class EpilogueSchedule(enum.Enum):
    tma = "tma"        # TmaWarpSpecialized: subtiles through shared memory, TMA stores
    nosmem = "nosmem"  # NoSmemWarpSpecialized: registers straight to global memory (also what Auto picks)


@dataclass(frozen=True, order=True)
class ConvKernelConfig:
    """One sm90 conv kernel: all a candidate needs but the family that runs it, which its subclass names."""

    tile: Shape3
    cluster: Shape3
    stages: int  # 0: auto carveout
    epilogue: EpilogueSchedule
    alignment_c: int
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()  # the layer's epilogue, compiled in

    @property
    def compiled(self) -> "ConvKernelConfig":
        return self  # no run-time knobs

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    def kernel_name(self, prefix: str) -> str:
        """The configuration's name after its family's prefix."""
        stages = "auto" if self.stages == AUTO_STAGES else str(self.stages)
        return (f"{prefix}_{self.tile.text}_c{self.cluster.text}_s{stages}_{self.epilogue.value}_a{self.alignment_c}"
                f"_{self.dtype_key}{self.fusion.short}")

    @property
    def search_params(self) -> dict:
        return {"tile": self.tile.text, "cluster": self.cluster.text, "stages": self.stages,
                "epilogue": self.epilogue.value}

    @property
    def cluster_size(self) -> int:
        return self.cluster.m * self.cluster.n

    # --- shared memory, as the builders lay it out (sm90_gmma_builder.inl:64-73, sm90_builder.inl) ------
    @property
    def epilogue_tile(self) -> tuple[int, int]:
        m, n = self.tile.m, self.tile.n
        return min(64, m), math.gcd(min(32, n), n)  # EpilogueTileAuto (sm90_builder.inl:124-126)

    def epilogue_smem(self) -> tuple[int, int, int]:
        """(the epilogue's SharedStorage, its tensors, its pipeline) in bytes."""
        if self.epilogue is EpilogueSchedule.nosmem:
            return 1, 1, 2
        epi_m, epi_n = self.epilogue_tile
        tiles = (self.tile.m // epi_m) * (self.tile.n // epi_n)
        row = epi_n * self.output_type.bytes
        align = 8 * min(128, row)  # the swizzle atom
        # D's subtiles, the residual's (C) beside them, and the fused op's three per-channel f32 vectors
        # (alpha, beta, bias: Sm90RowBroadcast keeps a tile-N slice of each), as probed for 128x128x64.
        tensors = min(tiles, 2) * epi_m * row * (2 if self.fusion.residual else 1) + align
        if self.fusion.fused:
            tensors += 3 * self.tile.n * 4
        pipeline = min(tiles, 4) * 16
        return _round_up(tensors + pipeline, align), tensors, pipeline

    @property
    def stage_bytes(self) -> int:
        return (self.tile.m + self.tile.n) * self.tile.k * self.input_type.bytes + 16

    @property
    def stage_count(self) -> int:
        if self.stages != AUTO_STAGES:
            return self.stages
        return (SMEM_CAPACITY - self.epilogue_smem()[0]) // self.stage_bytes

    @property
    def smem_bytes(self) -> int:
        """Kernel::SharedStorageSize: the mainloop's and the epilogue's tensors share memory (a union),
        then both pipelines' barriers (sm90_gemm_tma_warpspecialized.hpp:120-139); side by side where the
        kernel reads a residual early (templates/early_residual.h)."""
        stages = self.stage_count
        mainloop = stages * (self.tile.m + self.tile.n) * self.tile.k * self.input_type.bytes
        _, tensors, pipeline = self.epilogue_smem()
        align = max(128, 8 * min(128, self.epilogue_tile[1] * self.output_type.bytes)
                    if self.epilogue is EpilogueSchedule.tma else 1)
        together = mainloop + tensors if self.fusion.residual else max(mainloop, tensors)
        return _round_up(together + _round_up(16 * stages, 16) + _round_up(pipeline, 16), align)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def describe(config: ConvKernelConfig) -> str:
    stages = "auto" if config.stages == AUTO_STAGES else config.stages
    return f"{config.tile.text} c{config.cluster.m}x{config.cluster.n} s{stages} {config.epilogue.value}"


def parse_space(document: object, family: str) -> SearchSpace:
    """The space file of `family`, a family that runs the conv kernel."""
    document = check_keys(family, document, {"family", "tile", "cluster", "stages", "epilogue"})
    return SearchSpace(family, (
        ("tile", tuple(t.text for t in shape_list(family, "tile", document["tile"]))),
        ("cluster", tuple(c.text for c in shape_list(family, "cluster", document["cluster"]))),
        ("stages", int_list(family, "stages", document["stages"], lambda v: v == 0 or 2 <= v <= 32,
                            "0 for auto, or 2 to 32")),
        ("epilogue", tuple(e.value for e in enum_list(family, "epilogue", document["epilogue"], EpilogueSchedule))),
    ))


def kernel_problem(problem: ConvProblem) -> ConvProblem:
    """Channels zero-padded to a multiple of 8 (C=3 -> 8): TMA's 16-byte stride alignment."""
    return pad_channels(problem, CHANNEL_MULTIPLE)


def config_fields(problem: ConvProblem, params: dict) -> dict:
    """The fields of a ConvKernelConfig from sampled parameters (strings or ints as stored in the study)."""
    return dict(
        tile=param(params, "tile", Shape3.parse),
        cluster=param(params, "cluster", Shape3.parse),
        stages=param(params, "stages", whole),
        epilogue=param(params, "epilogue", EpilogueSchedule),
        alignment_c=output_alignment(problem),
        input_type=problem.input_type, filter_type=problem.filter_type,
        output_type=problem.output_type, accumulator_type=problem.accumulator_type,
        fusion=problem.epilogue,
    )


def layer_problem(problem: ConvProblem) -> str | None:
    """What no sm90_conv configuration can run (the run-time checks of the collective's can_implement,
    sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:340-400, and of the TMA im2col descriptor)."""
    if (reason := types_problem(CONV_KERNEL, problem, INPUT_TYPES)):
        return reason
    need = 16 // problem.output_type.bytes
    if problem.k % need:
        padded = -(-problem.k // need) * need
        return (f"K={problem.k} output channels: the TMA store needs K to be a multiple of {need} for "
                f"{problem.output_type.value} output; pad K to {padded}")
    axes = (("R", "h", problem.axis_h), ("S", "w", problem.axis_w))
    for _, suffix, axis in axes:
        if axis.pad > 128:
            return f"{problem.field_name('pad_' + suffix)}={axis.pad} exceeds the im2col TMA's lower corner limit of 128"
    for name, _, axis in axes:
        span = (axis.taps - 1) * axis.dilation
        if span > 254:
            return f"({name}-1)*dilation={span} exceeds the im2col filter offset limit of 254"
        if span - axis.pad > 128:
            return f"({name}-1)*dilation-pad={span - axis.pad} exceeds the im2col TMA's upper corner limit of 128"
    for _, suffix, axis in axes:
        if axis.stride > 8:
            return f"{problem.field_name('stride_' + suffix)}={axis.stride}: the TMA im2col traversal stride is 1 to 8"
    return None


# Each rule returns why the configuration cannot run, or None.
def _check_tile(config: ConvKernelConfig, device: DeviceFacts) -> str | None:
    m, n, k = config.tile.m, config.tile.n, config.tile.k
    if m % 64 or m > 256:
        return f"tile M={m} must be 64, 128, 192 or 256 (wgmma is 64 rows a warpgroup, cute/arch/mma_sm90.hpp:370)"
    if k % 16 or k > 128:
        return f"tile K={k} must be a multiple of 16 up to 128 (mma_sm90.hpp:1159)"
    if n % 16 or n > 256:
        return (f"tile N={n} must be a multiple of 16 up to 256 (N=24 fails the filter TMA layout; the TMA box "
                "is at most 256 rows)")
    if m * n > MAX_TILE_MN:
        return (f"tile {m}x{n} needs {m * n // 128} accumulator registers a thread in the one consumer "
                f"warpgroup: it spills (128x256 measured at 255 registers and KBs of spills)")
    return None


def _check_cluster(config: ConvKernelConfig, device: DeviceFacts) -> str | None:
    cm, cn, ck = config.cluster.m, config.cluster.n, config.cluster.k
    if ck != 1 or cm not in (1, 2, 4, 8) or cn not in (1, 2, 4, 8) or cm * cn > MAX_CLUSTER_SIZE:
        return (f"cluster {config.cluster.text}: powers of two in M and N, K 1, at most {MAX_CLUSTER_SIZE} CTAs "
                "(3x1 fails CUTLASS's safe_div)")
    if cn > 1 and (config.tile.m // cn) % 8:
        return f"activations multicast over cluster N={cn} split tile M={config.tile.m} into uneven rows"
    if cm > 1 and (config.tile.n // cm) % 8:
        return f"filters multicast over cluster M={cm} split tile N={config.tile.n} into uneven rows"
    return None


def _check_shared_memory(config: ConvKernelConfig, device: DeviceFacts) -> str | None:
    limit = min(SMEM_CAPACITY, device.smem_optin_per_block)
    if config.stage_count < 2:
        return f"only {config.stage_count} pipeline stage(s) of {config.stage_bytes} bytes fit: at least 2 are needed"
    if config.smem_bytes > limit:
        return (f"{config.stage_count} stages need {config.smem_bytes} bytes of shared memory, over the "
                f"{limit} a block may opt into (it would compile, then fail in initialize)")
    return None


def _check_types(config: ConvKernelConfig, device: DeviceFacts) -> str | None:
    return types_problem(CONV_KERNEL, config, INPUT_TYPES)


def _check_fusion(config: ConvKernelConfig, device: DeviceFacts) -> str | None:
    return fusion_problem(config.epilogue, config.fusion)


def fusion_problem(schedule: EpilogueSchedule, fusion: Epilogue) -> str | None:
    """The no-smem epilogue's builder takes only a plain LinearCombination (sm90_builder.inl:466-519)."""
    if fusion.fused and schedule is EpilogueSchedule.nosmem:
        return f"the no-smem epilogue cannot fuse {fusion.key}: the TMA epilogue can"
    return None


RULES = (_check_types, _check_tile, _check_cluster, _check_shared_memory, _check_fusion)


def config_problems(config: ConvKernelConfig, device: DeviceFacts) -> list[str]:
    """Every reason the kernel's configuration cannot be built or run on `device`, whatever the problem."""
    return [reason for rule in RULES if (reason := rule(config, device))]


def k_steps(config: ConvKernelConfig, problem: ConvProblem) -> int:
    """Main-loop iterations of one output tile: GEMM-K walks C in tile-K slices at each filter tap
    (conv/detail.hpp:88-94), so C % tile K is zero-filled work."""
    padded = kernel_problem(problem)
    return padded.r * padded.s * -(-padded.c // config.tile.k)
