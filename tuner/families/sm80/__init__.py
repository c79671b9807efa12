"""sm80: CUTLASS 2.x `DefaultConv2dFprop` + `ImplicitGemmConvolution`, cp.async + mma.sync, arch tag
Sm80; runs on sm_80 and later, compiled for the device's own arch (sm_90 on an H100)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import ampere_device_problem, native_arch_flags
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm80 import codegen, costmodel, space
from tuner.families.sm80_common import space as common

FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 2.x implicit GEMM (cp.async + mma.sync), sm_80 and later",
    folder=Path(__file__).parent,
    plot_colour="tab:blue",
    fusable=common.FUSABLE,
    device_problem=partial(ampere_device_problem, space.FAMILY),
    describe=common.describe,
    rules=SpaceRules(knobs=("tile", "warps", "stages", "swizzle", "iterator", "split_k"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=common.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, kernel_problem=common.kernel_problem,
                     reference_params=space.REFERENCE_PARAMS),
    emitter=CppEmitter(arch_flags=native_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
