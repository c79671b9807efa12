"""sm80_depthwise: CUTLASS 2.x direct depthwise convolution (`DefaultDepthwiseDirect2dConvFprop`, the fixed stride-
and-dilation iterator, SIMT FMAs in f32) for depthwise layers (MobileNet, EfficientNet, ConvNeXt's 7x7), with a
per-channel epilogue (scale, bias, activation), sm_80 and later. A depthwise conv does R*S multiply-adds an output:
it is memory-bound, and its cost model and diagnosis weigh its bytes against the copy ceiling."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import ampere_device_problem, native_arch_flags
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm80_depthwise import codegen, costmodel, space
from tuner.families.sm80_depthwise.space import Sm80DepthwiseConfig


def describe(config: Sm80DepthwiseConfig) -> str:
    return (f"{config.output_tile.text} px c{config.channels} w{config.warps} s{config.stages} "
            f"x{config.split} CTAs")


FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 2.x direct depthwise convolution (SIMT, fixed stride and dilation), sm_80 and later",
    folder=Path(__file__).parent,
    plot_colour="tab:olive",
    fusable=frozenset({"scale", "bias", "relu", "gelu", "silu"}),
    runs_groups=True,
    device_problem=partial(ampere_device_problem, space.FAMILY),
    describe=describe,
    rules=SpaceRules(knobs=("output_tile", "channels", "warps", "stages", "split"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, reference_params=space.REFERENCE_PARAMS),
    emitter=CppEmitter(arch_flags=native_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape),
)
