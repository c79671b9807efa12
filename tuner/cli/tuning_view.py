"""What the user sees of a tuning run: the pipeline's events (tuner/pipeline/events.py) drawn with rich, a
progress bar while a study runs and tables of what it found, and the runs' regression table."""
from __future__ import annotations

from functools import singledispatchmethod

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner.analysis.ncu import LaunchStats
from tuner.analysis.profile import Agreement
from tuner.analysis.report import Confirmed, FinalistWaste, blocks_of, reason_line
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.pipeline.events import (BestWritten, CandidatesAsked, ChainedBuilt, DeviceFound, Event, FamilySkipped,
                                   FinalistNotCompiled, FinalistsConfirmed, FinalistsFailed, KernelCompiled,
                                   LayerFinishedEarlier, LayerStarted, LayerTimed, LayerTunedAs, NoCandidatePassed,
                                   OrphansFailed, ProfilerMissing, StudyEnded, StudyStarted, TrialEvaluated,
                                   TrialsFailed, WasteFound, WinnerChosen)
from tuner.pipeline.nightly import REGRESSION_THRESHOLD
from tuner.pipeline.tuning import LayerOutcome
from tuner.search.trials import TrialRecord


class TuningView:
    """An event sink that prints each event on `console`; a study's progress is a live bar until the study
    ends. Used as a context manager, so that a run that stops mid-study leaves no bar running."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.best_us: float | None = None

    def __enter__(self) -> TuningView:
        return self

    def __exit__(self, *exc) -> None:
        self._stop_progress()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    @singledispatchmethod
    def emit(self, event: Event) -> None:
        """An event with nothing to show."""

    @emit.register
    def _device(self, event: DeviceFound) -> None:
        device = event.device
        self.console.print(f"[bold]{device.name}[/] sm_{device.cc}, {device.sm_count} SMs, "
                           f"{device.smem_optin_per_block // 1024} KB smem/block opt-in, "
                           f"L2 {device.l2_bytes >> 20} MB, driver {device.driver_version}")

    @emit.register
    def _family_skipped(self, event: FamilySkipped) -> None:
        self.console.print(f"[yellow]{event.family} skipped[/]: {escape(event.reason)}", highlight=False)

    @emit.register
    def _tuned_as(self, event: LayerTunedAs) -> None:
        self.console.print(f"[bold]{escape(event.layer)}[/]: the same problem is tuned as {escape(event.twin)}; "
                           f"skipped (tune it with --layer {event.twin})")

    @emit.register
    def _finished_earlier(self, event: LayerFinishedEarlier) -> None:
        self.console.print(f"[bold]{escape(event.layer)}[/]: finished earlier in run {escape(event.run_id)}")

    @emit.register
    def _layer(self, event: LayerStarted) -> None:
        if event.left_out:
            self.console.print(f"{', '.join(event.left_out)} left out: "
                               f"{', '.join(space.family for space in event.spaces)} builds this "
                               "layer's kernels in a second and matched or beat them where measured "
                               "(--family names them to search them)", highlight=False)
        problem = event.problem
        m, n, k = problem.gemm_mnk
        self.console.print(f"[bold]{escape(event.layer)}[/]: {problem.shape_text} ({problem.dtype_key}); implicit "
                           f"GEMM {m}x{n}x{k}, {problem.flops / 1e9:.3f} GFLOP")
        for space in event.spaces:
            self.console.print(f"{space.family} space: {space.candidates} candidates, {space.valid} pass the static "
                               f"checks ({space.kernels} distinct kernels to compile)")

    @emit.register
    def _orphans(self, event: OrphansFailed) -> None:
        self.console.print(f"{event.count} trial(s) of a killed worker on this host marked FAIL; they will be retried")

    @emit.register
    def _study_started(self, event: StudyStarted) -> None:
        self._stop_progress()
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=self.console)
        self.compile_task = self.progress.add_task("compile ", total=0, note="")
        self.measure_task = self.progress.add_task("validate+time", total=event.trials, note="")
        self.best_us = None
        self.progress.start()

    @emit.register
    def _asked(self, event: CandidatesAsked) -> None:
        task = self.progress.tasks[self.compile_task]
        self.progress.update(self.compile_task, total=(task.total or 0) + event.count)

    @emit.register
    def _compiled(self, event: KernelCompiled) -> None:
        result = event.result
        note = "cached" if result.cached else f"{result.seconds:.0f} s"
        self.progress.update(self.compile_task, advance=1,
                             note=f"{result.config.family} {result.config.tile.text} {note}")

    @emit.register
    def _evaluated(self, event: TrialEvaluated) -> None:
        record = event.record
        if "from_record" in record.attrs or record.status.value == "invalid":
            return
        if record.median_us is not None and (self.best_us is None or record.median_us < self.best_us):
            self.best_us = record.median_us
        best = f"best {self.best_us:.2f} µs" if self.best_us else ""
        self.progress.update(self.measure_task, advance=1, note=f"{record.status.value:14} {best}")

    @emit.register
    def _study_ended(self, event: StudyEnded) -> None:
        self._stop_progress()
        self.console.print(f"study {escape(event.study)}: {event.trials} trials in all; this run: "
                           f"{outcome_line(event.outcomes)}; {event.clock.line(event.wall_s)}", highlight=False)

    @emit.register
    def _failures(self, event: TrialsFailed) -> None:
        self.console.print(failures_table(event.records))

    @emit.register
    def _nothing_passed(self, event: NoCandidatePassed) -> None:
        self.console.print("[red]no candidate passed validation; nothing recorded[/]")

    @emit.register
    def _not_compiled(self, event: FinalistNotCompiled) -> None:
        self.console.print(f"[yellow]finalist {event.label} ({event.config.name}) did not compile: {event.error}[/]")

    @emit.register
    def _finalists_failed(self, event: FinalistsFailed) -> None:
        self.console.print("[red]the finalists failed when re-measured; nothing recorded[/]")

    @emit.register
    def _confirmed(self, event: FinalistsConfirmed) -> None:
        self.console.print(confirmed_table(event.rows, event.problem, event.device))

    @emit.register
    def _winner(self, event: WinnerChosen) -> None:
        winner, reference = event.winner, event.reference
        if reference is None:
            self.console.print("reference configuration (128x128x64, 3 stages) cannot run this problem here")
        else:
            ratio = reference.measurement.median_us / winner.measurement.median_us
            self.console.print(f"winner {winner.measurement.median_us:.2f} µs vs reference "
                               f"{reference.measurement.median_us:.2f} µs: {ratio:.2f}x faster; grid "
                               f"{winner.grid_blocks} blocks vs {reference.grid_blocks} on {event.sm_count} SMs")
        if winner.grid_blocks < event.sm_count:
            self.console.print(fewer_blocks_text(winner, event.sm_count, event.wider))

    @emit.register
    def _profiler_missing(self, event: ProfilerMissing) -> None:
        self.console.print(f"[yellow]ncu: {event.reason}; the waste table is the static diagnosis alone[/]")

    @emit.register
    def _waste(self, event: WasteFound) -> None:
        self.console.print(waste_table(event.rows))

    @emit.register
    def _timed(self, event: LayerTimed) -> None:
        self.console.print(f"{escape(event.layer)}: {event.total_s:.1f} s in all (setting up {event.setup_s:.1f} s, "
                           f"the study {event.study_s:.1f} s, finalists and results {event.finish_s:.1f} s)",
                           highlight=False)

    @emit.register
    def _written(self, event: BestWritten) -> None:
        self.console.print(f"wrote {escape(str(event.path))}")

    @emit.register
    def _chained(self, event: ChainedBuilt) -> None:
        self.console.print(f"built {event.built} kept kernels for programmatic dependent launch, as the PyTorch path "
                           f"launches them, in {event.seconds:.1f} s", highlight=False)
        for failure in event.failed:
            self.console.print(f"[yellow]not built for programmatic dependent launch[/]: {escape(failure)} "
                               "(optimize launches the build the tuner timed)", highlight=False)


def describe_config(config: KernelConfig) -> str:
    return f"{config.family} {registry.family_of(config).describe(config)}"


def outcome_line(outcomes: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{count} {name}" for name, count in outcomes)


def fewer_blocks_text(winner: Confirmed, sm_count: int, wider: TrialRecord | None) -> str:
    """The study's own evidence for a grid smaller than the SM count: the fastest candidate that
    launched more blocks, and how much slower it was."""
    tile = winner.config.tile
    text = (f"the winner launches {winner.grid_blocks} blocks ({tile.m}x{tile.n} tiles, "
            f"{describe_config(winner.config)}) on {sm_count} SMs")
    if wider is None:
        return text + "; no measured candidate launched more"
    return (text + f"; the fastest measured candidate with more blocks ({blocks_of(wider)}: "
            f"{describe_config(wider.config)}) took {wider.median_us:.2f} µs in the study, "
            f"{wider.median_us / winner.measurement.median_us:.2f}x the winner")


def confirmed_table(rows: tuple[Confirmed, ...], problem: ConvProblem, device: DeviceFacts) -> Table:
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


def failures_table(records: tuple[TrialRecord, ...]) -> Table:
    table = Table(title="candidates that did not count (first of each reason)")
    table.add_column("status")
    table.add_column("config")
    table.add_column("reason", overflow="fold")
    for record in records:
        table.add_row(record.status.value, describe_config(record.config), reason_line(record))
    return table


def _agreement_text(agreements: tuple[Agreement, ...]) -> str:
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


def waste_table(rows: tuple[FinalistWaste, ...]) -> Table:
    """Why each finalist is as fast as it is: static facts and flags, and ncu's word where it ran."""
    table = Table(title="waste of the finalists (static diagnosis; ncu where profiled)", show_lines=True)
    for column in ("", "config", "µs", "occupancy", "waste", "static = ncu", "ncu"):
        table.add_column(column, overflow="fold")
    for waste in rows:
        row, occ, profiled = waste.finalist, waste.occupancy, waste.profile
        flags = "\n".join(f"{f.code}: {f.message}" for f in waste.flags) or "none"
        table.add_row(row.label, describe_config(row.config), f"{row.measurement.median_us:.2f}",
                      f"{occ.theoretical_pct:.1f}% ({occ.blocks_per_sm} blocks/SM, {occ.limited_by_text})",
                      flags, _agreement_text(profiled[1]) if profiled else "not profiled",
                      _ncu_text(profiled[0]) if profiled else "")
    return table


def run_summary(outcomes: list[LayerOutcome], seconds: float) -> str:
    """The run's last line: how many layers, how long, and what became of them."""
    skipped = sum(o.skipped for o in outcomes)
    failed = sum(o.runtime_us is None for o in outcomes)
    parts = [f"{len(outcomes) - skipped - failed} tuned"] + ([f"{skipped} tuned earlier or under another name"]
                                                             if skipped else [])
    parts += [f"{failed} with no kernel that passed"] if failed else []
    return f"{len(outcomes)} layer{'s' if len(outcomes) != 1 else ''} in {seconds:.0f} s: {', '.join(parts)}"


def regression_table(outcomes: list[LayerOutcome], threshold: float = REGRESSION_THRESHOLD) -> Table:
    table = Table(title=f"against the previous best (regression: more than {threshold:.0%} slower)")
    for column in ("layer", "previous µs", "now µs", "change", "", "kernel now"):
        table.add_column(column, justify="right" if "µs" in column or column == "change" else "left")
    for outcome in outcomes:
        change = outcome.change
        verdict = ("" if change is None else "[red]REGRESSION[/]" if change > threshold
                   else "[green]faster[/]" if change < -threshold else "same")
        table.add_row(escape(outcome.layer), _us(outcome.previous_us), _us(outcome.runtime_us),
                      "new" if change is None else f"{change:+.1%}", verdict, outcome.kernel or "none passed")
    return table


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
