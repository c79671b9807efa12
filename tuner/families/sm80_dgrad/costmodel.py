"""The sm80_dgrad family's cost-model terms: the 2.x implicit GEMM's resident blocks and warp efficiency, with the
main loop of a dgrad tile (the taps of its stride phase)."""
from __future__ import annotations

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm80_common.costmodel import at_fitted_knobs, kernel_terms
from tuner.families.sm80_common.space import IteratorAlgorithm
from tuner.families.sm80_dgrad.space import Sm80DgradConfig, StrideSupport, k_iterations, taps_per_phase


def cost_terms(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    return kernel_terms(config, k_iterations(config, problem), device)


def prior_order(config: Sm80DgradConfig, problem: ConvProblem) -> int | None:
    """sm80's fitted stages and swizzle, the optimized iterator; at stride > 1 the strided kernel (the
    unity one cannot run it), at stride 1 the unity kernel first (no phases to walk)."""
    if not at_fitted_knobs(config):
        return None
    if config.iterator is not IteratorAlgorithm.optimized:
        return None
    preferred = StrideSupport.unity if problem.strides == (1, 1) else StrideSupport.strided
    return 0 if config.stride_support is preferred else 1


def launch_shape(config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    m, n, _ = problem.gemm_mnk
    tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
    return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                       filter_taps=taps_per_phase(config, problem),
                       split_k_slices=config.split_k, work_tiles=tiles * config.split_k,
                       can_split_k=problem.strides == (1, 1))
