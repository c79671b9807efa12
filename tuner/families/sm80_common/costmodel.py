"""What the CUTLASS 2.x implicit-GEMM families share of their cost model: resident blocks from shared memory and
an estimate of registers, the tensor-core efficiency of a warp tile, and the knobs the model was fitted at
(tuner/search/costmodel.py combines the terms)."""
from __future__ import annotations

from tuner.core.device import DeviceFacts, block_limits
from tuner.families.base import CostTerms
from tuner.families.sm80_common.space import ImplicitGemmConfig

# Fitted to the H100 landscape of `tune.py bench` (its first 6 layers, results/nvidia-h100-80gb-hbm3/
# landscape/sm80/; the 31 layers recorded after the last change to the model are all within 3 % with
# the prior): treat it as a starting point on other GPUs.
WARP_EFFICIENCY_EXPONENT = 0.25
# Registers a thread needs besides its accumulators (addresses, fragments, pipeline state).
REGISTER_OVERHEAD = 60
# The model was fitted where stages were 3-4, the swizzle the identity and the iterator the
# optimized one, and it cannot tell swizzles or iterators apart. Its picks keep those knobs at the
# fitted values, so that ties are not broken by name: on the full sm80 space the name order picked
# 5-6 stages and swizzle 2, none of them measured.
PRIOR_STAGES = (3, 4)
PRIOR_SWIZZLE = 1


def blocks_per_sm(config: ImplicitGemmConfig, device: DeviceFacts) -> int:
    registers = min(255, config.warp_tile.m * config.warp_tile.n // 32 + REGISTER_OVERHEAD)
    return max(1, min(block_limits(registers, config.mainloop_smem_bytes, config.warp_count, device).values()))


def warp_efficiency(config: ImplicitGemmConfig) -> float:
    """Tensor-core efficiency of a warp tile: 64x64 and larger keep the pipes busy; small warp
    tiles spend their time on shared-memory loads."""
    return min(1.0, (config.warp_tile.m * config.warp_tile.n / (64 * 64)) ** WARP_EFFICIENCY_EXPONENT)


def kernel_terms(config: ImplicitGemmConfig, block_k_steps: int, device: DeviceFacts) -> CostTerms:
    """The terms of a kernel whose output tile takes `block_k_steps` main-loop iterations (the family's count)."""
    return CostTerms(
        tile_m=config.tile.m, tile_n=config.tile.n,
        block_k_steps=block_k_steps,
        flops_per_k_step=2 * config.tile.m * config.tile.n * config.tile.k,
        blocks_per_sm=blocks_per_sm(config, device),
        warps_per_block=config.warp_count,
        efficiency=warp_efficiency(config),
        stages=config.stages,
        split_k=config.split_k,
    )


def at_fitted_knobs(config: ImplicitGemmConfig) -> bool:
    """Whether the knobs the model cannot see (stages, swizzle) are at the values it was fitted at."""
    return config.stages in PRIOR_STAGES and config.swizzle == PRIOR_SWIZZLE
