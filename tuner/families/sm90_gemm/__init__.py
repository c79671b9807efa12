"""sm90_gemm: a 1x1, stride-1, unpadded NHWC conv run as the GEMM it is, on the same buffers, by CUTLASS
3.x (`cutlass::gemm::collective::CollectiveBuilder`, TMA + wgmma; warp-specialized, cooperative and
ping-pong schedules; persistent and stream-K schedulers), built for sm_90a."""
from __future__ import annotations

from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.families.sm90_conv import Sm90ConvFamily
from tuner.families.base import (CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace,
                                 sm90a_device_problem)
from tuner.families.sm90_gemm import codegen, costmodel, space
from tuner.families.sm90_gemm.space import Scheduler, Sm90GemmConfig
from tuner.core.problem import ConvProblem


class Sm90GemmFamily(Family):
    name = space.FAMILY
    fusable = Sm90ConvFamily.fusable  # the same fusion operations
    refused_parts = Sm90ConvFamily.refused_parts
    summary = "CUTLASS 3.x GEMM (TMA + wgmma) for 1x1 stride-1 layers, sm_90a only"
    plot_colour = "tab:purple"
    folder = Path(__file__).parent
    groupable = True
    knobs = ("tile", "cluster", "schedule", "scheduler", "epilogue", "stages", "raster", "swizzle", "split_k", "swap_ab",
             "epilogue_n")

    def device_problem(self, device: DeviceFacts) -> str | None:
        return sm90a_device_problem(self.name, device)

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return space.kernel_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm90GemmConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def launch_args(self, config: Sm90GemmConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return ["-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"]

    def kernel_alias(self, config: Sm90GemmConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces()

    def cost_terms(self, config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        return costmodel.cost_terms(config, problem, device)

    def prior_order(self, config: Sm90GemmConfig, problem: ConvProblem) -> int | None:
        return costmodel.prior_order(config, problem)

    def launch_shape(self, config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        # In the layer's orientation (M along N*P*Q), whichever way a swapped kernel runs it.
        m, n, _ = space.kernel_problem(problem).gemm_mnk
        tile = config.layer_tile
        tiles = -(-m // tile.m) * -(-n // tile.n)
        splits = config.split_k if config.scheduler is Scheduler.stream_k else 1
        return LaunchShape(tile_mnk=(tile.m, tile.n, tile.k), filter_taps=1,
                           split_k_slices=splits, work_tiles=tiles * splits, persistent=config.persistent,
                           cluster=(*config.layer_cluster, 1), warp_specialized=True)

    def describe(self, config: Sm90GemmConfig) -> str:
        stages = "auto" if config.stages == space.AUTO_STAGES else config.stages
        swapped = " swab" if config.swap_ab else ""
        subtile = f" e{config.epilogue_n}" if config.epilogue_n else ""
        return (f"{config.tile.text}{swapped} c{config.cluster.m}x{config.cluster.n} {config.schedule.value} "
                f"{config.scheduler.value} {config.epilogue.value}{subtile} s{stages} r{config.raster} "
                f"sw{config.swizzle} sk{config.split_k}")


FAMILY = Sm90GemmFamily()
