"""The sm80 family's space: typed CUTLASS 2.x implicit-GEMM fprop configurations (sm80_common's kernel, run on
the layer as it is, odd C zero-padded) and the knobs its space file gives."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.core.problem import ConvProblem
from tuner.families.base import LaunchArgs, SearchSpace, check_keys, enum_list, int_list, types_problem
from tuner.families.sm80_common.space import (INSTRUCTION_SHAPES, ImplicitGemmConfig, IteratorAlgorithm, config_fields,
                                              kernel_choices, kernel_problem)

FAMILY = "sm80"


@dataclass(frozen=True, order=True)
class Sm80Config(ImplicitGemmConfig):
    """One sm80 implicit-GEMM fprop kernel plus its run-time split-K; all a candidate needs."""

    @property
    def family(self) -> str:
        return FAMILY


def parse_space(document: object) -> SearchSpace:
    document = check_keys(FAMILY, document, {"family", "threadblock", "warp_count", "stages", "swizzle", "iterator",
                                             "split_k"})
    choices = (
        *kernel_choices(FAMILY, document),
        ("iterator", tuple(i.value for i in enum_list(FAMILY, "iterator", document["iterator"], IteratorAlgorithm))),
        ("split_k", int_list(FAMILY, "split_k", document["split_k"], lambda v: 1 <= v <= 64, "1 to 64")),
    )
    return SearchSpace(FAMILY, choices)


def layer_problem(problem: ConvProblem) -> str | None:
    return types_problem(FAMILY, problem, tuple(INSTRUCTION_SHAPES))


def make_config(problem: ConvProblem, params: dict) -> Sm80Config:
    """A configuration from sampled parameters (strings or ints as stored in the study)."""
    return Sm80Config(**config_fields(problem, params))


def launch_args(config: Sm80Config, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(kernel_problem(problem).c, split_k=config.split_k)


REFERENCE_PARAMS = {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1,
                    "iterator": "optimized", "split_k": 1}


def reference_config(problem: ConvProblem) -> Sm80Config:
    """The hand-picked configuration of the reference ncu log: 128x128x64, warp 64x64x64, 3 stages."""
    return make_config(problem, REFERENCE_PARAMS)
