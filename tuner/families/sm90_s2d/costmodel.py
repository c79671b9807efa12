"""The sm90_s2d family's cost-model terms and launch shape: the sm90 conv kernel's on the folded problem (the
fold's copy is not modelled)."""
from __future__ import annotations

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm90_common import costmodel as conv_costmodel
from tuner.families.sm90_s2d.space import Sm90S2dConfig, folded_problem


def cost_terms(config: Sm90S2dConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    return conv_costmodel.cost_terms(config, folded_problem(problem), device)


def launch_shape(config: Sm90S2dConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    return conv_costmodel.launch_shape(config, folded_problem(problem), device)
