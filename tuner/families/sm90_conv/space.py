"""The sm90_conv family's space: sm90_common's conv kernel (CUTLASS 3.x implicit GEMM, TMA im2col + wgmma) run on
the layer as it is, its channels zero-padded to a multiple of 8."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import LaunchArgs, SearchSpace
from tuner.families.sm90_common import space as common
from tuner.families.sm90_common.space import ConvKernelConfig, kernel_problem, layer_problem

FAMILY = "sm90_conv"


@dataclass(frozen=True, order=True)
class Sm90ConvConfig(ConvKernelConfig):
    @property
    def family(self) -> str:
        return FAMILY

    @property
    def name(self) -> str:
        return self.kernel_name("sm90c")


def parse_space(document: object) -> SearchSpace:
    return common.parse_space(document, FAMILY)


def make_config(problem: ConvProblem, params: dict) -> Sm90ConvConfig:
    return Sm90ConvConfig(**common.config_fields(problem, params))


def launch_args(config: Sm90ConvConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(kernel_problem(problem).c)


def static_problems(config: Sm90ConvConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    reasons = common.config_problems(config, device)
    if (reason := layer_problem(problem)):
        reasons.append(reason)
    return reasons
