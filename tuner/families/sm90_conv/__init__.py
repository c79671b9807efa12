"""sm90_conv: CUTLASS 3.x implicit-GEMM conv2d fprop for Hopper (`cutlass::conv::collective::
CollectiveBuilder`, TMA im2col + wgmma, `KernelImplicitTmaWarpSpecializedSm90`), built for sm_90a."""
from __future__ import annotations

from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.families.base import (CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace,
                                 sm90a_device_problem)
from tuner.families.sm90_conv import codegen, costmodel, space
from tuner.families.sm90_conv.space import Sm90ConvConfig
from tuner.core.problem import ConvProblem


# CUTLASS 4.2's sm90 SiLU epilogue: in the cold studies of the layers outside the ResNet-50 table (H100,
# 2026-11-23), every sm90 SiLU kernel ran about 9 µs slower than the same tile with ReLU, and an sm80 kernel
# won; sm90_dsl fuses SiLU at 1.03x its ReLU (docs/fusion.md).
SLOW_SILU = ("{family} does not fuse silu: CUTLASS 4.2's sm90 SiLU epilogue ran about 9 µs slower than ReLU on "
             "the same tile (docs/fusion.md); sm90_dsl or sm80 fuse it")


class Sm90ConvFamily(Family):
    name = space.FAMILY
    # Through the 3.x fusion operations (codegen.fusion_tag), TMA epilogue only; not SiLU (SLOW_SILU).
    fusable = frozenset({"scale", "bias", "residual", "relu", "gelu"})
    refused_parts = (("silu", SLOW_SILU),)
    summary = "CUTLASS 3.x implicit GEMM (TMA im2col + wgmma), sm_90a only"
    plot_colour = "tab:orange"
    folder = Path(__file__).parent
    groupable = True
    knobs = ("tile", "cluster", "stages", "epilogue")

    def device_problem(self, device: DeviceFacts) -> str | None:
        return sm90a_device_problem(self.name, device)

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return space.kernel_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm90ConvConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm90ConvConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def launch_args(self, config: Sm90ConvConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return ["-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"]

    def kernel_alias(self, config: Sm90ConvConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces()

    def cost_terms(self, config: Sm90ConvConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        return costmodel.cost_terms(config, self.kernel_problem(problem), device)

    def prior_order(self, config: Sm90ConvConfig, problem: ConvProblem) -> int | None:
        return costmodel.prior_order(config, problem)

    def launch_shape(self, config: Sm90ConvConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        padded = self.kernel_problem(problem)
        m, n, _ = padded.gemm_mnk
        tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k), filter_taps=padded.r * padded.s,
                           split_k_slices=1, work_tiles=tiles, cluster=(config.cluster.m, config.cluster.n, 1),
                           can_split_k=False, warp_specialized=True)

    def describe(self, config: Sm90ConvConfig) -> str:
        stages = "auto" if config.stages == space.AUTO_STAGES else config.stages
        return f"{config.tile.text} c{config.cluster.m}x{config.cluster.n} s{stages} {config.epilogue.value}"


FAMILY = Sm90ConvFamily()
