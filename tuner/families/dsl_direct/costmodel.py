"""The dsl_direct family's cost-model terms and launch shape: multiply-adds on CUDA cores (R*S an output depthwise,
8*R*S in a group of 8) or, in the mma mapping, on tensor cores through mma.sync; one CTA an output tile."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.core.problem import ConvProblem
from tuner.families.base import CostTerms, LaunchShape
from tuner.families.dsl_direct.space import DslDirectConfig

# The SM's f32 FMA rate as a share of its dense f16 tensor rate, which the cost model's matrix ceiling holds (H100
# SXM datasheet: 67 TFLOPS f32 against 989 TFLOPS f16 tensor).
SIMT_SHARE = 67 / 989
# mma.sync's share of that rate: Hopper runs the Ampere warp-level instruction at about half of wgmma's rate, and a
# group of 8 fills an m16n8k8 at its narrowest N.
MMA_SHARE = 0.5
# Registers a thread is taken to need when the model ranks (the builds of spec.py's cases used 72-86).
REGISTERS_PER_THREAD = 96


def cost_terms(config: DslDirectConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
    """A CTA computes one tile_p x tile_q x channels output tile in one step: its taps are register FMAs over a
    window staged once, not pipeline iterations that each wait on memory. A group of 8 does 8 multiply-adds a tap
    where depthwise does one."""
    spec = config.build_spec()
    warps = -(-config.threads // 32)
    limits = block_limits(REGISTERS_PER_THREAD, spec.smem_bytes(), warps, device)
    taps = problem.r * problem.s * config.shape.group_width
    return CostTerms(
        tile_m=config.tile_p * config.tile_q, tile_n=config.channels, block_k_steps=1,
        flops_per_k_step=2 * config.tile_p * config.tile_q * config.channels * taps,
        blocks_per_sm=max(1, min(limits.values())), warps_per_block=warps,
        efficiency=MMA_SHARE if config.mapping == "mma" else SIMT_SHARE, stages=1,
        memory_bound=config.shape.group_width == 1)


def launch_shape(config: DslDirectConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
    grid = config.build_spec().grid()
    return LaunchShape(tile_mnk=(config.tile_p * config.tile_q, config.channels, problem.r * problem.s),
                       filter_taps=1, split_k_slices=1, work_tiles=grid[0] * grid[1], can_split_k=False,
                       memory_bound=True)
