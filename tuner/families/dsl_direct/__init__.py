"""dsl_direct: a direct convolution for depthwise layers (MobileNet, EfficientNet, ConvNeXt's 7x7) and groups of 8
channels (RegNet), written in the CuTe DSL and compiled per problem in seconds. On CUDA cores (mapping simt) each CTA
stages its output tile's input window and filter in shared memory once, and each thread sweeps a row of outputs for
8 channels with one filter row's inputs in registers; on tensor cores (mapping mma, groups of 8) each warp issues
one mma.sync.m16n8k8 a filter tap for 16 pixels of one group. Fuses scale, bias and ReLU, GELU or SiLU. Needs the
optional `dsl` extra (nvidia-cutlass-dsl) to build kernels; its space, static checks and cost model work without it."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_device_problem
from tuner.families.dsl_direct import costmodel, space, toolchain
from tuner.families.dsl_direct.space import DslDirectConfig
from tuner.families.family import BuilderEmitter, Family, PerformanceModel, SpaceRules


def describe(config: DslDirectConfig) -> str:
    return (f"{config.mapping} {config.tile_p}x{config.tile_q} px c{config.channels} x{config.columns} "
            f"g{config.shape.group_width}")


FAMILY = Family(
    name=space.FAMILY,
    summary="CuTe DSL direct convolution for depthwise and 8-channel groups (CUDA cores; tensor cores for the "
            "groups), one per problem, sm_90a",
    folder=Path(__file__).parent,
    plot_colour="tab:pink",
    fusable=frozenset({"scale", "bias", "relu", "gelu", "silu"}),
    runs_groups=True,
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=describe,
    rules=SpaceRules(knobs=("tile", "channels", "columns", "mapping"), parse_space=space.parse_space,
                     make_config=space.make_config, static_problems=space.static_problems,
                     layer_problem=space.layer_problem, launch_args=space.launch_args,
                     reference_params=space.REFERENCE_PARAMS),
    emitter=BuilderEmitter(build_request=toolchain.build_request, toolchain_problem=toolchain.toolchain_problem),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape),
)
