"""A cost model that ranks candidates before anything is compiled: waves of blocks over the SMs,
tile padding, occupancy from shared memory and an estimate of registers, the memory floor, and
the serial split-K epilogue. Its best picks seed a study (Optuna's enqueue_trial)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from tuner.device import DeviceFacts
from tuner.diagnose import DRIVER_SMEM_PER_BLOCK
from tuner.problem import ConvProblem
from tuner.results import BENCH_FILE
from tuner.space import (SMALL_CHANNELS, IteratorAlgorithm, KernelConfig, SearchSpace, k_iterations,
                         kernel_problem, valid_configs)

# Rates of an H100-class part used when no measured ceiling is given; only ratios between
# candidates matter for the ranking.
DEFAULT_MATMUL_TFLOPS = 600.0
DEFAULT_COPY_GBPS = 3000.0
# Fixed cost of a launch and its epilogue, of one main-loop iteration's latency, and of each extra
# serial split-K slice, whose epilogue waits for the previous slice's (µs). These three and the
# warp-efficiency exponent were fitted to the H100 landscape of `tune.py bench` (its first 6 layers,
# results/nvidia-h100-80gb-hbm3/landscape/; the 31 layers recorded after the last change to the
# model are all within 3 % with the prior): treat them as a starting point on other GPUs.
LAUNCH_US = 2.0
ITERATION_LATENCY_US = 0.1
SPLIT_K_SLICE_US = 1.0
WARP_EFFICIENCY_EXPONENT = 0.25
# Warps one SM needs in flight before all its tensor cores work: one per sub-partition. Fewer run
# the SM at the fraction they fill. On the H100 single-warp blocks measured a median 3.2x the
# layer's best (48 of them, never within 13 %); 4 ranked measured pairs best (81 % vs 78 % without).
WARPS_TO_FILL_SM = 4
# Registers a thread needs besides its accumulators (addresses, fragments, pipeline state).
REGISTER_OVERHEAD = 60


# How many of the model's picks seed a study.
PRIOR_PICKS = 8
# The model ranks tile, warp split and split-K; it was fitted where stages were 3-4, the swizzle
# the identity and the iterator the optimized one, and it cannot tell swizzles or iterators apart.
# Its picks keep those knobs at the fitted values, so that ties are not broken by name: on the
# full sm80 space the name order picked 5-6 stages and swizzle 2, none of them measured.
# Where C is small the fixed-channel iterator comes first: on the H100 the ResNet-50 stem ran
# 8.6 µs with it against 16.4 µs for the best optimized-iterator kernel of the landscape.
PRIOR_STAGES = (3, 4)
PRIOR_SWIZZLE = 1


@dataclass(frozen=True)
class Ceilings:
    matmul_tflops: float = DEFAULT_MATMUL_TFLOPS
    copy_gbps: float = DEFAULT_COPY_GBPS


def measured_ceilings(folder: Path) -> Ceilings:
    """The matrix and copy ceilings `tune.py bench` measured on this GPU, or the defaults."""
    bench = folder / BENCH_FILE
    if not bench.exists():
        return Ceilings()
    measured = (yaml.safe_load(bench.read_text()) or {}).get("ceilings") or {}
    return Ceilings(measured.get("matmul_tflops", DEFAULT_MATMUL_TFLOPS), measured.get("copy_gbps", DEFAULT_COPY_GBPS))


def blocks_per_sm(config: KernelConfig, device: DeviceFacts) -> int:
    registers = min(255, config.warp_tile.m * config.warp_tile.n // 32 + REGISTER_OVERHEAD)
    by_registers = device.registers_per_sm // (registers * config.threads)
    by_smem = device.smem_per_sm // (config.mainloop_smem_bytes + DRIVER_SMEM_PER_BLOCK)
    by_warps = device.max_warps_per_sm // config.warp_count
    return max(1, min(by_registers, by_smem, by_warps, device.max_blocks_per_sm))


def warp_efficiency(config: KernelConfig) -> float:
    """Tensor-core efficiency of a warp tile: 64x64 and larger keep the pipes busy; small warp
    tiles spend their time on shared-memory loads."""
    return min(1.0, (config.warp_tile.m * config.warp_tile.n / (64 * 64)) ** WARP_EFFICIENCY_EXPONENT)


def predicted_us(config: KernelConfig, problem: ConvProblem, device: DeviceFacts,
                 ceilings: Ceilings = Ceilings()) -> float:
    padded = kernel_problem(problem)
    m, n, _ = padded.gemm_mnk
    tiles = math.ceil(m / config.tile.m) * math.ceil(n / config.tile.n)
    blocks = tiles * config.split_k
    resident = blocks_per_sm(config, device)
    waves = math.ceil(blocks / (device.sm_count * resident))
    iterations = math.ceil(k_iterations(config, problem) / config.split_k)
    block_flops = 2 * config.tile.m * config.tile.n * config.tile.k * iterations
    sharing = min(resident, math.ceil(blocks / device.sm_count))  # blocks that share one SM's tensor cores
    fill = min(1.0, sharing * config.warp_count / WARPS_TO_FILL_SM)
    sm_rate = ceilings.matmul_tflops * 1e12 / device.sm_count * warp_efficiency(config) * fill
    compute_us = waves * (block_flops * sharing / sm_rate * 1e6 + iterations * ITERATION_LATENCY_US / config.stages * 3)
    memory_us = problem.bytes_moved / (ceilings.copy_gbps * 1e9) * 1e6
    split_k_us = (config.split_k - 1) * (SPLIT_K_SLICE_US + problem.output_elements * 2 * problem.output_type.bytes
                                         / (ceilings.copy_gbps * 1e9) * 1e6)
    return LAUNCH_US + max(compute_us, memory_us) + split_k_us


def ranked_by_model(space: SearchSpace, problem: ConvProblem, device: DeviceFacts,
                    ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    configs = valid_configs(space, problem, device)
    return sorted(configs, key=lambda c: (predicted_us(c, problem, device, ceilings), c.name))


def prior_iterators(problem: ConvProblem) -> tuple[IteratorAlgorithm, ...]:
    if kernel_problem(problem).c <= SMALL_CHANNELS:
        return IteratorAlgorithm.fixed_channels, IteratorAlgorithm.few_channels, IteratorAlgorithm.optimized
    return (IteratorAlgorithm.optimized,)


def prior_candidates(space: SearchSpace, problem: ConvProblem, device: DeviceFacts,
                     ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """The model's ranking over the configurations whose unmodelled knobs sit at the fitted values:
    the first preferred iterator the space holds a valid configuration for; whole space if none."""
    ranked = ranked_by_model(space, problem, device, ceilings)
    fitted = [c for c in ranked if c.stages in PRIOR_STAGES and c.swizzle == PRIOR_SWIZZLE] or ranked
    for iterator in prior_iterators(problem):
        preferred = [c for c in fitted if c.iterator is iterator]
        if preferred:
            return preferred
    return fitted


def prior_picks(space: SearchSpace, problem: ConvProblem, device: DeviceFacts, count: int,
                ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """The model's `count` best, at most two per threadblock shape so the seeds differ in kind."""
    picks, per_tile = [], {}
    for config in prior_candidates(space, problem, device, ceilings):
        if per_tile.get(config.tile, 0) < 2:
            picks.append(config)
            per_tile[config.tile] = per_tile.get(config.tile, 0) + 1
        if len(picks) == count:
            break
    return picks
