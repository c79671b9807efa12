"""The sm80_depthwise family's cost-model terms and launch shape: a memory-bound kernel, whose multiply-adds run on
CUDA cores and whose bytes against the copy ceiling bind."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.sm80_depthwise.space import Sm80DepthwiseConfig, output_tiles, smem_bytes

# The SM's f32 FMA rate as a share of its dense f16 tensor rate, which the cost model's matrix ceiling holds
# (H100 SXM datasheet: 67 TFLOPS f32 against 989 TFLOPS f16 tensor): the direct kernel multiplies on CUDA cores.
SIMT_SHARE = 67 / 989
# Registers a thread of the direct kernel is taken to need when the cost model ranks (not measured: ptxas says).
REGISTERS_PER_THREAD = 128


def cost_terms(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """A CTA of the model is one of the kernel's: its M extent the output tiles it walks (a slice's tiles over
    `split` CTAs), its steps each tile's R*S taps. The multiply-adds run at the SIMT share of the matrix
    ceiling; the model's memory floor (the bytes against the copy ceiling) is what binds."""
    tiles = -(-output_tiles(config, problem) // config.split)
    taps = config.filter[0] * config.filter[1]
    limits = block_limits(REGISTERS_PER_THREAD, smem_bytes(config), config.warps, device)
    return CostTerms(
        tile_m=tiles * config.output_tile.pixels, tile_n=config.channels,
        block_k_steps=tiles * taps,
        flops_per_k_step=2 * config.output_tile.pixels * config.channels,
        blocks_per_sm=max(1, min(limits.values())),
        warps_per_block=config.warps,
        efficiency=SIMT_SHARE,
        stages=config.stages,
        memory_bound=True,
    )


def launch_shape(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    slices = -(-problem.k // config.channels)
    return LaunchShape(tile_mnk=(config.output_tile.pixels, config.channels, config.filter[0] * config.filter[1]),
                       filter_taps=1, split_k_slices=1, work_tiles=slices * config.split,
                       can_split_k=False, memory_bound=True)
