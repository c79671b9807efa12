"""An ncu report explained: its launches grouped by kernel and shape, the GPU it ran on, and per kernel its
occupancy, its waste (diagnose.py) and what limits it (verdict.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.analysis.diagnose import (DEFAULT_THRESHOLDS, LaunchFacts, Occupancy, Thresholds, WasteFlag, diagnose,
                                     occupancy)
from tuner.analysis.kernel_names import kernel_short_name
from tuner.analysis.ncu import LaunchGroup, LaunchStats, NcuReportError, group_launches
from tuner.analysis.ncu_file import load_report, read_report
from tuner.analysis.verdict import KernelVerdict, kernel_verdict
from tuner.core import gpus
from tuner.core.gpus import GpuSpec
from tuner.core.problem import ConvProblem

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


def diagnose_report(
    path: Path, sms: int | None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[tuple[LaunchGroup, Occupancy, list[WasteFlag]]]:
    """Diagnose every launch group of an ncu text or CSV report; `sms` overrides the report's SM count."""
    results = []
    for group in group_launches(read_report(path)):
        facts = from_launch_stats(group.stats, sms)
        results.append((group, occupancy(facts), diagnose(facts, thresholds)))
    return results


FROM_DEVICE_NAME = "the report's device name"


@dataclass(frozen=True)
class GpuIdentity:
    gpu: GpuSpec | None
    how: str  # how it was identified, or why it was not


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
        kernel_verdict(group, occ, flags, total / whole if whole else None, identity.gpu, problem)
        for (group, occ, flags), total in zip(results, totals)
    )
    return ReportDiagnosis(identity, problem, results, kernels)
