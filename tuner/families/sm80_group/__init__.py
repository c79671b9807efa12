"""sm80_group: CUTLASS 2.x grouped implicit GEMM (`DefaultConv2dGroupFprop`, cp.async + mma.sync) for grouped
convolutions (RegNet, ResNeXt): one group a CTA (analytic or optimized iterator) or several whole groups a CTA
(analytic), sm_80 and later. sm80's runner and its visitor-tree epilogue, on the grouped main loop."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import ampere_device_problem, native_arch_flags
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm80_common import space as common
from tuner.families.sm80_group import codegen, costmodel, space
from tuner.families.sm80_group.space import GroupMode, Sm80GroupConfig


def describe(config: Sm80GroupConfig) -> str:
    groups = "1 group/CTA" if config.group_mode is GroupMode.single else "groups/CTA"
    return (f"{config.tile.text} w{config.warps.text} s{config.stages} sw{config.swizzle} "
            f"{config.iterator.value} {groups}")


FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 2.x grouped implicit GEMM (cp.async + mma.sync), grouped convolutions, sm_80 and later",
    folder=Path(__file__).parent,
    plot_colour="tab:cyan",
    fusable=common.FUSABLE,
    runs_groups=True,
    device_problem=partial(ampere_device_problem, common.KERNELS),
    describe=describe,
    # the channels are not padded: a zero channel would shift every group after the first
    rules=SpaceRules(knobs=("tile", "warps", "stages", "swizzle", "iterator", "group_mode"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, reference_params=space.REFERENCE_PARAMS),
    emitter=CppEmitter(arch_flags=native_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
