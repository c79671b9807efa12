"""A cost model that ranks candidates of any family before anything is compiled: waves of output
tiles over the SMs, tile padding, occupancy, tensor-core fill, the memory floor and the split-K
fix-up. Each family supplies its own terms (tile, K-steps, resident blocks, efficiency); the
model's best picks seed a study (Optuna's enqueue_trial)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.core.problem import ConvProblem
from tuner.store.bench_record import read_bench
from tuner.search.space import JointSpace, SearchSpace, valid_configs

# Rates of an H100-class part used when no measured ceiling is given; only ratios between
# candidates matter for the ranking.
DEFAULT_MATMUL_TFLOPS = 600.0
DEFAULT_COPY_GBPS = 3000.0
# Fixed cost of a launch and its epilogue, of one main-loop iteration's latency, and of each extra
# split-K slice, whose fix-up waits for the previous slice's (µs). These three were fitted to the
# H100 landscape of the sm80 family (tuner/families/sm80_common/costmodel.py says how).
LAUNCH_US = 2.0
ITERATION_LATENCY_US = 0.1
SPLIT_K_SLICE_US = 1.0
# The exchange of a split-K reduced within a cluster (partials into the first CTA's shared memory, mbarriers): a
# prior, not fitted. The workspace's fixed cost adds gpu-scope fences, an atomic and a read back: on an H200 the same
# split ran about 1 µs longer through the workspace than in the cluster (docs/dsl.md), as the two terms have it.
SPLIT_K_CLUSTER_US = 0.25
PARTIAL_BYTES = 4  # an f32 partial accumulator of an in-kernel split-K fixup
# Warps one SM needs in flight before all its tensor cores work: one per sub-partition. Fewer run
# the SM at the fraction they fill. On the H100 single-warp blocks measured a median 3.2x the
# layer's best (48 of them, never within 13 %); 4 ranked measured pairs best (81 % vs 78 % without).
WARPS_TO_FILL_SM = 4

# How many of the model's picks seed a study, and at most how many per threadblock tile.
PRIOR_PICKS = 8
PICKS_PER_TILE = 2
# A study of several families gets at least this many picks of each.
MIN_PICKS_PER_FAMILY = 3


@dataclass(frozen=True)
class Ceilings:
    matmul_tflops: float = DEFAULT_MATMUL_TFLOPS
    copy_gbps: float = DEFAULT_COPY_GBPS


def measured_ceilings(folder: Path) -> Ceilings:
    """The matrix and copy ceilings `tune.py bench` measured on this GPU, or the defaults."""
    measured = read_bench(folder).ceilings
    return Ceilings(measured.matmul_tflops, measured.copy_gbps) if measured else Ceilings()


def predicted_us(config: KernelConfig, problem: ConvProblem, device: DeviceFacts,
                 ceilings: Ceilings = Ceilings()) -> float:
    family = registry.family_of(config)
    terms = family.model.cost_terms(config, problem, device)
    m, n, _ = family.rules.kernel_problem(problem).gemm_mnk
    tiles = math.ceil(m / terms.tile_m) * math.ceil(n / terms.tile_n)
    blocks = tiles * terms.split_k
    resident = terms.blocks_per_sm
    waves = math.ceil(blocks / (device.sm_count * resident))
    if terms.clusters_at_once:
        waves = max(waves, math.ceil(blocks / terms.cluster_size / terms.clusters_at_once))
    iterations = math.ceil(terms.block_k_steps / terms.split_k)
    splits = terms.split_k
    if terms.stream_k:  # one wave, each CTA an equal share of every tile's k tiles
        work = tiles * terms.block_k_steps
        blocks = min(work, device.sm_count * resident)
        waves, iterations = 1, math.ceil(work / blocks)
        splits = max(2, math.ceil(blocks / tiles))
    block_flops = terms.flops_per_k_step * iterations
    sharing = min(resident, math.ceil(blocks / device.sm_count))  # blocks that share one SM's tensor cores
    fill = min(1.0, sharing * terms.warps_per_block / WARPS_TO_FILL_SM)
    sm_rate = ceilings.matmul_tflops * 1e12 / device.sm_count * terms.efficiency * fill
    compute_us = waves * (block_flops * sharing / sm_rate * 1e6
                          + iterations * ITERATION_LATENCY_US / terms.stages * 3)
    memory_us = problem.bytes_moved / (ceilings.copy_gbps * 1e9) * 1e6
    if terms.split_k_in_cluster:
        split_k_us = 0.0 if splits == 1 else SPLIT_K_CLUSTER_US
    elif terms.split_k_in_parallel or terms.stream_k:
        partial_bytes = 2 * splits * problem.output_elements * PARTIAL_BYTES
        split_k_us = 0.0 if splits == 1 else (SPLIT_K_SLICE_US + partial_bytes / (ceilings.copy_gbps * 1e9) * 1e6)
    else:
        split_k_us = (terms.split_k - 1) * (SPLIT_K_SLICE_US + problem.output_elements * 2 * problem.output_type.bytes
                                            / (ceilings.copy_gbps * 1e9) * 1e6)
    return LAUNCH_US + max(compute_us, memory_us) + split_k_us


@dataclass(frozen=True)
class Bound:
    """What binds a candidate in the model: its multiply-adds at the matrix ceiling (as its family sustains them)
    or its bytes, each tensor crossing DRAM once, at the copy ceiling."""

    kind: str          # 'compute-bound' or 'memory-bound'
    compute_us: float
    memory_us: float
    bytes_moved: int
    copy_gbps: float

    @property
    def text(self) -> str:
        return (f"{self.kind}: {self.bytes_moved / 1e6:.2f} MB at the {self.copy_gbps:.0f} GB/s copy ceiling take "
                f"{self.memory_us:.2f} µs, its multiply-adds {self.compute_us:.2f} µs")


def bound(config: KernelConfig, problem: ConvProblem, device: DeviceFacts, ceilings: Ceilings = Ceilings()) -> Bound:
    """Which of the model's two floors binds: the memory one for a family that says its kernels are memory-bound
    (a depthwise conv) or whose compute takes less time than its bytes."""
    family = registry.family_of(config)
    terms = family.model.cost_terms(config, problem, device)
    m, n, k = family.rules.kernel_problem(problem).gemm_mnk
    compute_us = 2 * m * n * k / (ceilings.matmul_tflops * 1e12 * terms.efficiency) * 1e6
    memory_us = problem.bytes_moved / (ceilings.copy_gbps * 1e9) * 1e6
    kind = "memory-bound" if terms.memory_bound or memory_us >= compute_us else "compute-bound"
    return Bound(kind, compute_us, memory_us, problem.bytes_moved, ceilings.copy_gbps)


def by_model(configs: list[KernelConfig], problem: ConvProblem, device: DeviceFacts,
             ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """The configurations, fastest in the model first (ties by name)."""
    return sorted(configs, key=lambda c: (predicted_us(c, problem, device, ceilings), c.name))


def ranked_by_model(space: SearchSpace, problem: ConvProblem, device: DeviceFacts,
                    ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    return by_model(valid_configs(space, problem, device), problem, device, ceilings)


def prior_candidates(space: SearchSpace, problem: ConvProblem, device: DeviceFacts,
                     ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """The model's ranking over the configurations whose unmodelled knobs sit at the family's
    fitted values, its preferred ones first; the whole ranking where none does."""
    family = registry.get(space.family)
    configs = valid_configs(space, problem, device)
    orders = {config: family.model.prior_order(config, problem) for config in configs}
    fitted = [config for config in configs if orders[config] is not None]
    if not fitted:
        return by_model(configs, problem, device, ceilings)
    # only the fitted ones are ranked: an eighteenth of sm90_dsl's space, seconds of a layer's setup
    return sorted(by_model(fitted, problem, device, ceilings), key=lambda c: orders[c])  # stable within a preference


def prior_picks(space: SearchSpace, problem: ConvProblem, device: DeviceFacts, count: int,
                ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """The model's `count` best, at most two per threadblock shape so the seeds differ in kind."""
    picks, per_tile = [], {}
    for config in prior_candidates(space, problem, device, ceilings):
        if len(picks) == count:
            break
        if per_tile.get(config.tile, 0) < PICKS_PER_TILE:
            picks.append(config)
            per_tile[config.tile] = per_tile.get(config.tile, 0) + 1
    return picks


def picks_per_family(count: int, families: int) -> int:
    if families <= 1 or count == 0:
        return count
    return max(MIN_PICKS_PER_FAMILY, math.ceil(count / families))


def joint_prior_picks(joint: JointSpace, problem: ConvProblem, device: DeviceFacts, count: int,
                      ceilings: Ceilings = Ceilings()) -> list[KernelConfig]:
    """Picks of every family of the study: the model's ranking across families is not calibrated
    well enough to let one family's picks crowd out another's."""
    each = picks_per_family(count, len(joint.spaces))
    return [config for space in joint.spaces for config in prior_picks(space, problem, device, each, ceilings)]
