"""sm80_group: CUTLASS 2.x grouped implicit GEMM (`DefaultConv2dGroupFprop`, cp.async + mma.sync) for grouped
convolutions (RegNet, ResNeXt): one group a CTA (analytic or optimized iterator) or several whole groups a CTA
(analytic), sm_80 and later. sm80's runner and its visitor-tree epilogue, on the grouped main loop."""
from __future__ import annotations

from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.families.base import CostTerms, CppPieces, LaunchArgs, LaunchShape, SearchSpace
from tuner.families.sm80 import Sm80Family
from tuner.families.sm80 import costmodel as sm80_costmodel
from tuner.families.sm80_group import codegen, space
from tuner.families.sm80_group.space import GroupMode, Sm80GroupConfig
from tuner.core.problem import ConvProblem


class Sm80GroupFamily(Sm80Family):
    name = space.FAMILY
    summary = "CUTLASS 2.x grouped implicit GEMM (cp.async + mma.sync), grouped convolutions, sm_80 and later"
    plot_colour = "tab:cyan"
    folder = Path(__file__).parent
    knobs = ("tile", "warps", "stages", "swizzle", "iterator", "group_mode")
    runs_groups = True

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem) or super().layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return problem  # a zero channel would shift every group after the first

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm80GroupConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def reference_params(self) -> dict:
        return dict(space.REFERENCE_PARAMS)

    def launch_args(self, config: Sm80GroupConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def kernel_alias(self, config: Sm80GroupConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces(fused=any(config.fusion.fused for config in configs))

    def cost_terms(self, config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        """sm80's terms with the grouped main loop's iterations: a CTA of several groups walks each group's
        channels in turn, its whole tile N multiplied at every step (the other groups' columns are zeros)."""
        return CostTerms(
            tile_m=config.tile.m, tile_n=config.tile.n,
            block_k_steps=space.k_iterations(config, problem),
            flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
            blocks_per_sm=sm80_costmodel.blocks_per_sm(config, device),
            warps_per_block=config.warp_count,
            efficiency=sm80_costmodel.warp_efficiency(config),
            stages=config.stages,
        )

    def prior_order(self, config: Sm80GroupConfig, problem: ConvProblem) -> int | None:
        if config.stages not in sm80_costmodel.PRIOR_STAGES or config.swizzle != sm80_costmodel.PRIOR_SWIZZLE:
            return None
        return 0

    def launch_shape(self, config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        m, n, _ = problem.gemm_mnk
        tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                           filter_taps=problem.r * problem.s, split_k_slices=1, work_tiles=tiles, can_split_k=False)

    def describe(self, config: Sm80GroupConfig) -> str:
        groups = "1 group/CTA" if config.group_mode is GroupMode.single else "groups/CTA"
        return (f"{config.tile.text} w{config.warps.text} s{config.stages} sw{config.swizzle} "
                f"{config.iterator.value} {groups}")


FAMILY = Sm80GroupFamily()
