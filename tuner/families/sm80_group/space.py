"""The sm80_group family's space: CUTLASS 2.x grouped implicit-GEMM fprop (DefaultConv2dGroupFprop) configurations,
sm80's knobs plus the group mode, and the static checks of the grouped kernel (cutlass/conv/device/
implicit_gemm_convolution.h's can_implement, the grouped iterators')."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

from tuner.core.device import DeviceFacts
from tuner.families.base import LaunchArgs, SearchSpace, SpaceError, check_keys, enum_list, param, types_problem
from tuner.families.sm80_common import space as common
from tuner.families.sm80_common.space import ImplicitGemmConfig, IteratorAlgorithm
from tuner.core.problem import ConvProblem

FAMILY = "sm80_group"


class GroupMode(enum.Enum):
    single = "single"      # a CTA's output channels lie in one group: K/groups a multiple of tile N
    multiple = "multiple"  # a CTA's tile N holds whole groups: tile N a multiple of K/groups (analytic only)


ITERATORS = (IteratorAlgorithm.analytic, IteratorAlgorithm.optimized)


@dataclass(frozen=True, order=True)
class Sm80GroupConfig(ImplicitGemmConfig):
    """The 2.x implicit GEMM's configuration (split-K always 1: the grouped kernel refuses slices) with the group
    mode."""

    group_mode: GroupMode = GroupMode.single

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def name(self) -> str:
        return (f"{self.tile.text}_w{self.warps.text}_s{self.stages}_sw{self.swizzle}_{self.iterator.value}"
                f"_{self.group_mode.value}_a{self.alignment_ab}x{self.alignment_c}_{self.dtype_key}{self.fusion.short}")

    @property
    def search_params(self) -> dict[str, str | int]:
        params = {**super().search_params, "group_mode": self.group_mode.value}
        del params["split_k"]
        return params


def parse_space(document: object) -> SearchSpace:
    document = check_keys(FAMILY, document, {"family", "threadblock", "warp_count", "stages", "swizzle", "iterator",
                                             "group_mode"})
    iterators = enum_list(FAMILY, "iterator", document["iterator"], IteratorAlgorithm)
    if (other := [i.value for i in iterators if i not in ITERATORS]):
        raise SpaceError(f"{FAMILY} search space: iterator {', '.join(other)} has no grouped kernel; "
                              "give analytic and/or optimized")
    choices = (
        *common.kernel_choices(FAMILY, document),
        ("iterator", tuple(i.value for i in iterators)),
        ("group_mode", tuple(m.value for m in enum_list(FAMILY, "group_mode", document["group_mode"], GroupMode))),
    )
    return SearchSpace(FAMILY, choices)


@lru_cache(maxsize=256)  # once a configuration of a space's enumeration, for one problem
def derive_alignments(problem: ConvProblem) -> tuple[int, int]:
    """Elements per access of A and B, contiguous in a group's channels (C/groups), and of the output (K)."""
    widest_ab = 128 // problem.input_type.bits
    ab_widths = tuple(w for w in (8, 4, 2, 1) if w <= widest_ab)
    alignment_ab = next(w for w in ab_widths if problem.channels_per_group % w == 0)
    return alignment_ab, common.derive_alignments(problem)[1]


# cp.async moves 4, 8 or 16 bytes: a group's channels must fill at least one such access.
MIN_ACCESS_BYTES = 4


def layer_problem(problem: ConvProblem) -> str | None:
    return grouping_problem(problem) or types_problem(FAMILY, problem, tuple(common.INSTRUCTION_SHAPES))


def grouping_problem(problem: ConvProblem) -> str | None:
    if problem.groups == 1:
        return f"{FAMILY} runs grouped convolutions (groups > 1); sm80 runs this ungrouped one"
    per_group = problem.channels_per_group
    if per_group * problem.input_type.bytes % MIN_ACCESS_BYTES:
        kind = "a depthwise convolution (one channel a group)" if per_group == 1 else f"{per_group} channels a group"
        return (f"{FAMILY}'s asynchronous copies read at least {MIN_ACCESS_BYTES} bytes of a group's channels; "
                f"this is {kind}" + (": sm80_depthwise runs it" if per_group == 1 else ""))
    return None


def make_config(problem: ConvProblem, params: dict) -> Sm80GroupConfig:
    """The 2.x implicit GEMM's configuration of the knobs (split-K 1), its A/B accesses those of a group's
    channels."""
    values = common.config_fields(problem, {**params, "split_k": 1})
    values["alignment_ab"] = derive_alignments(problem)[0]
    return Sm80GroupConfig(**values, group_mode=param(params, "group_mode", GroupMode))


def launch_args(config: Sm80GroupConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(problem.c)


REFERENCE_PARAMS = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "analytic",
                    "group_mode": "multiple"}


def _check_iterator(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if config.iterator not in ITERATORS:
        return f"{config.iterator.value} iterator has no grouped kernel (analytic or optimized)"
    if config.iterator is IteratorAlgorithm.optimized and config.group_mode is not GroupMode.single:
        return "the optimized grouped iterator takes one group a CTA (group mode single) only"
    return None


def _check_group_mode(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    k_per_group, tile_n = problem.k // problem.groups, config.tile.n
    if config.group_mode is GroupMode.single and k_per_group % tile_n:
        return (f"group mode single needs K/groups ({k_per_group}) to be a multiple of tile N {tile_n}: "
                "one CTA computes one group")
    if config.group_mode is GroupMode.multiple and tile_n % k_per_group:
        return (f"group mode multiple needs tile N {tile_n} to be a multiple of K/groups ({k_per_group}): "
                "one CTA computes whole groups")
    return None


def _check_alignment(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if problem.channels_per_group % config.alignment_ab:
        return (f"{config.alignment_ab}-element accesses do not divide the {problem.channels_per_group} "
                "channels of a group")
    return None


def static_problems(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    """The 2.x implicit GEMM's rules of the types, tile, warps and pipeline (the grouped kernel is
    DefaultConv2dFprop's main loop with grouped iterators), then the grouped kernel's own; split-K is always 1."""
    if (reason := grouping_problem(problem)):
        return [reason]
    general = common.static_problems(config, problem, device)
    own = [reason for rule in (_check_iterator, _check_group_mode, _check_alignment)
           if (reason := rule(config, problem, device))]
    return general + own


def k_iterations(config: Sm80GroupConfig, problem: ConvProblem) -> int:
    """Main-loop iterations of one CTA (conv2d_problem_size.h's implicit_gemm_k_iterations): each group's channels
    in tile-K steps at every filter tap, once for each group the CTA holds."""
    per_group = problem.r * problem.s * -(-problem.channels_per_group // config.tile.k)
    k_per_group = problem.k // problem.groups
    return per_group * (config.tile.n // k_per_group if k_per_group < config.tile.n else 1)

