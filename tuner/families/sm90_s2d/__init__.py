"""sm90_s2d: the sm90_conv kernel (CUTLASS 3.x, TMA im2col + wgmma) run on a space-to-depth fold of a
strided conv over few channels (the stem): the fold is a copy kernel launched before the conv, timed
with it; the filter is folded once when the runner is initialized (weights are constant), sm_90a only."""
from __future__ import annotations

from pathlib import Path

from tuner.families.base import CppPieces, LaunchArgs, SearchSpace
from tuner.families.sm90_conv import Sm90ConvFamily
from tuner.families.sm90_s2d import codegen, space
from tuner.families.sm90_s2d.space import Sm90S2dConfig
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem


class Sm90S2dFamily(Sm90ConvFamily):
    name = space.FAMILY
    summary = "sm90_conv's kernel on a space-to-depth fold of a strided conv over few channels, sm_90a only"
    plot_colour = "tab:green"
    folder = Path(__file__).parent

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return space.folded_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm90S2dConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm90S2dConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def launch_args(self, config: Sm90S2dConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def kernel_alias(self, config: Sm90S2dConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces()

    def describe(self, config: Sm90S2dConfig) -> str:
        return "s2d " + super().describe(config)


FAMILY = Sm90S2dFamily()
