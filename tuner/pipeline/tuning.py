"""Tuning one layer after another on the GPU at hand: study, side-by-side confirmation, waste
diagnosis, ncu on the finalists, and the layer's entry in results/<gpu>/best.yaml."""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.markup import escape

from tuner.analysis import report
from tuner.search.costmodel import PRIOR_PICKS, Ceilings, joint_prior_picks, measured_ceilings
from tuner.build.compile import Compiler
from tuner.build.compile_cache import CompileResult
from tuner.build.nvcc import cutlass_version, nvcc_version
from tuner.core.device import DeviceFacts, device_from_dict, volume
from tuner.analysis.diagnose import LaunchFacts, diagnose, kernel_facts, occupancy
from tuner.measure.evaluate import GpuEvaluator, WorkerProcess, query_device_facts
from tuner.families import registry
from tuner.families.base import KernelConfig, SearchSpace, SpaceError
from tuner.measure.timing import Measurement
from tuner.analysis.ncu import LaunchStats
from tuner.core.epilogue import Epilogue
from tuner.core.layers import Layer
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.analysis.profile import Agreement, ProfilerUnavailable, agreement, profile_candidate
from tuner.search.replay import fastest_recorded
from tuner.store.results import (BestEntry, ResultsError, append_history, best_entries, gpu_dir, names_by_problem,
                           GRACE_S, heartbeat_for, study_storage, update_best)
from tuner.search.space import (JointSpace, entry_config, joint_params, joint_valid_configs, layer_space, make_config,
                         static_problems, without_superseded)
from tuner.core.status import Status
from tuner.search.study import (TrialRecord, StudyRunner, fail_orphans, open_study, params_key, ranked, recorded_trials,
                         stop_if_requested, study_name)


# How many of the fastest configurations of each family's recorded landscape seed a layer's study.
LANDSCAPE_SEEDS = 2
# Configurations a layer with an epilogue takes from its bare twin's study (twin_seeds).
TWIN_SEEDS = 4


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


def waste_attrs(facts: LaunchFacts) -> dict:
    occ = occupancy(facts)
    return {
        "occupancy": {"blocks_per_sm": occ.blocks_per_sm, "limited_by": list(occ.limited_by),
                      "theoretical_pct": round(occ.theoretical_pct, 2)},
        "waste": [{"code": f.code, "value": round(f.value, 4), "message": f.message} for f in diagnose(facts)],
    }


def reference_config(joint: JointSpace, problem: ConvProblem, device: DeviceFacts) -> KernelConfig | None:
    """The hand-picked configuration of the first family in the study that has one (sm80's is the
    reference ncu log's 128x128x64, 3 stages), where it can run the problem."""
    for family in joint.families:
        params = registry.get(family).reference_params()
        if params is None:
            continue
        config = make_config(problem, family, params)
        if joint.contains(config) and not static_problems(config, problem, device):
            return config
    return None


def landscape_seeds(folder: Path | None, layer: str, problem: ConvProblem, joint: JointSpace, device: DeviceFacts,
                    per_family: int = LANDSCAPE_SEEDS) -> list[KernelConfig]:
    """The fastest configurations `tune.py bench` measured for this layer on this GPU
    (results/<gpu>/landscape/<family>/<layer>.csv), `per_family` of each family the study searches."""
    seeds = []
    for family in joint.families:
        path = folder / "landscape" / family / f"{layer}.csv" if folder else None
        if path is None or not path.is_file():
            continue
        try:
            found = fastest_recorded(path, problem, family, per_family)
        except (OSError, KeyError, ValueError):  # a landscape of an older space: no seeds from it
            continue
        seeds += [c for c in found if joint.contains(c) and not static_problems(c, problem, device)]
    return seeds


def twin_seeds(folder: Path | None, storage, problem: ConvProblem, joint: JointSpace, device: DeviceFacts,
               count: int = TWIN_SEEDS) -> list[KernelConfig]:
    """For a layer with an epilogue: the `count` fastest configurations its bare twin (the same
    convolution without the epilogue, a best.yaml entry of this GPU) measured, built with the epilogue.
    The epilogue costs a kernel little, so they are the first candidates worth trying."""
    if folder is None or not problem.epilogue.fused:
        return []
    bare = replace(problem, epilogue=Epilogue())
    for entry in best_entries(folder).values():
        if entry.problem != bare or entry.study_name is None:
            continue
        try:
            twin = optuna.load_study(study_name=entry.study_name, storage=storage)
        except (KeyError, optuna.exceptions.OptunaError):
            continue
        seeds = []
        for record in ranked(twin, bare):
            try:
                config = make_config(problem, record.config.family, record.config.search_params)
            except (SpaceError, ValueError):
                continue
            if config not in seeds and joint.contains(config) and not static_problems(config, problem, device):
                seeds.append(config)
            if len(seeds) == count:
                break
        return seeds
    return []


def seed_configs(problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int, ceilings: Ceilings,
                 measured: list[KernelConfig] = (), twins: list[KernelConfig] = ()) -> list[tuple[KernelConfig, str]]:
    """What seed_study queues, in its order, each with why: the reference, the landscape's fastest, the
    bare twin's fastest, the cost model's picks."""
    reference = reference_config(joint, problem, device)
    seeds = ([(reference, "reference")] if reference is not None else []) + [(c, "landscape") for c in measured]
    seeds += [(c, "twin") for c in twins]
    return seeds + [(c, "prior") for c in joint_prior_picks(joint, problem, device, prior, ceilings)]


def seed_study(study, problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int,
               ceilings: Ceilings, measured: list[KernelConfig] = (), twins: list[KernelConfig] = ()) -> None:
    """Queue the reference config, the configurations this GPU's landscapes measured fastest for the
    layer, those its bare twin measured fastest (a layer with an epilogue), and the cost model's
    picks, each unless the study has measured it or holds it queued: a
    study made before the model (or before a change to it) gets the current picks on its next run, and
    a seed asked by a run that was interrupted before measuring it (its trial FAILed) is queued again."""
    known = set(recorded_trials(study, problem))
    known |= {params_key(t.params or t.system_attrs.get("fixed_params", {}))
              for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))}
    for config, why in seed_configs(problem, joint, device, prior, ceilings, measured, twins):
        params = joint_params(config)
        if params_key(params) not in known:
            study.enqueue_trial(params, user_attrs={why: True})
            known.add(params_key(params))


def confirm(configs: list[tuple[str, KernelConfig]], compiled: dict[KernelConfig, CompileResult],
            evaluator: GpuEvaluator, problem: ConvProblem, rounds: int) -> list[report.Confirmed]:
    """Re-measure the finalists and the reference interleaved, so that their ratios are fair;
    each gets the median of its rounds."""
    runs: dict[str, list] = {label: [] for label, _ in configs}
    for _ in range(rounds):
        for label, config in configs:
            launch = registry.family_of(config).launch_args(config, problem)
            evaluation = evaluator.evaluate(compiled[config.compiled].binary, problem, launch)
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
            middle.attributes, ptxas.spill_bytes if ptxas else None, middle.cluster))
    return confirmed


def profile_finalists(rows: list[report.Confirmed], facts: dict[str, LaunchFacts],
                      compiled: dict[KernelConfig, CompileResult], problem: ConvProblem, top: int,
                      console: Console) -> dict[str, tuple[LaunchStats, list[Agreement]]]:
    """ncu on the fastest `top` rows; where ncu cannot run, say so once and go on without it."""
    profiles = {}
    for row in sorted(rows, key=lambda r: r.measurement.median_us)[:top]:
        try:
            launch = registry.family_of(row.config).launch_args(row.config, problem)
            stats = profile_candidate(compiled[row.config.compiled].binary, problem, launch)
        except ProfilerUnavailable as error:
            console.print(f"[yellow]ncu: {error}; the waste table is the static diagnosis alone[/]")
            break
        profiles[row.label] = (stats, agreement(facts[row.label], stats))
    return profiles


def best_entry(layer: Layer, winner: report.Confirmed, reference: report.Confirmed | None, study,
               device: DeviceFacts, measured: int, facts: LaunchFacts,
               profile: tuple[LaunchStats, list[Agreement]] | None, run_id: str,
               rows: list[report.Confirmed] = ()) -> dict:
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

    def __init__(self, options: TuningOptions, spaces: tuple[SearchSpace, ...], console: Console):
        self.options = options
        self.console = console
        self.worker = WorkerProcess(timeout_s=options.timeout_s)
        self.device = device_from_dict(query_device_facts(self.worker))
        self.spaces = device_spaces(spaces, self.device)
        self.spaces = buildable_spaces(self.spaces, console)
        self.compiler = Compiler(self.device, options.cache_dir, options.jobs)
        self.evaluator = GpuEvaluator(self.device.l2_bytes, self.worker)
        self.folder = gpu_dir(options.results_dir, self.device.slug)
        self.storage = study_storage(options.storage, options.results_dir, self.device.slug,
                                     heartbeat_s=heartbeat_for(options.stale_after_s), grace_s=options.stale_after_s)
        self.ceilings = measured_ceilings(self.folder)
        report.print_device(console, self.device)

    def close(self) -> None:
        self.evaluator.close()
        self.compiler.close()

    def tune_layer(self, layer: Layer) -> LayerOutcome:
        entries = best_entries(self.folder)
        previous = entries.get(layer.name)
        run_id = self.options.run_id
        twin = names_by_problem(entries).get(layer.problem)
        if previous is None and twin is not None and self.options.skip_tuned_problems:
            self.console.print(f"[bold]{escape(layer.name)}[/]: the same problem is tuned as {escape(str(twin))}; skipped "
                               f"(tune it with --layer {twin})")
            return LayerOutcome(layer.name, entries[twin].runtime_us, None, entries[twin].kernel, 0, skipped=True)
        if previous and run_id and previous.run == run_id:
            self.console.print(f"[bold]{escape(layer.name)}[/]: finished earlier in run {escape(str(run_id))}")
            return LayerOutcome(layer.name, previous.runtime_us, previous.previous_us, previous.kernel, 0, skipped=True)
        started = time.monotonic()
        joint = layer_space(self.spaces, layer.problem, self.device)
        if self.options.prefer_superseding:
            joint, left_out = without_superseded(joint, layer.problem)
            if left_out:
                self.console.print(f"{', '.join(left_out)} left out: {', '.join(joint.families)} builds this "
                                   "layer's kernels in a second and matched or beat them where measured "
                                   "(--family names them to search them)", highlight=False)
        valid = joint_valid_configs(joint, layer.problem, self.device)
        report.print_space(self.console, layer.name, layer.problem, joint, valid)
        study = open_study(study_name(self.device, layer.name, layer.problem, joint), self.storage, self.options.seed,
                           joint)
        orphans = fail_orphans(study)
        if orphans:
            self.console.print(f"{orphans} trial(s) of a killed worker on this host marked FAIL; they will be retried")
        reference = reference_config(joint, layer.problem, self.device)
        self.compiler.prestart(valid)
        seed_study(study, layer.problem, joint, self.device, self.options.prior, self.ceilings,
                   landscape_seeds(self.folder, layer.name, layer.problem, joint, self.device),
                   twin_seeds(self.folder, self.storage, layer.problem, joint, self.device))
        with report.StudyDisplay(self.console, self.options.trials) as display:
            tuner = StudyRunner(study, layer.problem, joint, self.device, self.compiler, self.evaluator,
                                display.callbacks(), run_id, storage=self.storage)
            study_started = time.monotonic()
            measured = tuner.run(self.options.trials)
        self.console.print(f"study {escape(study.study_name)}: {len(study.trials)} trials in all; this run: "
                           f"{report.outcome_line(display.outcomes)}; "
                           f"{tuner.clock.line(time.monotonic() - study_started)}", highlight=False)
        finish_started = time.monotonic()
        entry = self.finish(layer, study, joint, reference, measured, tuner.run_id, previous)
        self.console.print(f"{escape(layer.name)}: {time.monotonic() - started:.1f} s in all (setting up "
                           f"{study_started - started:.1f} s, the study {finish_started - study_started:.1f} s, "
                           f"finalists and results {time.monotonic() - finish_started:.1f} s)", highlight=False)
        if entry is None:
            return LayerOutcome(layer.name, None, previous and previous.runtime_us, None, measured)
        if previous and previous.run != tuner.run_id:
            entry["previous"] = {"runtime_us": previous.runtime_us, "kernel": previous.kernel, "run": previous.run,
                                 "date": previous.date}
        update_best(self.folder, layer.name, entry, table_header(self.device))
        append_history(self.folder, {"layer": layer.name, "kernel": entry["kernel"], "runtime_us": entry["runtime_us"],
                                     "measured": measured, "study": study.study_name, "run": tuner.run_id})
        self.console.print(f"wrote {self.folder / 'best.yaml'}")
        return LayerOutcome(layer.name, entry["runtime_us"], (entry.get("previous") or {}).get("runtime_us"),
                            entry["kernel"], measured)

    def finish(self, layer: Layer, study, joint: JointSpace, reference: KernelConfig | None, measured: int,
               run_id: str, previous: BestEntry | None = None) -> dict | None:
        """Re-measure the finalists side by side, explain them, and build the layer's best entry."""
        device, options, console = self.device, self.options, self.console
        records = sorted(recorded_trials(study, layer.problem).values(), key=lambda r: r.number)
        if any(r.status not in (Status.ok, Status.invalid) for r in records):
            console.print(report.failures_table(records))
        best = ranked(study, layer.problem)
        if not best:
            console.print("[red]no candidate passed validation; nothing recorded[/]")
            return None
        finalists = finalist_configs(best, options.top, reference, previous, layer.problem, device, joint)
        compiled = {r.config.compiled: r for r in self.compiler.compile_many([c for _, c in finalists])}
        stop_if_requested()  # an interrupt during these compiles killed some: stop, nothing to record
        for label, config in finalists:
            if not compiled[config.compiled].ok:
                console.print(f"[yellow]finalist {label} ({config.name}) did not compile: "
                              f"{compiled[config.compiled].error}[/]")
        finalists = [(label, c) for label, c in finalists if compiled[c.compiled].ok]
        rows = confirm(finalists, compiled, self.evaluator, layer.problem, options.confirm_rounds)
        if not rows:
            console.print("[red]the finalists failed when re-measured; nothing recorded[/]")
            return None
        console.print(report.confirmed_table(rows, layer.problem, device))
        winner = min(rows, key=lambda r: r.measurement.median_us)
        reference_row = next((r for r in rows if reference is not None and r.config == reference), None)
        say_versus_reference(console, winner, reference_row, device, best)
        facts = {r.label: kernel_facts(r.config, layer.problem, device, r.grid_blocks, r.attributes, r.spill_bytes)
                 for r in rows}
        profiles = ({} if options.no_ncu else
                    profile_finalists(rows, facts, compiled, layer.problem, options.ncu_top, console))
        console.print(report.waste_table([(r, facts[r.label]) for r in rows], profiles))
        return best_entry(layer, winner, reference_row, study, device, measured, facts[winner.label],
                          profiles.get(winner.label), run_id, rows)


def finalist_configs(best: list[TrialRecord], top: int, reference: KernelConfig | None, previous: BestEntry | None,
                     problem: ConvProblem, device: DeviceFacts,
                     joint: JointSpace | None = None) -> list[tuple[str, KernelConfig]]:
    """The study's `top` fastest; the fastest of each other family of the study (so that the table
    shows what each family reaches); then the reference config and the layer's previous best where
    the study lacks them and they can run: re-measured side by side, the previous best can win again,
    so a study that lost its history (or a short one) never replaces a faster kernel with a slower one."""
    finalists = [(f"#{i + 1}", r.config) for i, r in enumerate(best[:top])]
    extra: list[tuple[str, KernelConfig | None]] = []
    for family in (joint.families if joint else ()):
        fastest = next((r.config for r in best if r.config.family == family), None)
        extra.append((f"best {family}", fastest))
    extra.append(("reference", reference))
    if previous is not None:
        try:
            extra.append(("previous", entry_config(previous, "previous", problem)))
        except ResultsError:  # an entry written by an older search space: nothing to re-measure
            pass
    for label, config in extra:
        if (config is not None and all(config != chosen for _, chosen in finalists)
                and registry.why_not(registry.family_of(config), problem, device) is None
                and not static_problems(config, problem, device)):
            finalists.append((label, config))
    return finalists


def device_spaces(spaces: tuple[SearchSpace, ...], device: DeviceFacts) -> tuple[SearchSpace, ...]:
    """The spaces whose family this device can run; none: a SpaceError saying why for each."""
    runnable = tuple(s for s in spaces if registry.get(s.family).device_problem(device) is None)
    if not runnable:
        reasons = "; ".join(f"{s.family}: {registry.get(s.family).device_problem(device)}" for s in spaces)
        raise SpaceError(f"this GPU ({device.name}) can run none of the families asked for: {reasons}")
    return runnable


def buildable_spaces(spaces: tuple[SearchSpace, ...], console: Console) -> tuple[SearchSpace, ...]:
    """The spaces whose family this machine can build, each other one skipped with one line that says how
    to install what it needs; none: a SpaceError."""
    buildable = []
    for space in spaces:
        reason = registry.get(space.family).toolchain_problem()
        if reason is None:
            buildable.append(space)
        else:
            console.print(f"[yellow]{space.family} skipped[/]: {escape(reason)}", highlight=False)
    if not buildable:
        raise SpaceError("this machine can build none of the families asked for")
    return tuple(buildable)


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
    text = (f"the winner launches {winner.grid_blocks} blocks ({tile.m}x{tile.n} tiles, "
            f"{report.describe_config(winner.config)}) on {device.sm_count} SMs")
    wider = [r for r in measured if blocks_of(r) > winner.grid_blocks]
    if not wider:
        return text + "; no measured candidate launched more"
    best_wider = min(wider, key=lambda r: r.median_us)
    return (text + f"; the fastest measured candidate with more blocks ({blocks_of(best_wider)}: "
            f"{report.describe_config(best_wider.config)}) took {best_wider.median_us:.2f} µs in the study, "
            f"{best_wider.median_us / winner.measurement.median_us:.2f}x the winner")


def blocks_of(record: TrialRecord) -> int:
    return volume(record.attrs.get("grid") or (0, 0, 0))


