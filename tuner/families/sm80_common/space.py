"""What the CUTLASS 2.x implicit-GEMM families (sm80, sm80_group, sm80_dgrad) share of their space: the
configuration of CUTLASS's Sm80 implicit GEMM (`ImplicitGemmConvolution`, cp.async + mma.sync) and the static
checks of its tile, warps, pipeline, iterator and types, which need no compile."""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from functools import lru_cache

from tuner.core.device import DeviceFacts
from tuner.core.epilogue import Epilogue
from tuner.families.base import Shape3, int_list, pad_channels, param, shape_list, types_problem, whole
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.problem import ConvProblem

KERNELS = "sm80"  # how reasons name these kernels, whichever family builds them
# Through templates/conv2d_fprop_evt.h's visitor-tree epilogue, at split-K 1 only.
FUSABLE = frozenset({"scale", "bias", "residual", "relu", "gelu", "silu"})


class IteratorAlgorithm(enum.Enum):
    optimized = "optimized"
    analytic = "analytic"
    few_channels = "few_channels"
    fixed_channels = "fixed_channels"


SWIZZLES = (1, 2, 4, 8)
# Channels at or under this count are "small C": the few/fixed-channel iterators exist for them.
SMALL_CHANNELS = 8
MAX_THREADS_PER_BLOCK = 1024
# A 64x64 warp tile holds 128 f32 accumulators per thread; larger ones spill (seen on the H100:
# 128x128 warp tiles used 255 registers and kilobytes of spills, and ran 10-40x slower).
MAX_ACCUMULATORS_PER_THREAD = 128


@dataclass(frozen=True, order=True)
class ImplicitGemmConfig:
    """One CUTLASS 2.x implicit-GEMM kernel plus its run-time split-K; all a candidate needs but the family that
    builds it, which its subclass names."""

    tile: Shape3
    warps: Shape3
    stages: int
    swizzle: int
    iterator: IteratorAlgorithm
    split_k: int
    alignment_ab: int
    alignment_c: int
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()  # the layer's epilogue, compiled in (templates/conv2d_fprop_evt.h)

    @property
    def warp_tile(self) -> Shape3:
        return Shape3(self.tile.m // self.warps.m, self.tile.n // self.warps.n, self.tile.k // self.warps.k)

    @property
    def warp_count(self) -> int:
        return self.warps.volume

    @property
    def threads(self) -> int:
        return 32 * self.warp_count

    @property
    def instruction(self) -> Shape3:
        return INSTRUCTION_SHAPES[self.input_type]

    @property
    def mainloop_smem_bytes(self) -> int:
        per_stage = self.tile.m * self.tile.k * self.input_type.bytes + self.tile.n * self.tile.k * self.filter_type.bytes
        return self.stages * per_stage

    @property
    def compiled(self) -> "ImplicitGemmConfig":
        """The configuration as compiled: split-K is a run-time argument, so it does not count."""
        return replace(self, split_k=1)

    @property
    def name(self) -> str:
        return (
            f"{self.tile.text}_w{self.warps.text}_s{self.stages}_sw{self.swizzle}_{self.iterator.value}"
            f"_sk{self.split_k}_a{self.alignment_ab}x{self.alignment_c}_{self.dtype_key}{self.fusion.short}"
        )

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def search_params(self) -> dict[str, str | int]:
        """The values Optuna samples, in the form stored in the study."""
        return {
            "tile": self.tile.text,
            "warps": self.warps.text,
            "stages": self.stages,
            "swizzle": self.swizzle,
            "iterator": self.iterator.value,
            "split_k": self.split_k,
        }


# mma.sync shapes by input type (CUTLASS's sm80 generator): tf32 takes 8 of K an instruction.
INSTRUCTION_SHAPES = {DataType.f16: Shape3(16, 8, 16), DataType.bf16: Shape3(16, 8, 16),
                      DataType.tf32: Shape3(16, 8, 8)}


def kernel_choices(family: str, document: dict) -> tuple[tuple[str, tuple], ...]:
    """The choices of the knobs every 2.x implicit-GEMM space file gives, in study order: the threadblock tile,
    the warp count, the stages and the swizzle."""
    return (
        ("tile", tuple(t.text for t in shape_list(family, "threadblock", document["threadblock"]))),
        ("warps", tuple(w.text for w in shape_list(family, "warp_count", document["warp_count"]))),
        ("stages", int_list(family, "stages", document["stages"], lambda v: 2 <= v <= 16, "2 to 16")),
        ("swizzle", int_list(family, "swizzle", document["swizzle"], lambda v: v in SWIZZLES, "1, 2, 4 or 8")),
    )


def kernel_problem(problem: ConvProblem) -> ConvProblem:
    """The problem as the kernel sees it: an odd C is padded with a zero channel (C=3 -> 4),
    as frameworks do, since sm80's asynchronous copies move at least 4 bytes."""
    return pad_channels(problem, 2)


def _largest_dividing(value: int, widths: tuple[int, ...]) -> int:
    return next(w for w in widths if value % w == 0)


@lru_cache(maxsize=256)  # once a configuration of a space's enumeration, for one problem
def derive_alignments(problem: ConvProblem) -> tuple[int, int]:
    """Elements per access for A/B (contiguous in C) and for the output (contiguous in K)."""
    padded = kernel_problem(problem)
    widest_ab = 128 // padded.input_type.bits
    widest_c = 128 // padded.output_type.bits
    ab_widths = tuple(w for w in (8, 4, 2) if w <= widest_ab)
    c_widths = tuple(w for w in (8, 4, 2, 1) if w <= widest_c)
    return _largest_dividing(padded.c, ab_widths), _largest_dividing(padded.k, c_widths)


def config_fields(problem: ConvProblem, params: dict) -> dict:
    """The fields of an ImplicitGemmConfig from sampled parameters (strings or ints as stored in the study)."""
    alignment_ab, alignment_c = derive_alignments(problem)
    return dict(
        tile=param(params, "tile", Shape3.parse),
        warps=param(params, "warps", Shape3.parse),
        stages=param(params, "stages", whole),
        swizzle=param(params, "swizzle", whole),
        iterator=param(params, "iterator", IteratorAlgorithm),
        split_k=param(params, "split_k", whole),
        alignment_ab=alignment_ab,
        alignment_c=alignment_c,
        input_type=problem.input_type,
        filter_type=problem.filter_type,
        output_type=problem.output_type,
        accumulator_type=problem.accumulator_type,
        fusion=problem.epilogue,
    )


def describe(config: ImplicitGemmConfig) -> str:
    return (f"{config.tile.text} w{config.warps.text} s{config.stages} sw{config.swizzle} "
            f"{config.iterator.value} sk{config.split_k}")


# Each rule returns why the configuration cannot run, or None.
def _check_types(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    return types_problem(KERNELS, config, tuple(INSTRUCTION_SHAPES))


def check_warp_split(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    tile, warps = config.tile, config.warps
    if tile.m % warps.m or tile.n % warps.n or tile.k % warps.k:
        return f"threadblock {tile.text} does not divide by warp count {warps.text}"
    if warps.k != 1:
        return "sliced-K warps (warp count K > 1) are not built for conv"
    return None


def _check_warp_tile(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    warp, inst = config.warp_tile, config.instruction
    if warp.m % inst.m or warp.n % (2 * inst.n) or warp.k % inst.k:
        return (f"warp tile {warp.text} is not a multiple of the {inst.text} instruction "
                f"(N needs pairs of {inst.n} for ldmatrix)")
    if (warp.k // inst.k) % 2:
        return (f"warp tile K {warp.k} is {warp.k // inst.k} instruction step(s) of {inst.k}: the pipelined mainloop "
                "needs an even number, at least two (gemm/threadblock/mma_base.h:128-132)")
    return None


def _check_accumulators(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    per_thread = config.warp_tile.m * config.warp_tile.n // 32
    if per_thread > MAX_ACCUMULATORS_PER_THREAD:
        return (f"warp tile {config.warp_tile.m}x{config.warp_tile.n} needs {per_thread} accumulator registers "
                f"per thread (> {MAX_ACCUMULATORS_PER_THREAD}): it spills")
    return None


def _check_epilogue(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    """Two warp-tile widths that the H100 landscape (results/nvidia-h100-80gb-hbm3/landscape/, 5 layers
    with 16-bit output) showed never to work, and no working candidate is excluded by them."""
    width = config.warp_tile.n
    if width == 16 and config.alignment_c == 8:
        return ("a 16-wide warp tile cannot be tiled by CUTLASS's epilogue with 8-element output accesses "
                "(static assertion in output_tile_thread_map.h)")
    if width >= 128 and config.output_type.bits == 16:
        return f"warp tiles {width} wide with 16-bit output gave wrong results on every layer of the H100 landscape"
    return None


def check_threads(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.threads > MAX_THREADS_PER_BLOCK:
        return f"{config.threads} threads per block exceed {MAX_THREADS_PER_BLOCK}"
    return None


def check_shared_memory(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.mainloop_smem_bytes > device.smem_optin_per_block:
        return (f"{config.mainloop_smem_bytes // 1024} KB of shared memory exceeds the "
                f"{device.smem_optin_per_block // 1024} KB a block may opt into")
    return None


def check_thread_map(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    for operand, rows in (("A", config.tile.m), ("B", config.tile.n)):
        vectors = rows * config.tile.k // config.alignment_ab
        if vectors < config.threads or vectors % config.threads:
            return (f"{operand} tile {rows}x{config.tile.k} in {config.alignment_ab}-element vectors "
                    f"does not spread evenly over {config.threads} threads")
    return None


def _check_iterator(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    channels = kernel_problem(problem).c
    small = config.iterator in (IteratorAlgorithm.few_channels, IteratorAlgorithm.fixed_channels)
    if small and channels > SMALL_CHANNELS:
        return f"{config.iterator.value} iterator is for C <= {SMALL_CHANNELS}, this layer has C={channels}"
    if config.iterator is IteratorAlgorithm.fixed_channels and channels != config.alignment_ab:
        return f"fixed_channels needs C equal to the access width {config.alignment_ab}, C={channels}"
    if config.iterator is IteratorAlgorithm.optimized and max(problem.r, problem.s) > 32:
        return "optimized iterator supports filters up to 32x32"
    return None


def k_iterations(config: ImplicitGemmConfig, problem: ConvProblem) -> int:
    """Main-loop iterations of one block: the analytic and optimized iterators step through C in
    tile-K chunks at every filter tap; the small-channel ones run over R*S*C as one axis."""
    padded = kernel_problem(problem)
    if config.iterator in (IteratorAlgorithm.few_channels, IteratorAlgorithm.fixed_channels):
        return -(-padded.r * padded.s * padded.c // config.tile.k)
    return padded.r * padded.s * -(-padded.c // config.tile.k)


def _check_split_k(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    iterations = k_iterations(config, problem)
    if config.split_k > iterations:
        return f"split-K {config.split_k} exceeds the {iterations} K-iterations of this problem"
    return None


def _check_fusion(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    """The fused epilogue's visitors cannot reduce split-K slices: they have no set_k_partition, and the
    sm80 GEMM's EVT kernel asserts the same (cutlass/gemm/kernel/gemm_universal_with_visitor.h:148-150)."""
    if config.fusion.fused and config.split_k != 1:
        return f"split-K {config.split_k} cannot be fused with the epilogue {config.fusion.key}: only split-K 1 can"
    return None


# The shared-memory layout of K-major operands (TensorOpMultiplicandCrosswise) holds a threadblock's K of one row
# in one 128-byte line: K x element bits <= 1024 (cutlass/layout/tensor_op_multiplicand_sm75.h:92).
SMEM_LINE_BITS = 1024


def _check_crosswise(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    bits = max(config.input_type.bits, config.filter_type.bits)
    if config.tile.k * bits > SMEM_LINE_BITS:
        return (f"threadblock K {config.tile.k} of {bits}-bit operands is {config.tile.k * bits // 8} bytes a row, "
                f"over the {SMEM_LINE_BITS // 8}-byte shared-memory line the sm80 operand layout takes (K <= "
                f"{SMEM_LINE_BITS // bits} here)")
    return None


# These need a warp tile, so they run only once the threadblock divides by the warp count.
WARP_TILE_RULES = (_check_warp_tile, _check_accumulators, _check_epilogue)
STATIC_RULES = (check_threads, _check_crosswise,
                check_shared_memory, check_thread_map, _check_iterator, _check_split_k, _check_fusion)


def check_ranges(config: ImplicitGemmConfig) -> str | None:
    """The knobs' values a space file may give (parse_space's rules): stored parameters, such as a
    hand-edited best.yaml's, are held to them too (stages 1 or split-K 0 reached the C++ build)."""
    if not 2 <= config.stages <= 16:
        return f"stages {config.stages} is not from 2 to 16"
    if not 1 <= config.split_k <= 64:
        return f"split-K {config.split_k} is not from 1 to 64"
    if config.swizzle not in SWIZZLES:
        return f"swizzle {config.swizzle} is not 1, 2, 4 or 8"
    return None


def static_problems(config: ImplicitGemmConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    """Every reason the configuration cannot run, found without compiling; empty when valid.
    Unsupported data types stop here: the other rules need the instruction shape of the type."""
    if (reason := check_ranges(config) or _check_types(config, problem, device)):
        return [reason]
    split = check_warp_split(config, problem, device)
    rules = STATIC_RULES if split else WARP_TILE_RULES + STATIC_RULES
    return ([split] if split else []) + [reason for rule in rules if (reason := rule(config, problem, device))]
