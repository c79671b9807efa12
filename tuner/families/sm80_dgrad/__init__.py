"""sm80_dgrad: transposed convolutions (ConvTranspose2d's forward pass) as CUTLASS 2.x's dgrad,
`DefaultConv2dDgrad` + `ImplicitGemmConvolution` (the strided dgrad for stride > 1), cp.async +
mma.sync; runs on sm_80 and later, built as sm80 is. It runs transposed problems only, bare (no epilogue
fused yet); space.py says how a transposed problem maps onto CUTLASS's dgrad."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import ampere_device_problem, native_arch_flags
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm80_common import space as common
from tuner.families.sm80_dgrad import codegen, costmodel, space
from tuner.families.sm80_dgrad.space import Sm80DgradConfig


def describe(config: Sm80DgradConfig) -> str:
    return f"dgrad {config.stride_support.value} " + common.describe(config)


FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 2.x implicit-GEMM dgrad (cp.async + mma.sync) as a transposed convolution, sm_80 and later",
    folder=Path(__file__).parent,
    plot_colour="tab:cyan",
    runs_transposed=True,
    device_problem=partial(ampere_device_problem, common.KERNELS),
    describe=describe,
    rules=SpaceRules(knobs=("tile", "warps", "stages", "swizzle", "iterator", "stride_support", "split_k"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, reference_params=space.REFERENCE_PARAMS),
    emitter=CppEmitter(arch_flags=native_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
