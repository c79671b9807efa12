"""The sm80_group family's cost-model terms and launch shape: sm80's resident blocks and warp efficiency, with the
grouped main loop's iterations."""
from __future__ import annotations

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm80 import costmodel as sm80_costmodel
from tuner.families.sm80_group.space import Sm80GroupConfig, k_iterations


def cost_terms(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """sm80's terms with the grouped main loop's iterations: a CTA of several groups walks each group's
    channels in turn, its whole tile N multiplied at every step (the other groups' columns are zeros)."""
    return CostTerms(
        tile_m=config.tile.m, tile_n=config.tile.n,
        block_k_steps=k_iterations(config, problem),
        flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
        blocks_per_sm=sm80_costmodel.blocks_per_sm(config, device),
        warps_per_block=config.warp_count,
        efficiency=sm80_costmodel.warp_efficiency(config),
        stages=config.stages,
    )


def prior_order(config: Sm80GroupConfig, problem: ConvProblem) -> int | None:
    if config.stages not in sm80_costmodel.PRIOR_STAGES or config.swizzle != sm80_costmodel.PRIOR_SWIZZLE:
        return None
    return 0


def launch_shape(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    m, n, _ = problem.gemm_mnk
    tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
    return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                       filter_taps=problem.r * problem.s, split_k_slices=1, work_tiles=tiles, can_split_k=False)
