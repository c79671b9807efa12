"""The sm90_dsl family's cost-model terms: persistent kernels (one wave of CTAs that loop over the
tiles), one or two consumer warpgroups, and for a conv the share of each box of pixels that falls on
the output (a box past the edge of P or Q computes padding); split-K's units are more CTAs at work, each on
fewer k tiles, and its fixup reads back the partials every split wrote; stream-K is one wave of CTAs, each on an
equal share of all the k tiles. Splits reduced within a cluster skip the workspace's global round trip."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm90_dsl.residency import resident_clusters
from tuner.families.sm90_dsl.space import AUTO_STAGES, CONSUMER_WARPGROUPS, Raster, Schedule, Sm90DslConfig, threads

# The tensor rate one CTA sustains with a 128x256 tile, by schedule, relative to the matrix ceiling, and
# how it falls with smaller tiles: sm90_gemm's fitted values (its costmodel.py) until this family has a
# measured landscape of its own.
RATE_SCALE = {Schedule.cooperative: 0.9, Schedule.pingpong: 0.9, Schedule.single: 0.7}
TILE_EXPONENT = 0.3
TILE_K_EXPONENT = 0.5
# The tensor cores' dense rate in an input type, relative to f16's (the matrix ceiling `tune.py bench` measures):
# fp8 wgmma runs twice as many multiply-adds, 1979 dense TFLOPS on the H100 SXM against 989. Unmeasured in this
# family until e4m3 kernels run on the GPU.
TENSOR_RATE = {DataType.e4m3: 2.0}


def blocks_per_sm(config: Sm90DslConfig, device: DeviceFacts) -> int:
    return max(1, min(block_limits(0, config.smem_bytes, threads(config.schedule) // 32, device).values()))


def cost_terms(config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """The configuration holds the kernel's problem (config.shape): `problem` adds nothing to it."""
    box = config.box
    useful = 1.0 if box is None else box.useful_fraction(config.shape)
    share = (RATE_SCALE[config.schedule] * TENSOR_RATE.get(config.input_type, 1.0) * useful
             * min(1.0, (config.tile.m * config.tile.n / (128 * 256)) ** TILE_EXPONENT)
             * min(1.0, config.tile.k * config.input_type.bytes / 128) ** TILE_K_EXPONENT)
    return CostTerms(
        tile_m=config.tile.m, tile_n=config.tile.n,
        block_k_steps=config.k_steps,
        flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
        blocks_per_sm=blocks_per_sm(config, device),
        warps_per_block=4 * CONSUMER_WARPGROUPS[config.schedule],
        efficiency=share,
        stages=config.stage_count,
        persistent=True,
        cluster_size=config.launch_cluster.volume,
        clusters_at_once=resident_clusters(config.launch_cluster.volume),
        split_k=max(config.split_k, 1),
        split_k_in_parallel=True,
        split_k_in_cluster=config.cluster_reduce,
        stream_k=config.stream_k,
    )


# Output pixels a single consumer warpgroup's tile holds (one 64-row wgmma block).
SINGLE_TILE_ROWS = 64


def prior_order(config: Sm90DslConfig, problem: ConvProblem) -> int | None:
    """The model cannot see stages, raster, swizzle or the epilogue's staging: its picks keep them at as many
    stages as fit, along M, no swizzle, the default staging; two consumer warpgroups first, but one first where
    the whole output fits 64 rows: there a two-warpgroup tile computes mostly padding. (On an H200 the picks of
    ResNet-50's 7x7 batch-1 1x1, 49 pixels, were all 128-row cooperative tiles, the study's best 6.17 us; a 64-row
    single tile with its four splits reduced in the cluster ran 4.48 us.)"""
    if (config.stages, config.raster, config.swizzle) != (AUTO_STAGES, Raster.m, 1) or config.staging is not None:
        return None
    if problem.gemm_mnk[0] <= SINGLE_TILE_ROWS:
        return {Schedule.single: 0, Schedule.cooperative: 1, Schedule.pingpong: 2}[config.schedule]
    return {Schedule.cooperative: 0, Schedule.pingpong: 1, Schedule.single: 2}[config.schedule]


def launch_shape(config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    slices, units = config.split_k, config.work_tiles * config.split_k
    if config.stream_k:  # the CTAs at work are the grid's, each on a share of the tiles' k tiles
        plan = config.stream_plan
        units = plan.clusters * config.cluster.m * config.cluster.n
        slices = max(1, -(-units // config.work_tiles))
    return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                       filter_taps=config.shape.r * config.shape.s, split_k_slices=slices,
                       work_tiles=units, persistent=True,
                       cluster=(config.launch_cluster.m, config.launch_cluster.n, 1), can_split_k=True,
                       warp_specialized=True,
                       padded_m=None if config.box is None else config.m_tiles * config.tile.m)
