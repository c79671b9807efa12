"""sm90_conv: CUTLASS 3.x implicit-GEMM conv2d fprop for Hopper (`cutlass::conv::collective::
CollectiveBuilder`, TMA im2col + wgmma, `KernelImplicitTmaWarpSpecializedSm90`), built for sm_90a. The kernel is
sm90_common's, which sm90_s2d runs too."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_arch_flags, sm90a_device_problem
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm90_common import codegen as common_codegen
from tuner.families.sm90_common import costmodel as common_costmodel
from tuner.families.sm90_common import space as common
from tuner.families.sm90_conv import space

FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 3.x implicit GEMM (TMA im2col + wgmma), sm_90a only",
    folder=Path(__file__).parent,
    plot_colour="tab:orange",
    fusable=common.FUSABLE,
    refused_parts=common.REFUSED_PARTS,
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=common.describe,
    rules=SpaceRules(knobs=("tile", "cluster", "stages", "epilogue"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=common.layer_problem,
                     launch_args=space.launch_args, kernel_problem=common.kernel_problem),
    emitter=CppEmitter(arch_flags=sm90a_arch_flags, kernel_alias=common_codegen.kernel_alias,
                       cpp=common_codegen.cpp_pieces, groupable=True),
    model=PerformanceModel(cost_terms=common_costmodel.cost_terms, launch_shape=common_costmodel.launch_shape,
                           prior_order=common_costmodel.prior_order),
)
