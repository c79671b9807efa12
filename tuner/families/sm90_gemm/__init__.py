"""sm90_gemm: a 1x1, stride-1, unpadded NHWC conv run as the GEMM it is, on the same buffers, by CUTLASS
3.x (`cutlass::gemm::collective::CollectiveBuilder`, TMA + wgmma; warp-specialized, cooperative and
ping-pong schedules; persistent and stream-K schedulers), built for sm_90a."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from tuner.families.base import sm90a_arch_flags, sm90a_device_problem
from tuner.families.family import CppEmitter, Family, PerformanceModel, SpaceRules
from tuner.families.sm90_common import space as common
from tuner.families.sm90_gemm import codegen, costmodel, space
from tuner.families.sm90_gemm.space import AUTO_STAGES, Sm90GemmConfig


def describe(config: Sm90GemmConfig) -> str:
    stages = "auto" if config.stages == AUTO_STAGES else config.stages
    swapped = " swab" if config.swap_ab else ""
    subtile = f" e{config.epilogue_n}" if config.epilogue_n else ""
    return (f"{config.tile.text}{swapped} c{config.cluster.m}x{config.cluster.n} {config.schedule.value} "
            f"{config.scheduler.value} {config.epilogue.value}{subtile} s{stages} r{config.raster} "
            f"sw{config.swizzle} sk{config.split_k}")


FAMILY = Family(
    name=space.FAMILY,
    summary="CUTLASS 3.x GEMM (TMA + wgmma) for 1x1 stride-1 layers, sm_90a only",
    folder=Path(__file__).parent,
    plot_colour="tab:purple",
    fusable=common.FUSABLE,  # the same fusion operations
    refused_parts=common.REFUSED_PARTS,
    device_problem=partial(sm90a_device_problem, space.FAMILY),
    describe=describe,
    rules=SpaceRules(knobs=("tile", "cluster", "schedule", "scheduler", "epilogue", "stages", "raster", "swizzle",
                            "split_k", "swap_ab", "epilogue_n"),
                     parse_space=space.parse_space, make_config=space.make_config,
                     static_problems=space.static_problems, layer_problem=space.layer_problem,
                     launch_args=space.launch_args, kernel_problem=common.kernel_problem),
    emitter=CppEmitter(arch_flags=sm90a_arch_flags, kernel_alias=codegen.kernel_alias, cpp=codegen.cpp_pieces,
                       groupable=True),
    model=PerformanceModel(cost_terms=costmodel.cost_terms, launch_shape=costmodel.launch_shape,
                           prior_order=costmodel.prior_order),
)
