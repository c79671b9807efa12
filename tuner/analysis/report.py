"""What the user sees: progress while a study runs, and tables of what it found (rich)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from tuner.build.compile_cache import CompileResult
from tuner.analysis.profile import Agreement
from tuner.core.device import DeviceFacts
from tuner.analysis.diagnose import LaunchFacts, diagnose, occupancy
from tuner.measure.timing import Measurement
from tuner.analysis.ncu import LaunchStats
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.measure.run import KernelAttributes
from tuner.search.space import JointSpace
from tuner.search.study import StudyProgress, TrialRecord


@dataclass(frozen=True)
class Confirmed:
    """A configuration re-measured side by side with the others after the study."""

    label: str
    config: KernelConfig
    measurement: Measurement
    error: float
    grid_blocks: int
    attributes: KernelAttributes
    spill_bytes: int | None
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def smem_bytes(self) -> int:
        return self.attributes.dynamic_smem_bytes + self.attributes.static_smem_bytes


def describe_config(config: KernelConfig) -> str:
    return f"{config.family} {registry.family_of(config).describe(config)}"


def print_device(console: Console, device: DeviceFacts) -> None:
    console.print(f"[bold]{device.name}[/] sm_{device.cc}, {device.sm_count} SMs, "
                  f"{device.smem_optin_per_block // 1024} KB smem/block opt-in, L2 {device.l2_bytes >> 20} MB, "
                  f"driver {device.driver_version}")


def print_space(console: Console, layer: str, problem: ConvProblem, joint: JointSpace,
                valid: list[KernelConfig]) -> None:
    m, n, k = problem.gemm_mnk
    console.print(f"[bold]{escape(layer)}[/]: {problem.shape_text} ({problem.dtype_key}); implicit GEMM {m}x{n}x{k}, "
                  f"{problem.flops / 1e9:.3f} GFLOP")
    for space in joint.spaces:
        mine = [c for c in valid if c.family == space.family]
        console.print(f"{space.family} space: {space.size} candidates, {len(mine)} pass the static checks "
                      f"({len({c.compiled for c in mine})} distinct kernels to compile)")


class StudyDisplay:
    """A rich progress bar fed by the study's callbacks."""

    def __init__(self, console: Console, total: int):
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=console)
        self.compile_task = self.progress.add_task("compile ", total=0, note="")
        self.measure_task = self.progress.add_task("validate+time", total=total, note="")
        self.outcomes: Counter = Counter()
        self.best_us: float | None = None

    def callbacks(self) -> StudyProgress:
        return StudyProgress(on_batch=self._on_batch, on_compiled=self._on_compiled, on_evaluated=self._on_evaluated)

    def _on_batch(self, size: int) -> None:
        task = self.progress.tasks[self.compile_task]
        self.progress.update(self.compile_task, total=(task.total or 0) + size)

    def _on_compiled(self, result: CompileResult) -> None:
        note = "cached" if result.cached else f"{result.seconds:.0f} s"
        self.progress.update(self.compile_task, advance=1,
                             note=f"{result.config.family} {result.config.tile.text} {note}")

    def _on_evaluated(self, record: TrialRecord) -> None:
        self.outcomes[record.status.value + (" (recorded)" if "from_record" in record.attrs else "")] += 1
        if "from_record" in record.attrs or record.status.value == "invalid":
            return
        if record.median_us is not None and (self.best_us is None or record.median_us < self.best_us):
            self.best_us = record.median_us
        best = f"best {self.best_us:.2f} µs" if self.best_us else ""
        self.progress.update(self.measure_task, advance=1, note=f"{record.status.value:14} {best}")

    def __enter__(self) -> "StudyDisplay":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)


def outcome_line(outcomes: Counter) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(outcomes.items()))


def confirmed_table(rows: list[Confirmed], problem: ConvProblem, device: DeviceFacts) -> Table:
    fastest = min(r.measurement.median_us for r in rows)
    table = Table(title="re-measured side by side (graph replay, rotated inputs)")
    for column in ("", "config", "µs", "spread", "vs best", "TFLOP/s", "GB/s", "rel. error", "blocks",
                   "regs", "smem KB", "blocks/SM"):
        table.add_column(column, justify="left" if column in ("", "config") else "right")
    for row in rows:
        m = row.measurement
        blocks = f"{row.grid_blocks}" + (" [red]<SMs[/]" if row.grid_blocks < device.sm_count else "")
        if row.cluster != (1, 1, 1):
            blocks += f" in {'x'.join(map(str, row.cluster))} clusters"
        table.add_row(row.label, describe_config(row.config), f"{m.median_us:.2f}", f"{100 * m.spread:.1f}%",
                      f"{m.median_us / fastest:.2f}x", f"{m.tflops(problem):.2f}", f"{m.gbps(problem):.0f}",
                      f"{row.error:.1e}", blocks, f"{row.attributes.registers_per_thread}",
                      f"{row.smem_bytes / 1024:.0f}", f"{row.attributes.max_active_blocks_per_sm}")
    return table


def failures_table(records: list[TrialRecord], limit: int = 8) -> Table:
    table = Table(title="candidates that did not count (first of each reason)")
    table.add_column("status")
    table.add_column("config")
    table.add_column("reason", overflow="fold")
    seen: set[str] = set()
    for record in records:
        reason = (record.reason or "").splitlines()[0][:160] if record.reason else ""
        if record.status.value in ("ok", "invalid") or reason in seen or len(seen) >= limit:
            continue
        seen.add(reason)
        table.add_row(record.status.value, describe_config(record.config), reason)
    return table


def _agreement_text(agreements: list[Agreement]) -> str:
    parts = []
    for a in agreements:
        mark = "[green]=[/]" if a.agrees else "[red]≠[/]"
        ncu = "?" if a.ncu is None else f"{a.ncu:g}"
        parts.append(f"{a.fact}: {a.static:g} {mark} {ncu}")
    return "\n".join(parts)


def _ncu_text(stats: LaunchStats) -> str:
    def number(value, unit=""):
        return "?" if value is None else f"{value:.2f}{unit}"

    return (f"{number(stats.duration_us, ' µs')} under ncu\nSM {number(stats.sm_throughput_pct, '%')}, "
            f"memory {number(stats.memory_throughput_pct, '%')}\nachieved occupancy "
            f"{number(stats.achieved_occupancy_pct, '%')}")


def waste_table(rows: list[tuple[Confirmed, LaunchFacts]], profiles: dict[str, tuple[LaunchStats, list[Agreement]]]) -> Table:
    """Why each finalist is as fast as it is: static facts and flags, and ncu's word where it ran."""
    table = Table(title="waste of the finalists (static diagnosis; ncu where profiled)", show_lines=True)
    for column in ("", "config", "µs", "occupancy", "waste", "static = ncu", "ncu"):
        table.add_column(column, overflow="fold")
    for row, facts in rows:
        occ = occupancy(facts)
        flags = "\n".join(f"{f.code}: {f.message}" for f in diagnose(facts)) or "none"
        profiled = profiles.get(row.label)
        table.add_row(row.label, describe_config(row.config), f"{row.measurement.median_us:.2f}",
                      f"{occ.theoretical_pct:.1f}% ({occ.blocks_per_sm} blocks/SM, {occ.limited_by_text})",
                      flags, _agreement_text(profiled[1]) if profiled else "not profiled",
                      _ncu_text(profiled[0]) if profiled else "")
    return table
