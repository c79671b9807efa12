"""The sm90_gemm family's cost-model terms. Cooperative and ping-pong kernels are persistent with two
consumer warpgroups (ping-pong overlaps one tile's epilogue with the next tile's main loop); the ws
kernel is one consumer warpgroup, one tile per CTA. Stream-K balances the last wave."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm90_common.space import kernel_problem
from tuner.families.sm90_gemm.space import (AUTO_STAGES, CONSUMER_WARPGROUPS, THREADS, EpilogueSchedule, Schedule,
                                            Scheduler, Sm90GemmConfig, k_steps)
from tuner.core.problem import ConvProblem

# The tensor rate of a CTA with a 128x256 tile, by schedule, relative to the model's matrix ceiling, and
# how it falls with smaller tiles: 75 % of the H100 landscape's pairs more than 5 % apart ordered right
# (results/nvidia-h100-80gb-hbm3/landscape/sm90_gemm/; see sm90_conv's costmodel.py on the scale).
RATE_SCALE = {Schedule.cooperative: 0.9, Schedule.pingpong: 0.9, Schedule.ws: 0.7}
TILE_EXPONENT = 0.3
# Tile K below 64 halves the shared-memory swizzle and doubles the barriers and TMA issues per flop.
TILE_K_EXPONENT = 0.5


def blocks_per_sm(config: Sm90GemmConfig, device: DeviceFacts) -> int:
    # registers are not modelled here (the kernels' warpgroups set their own): smem, warps and blocks bind
    return max(1, min(block_limits(0, config.smem_bytes, THREADS[config.schedule] // 32, device).values()))


def cost_terms(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    share = (RATE_SCALE[config.schedule]
             * min(1.0, (config.tile.m * config.tile.n / (128 * 256)) ** TILE_EXPONENT)
             * min(1.0, config.tile.k / 64) ** TILE_K_EXPONENT)
    return CostTerms(
        tile_m=config.layer_tile.m, tile_n=config.layer_tile.n,  # the terms count tiles over the layer's GEMM
        block_k_steps=k_steps(config, problem),
        flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
        blocks_per_sm=blocks_per_sm(config, device),
        warps_per_block=4 * CONSUMER_WARPGROUPS[config.schedule],
        efficiency=share,
        stages=config.stage_count,
        split_k=config.split_k,
        persistent=config.persistent,
        cluster_size=config.cluster.m * config.cluster.n,
    )


def prior_order(config: Sm90GemmConfig, problem: ConvProblem) -> int | None:
    """The model cannot see stages, epilogue, raster or swizzle: the picks keep them at what NVIDIA's
    generator instantiates (auto stages, the TMA epilogue with its auto subtile, the heuristic raster, no
    swizzle), the cooperative schedule first."""
    if (config.stages, config.raster, config.swizzle, config.epilogue, config.epilogue_n) != (
            AUTO_STAGES, 0, 1, EpilogueSchedule.tma, 0):
        return None
    order = {Schedule.cooperative: 0, Schedule.pingpong: 1, Schedule.ws: 2}[config.schedule]
    return order + (1 if config.scheduler is Scheduler.stream_k else 0)


def launch_shape(config: Sm90GemmConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    # In the layer's orientation (M along N*P*Q), whichever way a swapped kernel runs it.
    m, n, _ = kernel_problem(problem).gemm_mnk
    tile = config.layer_tile
    tiles = -(-m // tile.m) * -(-n // tile.n)
    splits = config.split_k if config.scheduler is Scheduler.stream_k else 1
    return LaunchShape(tile_mnk=(tile.m, tile.n, tile.k), filter_taps=1,
                       split_k_slices=splits, work_tiles=tiles * splits, persistent=config.persistent,
                       cluster=(*config.layer_cluster, 1), warp_specialized=True)
