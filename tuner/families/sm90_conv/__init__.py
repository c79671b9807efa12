"""sm90_conv: CUTLASS 3.x implicit-GEMM conv2d fprop for Hopper (`cutlass::conv::collective::
CollectiveBuilder`, TMA im2col + wgmma, `KernelImplicitTmaWarpSpecializedSm90`), built for sm_90a."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_arch_flags, sm90a_device_problem
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm90_conv import codegen, costmodel, space

FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 3.x implicit GEMM (TMA im2col + wgmma), sm_90a only",
    folder=Path(__file__).parent,
    plot_colour="tab:orange",
    fusable=space.FUSABLE,
    refused_parts=space.REFUSED_PARTS,
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=space.describe,
    rules=SpaceRules(knobs=("tile", "cluster", "stages", "epilogue"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, kernel_problem=space.kernel_problem),
    emitter=CppEmitter(arch_flags=sm90a_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces,
                       groupable=True),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
