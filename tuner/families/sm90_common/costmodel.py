"""The sm90 conv kernel's cost-model terms and launch shape (sm90_conv's and sm90_s2d's). One consumer warpgroup
issues wgmma for the whole tile and the epilogue does not overlap the next tile's main loop (one tile per CTA), so
a CTA sustains a share of the SM's tensor rate that grows with the tile; blocks per SM follow from shared memory."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm90_common.space import (AUTO_STAGES, THREADS_PER_BLOCK, ConvKernelConfig, EpilogueSchedule,
                                              k_steps, kernel_problem)
from tuner.core.problem import ConvProblem

# The tensor rate of a CTA with a 128x128 tile, relative to the model's matrix ceiling, and how it falls
# with smaller tiles and tile K. Fitted to the H100 landscape of this family
# (results/nvidia-h100-80gb-hbm3/landscape/sm90_conv/, pairs of candidates more than 5 % apart): 69 % of
# pairs ordered right before (tile exponent 0.3, tile-K exponent 0.5), 73 % after. Scales that order the
# three families against each other best (83 % of cross-family pairs at 1.6 here and 1.8 for sm90_gemm,
# against 63 %) cost 4-5 points within each family; the joint prior gives each family its own picks, so
# within-family order is what counts.
RATE_SCALE = 0.8
TILE_EXPONENT = 0.8
# Tile K below 64 halves the shared-memory swizzle and doubles the barriers and TMA issues per flop.
TILE_K_EXPONENT = 0.25


def blocks_per_sm(config: ConvKernelConfig, device: DeviceFacts) -> int:
    # registers are not modelled here (the kernels' warpgroups set their own): smem, warps and blocks bind
    return max(1, min(block_limits(0, config.smem_bytes, THREADS_PER_BLOCK // 32, device).values()))


def cost_terms(config: ConvKernelConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """`problem`: the layer's, or the fold sm90_s2d runs the kernel on; k_steps pads its channels."""
    share = (RATE_SCALE * min(1.0, (config.tile.m * config.tile.n / (128 * 128)) ** TILE_EXPONENT)
             * min(1.0, config.tile.k / 64) ** TILE_K_EXPONENT)
    return CostTerms(
        tile_m=config.tile.m, tile_n=config.tile.n,
        block_k_steps=k_steps(config, problem),
        flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
        blocks_per_sm=blocks_per_sm(config, device),
        warps_per_block=4,  # the consumer warpgroup
        efficiency=share,
        stages=config.stage_count,
        cluster_size=config.cluster_size,
    )


def prior_order(config: ConvKernelConfig, problem: ConvProblem) -> int | None:
    """The model cannot see the stage count or the epilogue: the picks take auto stages (what NVIDIA's
    generator instantiates) and the TMA epilogue first (its best beat no-smem's on 46 of the 47 layers of
    the H100's landscape, results/nvidia-h100-80gb-hbm3/landscape/sm90_conv/)."""
    if config.stages != AUTO_STAGES:
        return None
    return 0 if config.epilogue is EpilogueSchedule.tma else 1


def launch_shape(config: ConvKernelConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    padded = kernel_problem(problem)
    m, n, _ = padded.gemm_mnk
    tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
    return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k), filter_taps=padded.r * padded.s,
                       split_k_slices=1, work_tiles=tiles, cluster=(config.cluster.m, config.cluster.n, 1),
                       can_split_k=False, warp_specialized=True)
