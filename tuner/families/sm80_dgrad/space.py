"""The sm80_dgrad family's space: CUTLASS 2.x implicit-GEMM dgrad configurations that run a transposed
convolution (ConvTranspose2d's forward pass is the data gradient of the convolution y -> x), and their
static checks.

The mapping onto CUTLASS's dgrad (cutlass/conv/conv2d_problem_size.h: dgrad(dy[N,P,Q,K], w[K,R,S,C]) ->
dx[N,H,W,C]): the transposed conv's input x[N,H,W,C] is dy, so CUTLASS's P, Q, K are the problem's H, W, C;
its output y[N,P,Q,K] is dx, so CUTLASS's H, W, C are the problem's P, Q, K; its weight w[C,R,S,K] is the
KRSC filter as CUTLASS reads it, untouched. Pad, stride and dilation are the same numbers. The knobs are
sm80's (tile, warps, stages, swizzle, split-K; the analytic or optimized iterator) plus the stride support:
`strided` is ImplicitGemmConvolutionStridedDgrad, which splits the output into stride_h x stride_w phases
and runs only the taps that land on each (the one that matters for stride-2 upsampling); `unity` is the
plain implicit GEMM for stride 1."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

from tuner.core.device import DeviceFacts
from tuner.families.base import LaunchArgs, SearchSpace, SpaceError, check_keys, enum_list, int_list, param, types_problem
from tuner.families.sm80_common import space as sm80_space
from tuner.families.sm80_common.space import ImplicitGemmConfig, IteratorAlgorithm
from tuner.core.axes import pair_text
from tuner.core.problem import ConvProblem

FAMILY = "sm80_dgrad"
ITERATORS = (IteratorAlgorithm.analytic, IteratorAlgorithm.optimized)


class StrideSupport(enum.Enum):
    strided = "strided"
    unity = "unity"


# CUTLASS's generator instantiates the strided dgrad with StridedDgradIdentityThreadblockSwizzle<1> and <4> only.
STRIDED_SWIZZLES = (1, 4)
# The optimized output-gradient iterator's limit (conv2d_dgrad_output_gradient_tile_access_iterator_optimized.h).
MAX_OPTIMIZED_TAPS = 32


@dataclass(frozen=True, order=True)
class Sm80DgradConfig(ImplicitGemmConfig):
    """An sm80 kernel configuration run as CUTLASS's dgrad: sm80's knobs, alignment_ab the access width of
    both operands (x along C, w along K), and the stride support."""

    stride_support: StrideSupport = StrideSupport.strided

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def name(self) -> str:
        return f"dgrad_{self.stride_support.value}_{super().name}"

    @property
    def search_params(self) -> dict[str, str | int]:
        return {**super().search_params, "stride_support": self.stride_support.value}


def parse_space(document: object) -> SearchSpace:
    document = check_keys(FAMILY, document, {"family", "threadblock", "warp_count", "stages", "swizzle", "iterator",
                                             "stride_support", "split_k"})
    iterators = enum_list(FAMILY, "iterator", document["iterator"], IteratorAlgorithm)
    if (other := [i.value for i in iterators if i not in ITERATORS]):
        raise SpaceError(f"{FAMILY} search space: iterator {', '.join(other)} is not one of analytic, optimized "
                         "(CUTLASS has no small-channel dgrad)")
    choices = (
        *sm80_space.kernel_choices(FAMILY, document),
        ("iterator", tuple(i.value for i in iterators)),
        ("stride_support", tuple(s.value for s in enum_list(FAMILY, "stride_support", document["stride_support"],
                                                            StrideSupport))),
        ("split_k", int_list(FAMILY, "split_k", document["split_k"], lambda v: 1 <= v <= 64, "1 to 64")),
    )
    return SearchSpace(FAMILY, choices)


def layer_problem(problem: ConvProblem) -> str | None:
    if (reason := types_problem(FAMILY, problem, tuple(sm80_space.INSTRUCTION_SHAPES))):
        return reason
    widest = 128 // problem.input_type.bits
    smallest = max(1, 32 // problem.input_type.bits)  # cp.async moves 4 bytes at least
    for what, channels in (("C (the input's channels)", problem.c), ("K (the output's channels)", problem.k)):
        if channels % smallest:
            return (f"{what}={channels} is not a multiple of {smallest}: the dgrad kernels read both operands "
                    f"{smallest} to {widest} elements at a time and pad no channels")
    if problem.dilations != (1, 1) and problem.strides != (1, 1):
        return (f"dilation {pair_text(problem.dilations)} with stride {pair_text(problem.strides)}: CUTLASS's strided "
                "dgrad runs undilated filters only, its unity-stride dgrad stride 1 only")
    return None


@lru_cache(maxsize=256)  # once a configuration of a space's enumeration, for one problem
def derive_alignments(problem: ConvProblem) -> tuple[int, int]:
    """Elements per access of both operands (x contiguous in C, w in K: one width for both) and of the
    output (contiguous in K)."""
    widest_ab, widest_c = 128 // problem.input_type.bits, 128 // problem.output_type.bits
    ab = next((w for w in (8, 4, 2, 1) if w <= widest_ab and problem.c % w == 0 and problem.k % w == 0), 1)
    c = next(w for w in (8, 4, 2, 1) if w <= widest_c and problem.k % w == 0)
    return ab, c


def make_config(problem: ConvProblem, params: dict) -> Sm80DgradConfig:
    base = sm80_space.config_fields(problem, params)
    alignment_ab, alignment_c = derive_alignments(problem)
    return Sm80DgradConfig(**base | {
        "alignment_ab": alignment_ab, "alignment_c": alignment_c,
        "stride_support": param(params, "stride_support", StrideSupport)})


def launch_args(config: Sm80DgradConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(problem.c, split_k=config.split_k)


# sm80's reference configuration (tuner/families/sm80/space.py), strided.
REFERENCE_PARAMS = {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized",
                    "split_k": 1, "stride_support": "strided"}


def taps_per_phase(config: Sm80DgradConfig, problem: ConvProblem) -> int:
    """Filter taps one output pixel gathers: all R*S at stride 1 (or in the unity kernel); about
    1/(stride_h*stride_w) of them in a phase of the strided kernel."""
    if config.stride_support is StrideSupport.unity:
        return problem.r * problem.s
    return -(-problem.r // problem.stride_h) * -(-problem.s // problem.stride_w)


def k_iterations(config: Sm80DgradConfig, problem: ConvProblem) -> int:
    """Main-loop iterations of one block: C in tile-K chunks at every tap of its phase."""
    return taps_per_phase(config, problem) * -(-problem.c // config.tile.k)


# Each rule returns why the configuration cannot run, or None.
def _check_layer(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if not problem.transposed:
        return f"{FAMILY} runs transposed convolutions only"
    return layer_problem(problem)


def _check_iterator(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.iterator not in ITERATORS:
        return f"{config.iterator.value} iterator: CUTLASS's dgrad has the analytic and optimized ones only"
    if config.iterator is IteratorAlgorithm.optimized and max(problem.r, problem.s) > MAX_OPTIMIZED_TAPS:
        return f"optimized iterator supports filters up to {MAX_OPTIMIZED_TAPS}x{MAX_OPTIMIZED_TAPS}"
    return None


def _check_stride_support(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.stride_support is StrideSupport.unity and problem.strides != (1, 1):
        return f"the unity-stride dgrad runs stride 1 only, this layer has stride {pair_text(problem.strides)}"
    if config.stride_support is StrideSupport.strided:
        if problem.dilations != (1, 1):
            return (f"the strided dgrad runs undilated filters only (CUTLASS's can_implement), dilation "
                    f"{pair_text(problem.dilations)}")
        if config.swizzle not in STRIDED_SWIZZLES:
            return (f"swizzle {config.swizzle}: the strided dgrad's StridedDgradIdentityThreadblockSwizzle is "
                    f"instantiated with {' or '.join(map(str, STRIDED_SWIZZLES))} only")
        if config.split_k != 1 and problem.strides != (1, 1):
            return f"split-K {config.split_k}: the strided dgrad cannot split K at stride > 1 (CUTLASS's can_implement)"
    return None


def _check_split_k(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    iterations = k_iterations(config, problem)
    if config.split_k > iterations:
        return f"split-K {config.split_k} exceeds the {iterations} K-iterations of this problem"
    return None


# sm80's rules that read only the tile, warps, stages, types and access widths hold for its dgrad as well.
STATIC_RULES = (_check_layer, _check_iterator, _check_stride_support, sm80_space.check_threads,
                sm80_space.check_shared_memory, sm80_space.check_thread_map, _check_split_k)


def static_problems(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    """Every reason the configuration cannot run, found without compiling; empty when valid."""
    if (reason := sm80_space.check_ranges(config)
            or types_problem(FAMILY, config, tuple(sm80_space.INSTRUCTION_SHAPES))):
        return [reason]
    split = sm80_space.check_warp_split(config, problem, device)
    rules = STATIC_RULES if split else sm80_space.WARP_TILE_RULES + STATIC_RULES
    return ([split] if split else []) + [reason for rule in rules if (reason := rule(config, problem, device))]
