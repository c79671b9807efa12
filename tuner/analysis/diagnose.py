"""Explain the waste of one kernel launch: small grids, partial waves, tile padding, low occupancy, spills."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner.core.device import DeviceFacts, block_limits, volume
from tuner.core import gpus
from tuner.core.gpus import GpuSpec
from tuner.analysis.ncu import (LaunchGroup, LaunchStats, NcuLaunch, NcuReportError, NcuRule, group_launches, metric_number,
                       SPEED_OF_LIGHT)
from tuner.analysis.ncu_file import load_report, read_report
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.measure.run import KernelAttributes


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


_REQUIRED_STATS = ("grid_blocks", "block_threads", "registers_per_thread", "dynamic_smem_per_block_bytes")


def _max_warps_per_sm(stats: LaunchStats) -> int:
    # ncu states occupancy as active warps over the device's maximum: 4 warps at 8.33 % -> 48 (sm_86).
    warps, pct = stats.theoretical_active_warps_per_sm, stats.theoretical_occupancy_pct
    if warps and pct:
        return round(warps * 100.0 / pct)
    return LaunchFacts.max_warps_per_sm


MIN_WAVES_TO_INFER = 0.25  # two decimals then leave at most 2 % of doubt


def inferred_sm_count(stats: LaunchStats) -> tuple[int, str] | None:
    """The SM count a report implies without stating it: ncu's waves per SM are grid / (SMs x blocks per
    SM), the blocks per SM being the tightest block limit. ncu prints waves to two decimals, so below
    MIN_WAVES_TO_INFER (0.03 waves on an H100: anything from 114 to 160 SMs) the count stays unknown."""
    limits = [limit for limit in (stats.block_limit_registers, stats.block_limit_shared_mem,
                                  stats.block_limit_warps, stats.block_limit_sm) if limit]
    if not (stats.grid_blocks and stats.waves_per_sm and limits) or stats.waves_per_sm < MIN_WAVES_TO_INFER:
        return None
    blocks = min(limits)
    count = round(stats.grid_blocks / (stats.waves_per_sm * blocks))
    if count < 1:
        return None
    return count, (f"grid {stats.grid_blocks} / ({stats.waves_per_sm:g} waves x {blocks} block"
                   f"{'s' if blocks > 1 else ''} per SM)")


def from_launch_stats(stats: LaunchStats, sm_count_override: int | None = None) -> LaunchFacts:
    """Facts from an ncu launch; the override (e.g. --sms) wins over the report's `# SMs`, which wins
    over the count its grid and waves imply."""
    missing = [name for name in _REQUIRED_STATS if getattr(stats, name) is None]
    if missing:
        raise NcuReportError(
            f"launch lacks {', '.join(missing)}: profile with `--section LaunchStats --section Occupancy`"
        )
    sm_count, inferred_from = sm_count_override if sm_count_override is not None else stats.sm_count, None
    if sm_count is None and (inferred := inferred_sm_count(stats)):
        sm_count, inferred_from = inferred
    return LaunchFacts(
        grid_blocks=stats.grid_blocks,
        threads_per_block=stats.block_threads,
        registers_per_thread=stats.registers_per_thread,
        smem_per_block_bytes=stats.dynamic_smem_per_block_bytes + (stats.static_smem_per_block_bytes or 0),
        sm_count=sm_count,
        sm_count_inferred_from=inferred_from,
        block_limit_registers=stats.block_limit_registers,
        block_limit_shared_mem=stats.block_limit_shared_mem,
        block_limit_warps=stats.block_limit_warps,
        block_limit_sm=stats.block_limit_sm,
        theoretical_occupancy_pct=stats.theoretical_occupancy_pct,
        max_warps_per_sm=_max_warps_per_sm(stats),
    )


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
    warps = attributes.threads_per_block // 32
    limits = block_limits(attributes.registers_per_thread, smem, warps, device)
    shape = family.launch_shape(config, problem, device)
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
        gemm_mnk=family.kernel_problem(problem).gemm_mnk,
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


def _count(number: int, noun: str) -> str:
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
                         f"{_count(units, 'output tile')} for {_count(facts.grid_blocks, 'persistent CTA')} on "
                         f"{_count(sms, 'SM')}: {_count(idle, 'SM')} idle")
    waves = _waves(facts, occ) if occ.blocks_per_sm else 0.0
    return WasteFlag(
        "small_grid",
        units / sms,
        f"{_count(units, 'block')} on {_count(sms, 'SM')}: {_count(idle, 'SM')} idle ({waves:.2f} waves)",
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
                         f"busies {_count(last_wave, 'CTA')}, {efficiency:.0%} efficiency")
    return WasteFlag(
        "partial_wave",
        efficiency,
        f"{units / slots:.2f} waves of {slots} block slots ({facts.sm_count} SMs x {occ.blocks_per_sm}): "
        f"the last wave runs {_count(last_wave, 'block')}, {efficiency:.0%} wave efficiency",
    )


def _padded_k(k: int, tile_k: int, taps: int) -> int:
    if taps < 1 or k % taps:  # not C*R*S for these taps: pad K as one dimension
        taps = 1
    return taps * math.ceil(k // taps / tile_k) * tile_k


def _padded(gemm: tuple[int, int, int], tile: tuple[int, int, int], taps: int) -> tuple[int, int, int]:
    (m, n, k), (tile_m, tile_n, tile_k) = gemm, tile
    return math.ceil(m / tile_m) * tile_m, math.ceil(n / tile_n) * tile_n, _padded_k(k, tile_k, taps)


def _tile_padding(facts: LaunchFacts, occ: Occupancy, limits: Thresholds) -> WasteFlag | None:
    if facts.gemm_mnk is None or facts.tile_mnk is None:
        return None
    padded = _padded(facts.gemm_mnk, facts.tile_mnk, facts.filter_taps)
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
        f"{_count(occ.blocks_per_sm, 'block')} of {_count(facts.warps_per_block, 'warp')}) is limited by "
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
    from tuner.search.costmodel import DEFAULT_COPY_GBPS  # the cost model sits above the diagnosis

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


def diagnose_report(
    path: Path, sms: int | None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[tuple[LaunchGroup, Occupancy, list[WasteFlag]]]:
    """Diagnose every launch group of an ncu text or CSV report; `sms` overrides the report's SM count."""
    results = []
    for group in group_launches(read_report(path)):
        facts = from_launch_stats(group.stats, sms)
        results.append((group, occupancy(facts), diagnose(facts, thresholds)))
    return results


# --- rendering -----------------------------------------------------------------------------------


def _template_arguments(text: str, template: str) -> list[str] | None:
    """Top-level arguments of the first `template<...>` in a demangled name, or None."""
    match = re.search(rf"(?<![\w]){re.escape(template)}<", text)
    if match is None:
        return None
    arguments, depth, start = [], 0, match.end()
    for index in range(match.end(), len(text)):
        char = text[index]
        if char in "<(":
            depth += 1
        elif char in ">)":
            if depth == 0:
                arguments.append(text[start:index].strip())
                return arguments
            depth -= 1
        elif char == "," and depth == 0:
            arguments.append(text[start:index].strip())
            start = index + 1
    return None


def _integer(argument: str) -> int | None:
    """'128' or '(int)128' -> 128."""
    match = re.fullmatch(r"(?:\([\w:]+\))?(\d+)", argument)
    return int(match[1]) if match else None


def _mainloop_stages(mainloop: str) -> int | None:
    if re.match(r"(?:\w+::)*ImplicitGemmPipelined<", mainloop):
        return 2
    arguments = _template_arguments(mainloop, "ImplicitGemmMultistage")
    # ImplicitGemmMultistage<Shape, IterA, SmemIterA, CacheA, IterB, SmemIterB, CacheB, Policy, Stages, ...>
    if arguments is None or len(arguments) < 9:
        return None
    return _integer(arguments[8])


def kernel_short_name(kernel_name: str) -> str:
    """'ImplicitGemmConvolution 128x128x64, 3 stages' for CUTLASS 2.x convs; 'CUTLASS 3.x <name>' for the
    3.x kernels this tuner emits (cutlass::device_kernel<...::<alias>_detail::Kernel>); else the name's
    first 60 chars."""
    fallback = kernel_name.removeprefix("void ")[:60]
    device_kernel = _template_arguments(kernel_name, "device_kernel")
    if device_kernel:
        named = re.search(r"(\w+)_detail::\w*Kernel$", device_kernel[0])
        if named:
            return f"CUTLASS 3.x {named[1]}"
    kernel_arguments = _template_arguments(kernel_name, "ImplicitGemmConvolution")
    if not kernel_arguments:
        return fallback
    shape = _template_arguments(kernel_arguments[0], "GemmShape")
    dims = [_integer(argument) for argument in shape or []]
    if len(dims) != 3 or None in dims:
        return fallback
    name = f"ImplicitGemmConvolution {'x'.join(map(str, dims))}"
    stages = _mainloop_stages(kernel_arguments[0])
    return f"{name}, {stages} stages" if stages else name


def _dims_text(dims: tuple[int, int, int] | None, total: int | None, unit: str) -> str:
    if dims is not None:
        return "x".join(map(str, dims))
    return "?" if total is None else f"{total} {unit}"


def _smem_text(stats: LaunchStats) -> str:
    if stats.dynamic_smem_per_block_bytes is None:
        return "?"
    return f"{(stats.dynamic_smem_per_block_bytes + (stats.static_smem_per_block_bytes or 0)) / 1000:.1f} KB"


def render_diagnosis(results: list[tuple[LaunchGroup, Occupancy, list[WasteFlag]]], console: Console) -> None:
    table = Table(title="Waste per kernel (Nsight Compute)", show_lines=True)
    for column in ("kernel", "launches", "median µs", "grid", "block", "regs", "smem/block", "occupancy", "waste"):
        table.add_column(column, overflow="fold")
    for group, occ, flags in results:
        stats = group.stats
        median = group.median_duration_us
        table.add_row(
            kernel_short_name(group.kernel_name),
            str(group.count),
            "?" if median is None else f"{median:.2f}",
            _dims_text(group.grid, stats.grid_blocks, "blocks"),
            _dims_text(group.block, stats.block_threads, "threads"),
            "?" if stats.registers_per_thread is None else str(stats.registers_per_thread),
            _smem_text(stats),
            f"{occ.theoretical_pct:.2f} % ({_count(occ.blocks_per_sm, 'block')}/SM, {occ.limited_by_text})",
            "\n".join(f"{flag.code}: {flag.message}" for flag in flags) or "none",
        )
    console.print(table)


# --- what limits each kernel of a report -----------------------------------------------------------

# ncu's SpeedOfLight rule calls a unit at 60 % of its peak or more well used, below it "latency issues".
HIGH_THROUGHPUT_PCT = 60.0
# Compute and memory within this many points of each other, both high, bound the kernel together.
BALANCED_POINTS = 10.0
MAX_WARNINGS = 6

_CONVOLUTION_NAME = re.compile(r"conv|implicit_?gemm|fprop|dgrad|wgrad", re.IGNORECASE)
# Kernel names that say tensor cores: CUTLASS's OpClassTensorOp / MmaTensorOp, cuDNN's and cuBLAS's
# xmma/hmma kernels, Hopper's wgmma, and this tuner's own kernels (every family is tensor-op).
_TENSOR_NAME = re.compile(r"tensor_?op|tensor_?core|wgmma|hmma|imma|xmma|cutlass_conv_tuner", re.IGNORECASE)
# Library kernels whose names may hide how they compute: without pipe figures, tensor use is unknown.
_LIBRARY_NAME = re.compile(r"cutlass|cudnn|cublas|implicit_?gemm|sm\d{2}_", re.IGNORECASE)
_BUSIEST_PIPE = re.compile(r"^(?P<pipe>[\w/+ -]+?) is the highest-utilized pipeline \((?P<pct>[\d.]+)%\)")
# Raw pipe metrics (`--metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active`, or the
# Compute Workload Analysis section's full set): utilisation in % of peak.
_PIPE_METRIC = re.compile(r"^sm__(?:inst_executed_)?pipe_(?P<pipe>[a-z0-9_]+?)(?:_cycles_active)?\.[\w.]*pct")


FROM_DEVICE_NAME = "the report's device name"


@dataclass(frozen=True)
class GpuIdentity:
    gpu: GpuSpec | None
    how: str  # how it was identified, or why it was not


@dataclass(frozen=True)
class Bound:
    kind: str    # 'compute-bound', 'memory-bound', 'compute- and memory-bound' or 'latency-bound'
    detail: str  # the throughputs that say so


@dataclass(frozen=True)
class TunedEstimate:
    """What a tuned implicit-GEMM kernel would take for the problem on the GPU: a roofline estimate."""

    compute_us: float
    memory_us: float
    launch_us: float
    tflops: float
    gbps: float
    shape_arg: str  # the problem as --shape takes it, every field spelled out

    @property
    def total_us(self) -> float:
        return self.launch_us + max(self.compute_us, self.memory_us)

    @property
    def tune_command(self) -> str:
        return f"python tune.py --shape {self.shape_arg}"


@dataclass(frozen=True)
class KernelVerdict:
    group: LaunchGroup
    occupancy: Occupancy
    flags: tuple[WasteFlag, ...]
    time_share: float | None              # of the report's summed launch durations
    bound: Bound | None                   # None where the report has no SpeedOfLight throughputs
    busiest_pipe: tuple[str, float] | None
    tensor_cores: bool | None             # None: cannot tell
    tensor_evidence: str
    convolution: bool
    direct_convolution: bool              # a hand-written convolution (no library name) off tensor cores
    achieved_occupancy_pct: float | None
    warnings: tuple[str, ...]             # ncu's rule advice, one short line each
    estimate: TunedEstimate | None

    @property
    def name(self) -> str:
        return kernel_short_name(self.group.kernel_name)

    @property
    def cuda_core_convolution(self) -> bool:
        return self.convolution and self.tensor_cores is False

    @property
    def limiter(self) -> str:
        """The one thing to fix first, in a line."""
        parts = []
        if self.cuda_core_convolution:
            kind = "direct convolution" if self.direct_convolution else "convolution"
            parts.append(f"{kind} on CUDA cores, not using tensor cores")
        small = next((flag for flag in self.flags if flag.code == "small_grid"), None)
        if small is not None:
            parts.append(f"small grid: {small.message}")
        if self.bound is not None:
            parts.append(f"{self.bound.kind} ({self.bound.detail})")
        return "; ".join(parts) or "nothing the report shows"


@dataclass(frozen=True)
class ReportDiagnosis:
    gpu: GpuIdentity
    problem: ConvProblem | None
    results: list[tuple[LaunchGroup, Occupancy, list[WasteFlag]]]
    kernels: tuple[KernelVerdict, ...]


def identify_gpu(text: str, groups: list[LaunchGroup], given: GpuSpec | None) -> GpuIdentity:
    """--gpu, else the device name the report prints, else the only GPU of the table with its SM count
    (stated, or inferred from grid and waves) and compute capability."""
    if given is not None:
        return GpuIdentity(given, "--gpu")
    named = gpus.find_in_text(text)
    if named is not None:
        return GpuIdentity(named, FROM_DEVICE_NAME)
    stats = [group.stats for group in groups]
    counts = {s.sm_count for s in stats if s.sm_count} or {found[0] for s in stats if (found := inferred_sm_count(s))}
    ccs = {launch.cc for group in groups for launch in group.launches if launch.cc}
    if len(counts) != 1:
        return GpuIdentity(None, "the report names no GPU and states no SM count (--gpu NAME names it)")
    (count,) = counts
    cc = next(iter(ccs)) if len(ccs) == 1 else None
    matches = gpus.by_sm_count(count, cc)
    where = f"{count} SMs" + (f", CC {cc}" if cc else "")
    if len(matches) == 1:
        return GpuIdentity(matches[0], f"its {where} (the only such GPU in tuner/core/gpus.py; --gpu overrides)")
    if not matches:
        return GpuIdentity(None, f"no GPU of tuner/core/gpus.py has {where} (--gpu NAME names it)")
    return GpuIdentity(None, f"{where}: {' or '.join(gpu.slug for gpu in matches)} (--gpu NAME picks one)")


def _bound(launch: NcuLaunch, stats: LaunchStats) -> Bound | None:
    sm, memory = stats.sm_throughput_pct, stats.memory_throughput_pct
    if sm is None or memory is None:
        return None
    units = [(unit, metric_number(launch, name, section=SPEED_OF_LIGHT)) for unit, name in
             (("L1/TEX", "L1/TEX Cache Throughput"), ("L2", "L2 Cache Throughput"), ("DRAM", "DRAM Throughput"))]
    memory_units = ", ".join(f"{unit} {pct:.1f} %" for unit, pct in units if pct is not None)
    detail = f"SM {sm:.1f} % and memory {memory:.1f} % of peak" + (f" ({memory_units})" if memory_units else "")
    high = max(sm, memory)
    if high < HIGH_THROUGHPUT_PCT:
        return Bound("latency-bound", f"{detail}: both under {HIGH_THROUGHPUT_PCT:.0f} %")
    if min(sm, memory) >= HIGH_THROUGHPUT_PCT and abs(sm - memory) <= BALANCED_POINTS:
        return Bound("compute- and memory-bound", detail)
    return Bound("compute-bound" if sm >= memory else "memory-bound", detail)


def _busiest_pipe(launch: NcuLaunch) -> tuple[str, float] | None:
    pipes = {}
    for metric in launch.metrics:
        match = _PIPE_METRIC.match(metric.name)
        if match and isinstance(metric.value, float):
            pipes[match["pipe"]] = max(metric.value, pipes.get(match["pipe"], 0.0))
    for rule in launch.rules:
        match = _BUSIEST_PIPE.match(rule.text)
        if match:
            pipes.setdefault(match["pipe"], float(match["pct"]))
    if not pipes:
        return None
    return max(pipes.items(), key=lambda item: item[1])


def _tensor_pipe_pct(launch: NcuLaunch) -> float | None:
    values = [metric.value for metric in launch.metrics
              if (match := _PIPE_METRIC.match(metric.name)) and match["pipe"].startswith("tensor")
              and isinstance(metric.value, float)]
    return max(values) if values else None


def tensor_core_use(launch: NcuLaunch) -> tuple[bool | None, str]:
    """Whether the launch runs on tensor cores, and what says so."""
    tensor_pct = _tensor_pipe_pct(launch)
    if tensor_pct is not None:
        return tensor_pct > 0, f"tensor pipe {tensor_pct:.1f} %"
    busiest = _busiest_pipe(launch)
    if busiest is not None and "tensor" in busiest[0].lower():
        return True, f"busiest pipe {busiest[0]} {busiest[1]:.1f} %"
    if _TENSOR_NAME.search(launch.kernel_name):
        return True, "the kernel's name"
    if busiest is not None:
        return False, f"busiest pipe {busiest[0]} {busiest[1]:.1f} %, no tensor-op name"
    if _LIBRARY_NAME.search(launch.kernel_name):
        return None, "no pipe figures in the report"
    return False, "a hand-written kernel with no tensor-op name"


# ncu's advice in a few words: (pattern over its text, the summary with the pattern's groups, or None to
# leave it out), the first that matches.
_RULE_SUMMARIES = (
    (r"uncoalesced global accesses resulting in a total of (\d+) excessive sectors \((\d+)%",
     "uncoalesced global accesses: {1} % of sectors are excess"),
    (r"uncoalesced shared accesses resulting in a total of (\d+) excessive wavefronts \((\d+)%",
     "shared-memory bank conflicts: {1} % of wavefronts are excess"),
    (r"global (loads|stores) (?:from|to) L1TEX might not be optimal\. On average, only ([\d.]+) of the 32 bytes",
     "global {0} use {1} of 32 bytes per sector (strided access)"),
    (r"only accesses an average of ([\d.]+) sectors out of the possible 4",
     "L1TEX-to-L2 loads use {0} of 4 sectors per cache line"),
    (r"grid is too small to fill the available resources on this device, resulting in only ([\d.]+) full waves",
     "grid too small: {0} full waves across the SMs"),
    (r"configured to execute only (\d+) blocks, which is less than the GPU's (\d+) multiprocessors",
     "grid of {0} blocks is less than the {1} SMs"),
    (r"tail effect|partial wave", "tail effect: the last wave leaves SMs idle"),
    (r"theoretical occupancy \(([\d.]+)%\) is limited by (?:the )?(?:number of )?(?:required )?(.+?)(?: See |\.|$)",
     "theoretical occupancy {0} % limited by {1}"),
    (r"warps per scheduler this kernel can issue according to its occupancy are below",
     "too few warps per scheduler to hide latency"),
    (r"theoretical \(([\d.]+)%\) and measured achieved occupancy \(([\d.]+)%\)",
     "achieved occupancy {1} % vs theoretical {0} % (imbalance or scheduling overhead)"),
    (r"stalled waiting for a scoreboard dependency on a L1TEX", "warps stall on global/local memory (L1TEX)"),
    (r"stalled waiting for a scoreboard dependency on a MIO", "warps stall on shared memory / MIO"),
    (r"stalled waiting for a math execution pipeline", "warps stall on a busy math pipeline"),
    (r"stalled waiting on a fixed latency execution dependency", "warps stall on dependent arithmetic"),
    (r"(\d+) fused and (\d+) non-fused FP32 instructions", "{1} FP32 adds/multiplies not fused into FMAs"),
    (r"achieves an average of ([\d.]+) threads being active per cycle", "divergence: {0} of 32 threads active"),
    (r"issues an instruction every ([\d.]+) cycles", "schedulers issue once every {0} cycles"),
    (r"All compute pipelines are under-utilized", "all compute pipelines under-utilized"),
    (r"Compute is more heavily utilized than Memory", "compute more heavily used than memory"),
    (r"Memory is more heavily utilized than Compute", "memory more heavily used than compute"),
    (r"is the highest-utilized pipeline", None),  # the busiest pipe has its own line
    (r"bank conflicts?", "shared-memory bank conflicts"),
)
_RULE_PATTERNS = tuple((re.compile(pattern, re.IGNORECASE), summary) for pattern, summary in _RULE_SUMMARIES)
_FIRST_SENTENCE_CHARS = 90


def summarise_rule(rule: NcuRule) -> str | None:
    """A rule's advice in one short line; None for information (INF) that advises nothing."""
    if rule.kind == "INF":
        return None
    for pattern, summary in _RULE_PATTERNS:
        match = pattern.search(rule.text)
        if match:
            if summary is None:
                return None
            text = summary.format(*match.groups())
            break
    else:
        sentence = rule.text.split(". ")[0].rstrip(".")
        text = sentence if len(sentence) <= _FIRST_SENTENCE_CHARS else sentence[:_FIRST_SENTENCE_CHARS - 3] + "..."
    return text + (f" (ncu est. speedup {rule.speedup_pct:.3g} %)" if rule.speedup_pct is not None else "")


def summarise_rules(rules: tuple[NcuRule, ...]) -> tuple[str, ...]:
    ranked = sorted(rules, key=lambda rule: -(rule.speedup_pct or 0.0))  # stable: ncu's order among equals
    lines = dict.fromkeys(line for rule in ranked if (line := summarise_rule(rule)) is not None)
    return tuple(lines)[:MAX_WARNINGS]


def tuned_estimate(problem: ConvProblem, gpu: GpuSpec) -> TunedEstimate:
    """A roofline for a tuned implicit-GEMM kernel of the tuner (f16 tensor cores, f32 accumulation):
    its multiply-adds at the achievable share of the tensor peak, or each tensor crossing DRAM once at the
    achievable bandwidth, whichever takes longer, plus the cost model's fixed launch cost."""
    from tuner.search.costmodel import LAUNCH_US  # the cost model sits above the diagnosis (it imports the space)

    tflops, gbps = gpus.achievable_tflops(gpu), gpus.achievable_gbps(gpu)
    return TunedEstimate(
        compute_us=problem.flops / (tflops * 1e12) * 1e6,
        memory_us=problem.bytes_moved / (gbps * 1e9) * 1e6,
        launch_us=LAUNCH_US,
        tflops=tflops,
        gbps=gbps,
        shape_arg=problem.shape_arg,
    )


def _verdict(group: LaunchGroup, occ: Occupancy, flags: list[WasteFlag], time_share: float | None,
             gpu: GpuSpec | None, problem: ConvProblem | None) -> KernelVerdict:
    launch, stats = group.launches[0], group.stats
    tensor, evidence = tensor_core_use(launch)
    convolution = bool(_CONVOLUTION_NAME.search(group.kernel_name))
    estimate = tuned_estimate(problem, gpu) if convolution and problem is not None and gpu is not None else None
    return KernelVerdict(
        group=group,
        occupancy=occ,
        flags=tuple(flags),
        time_share=time_share,
        bound=_bound(launch, stats),
        busiest_pipe=_busiest_pipe(launch),
        tensor_cores=tensor,
        tensor_evidence=evidence,
        convolution=convolution,
        direct_convolution=convolution and tensor is False and not _LIBRARY_NAME.search(group.kernel_name),
        achieved_occupancy_pct=stats.achieved_occupancy_pct,
        warnings=summarise_rules(launch.rules),
        estimate=estimate,
    )


def _total_us(group: LaunchGroup) -> float | None:
    durations = [LaunchStats.from_launch(launch).duration_us for launch in group.launches]
    return sum(durations) if None not in durations else None


def explain_report(path: Path, sms: int | None = None, gpu: GpuSpec | None = None,
                   problem: ConvProblem | None = None,
                   thresholds: Thresholds = DEFAULT_THRESHOLDS) -> ReportDiagnosis:
    """The waste table's results, the GPU, and per kernel what limits it. `sms` wins over the GPU's SM
    count, which wins over the report's."""
    launches, text = load_report(path)
    groups = group_launches(launches)
    identity = identify_gpu(text, groups, gpu)
    if sms is None and gpu is not None:
        sms = gpu.sm_count
    elif sms is None and identity.how == FROM_DEVICE_NAME and not any(group.stats.sm_count for group in groups):
        sms = identity.gpu.sm_count  # identified by its SM count, the count stays as the report gave or implied it
    results = []
    for group in groups:
        try:
            facts = from_launch_stats(group.stats, sms)
        except NcuReportError as error:
            raise NcuReportError(f"ncu report {path}: {kernel_short_name(group.kernel_name)}: {error} "
                                 "(or the report was cut short)") from None
        results.append((group, occupancy(facts), diagnose(facts, thresholds)))
    totals = [_total_us(group) for group in groups]
    whole = sum(totals) if None not in totals else None
    kernels = tuple(
        _verdict(group, occ, flags, total / whole if whole else None, identity.gpu, problem)
        for (group, occ, flags), total in zip(results, totals)
    )
    return ReportDiagnosis(identity, problem, results, kernels)


def _kernel_lines(verdict: KernelVerdict, problem: ConvProblem | None, gpu: GpuIdentity) -> list[str]:
    group, occ = verdict.group, verdict.occupancy
    median = group.median_duration_us
    heading = f"{verdict.name}: {group.count} launch{'es' if group.count > 1 else ''}" + \
        ("" if median is None else f", median {median:.2f} µs") + \
        ("" if verdict.time_share is None else f", {verdict.time_share:.0%} of the profiled time")
    lines = [heading, f"  limiter: {verdict.limiter}"]
    if verdict.busiest_pipe is not None:
        lines.append(f"  busiest pipe: {verdict.busiest_pipe[0]} ({verdict.busiest_pipe[1]:.1f} % of its peak)")
    tensor = {True: "yes", False: "no", None: "cannot tell"}[verdict.tensor_cores]
    lines.append(f"  tensor cores: {tensor} ({verdict.tensor_evidence})")
    achieved = verdict.achieved_occupancy_pct
    lines.append("  occupancy: " + ("" if achieved is None else f"achieved {achieved:.2f} % of ") +
                 f"theoretical {occ.theoretical_pct:.2f} % ({_count(occ.blocks_per_sm, 'block')}/SM, limited by "
                 f"{occ.limited_by_text})")
    lines.extend(f"  ncu: {warning}" for warning in verdict.warnings)
    if verdict.estimate is not None:
        estimate = verdict.estimate
        measured = "" if median is None else \
            f" against {median:.2f} µs measured ({median / estimate.total_us:.3g}x)"
        lines.append(f"  a tuned implicit-GEMM kernel (f16 tensor cores, f32 accumulate) on {gpu.gpu.slug}: "
                     f"~{estimate.total_us:.2f} µs{measured}: {estimate.compute_us:.2f} µs of math at "
                     f"{estimate.tflops:.1f} TFLOP/s ({gpus.TENSOR_FRACTION:.0%} of peak), "
                     f"{estimate.memory_us:.2f} µs of DRAM traffic at {estimate.gbps:.0f} GB/s "
                     f"({gpus.DRAM_FRACTION:.0%}), {estimate.launch_us:g} µs launch; an estimate, not a measurement")
        lines.append(f"  tune it: {estimate.tune_command}   (predict first: python tune.py predict --gpu "
                     f"{gpu.gpu.slug} --shape {estimate.shape_arg})")
    elif verdict.cuda_core_convolution and problem is None:
        lines.append("  give --shape N,H,W,C,K,R,S[,pad,stride,dilation] for what a tuned implicit-GEMM kernel "
                     "would take, and the tune.py command")
    elif verdict.convolution and problem is not None and gpu.gpu is None:
        lines.append("  name the GPU with --gpu NAME for what a tuned implicit-GEMM kernel would take")
    return lines


def _ranked(diagnosis: ReportDiagnosis) -> list[KernelVerdict]:
    """The kernels, the longest-running first."""
    return sorted(diagnosis.kernels, key=lambda verdict: -(verdict.time_share or 0.0))


def explanation_document(diagnosis: ReportDiagnosis) -> dict:
    """What render_explanation prints, as `tune.py diagnose --json` gives it: the GPU, the problem given, and
    per kernel (the longest-running first) its launch shape, occupancy, waste flags, limiter and estimate."""
    identity = diagnosis.gpu
    kernels = []
    for verdict in _ranked(diagnosis):
        group, occ, stats, estimate = verdict.group, verdict.occupancy, verdict.group.stats, verdict.estimate
        kernels.append({
            "name": verdict.name, "kernel": group.kernel_name, "launches": group.count,
            "median_us": group.median_duration_us, "time_share": verdict.time_share,
            "grid": list(group.grid) if group.grid else None, "grid_blocks": stats.grid_blocks,
            "block": list(group.block) if group.block else None, "block_threads": stats.block_threads,
            "registers_per_thread": stats.registers_per_thread,
            "smem_per_block_bytes": None if stats.dynamic_smem_per_block_bytes is None else
            stats.dynamic_smem_per_block_bytes + (stats.static_smem_per_block_bytes or 0),
            "occupancy": {"theoretical_pct": occ.theoretical_pct, "achieved_pct": verdict.achieved_occupancy_pct,
                          "blocks_per_sm": occ.blocks_per_sm, "limited_by": list(occ.limited_by)},
            "waste": [{"code": flag.code, "value": flag.value, "message": flag.message} for flag in verdict.flags],
            "limiter": verdict.limiter,
            "bound": None if verdict.bound is None else {"kind": verdict.bound.kind, "detail": verdict.bound.detail},
            "busiest_pipe": None if verdict.busiest_pipe is None else
            {"pipe": verdict.busiest_pipe[0], "pct_of_peak": verdict.busiest_pipe[1]},
            "tensor_cores": verdict.tensor_cores, "tensor_evidence": verdict.tensor_evidence,
            "convolution": verdict.convolution, "ncu_warnings": list(verdict.warnings),
            "tuned_estimate": None if estimate is None else {
                "total_us": estimate.total_us, "compute_us": estimate.compute_us, "memory_us": estimate.memory_us,
                "launch_us": estimate.launch_us, "tflops": estimate.tflops, "gbps": estimate.gbps,
                "tune_command": estimate.tune_command}})
    return {"gpu": None if identity.gpu is None else {"slug": identity.gpu.slug, "name": identity.gpu.name,
                                                      "sm_count": identity.gpu.sm_count},
            "gpu_from": identity.how,
            "problem": None if diagnosis.problem is None else problem_to_dict(diagnosis.problem),
            "kernels": kernels}


def render_explanation(diagnosis: ReportDiagnosis, console: Console) -> None:
    """The waste table, then the GPU and what limits each kernel, the longest-running first."""
    render_diagnosis(diagnosis.results, console)
    identity = diagnosis.gpu
    if identity.gpu is not None:
        gpu_line = f"GPU: {identity.gpu.summary}; from {identity.how}"
    else:
        gpu_line = f"GPU: not identified: {identity.how}"
    lines = [gpu_line]
    ranked = _ranked(diagnosis)
    if len(ranked) > 1 and ranked[0].time_share is not None:
        lines.append(f"Most of the time ({ranked[0].time_share:.0%}): {ranked[0].name}: {ranked[0].limiter}")
    for verdict in ranked:
        lines.extend(_kernel_lines(verdict, diagnosis.problem, identity))
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
