"""Tuning one layer after another on the GPU at hand: study, side-by-side confirmation, waste
diagnosis, ncu on the finalists, and the layer's entry in results/<gpu>/best.yaml. What it does and finds
goes to an event sink (pipeline/events.py); it prints nothing."""
from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tuner.analysis.report import (Confirmed, FinalistWaste, explain_finalists, fastest_wider, first_failures,
                                   outcome_name)
from tuner.search.costmodel import PRIOR_PICKS, measured_ceilings
from tuner.build.compile import Compiler, CompileResult
from tuner.build.nvcc import cutlass_version, nvcc_version
from tuner.core.device import DeviceFacts, device_from_dict
from tuner.measure.evaluate import GpuEvaluator, WorkerProcess, query_device_facts
from tuner.families import registry
from tuner.families.base import KernelConfig, SearchSpace, SpaceError
from tuner.families.candidate import Candidate
from tuner.measure.timing import Measurement
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.core.layers import Layer
from tuner.pipeline.events import (BestWritten, CandidatesAsked, ChainedBuilt, DeviceFound, EventSink, FamilySkipped,
                                   FamilySpace, FinalistNotCompiled, FinalistsConfirmed, FinalistsFailed,
                                   KernelCompiled, LayerFinishedEarlier, LayerStarted, LayerTimed, LayerTunedAs,
                                   NoCandidatePassed, OrphansFailed, ProfilerMissing, StudyEnded, StudyStarted,
                                   TrialEvaluated, TrialsFailed, WasteFound, WinnerChosen)
from tuner.search.seeds import landscape_seeds, reference_config, seed_study, sibling_seeds, twin_seeds
from tuner.store.journal import GRACE_S, heartbeat_for, study_storage
from tuner.store.best import best_entries, names_by_problem, update_best
from tuner.store.history import append_history
from tuner.store.results import ResultsError, gpu_dir
from tuner.store.schema import BestEntry, BestHeader, HistoryEvent
from tuner.search.refine import refined_variants
from tuner.search.space import JointSpace, entry_config, joint_valid_configs, layer_space, without_superseded
from tuner.core.status import Status
from tuner.core.yamlfile import brief_reason
from tuner.search.study import StudyProgress, StudyRunner, open_study, stop_if_requested
from tuner.search.trials import TrialRecord, ranked, recorded_trials, study_name
from tuner.search.workers import fail_orphans


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
    stale_after_s: int = GRACE_S  # --stale-after: when a silent host's trials are measured again
    # An imported network's layer whose problem another best.yaml entry already holds (the r50 table's,
    # another network's) is not tuned again: the report and the export find that entry by its problem.
    skip_tuned_problems: bool = False
    # No --family: a family that supersedes others on a layer (Family.supersedes) searches it without them.
    prefer_superseding: bool = False


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


def waste_attrs(waste: FinalistWaste) -> dict:
    occ = waste.occupancy
    return {
        "occupancy": {"blocks_per_sm": occ.blocks_per_sm, "limited_by": list(occ.limited_by),
                      "theoretical_pct": round(occ.theoretical_pct, 2)},
        "waste": [{"code": f.code, "value": round(f.value, 4), "message": f.message} for f in waste.flags],
    }


def confirm(finalists: list[tuple[str, Candidate]], compiled: dict[KernelConfig, CompileResult],
            evaluator: GpuEvaluator, rounds: int) -> list[Confirmed]:
    """Re-measure the finalists and the reference interleaved, so that their ratios are fair;
    each gets the median of its rounds."""
    runs: dict[str, list] = {label: [] for label, _ in finalists}
    for _ in range(rounds):
        for label, candidate in finalists:
            evaluation = evaluator.evaluate(compiled[candidate.config.compiled].binary, candidate.problem,
                                            candidate.launch)
            if evaluation.status is Status.ok:
                runs[label].append(evaluation)
    confirmed = []
    for label, candidate in finalists:
        if not runs[label]:
            continue
        middle = sorted(runs[label], key=lambda e: e.measurement.median_us)[len(runs[label]) // 2]
        ptxas = compiled[candidate.config.compiled].ptxas
        confirmed.append(Confirmed(
            label, candidate.config, middle.measurement, max(e.error for e in runs[label]), middle.grid_blocks,
            middle.attributes, ptxas.spill_bytes if ptxas else None, middle.cluster))
    return confirmed


def best_entry(layer: Layer, waste: FinalistWaste, reference: Confirmed | None, study, device: DeviceFacts,
               measured: int, run_id: str, rows: list[Confirmed] = ()) -> dict:
    winner = waste.finalist
    m: Measurement = winner.measurement
    family_best: dict[str, float] = {}
    for row in sorted(rows, key=lambda r: r.measurement.median_us):
        family_best.setdefault(row.config.family, round(row.measurement.median_us, 3))
    entry = {
        "problem": problem_to_dict(layer.problem),
        "family": winner.config.family,
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
        "cluster": list(winner.cluster),
        "waves": round(winner.grid_blocks / (device.sm_count * max(1, winner.attributes.max_active_blocks_per_sm)), 3),
        "registers_per_thread": winner.attributes.registers_per_thread,
        "spill_bytes": winner.spill_bytes,
        "smem_bytes": winner.smem_bytes,
        "study": {"name": study.study_name, "trials": len(study.trials), "measured_this_run": measured},
        "family_best_us": family_best,
        "run": run_id,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    entry.update(waste_attrs(waste))
    if waste.profile is not None:
        stats, agreements = waste.profile
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
    """One GPU, one worker process, one compiler: tunes the layers it is given in turn, and tells `sink` what it
    does and finds."""

    def __init__(self, options: TuningOptions, spaces: tuple[SearchSpace, ...], sink: EventSink,
                 device: DeviceFacts, compiler: Compiler, evaluator: GpuEvaluator):
        self.options, self.sink, self.device = options, sink, device
        self.spaces = buildable_spaces(device_spaces(spaces, device), sink)
        self.compiler, self.evaluator = compiler, evaluator
        self.folder = gpu_dir(options.results_dir, device.slug)
        self.storage = study_storage(options.storage, options.results_dir, device.slug,
                                     heartbeat_s=heartbeat_for(options.stale_after_s), grace_s=options.stale_after_s)
        self.ceilings = measured_ceilings(self.folder)
        sink.emit(DeviceFound(device))

    @classmethod
    def on_this_gpu(cls, options: TuningOptions, spaces: tuple[SearchSpace, ...], sink: EventSink) -> TuningSession:
        """The session of the GPU at hand: a worker process on it, whose facts the compiler builds for."""
        worker = WorkerProcess(timeout_s=options.timeout_s)
        device = device_from_dict(query_device_facts(worker))
        return cls(options, spaces, sink, device, Compiler(device, options.cache_dir, options.jobs),
                   GpuEvaluator(device.l2_bytes, worker))

    def close(self) -> None:
        self.evaluator.close()
        self.compiler.close()

    def tune_layer(self, layer: Layer) -> LayerOutcome:
        entries = best_entries(self.folder)
        previous = entries.get(layer.name)
        run_id = self.options.run_id
        twin = names_by_problem(entries).get(layer.problem)
        if previous is None and twin is not None and self.options.skip_tuned_problems:
            self.sink.emit(LayerTunedAs(layer.name, str(twin)))
            return LayerOutcome(layer.name, entries[twin].runtime_us, None, entries[twin].kernel, 0, skipped=True)
        if previous and run_id and previous.run == run_id:
            self.sink.emit(LayerFinishedEarlier(layer.name, str(run_id)))
            return LayerOutcome(layer.name, previous.runtime_us, previous.previous_us, previous.kernel, 0, skipped=True)
        started = time.monotonic()
        joint, valid = self.start_layer(layer)
        study = open_study(study_name(self.device, layer.name, layer.problem, joint), self.storage, self.options.seed,
                           joint)
        orphans = fail_orphans(study)
        if orphans:
            self.sink.emit(OrphansFailed(orphans))
        reference = reference_config(joint, layer.problem, self.device)
        self.compiler.prestart(valid)
        seed_study(study, layer.problem, joint, self.device, self.options.prior, self.ceilings,
                   landscape_seeds(self.folder, layer.name, layer.problem, joint, self.device),
                   twin_seeds(self.folder, self.storage, layer.problem, joint, self.device),
                   sibling_seeds(self.options.results_dir, self.folder.name, layer.problem, joint, self.device))
        study_started = time.monotonic()
        measured, run_id = self.run_study(study, layer, joint)
        finish_started = time.monotonic()
        entry = self.finish(layer, study, joint, reference, measured, run_id, previous)
        ended = time.monotonic()
        self.sink.emit(LayerTimed(layer.name, ended - started, study_started - started, finish_started - study_started,
                                  ended - finish_started))
        if entry is None:
            return LayerOutcome(layer.name, None, previous and previous.runtime_us, None, measured)
        if previous and previous.run != run_id:
            entry["previous"] = {"runtime_us": previous.runtime_us, "kernel": previous.kernel, "run": previous.run,
                                 "date": previous.date}
        update_best(self.folder, layer.name, BestEntry.parse(layer.name, entry),
                    BestHeader.parse(table_header(self.device)))
        append_history(self.folder, HistoryEvent(layer.name, entry["kernel"], entry["runtime_us"], measured,
                                                 study.study_name, run_id))
        self.sink.emit(BestWritten(layer.name, self.folder / "best.yaml"))
        return LayerOutcome(layer.name, entry["runtime_us"], (entry.get("previous") or {}).get("runtime_us"),
                            entry["kernel"], measured)

    def build_chained(self, layers: list[str]) -> None:
        """The builds that tuner.torch_ops.optimize launches by default (Family.chained: sm90_dsl's, for
        programmatic dependent launch) of the kernels these layers keep, made into the compile cache now, so that
        the first optimize after a tune finds every kernel built, as it did when it launched the tuned builds."""
        entries = best_entries(self.folder)
        configs = []
        for name in layers:
            entry = entries.get(name)
            if entry is None:
                continue
            try:
                config = entry_config(entry, name, entry.problem)
            except (SpaceError, ValueError, KeyError, TypeError):
                continue
            chained = registry.chained_build(config)
            if chained is not None:
                configs.append(chained)
        if not configs:
            return
        started = time.monotonic()
        results = self.compiler.compile_many(list(dict.fromkeys(configs)))
        failed = tuple(f"{r.config.name}: {brief_reason(r.error) or 'no library'}" for r in results if not r.ok)
        self.sink.emit(ChainedBuilt(len(results) - len(failed), failed, time.monotonic() - started))

    def start_layer(self, layer: Layer) -> tuple[JointSpace, list[KernelConfig]]:
        """The layer's joint space (without the families a superseding one replaces, unless --family named them),
        and its configurations that pass the static checks."""
        joint, left_out = layer_space(self.spaces, layer.problem, self.device), ()
        if self.options.prefer_superseding:
            joint, left_out = without_superseded(joint, layer.problem)
        valid = joint_valid_configs(joint, layer.problem, self.device)
        self.sink.emit(LayerStarted(layer.name, layer.problem, family_spaces(joint, valid), tuple(left_out)))
        return joint, valid

    def run_study(self, study, layer: Layer, joint: JointSpace) -> tuple[int, str]:
        """This run's trials of the layer's study, told as they go: how many it measured, and its run id."""
        outcomes: Counter = Counter()
        self.sink.emit(StudyStarted(study.study_name, self.options.trials))
        runner = StudyRunner(study, layer.problem, joint, self.device, self.compiler, self.evaluator,
                             self.progress(outcomes), self.options.run_id, storage=self.storage)
        started = time.monotonic()
        measured = runner.run(self.options.trials)
        self.sink.emit(StudyEnded(study.study_name, len(study.trials), tuple(sorted(outcomes.items())),
                                  replace(runner.clock), time.monotonic() - started))
        return measured, runner.run_id

    def progress(self, outcomes: Counter) -> StudyProgress:
        """The study's callbacks as events; each trial evaluated is also counted in `outcomes`."""
        def evaluated(record: TrialRecord) -> None:
            outcomes[outcome_name(record)] += 1
            self.sink.emit(TrialEvaluated(record))

        return StudyProgress(on_batch=lambda size: self.sink.emit(CandidatesAsked(size)),
                             on_compiled=lambda result: self.sink.emit(KernelCompiled(result)), on_evaluated=evaluated)

    def finish(self, layer: Layer, study, joint: JointSpace, reference: KernelConfig | None, measured: int,
               run_id: str, previous: BestEntry | None = None) -> dict | None:
        """Re-measure the finalists side by side, explain them, and build the layer's best entry."""
        device, options, sink = self.device, self.options, self.sink
        failures = first_failures(sorted(recorded_trials(study, layer.problem).values(), key=lambda r: r.number))
        if failures:
            sink.emit(TrialsFailed(tuple(failures)))
        best = ranked(study, layer.problem)
        if not best:
            sink.emit(NoCandidatePassed(layer.name))
            return None
        finalists = finalist_configs(best, options.top, reference, previous, layer.problem, device, joint, self.spaces)
        compiled = {r.config.compiled: r for r in self.compiler.compile_many([c.config for _, c in finalists])}
        stop_if_requested()  # an interrupt during these compiles killed some: stop, nothing to record
        for label, candidate in finalists:
            if not compiled[candidate.config.compiled].ok:
                sink.emit(FinalistNotCompiled(label, candidate.config, compiled[candidate.config.compiled].error))
        finalists = [(label, c) for label, c in finalists if compiled[c.config.compiled].ok]
        rows = confirm(finalists, compiled, self.evaluator, options.confirm_rounds)
        if not rows:
            sink.emit(FinalistsFailed(layer.name))
            return None
        sink.emit(FinalistsConfirmed(tuple(rows), layer.problem, device))
        winner = min(rows, key=lambda r: r.measurement.median_us)
        reference_row = next((r for r in rows if reference is not None and r.config == reference), None)
        sink.emit(WinnerChosen(winner, reference_row, device.sm_count, fastest_wider(winner, best)))
        wastes, ncu_missing = explain_finalists(rows, compiled, layer.problem, device,
                                                0 if options.no_ncu else options.ncu_top)
        if ncu_missing:
            sink.emit(ProfilerMissing(ncu_missing))
        sink.emit(WasteFound(tuple(wastes.values())))
        return best_entry(layer, wastes[winner.label], reference_row, study, device, measured, run_id, rows)


def family_spaces(joint: JointSpace, valid: list[KernelConfig]) -> tuple[FamilySpace, ...]:
    """Each family's share of the layer's space: its size, its candidates that pass the static checks, their kernels."""
    spaces = []
    for space in joint.spaces:
        mine = [c for c in valid if c.family == space.family]
        spaces.append(FamilySpace(space.family, space.size, len(mine), len({c.compiled for c in mine})))
    return tuple(spaces)


def finalist_configs(best: list[TrialRecord], top: int, reference: KernelConfig | None, previous: BestEntry | None,
                     problem: ConvProblem, device: DeviceFacts, joint: JointSpace | None = None,
                     spaces: tuple[SearchSpace, ...] = ()) -> list[tuple[str, Candidate]]:
    """The study's `top` fastest; the fastest of each other family of the study (so that the table
    shows what each family reaches); then the reference config and the layer's previous best where
    the study lacks them and they can run: re-measured side by side, the previous best can win again,
    so a study that lost its history (or a short one) never replaces a faster kernel with a slower one.
    The top and the previous best are each followed by their variants in the other choices `spaces` give their
    family's refined knobs (#1.1, #1.2, previous.1 ...; refine.py)."""
    full = {space.family: space for space in spaces}
    finalists: list[tuple[str, Candidate]] = []

    def add(label: str, config: KernelConfig | None, refine: bool = False) -> None:
        if config is None or any(config == chosen.config for _, chosen in finalists):
            return
        candidate = Candidate.of(config, problem)
        if not candidate.runs_on(device):
            return
        finalists.append((label, candidate))
        space = full.get(config.family)
        for number, variant in enumerate(refined_variants(config, space, problem, device) if refine and space else ()):
            add(f"{label}.{number + 1}", variant)

    for i, r in enumerate(best[:top]):
        add(f"#{i + 1}", r.config, refine=True)
    for family in (joint.families if joint else ()):
        add(f"best {family}", next((r.config for r in best if r.config.family == family), None))
    add("reference", reference)
    if previous is not None:
        try:
            add("previous", entry_config(previous, "previous", problem), refine=True)
        except ResultsError:  # an entry written by an older search space: nothing to re-measure
            pass
    return finalists


def device_spaces(spaces: tuple[SearchSpace, ...], device: DeviceFacts) -> tuple[SearchSpace, ...]:
    """The spaces whose family this device can run; none: a SpaceError saying why for each."""
    runnable = tuple(s for s in spaces if registry.get(s.family).device_problem(device) is None)
    if not runnable:
        reasons = "; ".join(f"{s.family}: {registry.get(s.family).device_problem(device)}" for s in spaces)
        raise SpaceError(f"this GPU ({device.name}) can run none of the families asked for: {reasons}")
    return runnable


def buildable_spaces(spaces: tuple[SearchSpace, ...], sink: EventSink) -> tuple[SearchSpace, ...]:
    """The spaces whose family this machine can build, each other one skipped with what it needs installed; none:
    a SpaceError."""
    buildable = []
    for space in spaces:
        reason = registry.get(space.family).emitter.toolchain_problem()
        if reason is None:
            buildable.append(space)
        else:
            sink.emit(FamilySkipped(space.family, reason))
    if not buildable:
        raise SpaceError("this machine can build none of the families asked for")
    return tuple(buildable)
