"""Tuning one layer after another on the GPU at hand: study, side-by-side confirmation, waste
diagnosis, ncu on the finalists, and the layer's entry in results/<gpu>/best.yaml."""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from tuner import report
from tuner.costmodel import PRIOR_PICKS, Ceilings, measured_ceilings, prior_picks
from tuner.compile import Compiler, CompileResult, cutlass_version, nvcc_version
from tuner.device import DeviceFacts, device_from_dict
from tuner.diagnose import LaunchFacts, kernel_facts
from tuner.evaluate import GpuEvaluator, WorkerProcess, query_device_facts
from tuner.measure import Measurement
from tuner.ncu import LaunchStats
from tuner.problem import ConvProblem, Layer
from tuner.profile import Agreement, ProfilerUnavailable, agreement, profile_candidate
from tuner.results import append_history, default_storage, gpu_dir, read_best, update_best
from tuner.space import REFERENCE_PARAMS, KernelConfig, SearchSpace, make_config, static_problems, valid_configs
from tuner.status import Status
from tuner.study import (TrialRecord, Tuner, fail_orphans, open_study, params_key, ranked, recorded_trials,
                         study_name, waste_attrs)


@dataclass(frozen=True)
class TuningOptions:
    trials: int
    top: int
    confirm_rounds: int
    ncu_top: int
    no_ncu: bool
    seed: int
    storage: str | None
    results_dir: Path
    cache_dir: Path | None
    jobs: int | None
    timeout_s: float
    run_id: str | None
    prior: int = PRIOR_PICKS


@dataclass(frozen=True)
class LayerOutcome:
    layer: str
    runtime_us: float | None
    previous_us: float | None
    kernel: str | None
    measured: int
    skipped: bool = False

    @property
    def change(self) -> float | None:
        if self.runtime_us is None or not self.previous_us:
            return None
        return self.runtime_us / self.previous_us - 1.0


def seed_study(study, problem: ConvProblem, space: SearchSpace, device: DeviceFacts, prior: int,
               ceilings: Ceilings) -> None:
    """Queue the reference config and the cost model's picks, each unless the study has it already:
    a study made before the model (or before a change to it) gets the current picks on its next run."""
    reference = make_config(problem, REFERENCE_PARAMS)
    if (params_key(REFERENCE_PARAMS) not in recorded_trials(study, problem)
            and not static_problems(reference, problem, device)):
        study.enqueue_trial(REFERENCE_PARAMS, user_attrs={"reference": True}, skip_if_exists=True)
    for config in prior_picks(space, problem, device, prior, ceilings):
        study.enqueue_trial(config.search_params, user_attrs={"prior": True}, skip_if_exists=True)


def confirm(configs: list[tuple[str, KernelConfig]], compiled: dict[KernelConfig, CompileResult],
            evaluator: GpuEvaluator, problem: ConvProblem, rounds: int) -> list[report.Confirmed]:
    """Re-measure the finalists and the reference interleaved, so that their ratios are fair;
    each gets the median of its rounds."""
    runs: dict[str, list] = {label: [] for label, _ in configs}
    for _ in range(rounds):
        for label, config in configs:
            evaluation = evaluator.evaluate(compiled[config.compiled].library, problem, config.split_k)
            if evaluation.status is Status.ok:
                runs[label].append(evaluation)
    confirmed = []
    for label, config in configs:
        if not runs[label]:
            continue
        middle = sorted(runs[label], key=lambda e: e.measurement.median_us)[len(runs[label]) // 2]
        ptxas = compiled[config.compiled].ptxas
        confirmed.append(report.Confirmed(
            label, config, middle.measurement, max(e.error for e in runs[label]), middle.grid_blocks,
            middle.attributes, ptxas.spill_bytes if ptxas else None))
    return confirmed


def profile_finalists(rows: list[report.Confirmed], facts: dict[str, LaunchFacts],
                      compiled: dict[KernelConfig, CompileResult], problem: ConvProblem, top: int,
                      console: Console) -> dict[str, tuple[LaunchStats, list[Agreement]]]:
    """ncu on the fastest `top` rows; where ncu cannot run, say so once and go on without it."""
    profiles = {}
    for row in sorted(rows, key=lambda r: r.measurement.median_us)[:top]:
        try:
            stats = profile_candidate(compiled[row.config.compiled].library, problem, row.config.split_k)
        except ProfilerUnavailable as error:
            console.print(f"[yellow]ncu: {error}; the waste table is the static diagnosis alone[/]")
            break
        profiles[row.label] = (stats, agreement(facts[row.label], stats))
    return profiles


def best_entry(layer: Layer, winner: report.Confirmed, reference: report.Confirmed | None, study,
               device: DeviceFacts, measured: int, facts: LaunchFacts,
               profile: tuple[LaunchStats, list[Agreement]] | None, run_id: str) -> dict:
    m: Measurement = winner.measurement
    entry = {
        "problem": {k: (v.value if hasattr(v, "value") else v) for k, v in vars(layer.problem).items()},
        "family": "sm80",
        "params": winner.config.search_params,
        "kernel": winner.config.name,
        "runtime_us": round(m.median_us, 3),
        "spread": round(m.spread, 4),
        "p10_us": round(m.p10_us, 3),
        "p90_us": round(m.p90_us, 3),
        "tflops": round(m.tflops(layer.problem), 3),
        "gbps": round(m.gbps(layer.problem), 1),
        "rel_l2_error": float(f"{winner.error:.3e}"),
        "grid_blocks": winner.grid_blocks,
        "waves": round(winner.grid_blocks / (device.sm_count * max(1, winner.attributes.max_active_blocks_per_sm)), 3),
        "registers_per_thread": winner.attributes.registers_per_thread,
        "spill_bytes": winner.spill_bytes,
        "smem_bytes": winner.smem_bytes,
        "study": {"name": study.study_name, "trials": len(study.trials), "measured_this_run": measured},
        "run": run_id,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    entry.update(waste_attrs(facts))
    if profile is not None:
        stats, agreements = profile
        entry["ncu"] = {k: v for k, v in asdict(stats).items() if v is not None}
        entry["ncu"]["agrees_with_static"] = {a.fact: a.agrees for a in agreements}
    if reference is not None:
        entry["reference"] = {"params": reference.config.search_params,
                              "runtime_us": round(reference.measurement.median_us, 3),
                              "grid_blocks": reference.grid_blocks,
                              "speedup": round(reference.measurement.median_us / m.median_us, 3)}
    return entry


def table_header(device: DeviceFacts) -> dict:
    return {
        "device": {"name": device.name, "slug": device.slug, "compute_capability": f"{device.cc_major}.{device.cc_minor}",
                   "sm_count": device.sm_count, "l2_bytes": device.l2_bytes},
        "toolchain": {"nvcc": nvcc_version(), "cutlass": cutlass_version(), "driver": device.driver_version,
                      "cuda_runtime": device.runtime_version},
    }


class TuningSession:
    """One GPU, one worker process, one compiler: tunes the layers it is given in turn."""

    def __init__(self, options: TuningOptions, space: SearchSpace, console: Console):
        self.options = options
        self.space = space
        self.console = console
        self.worker = WorkerProcess(timeout_s=options.timeout_s)
        self.device = device_from_dict(query_device_facts(self.worker))
        self.compiler = Compiler(self.device.arch_flag, options.cache_dir, options.jobs)
        self.evaluator = GpuEvaluator(self.device.l2_bytes, self.worker)
        self.folder = gpu_dir(options.results_dir, self.device.slug)
        self.storage = options.storage or default_storage(options.results_dir, self.device.slug)
        self.ceilings = measured_ceilings(self.folder)
        report.print_device(console, self.device)

    def close(self) -> None:
        self.evaluator.close()

    def tune_layer(self, layer: Layer) -> LayerOutcome:
        previous = read_best(self.folder)["layers"].get(layer.name)
        run_id = self.options.run_id
        if previous and run_id and previous.get("run") == run_id:
            self.console.print(f"[bold]{layer.name}[/]: finished earlier in run {run_id}")
            before = (previous.get("previous") or {}).get("runtime_us")
            return LayerOutcome(layer.name, previous["runtime_us"], before, previous.get("kernel"), 0, skipped=True)
        valid = valid_configs(self.space, layer.problem, self.device)
        report.print_space(self.console, layer.name, layer.problem, self.space.size, len(valid),
                           len({c.compiled for c in valid}))
        study = open_study(study_name(self.device, layer.name, layer.problem), self.storage, self.options.seed)
        orphans = fail_orphans(study)
        if orphans:
            self.console.print(f"{orphans} trial(s) of a killed worker on this host marked FAIL; they will be retried")
        reference = make_config(layer.problem, REFERENCE_PARAMS)
        seed_study(study, layer.problem, self.space, self.device, self.options.prior, self.ceilings)
        with report.StudyDisplay(self.console, self.options.trials) as display:
            tuner = Tuner(study, layer.problem, self.space, self.device, self.compiler, self.evaluator,
                          display.callbacks(), run_id)
            measured = tuner.run(self.options.trials)
        self.console.print(f"study {study.study_name}: {len(study.trials)} trials in all; this run: "
                           f"{report.outcome_line(display.outcomes)}")
        entry = self.finish(layer, study, reference, measured, tuner.run_id, previous and previous.get("params"))
        if entry is None:
            return LayerOutcome(layer.name, None, previous and previous.get("runtime_us"), None, measured)
        if previous and previous.get("run") != tuner.run_id:
            entry["previous"] = {k: previous.get(k) for k in ("runtime_us", "kernel", "run", "date")}
        update_best(self.folder, layer.name, entry, table_header(self.device))
        append_history(self.folder, {"layer": layer.name, "kernel": entry["kernel"], "runtime_us": entry["runtime_us"],
                                     "measured": measured, "study": study.study_name, "run": tuner.run_id})
        self.console.print(f"wrote {self.folder / 'best.yaml'}")
        return LayerOutcome(layer.name, entry["runtime_us"], (entry.get("previous") or {}).get("runtime_us"),
                            entry["kernel"], measured)

    def finish(self, layer: Layer, study, reference: KernelConfig, measured: int, run_id: str,
               previous_params: dict | None = None) -> dict | None:
        """Re-measure the finalists side by side, explain them, and build the layer's best entry."""
        device, options, console = self.device, self.options, self.console
        records = sorted(recorded_trials(study, layer.problem).values(), key=lambda r: r.number)
        if any(r.status not in (Status.ok, Status.invalid) for r in records):
            console.print(report.failures_table(records))
        best = ranked(study, layer.problem)
        if not best:
            console.print("[red]no candidate passed validation; nothing recorded[/]")
            return None
        finalists = finalist_configs(best, options.top, reference, previous_params, layer.problem, device)
        compiled = {r.config.compiled: r for r in self.compiler.compile_many([c for _, c in finalists])}
        rows = confirm(finalists, compiled, self.evaluator, layer.problem, options.confirm_rounds)
        if not rows:
            console.print("[red]the finalists failed when re-measured; nothing recorded[/]")
            return None
        console.print(report.confirmed_table(rows, layer.problem, device))
        winner = min(rows, key=lambda r: r.measurement.median_us)
        reference_row = next((r for r in rows if r.config == reference), None)
        say_versus_reference(console, winner, reference_row, device, best)
        facts = {r.label: kernel_facts(r.config, layer.problem, device, r.grid_blocks, r.attributes, r.spill_bytes)
                 for r in rows}
        profiles = ({} if options.no_ncu else
                    profile_finalists(rows, facts, compiled, layer.problem, options.ncu_top, console))
        console.print(report.waste_table([(r, facts[r.label]) for r in rows], profiles))
        return best_entry(layer, winner, reference_row, study, device, measured, facts[winner.label],
                          profiles.get(winner.label), run_id)


def finalist_configs(best: list[TrialRecord], top: int, reference: KernelConfig, previous_params: dict | None,
                     problem: ConvProblem, device: DeviceFacts) -> list[tuple[str, KernelConfig]]:
    """The study's `top` fastest, then the reference config and the layer's previous best where the
    study lacks them and they can run: re-measured side by side, the previous best can win again, so a
    study that lost its history (or a short one) never replaces a faster kernel with a slower one."""
    finalists = [(f"#{i + 1}", r.config) for i, r in enumerate(best[:top])]
    extra = [("reference", reference)]
    if previous_params:
        try:
            extra.append(("previous", make_config(problem, previous_params)))
        except (KeyError, ValueError):  # an entry written by an older search space: nothing to re-measure
            pass
    for label, config in extra:
        if all(config != chosen for _, chosen in finalists) and not static_problems(config, problem, device):
            finalists.append((label, config))
    return finalists


def say_versus_reference(console: Console, winner: report.Confirmed, reference: report.Confirmed | None,
                         device: DeviceFacts, measured: list[TrialRecord]) -> None:
    if reference is None:
        console.print("reference configuration (128x128x64, 3 stages) cannot run this problem here")
    else:
        ratio = reference.measurement.median_us / winner.measurement.median_us
        console.print(f"winner {winner.measurement.median_us:.2f} µs vs reference {reference.measurement.median_us:.2f} µs: "
                      f"{ratio:.2f}x faster; grid {winner.grid_blocks} blocks vs {reference.grid_blocks} on "
                      f"{device.sm_count} SMs")
    if winner.grid_blocks < device.sm_count:
        console.print(why_fewer_blocks(winner, device, measured))


def why_fewer_blocks(winner: report.Confirmed, device: DeviceFacts, measured: list[TrialRecord]) -> str:
    """The study's own evidence for a grid smaller than the SM count: the fastest candidate that
    launched more blocks, and how much slower it was."""
    tile = winner.config.tile
    text = (f"the winner launches {winner.grid_blocks} blocks ({tile.m}x{tile.n} tiles x split-K "
            f"{winner.config.split_k}) on {device.sm_count} SMs")
    wider = [r for r in measured if blocks_of(r) > winner.grid_blocks]
    if not wider:
        return text + "; no measured candidate launched more"
    best_wider = min(wider, key=lambda r: r.median_us)
    return (text + f"; the fastest measured candidate with more blocks ({blocks_of(best_wider)}: "
            f"{report.describe_config(best_wider.config)}) took {best_wider.median_us:.2f} µs in the study, "
            f"{best_wider.median_us / winner.measurement.median_us:.2f}x the winner")


def blocks_of(record: TrialRecord) -> int:
    grid = record.attrs.get("grid") or [0, 0, 0]
    return grid[0] * grid[1] * grid[2]


