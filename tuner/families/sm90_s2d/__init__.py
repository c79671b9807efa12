"""sm90_s2d: the sm90_conv kernel (CUTLASS 3.x, TMA im2col + wgmma) run on a space-to-depth fold of a
strided conv over few channels (the stem): the fold is a copy kernel launched before the conv, timed
with it; the filter is folded once when the runner is initialized (weights are constant), sm_90a only."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_arch_flags, sm90a_device_problem
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm90_common import codegen as conv_codegen
from tuner.families.sm90_common import costmodel as conv_costmodel
from tuner.families.sm90_common import space as conv_space
from tuner.families.sm90_s2d import codegen, costmodel, space
from tuner.families.sm90_s2d.space import Sm90S2dConfig


def describe(config: Sm90S2dConfig) -> str:
    return "s2d " + conv_space.describe(config)


FAMILY = Family(
    name=space.FAMILY,
    summary="sm90_conv's kernel on a space-to-depth fold of a strided conv over few channels, sm_90a only",
    folder=Path(__file__).parent,
    plot_colour="tab:green",
    fusable=conv_space.FUSABLE,
    refused_parts=conv_space.REFUSED_PARTS,
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=describe,
    rules=SpaceRules(knobs=("tile", "cluster", "stages", "epilogue"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, kernel_problem=space.folded_problem),
    emitter=CppEmitter(arch_flags=sm90a_arch_flags, kernel_alias=conv_codegen.kernel_alias, cpp=codegen.cpp_pieces,
                       groupable=True),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=conv_costmodel.prior_order),
)
