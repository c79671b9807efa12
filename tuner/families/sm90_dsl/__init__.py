"""sm90_dsl: persistent, warp-specialized Hopper kernels written in the CuTe DSL (TMA, wgmma, one or two
consumer warpgroups, TMA multicast clusters, the fused epilogue), compiled per problem in about a second
by the DSL instead of nvcc. Needs the optional `dsl` extra (nvidia-cutlass-dsl) to build kernels; its
space, static checks and cost model work without it."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_device_problem
from tuner.families.family import BuilderEmitter, Family, PerformanceModel, SpaceRules
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.families.sm90_dsl import checks, costmodel, space, toolchain
from tuner.families.sm90_dsl.space import AUTO_STAGES, EpilogueStore, L2Hints, Sm90DslConfig
from tuner.families.sm90_dsl.spec import GATHER_BELOW_CHANNELS

SMALL_CHANNELS = 16  # from 8 to this, a default study keeps the C++ Hopper families beside this one


def supersedes(problem: ConvProblem) -> frozenset[str]:
    """The same TMA + wgmma kernels as sm90_conv and sm90_gemm, persistent and with two consumers, built in
    a second instead of nvcc's minute: on the H100 its cold studies beat or matched the C++ families'
    tuned kernels on the layers measured (docs/dsl.md). sm80 too: in the 16 suite layers studied with
    both, sm80 won one, by 2 %, and its nvcc compiles were most of a 30-67 s cold study. Below 8 channels
    its gathering kernel replaces sm90_s2d's fold as well: the ResNet-50 stem's tuned kernels, bare and
    fused at batch 1 and 32, ran 0.69-0.78x sm90_s2d's (r50_stem_b32 72.7 µs against 94.2). Not from 8 to
    15 channels: it pads C to 8 or 16 and reads a box a tap (the 7x7 stem with C=8 ran 4.95x cuDNN)."""
    if problem.k % GATHER_BELOW_CHANNELS or problem.input_type is DataType.tf32:
        return frozenset()  # its element-by-element store of such a K, and tf32, not measured against the others yet
    if problem.c < GATHER_BELOW_CHANNELS:
        return frozenset({"sm80", "sm90_conv", "sm90_gemm", "sm90_s2d"})
    return frozenset() if problem.c < SMALL_CHANNELS else frozenset({"sm80", "sm90_conv", "sm90_gemm"})


def describe(config: Sm90DslConfig) -> str:
    stages = "auto" if config.stages == AUTO_STAGES else config.stages
    box = "" if config.shape.is_gemm else " im2col" if config.im2col else f" q{config.tile_q or 'auto'}"
    split = (" stream-K" if config.stream_k else
             f" sk{config.split_k}{' in the cluster' if config.cluster_reduce else ''}" if config.split_k > 1 else "")
    staging = (" direct store" if config.epi_store is EpilogueStore.direct
               else f" e{config.staging}" if config.staging else "")
    hints = " L2 stream" if config.l2_hints is L2Hints.stream else ""
    return (f"{config.tile.text}{box} c{config.cluster.m}x{config.cluster.n} {config.schedule.value} s{stages} "
            f"r{config.raster.value} sw{config.swizzle}{split}{staging}{hints}")


FAMILY = Family(
    name=space.FAMILY,
    summary="CuTe DSL persistent warp-specialized kernels (TMA + wgmma), one per problem, sm_90a only",
    folder=Path(__file__).parent,
    plot_colour="tab:red",
    fusable=frozenset({"scale", "bias", "residual", "relu", "gelu", "silu"}),
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=describe,
    supersedes=supersedes,
    chained=partial(replace, pdl=True),
    rules=SpaceRules(knobs=("tile", "cluster", "schedule", "stages", "raster", "swizzle", "tile_q", "split_k",
                            "split_reduce", "epi_columns", "epi_buffers", "epi_store", "l2_hints"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=checks.static_problems, layer_problem=checks.layer_problem,
                     launch_args=space.launch_args, kernel_problem=space.kernel_problem,
                     refined_knobs=("epi_columns", "epi_buffers", "epi_store", "l2_hints")),
    # its kernels are DSL-exported objects, not templates
    emitter=BuilderEmitter(build_request=toolchain.build_request, toolchain_problem=toolchain.toolchain_problem),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
