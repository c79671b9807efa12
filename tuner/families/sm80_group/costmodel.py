"""The sm80_group family's cost-model terms and launch shape: the 2.x implicit GEMM's resident blocks and warp
efficiency, with the grouped main loop's iterations."""
from __future__ import annotations

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm80_common.costmodel import at_fitted_knobs, kernel_terms
from tuner.families.sm80_group.space import Sm80GroupConfig, k_iterations


def cost_terms(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """The grouped main loop's iterations: a CTA of several groups walks each group's channels in turn, its whole
    tile N multiplied at every step (the other groups' columns are zeros)."""
    return kernel_terms(config, k_iterations(config, problem), device)


def prior_order(config: Sm80GroupConfig, problem: ConvProblem) -> int | None:
    return 0 if at_fitted_knobs(config) else None


def launch_shape(config: Sm80GroupConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    m, n, _ = problem.gemm_mnk
    tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
    return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                       filter_taps=problem.r * problem.s, split_k_slices=1, work_tiles=tiles, can_split_k=False)
