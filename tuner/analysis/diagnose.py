"""Explain the waste of one kernel launch: small grids, partial waves, tile padding, low occupancy, spills.
The launch's facts come from the compiled kernel (kernel_facts) or from an ncu report (explain.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.core.device import DeviceFacts, block_limits, volume
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.measure.run import KernelAttributes
from tuner.search.costmodel import DEFAULT_COPY_GBPS


@dataclass(frozen=True)
class Thresholds:
    """Every limit a waste rule compares against; each comment says which side of it is flagged."""

    small_grid_sm_fill: float = 1.0  # small_grid: blocks < SMs x this
    min_wave_efficiency: float = 0.8  # partial_wave: waves / ceil(waves) below this
    max_padding_fraction: float = 0.10  # tile_padding: share of multiply-adds on padding above this
    min_occupancy_pct: float = 25.0  # occupancy_limit: theoretical occupancy below this
    max_spill_bytes: int = 0  # register_spills: spill stores + loads above this
    split_k_max_tile_fill: float = 0.5  # split_k_opportunity: blocks < SMs x this ...
    split_k_min_k_iterations: int = 8  # ... and at least this many K-loop iterations per block


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class LaunchFacts:
    """What the rules need to know about one launch; optional facts switch rules on when present."""

    grid_blocks: int
    threads_per_block: int
    registers_per_thread: int
    smem_per_block_bytes: int
    sm_count: int | None
    max_active_blocks_per_sm: int | None = None  # when known (e.g. from the CUDA occupancy API) it wins
    block_limit_registers: int | None = None
    block_limit_shared_mem: int | None = None
    block_limit_warps: int | None = None
    block_limit_sm: int | None = None
    theoretical_occupancy_pct: float | None = None
    spill_bytes: int | None = None  # ptxas spill stores + spill loads
    gemm_mnk: tuple[int, int, int] | None = None  # implicit GEMM: N*P*Q, K_out, C*R*S
    padded_m: int | None = None  # the GEMM rows the tiles compute, where not M rounded up (LaunchShape.padded_m)
    tile_mnk: tuple[int, int, int] | None = None  # threadblock tile
    split_k_slices: int = 1
    # CUTLASS's analytic and optimized fprop iterators walk C once per filter tap (R*S taps), padding C
    # to the tile's K at every tap; few/fixed-channel iterators walk C*R*S as one dimension (1 tap).
    filter_taps: int = 1
    max_warps_per_sm: int = 64
    # Output tiles x splits: the units of work. A persistent kernel launches at most one wave of
    # CTAs that loop over them; elsewhere every unit is a block of the grid.
    work_tiles: int | None = None
    persistent: bool = False
    cluster_size: int = 1
    # Whether the kernel can split K (sm80 serial split-K, sm90 GEMM stream-K): the split-K rule
    # suggests it only then.
    can_split_k: bool = True
    # Warp-specialized TMA kernels hide latency with their pipeline, not resident warps: no occupancy flag.
    warp_specialized: bool = False
    # A memory-bound kernel's bytes (each tensor crossing DRAM once): the memory_bound note weighs them against the
    # copy ceiling, and the GEMM-tile rules (tile padding, split-K) stay silent. None: a tensor-core kernel.
    memory_bytes: int | None = None
    # How the SM count was found when the report did not state it (e.g. "grid 8 / (0.29 waves x 1 block
    # per SM)"); None when it was stated or given.
    sm_count_inferred_from: str | None = None

    @property
    def warps_per_block(self) -> int:
        return math.ceil(self.threads_per_block / 32)

    @property
    def work_units(self) -> int:
        return self.work_tiles if self.work_tiles is not None else self.grid_blocks


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    limited_by: tuple[str, ...]  # the limits equal to blocks_per_sm (several on a tie)
    active_warps_per_sm: int
    max_warps_per_sm: int

    @property
    def theoretical_pct(self) -> float:
        return 100.0 * self.active_warps_per_sm / self.max_warps_per_sm

    @property
    def limited_by_text(self) -> str:
        return " and ".join(self.limited_by) or "an unreported limit"


@dataclass(frozen=True)
class WasteFlag:
    """One kind of waste. `value` is the figure compared with its threshold:
    small_grid and split_k_opportunity: blocks per SM; partial_wave: wave efficiency (0-1);
    tile_padding: padded share of multiply-adds (0-1); occupancy_limit: theoretical occupancy %;
    register_spills: bytes; sm_count_unknown: 0 (the rules that need the SM count were skipped);
    sm_count_inferred: 0 (a note: the count came from the grid and waves, not the report)."""

    code: str
    value: float
    message: str


def occupancy(facts: LaunchFacts) -> Occupancy:
    warps_limit = facts.block_limit_warps
    if warps_limit is None:
        warps_limit = facts.max_warps_per_sm // facts.warps_per_block
    limits = {
        "registers": facts.block_limit_registers,
        "shared memory": facts.block_limit_shared_mem,
        "warps": warps_limit,
        "blocks per SM": facts.block_limit_sm,
    }
    known = {name: limit for name, limit in limits.items() if limit is not None}
    blocks = facts.max_active_blocks_per_sm
    if blocks is None:
        blocks = min(known.values())
    return Occupancy(
        blocks_per_sm=blocks,
        limited_by=tuple(name for name, limit in known.items() if limit == blocks),
        active_warps_per_sm=blocks * facts.warps_per_block,
        max_warps_per_sm=facts.max_warps_per_sm,
    )


# --- facts of a compiled candidate ---------------------------------------------------------------


def kernel_facts(config: KernelConfig, problem: ConvProblem, device: DeviceFacts, grid_blocks: int,
                 attributes: KernelAttributes, spill_bytes: int | None) -> LaunchFacts:
    """What the compiled kernel and the problem say about a launch, before any profiler runs."""
    family = registry.family_of(config)
    smem = attributes.dynamic_smem_bytes + attributes.static_smem_bytes
    warps = -(-attributes.threads_per_block // 32)  # a partial warp holds a whole warp's registers and slot
    limits = block_limits(attributes.registers_per_thread, smem, warps, device)
    shape = family.model.launch_shape(config, problem, device)
    cluster = shape.cluster
    return LaunchFacts(
        grid_blocks=grid_blocks,
        threads_per_block=attributes.threads_per_block,
        registers_per_thread=attributes.registers_per_thread,
        smem_per_block_bytes=smem,
        sm_count=device.sm_count,
        max_active_blocks_per_sm=attributes.max_active_blocks_per_sm,
        block_limit_registers=limits["registers"],
        block_limit_shared_mem=limits["shared_mem"],
        block_limit_warps=limits["warps"],
        block_limit_sm=limits["sm"],
        spill_bytes=spill_bytes,
        gemm_mnk=family.rules.kernel_problem(problem).gemm_mnk,
        padded_m=shape.padded_m,
        tile_mnk=shape.tile_mnk,
        split_k_slices=shape.split_k_slices,
        filter_taps=shape.filter_taps,
        max_warps_per_sm=device.max_warps_per_sm,
        work_tiles=shape.work_tiles,
        persistent=shape.persistent,
        cluster_size=volume(cluster),
        can_split_k=shape.can_split_k,
        warp_specialized=shape.warp_specialized,
        memory_bytes=problem.bytes_moved if shape.memory_bound else None,
    )


# --- rules ---------------------------------------------------------------------------------------


def plural(number: int, noun: str) -> str:
    """'1 block', '3 blocks': the messages' counts, here and in the rendering."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _waves(facts: LaunchFacts, occ: Occupancy) -> float:
    return facts.grid_blocks / (facts.sm_count * occ.blocks_per_sm)


def _small_grid(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    units, sms = facts.work_units, facts.sm_count
    if units >= sms * limits.small_grid_sm_fill:
        return None
    idle = max(sms - units, 0)
    if facts.persistent:
        return WasteFlag("small_grid", units / sms,
                         f"{plural(units, 'output tile')} for {plural(facts.grid_blocks, 'persistent CTA')} on "
                         f"{plural(sms, 'SM')}: {plural(idle, 'SM')} idle")
    waves = _waves(facts, occ) if occ.blocks_per_sm else 0.0
    return WasteFlag(
        "small_grid",
        units / sms,
        f"{plural(units, 'block')} on {plural(sms, 'SM')}: {plural(idle, 'SM')} idle ({waves:.2f} waves)",
    )


def _partial_wave(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    # Below one block per SM the grid is small, and small_grid says so.
    units = facts.work_units
    if units < facts.sm_count or occ.blocks_per_sm == 0:
        return None
    # A persistent grid's CTAs are all resident and take the tiles in rounds; otherwise the SMs'
    # block slots take the blocks in waves.
    slots = facts.grid_blocks if facts.persistent else facts.sm_count * occ.blocks_per_sm
    full_waves = math.ceil(units / slots)
    efficiency = units / (full_waves * slots)
    if efficiency >= limits.min_wave_efficiency:
        return None
    last_wave = units - (full_waves - 1) * slots
    if facts.persistent:
        return WasteFlag("partial_wave", efficiency,
                         f"{units} output tiles over {slots} persistent CTAs: {units / slots:.2f} rounds, the last "
                         f"busies {plural(last_wave, 'CTA')}, {efficiency:.0%} efficiency")
    return WasteFlag(
        "partial_wave",
        efficiency,
        f"{units / slots:.2f} waves of {slots} block slots ({facts.sm_count} SMs x {occ.blocks_per_sm}): "
        f"the last wave runs {plural(last_wave, 'block')}, {efficiency:.0%} wave efficiency",
    )


def _padded_k(k: int, tile_k: int, taps: int) -> int:
    if taps < 1 or k % taps:  # not C*R*S for these taps: pad K as one dimension
        taps = 1
    return taps * math.ceil(k // taps / tile_k) * tile_k


def _padded(gemm: tuple[int, int, int], tile: tuple[int, int, int], taps: int,
            padded_m: int | None = None) -> tuple[int, int, int]:
    (m, n, k), (tile_m, tile_n, tile_k) = gemm, tile
    return (padded_m or math.ceil(m / tile_m) * tile_m), math.ceil(n / tile_n) * tile_n, _padded_k(k, tile_k, taps)


def _tile_padding(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    if facts.gemm_mnk is None or facts.tile_mnk is None:
        return None
    padded = _padded(facts.gemm_mnk, facts.tile_mnk, facts.filter_taps, facts.padded_m)
    useful_macs, padded_macs = math.prod(facts.gemm_mnk), math.prod(padded)
    wasted = (padded_macs - useful_macs) / padded_macs
    if wasted <= limits.max_padding_fraction:
        return None
    per_dimension = ", ".join(
        f"{dim} {size}->{size_padded}: {(size_padded - size) / size_padded:.0%}"
        for dim, size, size_padded in zip("MNK", facts.gemm_mnk, padded)
    )
    return WasteFlag("tile_padding", wasted, f"{wasted:.1%} of the multiply-adds are tile padding ({per_dimension})")


def _occupancy_limit(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    pct = occ.theoretical_pct
    if pct >= limits.min_occupancy_pct or facts.warp_specialized:
        return None
    return WasteFlag(
        "occupancy_limit",
        pct,
        f"theoretical occupancy {pct:.2f} % ({occ.active_warps_per_sm} of {occ.max_warps_per_sm} warps per SM, "
        f"{plural(occ.blocks_per_sm, 'block')} of {plural(facts.warps_per_block, 'warp')}) is limited by "
        f"{occ.limited_by_text}",
    )


def _register_spills(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    if facts.spill_bytes is None or facts.spill_bytes <= limits.max_spill_bytes:
        return None
    return WasteFlag(
        "register_spills",
        float(facts.spill_bytes),
        f"ptxas spills {facts.spill_bytes} bytes (stores + loads) at {facts.registers_per_thread} registers per thread",
    )


def _split_k_opportunity(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    if facts.gemm_mnk is None or facts.tile_mnk is None or not facts.can_split_k:
        return None
    (m, n, k), (tile_m, tile_n, tile_k) = facts.gemm_mnk, facts.tile_mnk
    blocks = math.ceil(m / tile_m) * math.ceil(n / tile_n) * facts.split_k_slices
    k_iterations = math.ceil(_padded_k(k, tile_k, facts.filter_taps) // tile_k / facts.split_k_slices)
    sms = facts.sm_count
    if blocks >= sms * limits.split_k_max_tile_fill or k_iterations < limits.split_k_min_k_iterations:
        return None
    suggested = facts.split_k_slices * min(sms // blocks, k_iterations)
    return WasteFlag(
        "split_k_opportunity",
        blocks / sms,
        f"{blocks} blocks of {k_iterations} K-loop iterations on {sms} SMs: "
        f"split-K over {suggested} slices would give {blocks // facts.split_k_slices * suggested} blocks",
    )


def _memory_bound(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    """A note, not a waste: the kernel's floor is its bytes at the copy ceiling (the cost model's default one;
    `tune.py bench` measures the GPU's)."""
    if facts.memory_bytes is None:
        return None
    floor_us = facts.memory_bytes / (DEFAULT_COPY_GBPS * 1e9) * 1e6
    return WasteFlag("memory_bound", facts.memory_bytes / 1e6,
                     f"memory-bound: {facts.memory_bytes / 1e6:.2f} MB cross DRAM at least once, {floor_us:.2f} µs at "
                     f"{DEFAULT_COPY_GBPS:.0f} GB/s; few multiply-adds an output, so no tensor-core tile rule applies")


_SM_COUNT_RULES = (_small_grid, _partial_wave, _split_k_opportunity)
# Rules of tensor-core GEMM tiles: a memory-bound kernel's tile is no GEMM tile.
_GEMM_TILE_RULES = (_tile_padding, _split_k_opportunity)
_RULES = (_small_grid, _partial_wave, _tile_padding, _occupancy_limit, _register_spills, _split_k_opportunity,
          _memory_bound)


def diagnose(facts: LaunchFacts, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[WasteFlag]:
    occ = occupancy(facts)
    rules = _RULES
    flags = []
    if facts.memory_bytes is not None:
        rules = tuple(rule for rule in rules if rule not in _GEMM_TILE_RULES)
    if facts.sm_count is None:
        rules = tuple(rule for rule in rules if rule not in _SM_COUNT_RULES)
        flags.append(
            WasteFlag(
                "sm_count_unknown",
                0.0,
                "SM count unknown (not in the report, none given): grid, wave and split-K checks skipped",
            )
        )
    elif facts.sm_count_inferred_from:
        flags.append(WasteFlag("sm_count_inferred", 0.0, f"{facts.sm_count} SMs, inferred from "
                                                          f"{facts.sm_count_inferred_from} (--sms sets it)"))
    flags.extend(flag for rule in rules if (flag := rule(facts, occ, thresholds)) is not None)
    return flags

