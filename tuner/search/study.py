"""The Optuna study: ask for candidates, prune the impossible ones, compile in the background,
evaluate each on the GPU once built, tell Optuna what happened. One study per (GPU, layer, problem,
families, dtypes): the kernel family is a sampled parameter, each family's knobs conditional on it."""
from __future__ import annotations

import threading
import time
import uuid
import warnings
import zlib
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import optuna
from optuna.trial import TrialState

from tuner.build.abi import KernelBinary
from tuner.build.compile_cache import CompileResult
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.core.status import Status
from tuner.families.base import KernelConfig, LaunchArgs, SpaceError
from tuner.families.candidate import Candidate
from tuner.measure.evaluate import Evaluation
from tuner.search.measurements import MeasurementDB
from tuner.search.space import (FAMILY_PARAM, JointSpace, config_from_params, joint_params, joint_valid_configs,
                                static_problems)
from tuner.search.trials import (FINISHED, FROM_RECORD, TrialRecord, compile_attrs, counted_in_run, evaluation_attrs,
                                 fits, in_flight_in_run, joint_distributions, label_values, params_key,
                                 problem_of_study, queued_keys, readable, record_of, set_trial_attrs)
from tuner.search.workers import Heartbeat, worker_id

# Asks that may pass without a new candidate (all impossible or already recorded) before the
# space counts as exhausted for this sampler.
EXHAUSTED_AFTER_ASKS = 400
# Asks without a new candidate after which the runner queues the configurations the sampler has not proposed
# (up to the run's budget): on a small space TPE keeps proposing what it measured (700 asks for 14 of RegNet's
# 30-odd kernels on the H100).
QUEUE_UNTRIED_AFTER_ASKS = 32
# How often the runner, waiting for a compile to finish, looks whether a stop was requested.
STOP_POLL_S = 0.5


class Evaluator(Protocol):
    def evaluate(self, binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs,
                 seed: int | None = None) -> Evaluation: ...


class CompileQueueLike(Protocol):
    """Compiles in the background (tuner.build.compile_queue.CompileQueue): a future per configuration submitted."""

    def submit(self, configs: Iterable[KernelConfig]) -> list[Future[CompileResult]]: ...

    def close(self) -> None: ...


class CompilerLike(Protocol):
    jobs: int

    def open_queue(self) -> CompileQueueLike: ...


def open_study(name: str, storage: optuna.storages.BaseStorage | str, seed: int,
               joint: JointSpace | None = None) -> optuna.Study:
    """Load the study, or create it and, given its joint space, carry over what the layer's other
    studies measured (see carry_over)."""
    with warnings.catch_warnings():  # multivariate, group and constant_liar are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # group: each family's knobs are sampled jointly among the trials of that family.
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize")
    except optuna.exceptions.DuplicatedStudyError:  # exists (or another host created it a moment ago)
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    label_values(study)
    if joint is not None:
        carry_over(study, joint, storage)
    return study


def carry_over(study: optuna.Study, joint: JointSpace, storage: optuna.storages.BaseStorage | str) -> int:
    """Copy into a new study the measured trials of the same problem's other studies (another search
    space, another set of families, an older space file, another layer name) whose configuration this
    space holds: the sampler and the already-measured check start from them instead of from nothing.
    The newest measurement of a configuration wins. Returns how many were copied."""
    key = problem_of_study(study.study_name)
    if key is None:
        return 0
    measurements = MeasurementDB(storage=storage)
    fitting = [trial for trial in measurements.trials(key, exclude=study.study_name) if fits(trial.params, joint)]
    return measurements.commit(study, joint, fitting)


# The tuner asks and tells and records the heartbeats itself (Heartbeat), which Optuna warns about on every ask.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def ask_config(study: optuna.Study, joint: JointSpace, tags: dict | None = None,
               on_ask: Callable[[optuna.Trial], None] | None = None) -> optuna.Trial:
    """A new trial with the family and that family's knobs sampled (or taken from the queue). `on_ask`
    (the heartbeat) and `tags` (the worker that owns it) come first, before the sampling's storage round
    trips, so that a kill leaves as small a window as possible for a RUNNING trial nobody can tell is
    orphaned (fail_orphans sweeps untagged ones after UNTAGGED_GRACE)."""
    trial = study.ask()
    if on_ask is not None:
        on_ask(trial)
    for key, value in (tags or {}).items():
        trial.set_user_attr(key, value)
    family = trial.suggest_categorical(FAMILY_PARAM, list(joint.families))
    for name, distribution in joint_distributions(joint, family).items():
        if name != FAMILY_PARAM:
            trial.suggest_categorical(name, distribution.choices)
    return trial


@dataclass
class StudyProgress:
    """Callbacks the command line uses to show progress; all optional."""

    on_batch: Callable[[int], None] = lambda size: None
    on_compiled: Callable[[CompileResult], None] = lambda result: None
    on_evaluated: Callable[[TrialRecord], None] = lambda record: None


_stop_requested = threading.Event()


def request_stop() -> None:
    """First call: finish the candidate in hand, record it, then stop (KeyboardInterrupt from the
    study loop). A second call stops at once."""
    if _stop_requested.is_set():
        raise KeyboardInterrupt
    _stop_requested.set()


def stop_if_requested() -> None:
    if _stop_requested.is_set():
        raise KeyboardInterrupt


@dataclass
class StudyClock:
    """Where a study's wall time went, in seconds: asking the sampler (and answering the impossible and
    recorded trials at once), waiting for compiles, and on the GPU worker (validate and time)."""

    asking: float = 0.0
    waiting_for_compiles: float = 0.0
    on_gpu: float = 0.0

    def line(self, wall_s: float) -> str:
        return (f"{wall_s:.1f} s: {self.waiting_for_compiles:.1f} s waiting for compiles, {self.on_gpu:.1f} s "
                f"validating and timing, {self.asking:.1f} s asking the sampler")


class StudyRunner:
    """Runs one layer's study for a number of trials: keeps up to a batch of candidates compiling in
    the background, evaluates each on the GPU worker as soon as its compile finishes, tells Optuna the
    outcome and asks for the next candidate in its place. (tuning.TuningSession drives one
    StudyRunner per layer and does everything after the study.)"""

    def __init__(self, study: optuna.Study, problem: ConvProblem, joint: JointSpace, device: DeviceFacts,
                 compiler: CompilerLike, evaluator: Evaluator, progress: StudyProgress | None = None,
                 run_id: str | None = None, storage: optuna.storages.BaseStorage | str | None = None):
        """`storage`: what the study was opened on, for the heartbeats of an RDB (none without it)."""
        self.study = study
        self.problem = problem
        self.joint = joint
        self.device = device
        self.compiler = compiler
        self.evaluator = evaluator
        self.progress = progress or StudyProgress()
        self.run_id = run_id or f"{worker_id()}:{uuid.uuid4().hex[:12]}"
        self.worker = worker_id()
        self.heartbeat = Heartbeat(study, storage)
        self.clock = StudyClock()
        # One set of random inputs for the whole run: the worker draws them, computes their float64 reference
        # and copies them past L2 once, not once a candidate (0.2-0.4 s each on the H100). The finalists are
        # validated again on fresh inputs in each confirmation round.
        self.inputs_seed = (1 << 30) | zlib.crc32(self.run_id.encode()) >> 2  # apart from the evaluator's 1, 2, ...
        # The study's record, kept up to date a newly finished trial at a time: rebuilt on every ask, it took
        # most of a small space's study once the study held thousands of trials (40 s of 41 on the H100).
        self.records: dict[tuple, TrialRecord] = {}
        self.seen: set[int] = set()
        self.tried: set[KernelConfig] = set()  # configurations that passed the static checks and have an outcome
        self.runnable = joint_valid_configs(joint, problem, device)
        self.space_size = len(self.runnable)
        self.queued_untried = False

    def run(self, candidates: int, batch_size: int | None = None) -> int:
        """Ask until `candidates` configurations have been compiled and evaluated under this run id,
        by this worker or any other on the study (impossible and already-recorded ones do not count);
        a run resumed under the same id only does what is left. Returns how many this call did.
        Stops early once every configuration that passes the static checks has an outcome or is in hand, or
        the sampler only proposes what the study already knows."""
        try:
            return self._run(candidates, max(1, batch_size or self.compiler.jobs))
        finally:
            self.heartbeat.close()

    def _run(self, candidates: int, batch_size: int) -> int:
        """A pipeline, not rounds: the next candidate is asked as soon as one compile of the batch
        finishes and its candidate is told, not once the slowest of the batch is built (the sampler's
        constant liar accounts for the candidates still compiling)."""
        done, idle_asks, waited = 0, 0, False
        storage = self.heartbeat.storage
        untold: dict[int, optuna.Trial] = {}  # asked, not told yet: FAILed if the run stops
        compiling: dict[Future[CompileResult], tuple[optuna.Trial, KernelConfig]] = {}
        with closing(self.compiler.open_queue()) as queue:
            try:
                while True:
                    stop_if_requested()
                    if storage is not None:  # a dead host's trials: FAIL, and re-queued by the storage's callback
                        optuna.storages.fail_stale_trials(self.study)
                    self.recorded()
                    if self.space_covered([config for _, config in compiling.values()]):
                        idle_asks = EXHAUSTED_AFTER_ASKS
                    if len(untold) < batch_size and idle_asks < EXHAUSTED_AFTER_ASKS:
                        asked = time.monotonic()
                        batch, idle = self._fill_batch(self._fill_size(batch_size, len(untold)), candidates)
                        self.clock.asking += time.monotonic() - asked
                        idle_asks = idle_asks + idle if not batch else 0
                        untold.update((trial.number, trial) for trial, _ in batch)
                        if batch:
                            self.progress.on_batch(len(batch))
                            compiling.update(zip(queue.submit([config for _, config in batch]), batch))
                    if compiling:
                        told = self._evaluate_next(compiling)
                        del untold[told]
                        done += 1
                    elif idle_asks >= EXHAUSTED_AFTER_ASKS:
                        break
                    elif self._remaining(candidates) <= 0:  # (above 0: another worker's candidate failed)
                        # Other workers' trials count as in flight. Those of a dead host go stale after the
                        # grace period: wait that long once, so that the run ends with them measured again.
                        if waited or storage is None or not in_flight_in_run(self.study, self.run_id):
                            break
                        waited = True
                        self._wait_out_grace_period()
            finally:
                for trial in untold.values():  # interrupted: FAIL, so that a resumed study tries them again
                    self._finish(trial, state=TrialState.FAIL, skip_if_finished=True)
        return done

    def _fill_size(self, batch_size: int, in_hand: int) -> int:
        """How many candidates to ask for: the free places of the batch, and queued seeds up to twice the
        batch in hand at once, so that their kernels compile together (in units of several kernels, when
        there are more than the cores) instead of one after the other."""
        waiting = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        return max(batch_size - in_hand, min(waiting, 2 * batch_size - in_hand))

    def _evaluate_next(self, compiling: dict[Future[CompileResult], tuple[optuna.Trial, KernelConfig]]) -> int:
        """Waits for the first compile to finish (of several finished, the oldest trial's), evaluates
        its candidate and tells the outcome; returns the trial's number. Looks for a stop request while
        waiting."""
        started = time.monotonic()
        while not (finished := wait(compiling, timeout=STOP_POLL_S, return_when=FIRST_COMPLETED).done):
            stop_if_requested()
        self.clock.waiting_for_compiles += time.monotonic() - started
        future = min(finished, key=lambda done: compiling[done][0].number)
        trial, config = compiling.pop(future)
        result = future.result()
        self.progress.on_compiled(result)
        stop_if_requested()  # between candidates: nothing measured is ever left untold
        self._evaluate(trial, config, result)
        return trial.number

    def _wait_out_grace_period(self) -> None:
        interval = self.heartbeat.storage.get_heartbeat_interval()
        deadline = time.monotonic() + self.heartbeat.stale_after_s + interval
        while time.monotonic() < deadline:
            stop_if_requested()
            time.sleep(min(1.0, interval))

    def _ask(self) -> optuna.Trial:
        return ask_config(self.study, self.joint, {"worker": self.worker, "run": self.run_id}, self.heartbeat.hold)

    def _finish(self, trial: optuna.Trial, *args, **kwargs) -> None:
        self.study.tell(trial, *args, **kwargs)
        self.heartbeat.release(trial)

    def _claimed_elsewhere(self, trial: optuna.Trial, key: tuple) -> int | None:
        """An older RUNNING trial with the same parameters (another worker's, or earlier in this
        batch): the lower trial number measures it, so no configuration is measured twice."""
        for other in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if other.number < trial.number and params_key(other.params) == key:
                return other.number
        return None

    def _remaining(self, candidates: int) -> int:
        """What is left of the run's budget once every worker's finished and in-hand candidates
        (this worker's batch so far included: its trials are RUNNING) are counted."""
        return candidates - counted_in_run(self.study, self.run_id) - in_flight_in_run(self.study, self.run_id)

    def _fill_batch(self, size: int, candidates: int) -> tuple[list[tuple[optuna.Trial, KernelConfig]], int]:
        """Ask trials until `size` new candidates are in hand, or the run's budget is taken by this
        worker and the others; answer the impossible and the recorded ones at once."""
        batch: list[tuple[optuna.Trial, KernelConfig]] = []
        idle = 0
        while len(batch) < size and idle < EXHAUSTED_AFTER_ASKS and self._remaining(candidates) > 0:
            if self.space_covered([config for _, config in batch]):
                break
            if idle >= QUEUE_UNTRIED_AFTER_ASKS and not self.queued_untried:
                self._queue_untried([config for _, config in batch], self._remaining(candidates))
            trial = self._ask()
            record = self.recorded()  # fresh: other workers finish trials too
            key = params_key(trial.params)
            try:
                config = config_from_params(self.problem, trial.params)
            except SpaceError as error:  # a queued trial from an older space: nothing to build
                trial.set_user_attr("reason", str(error))
                self._finish(trial, state=TrialState.PRUNED)
                idle += 1
                continue
            if key in record:
                self._answer_from_record(trial, record[key])
            elif (reasons := static_problems(config, self.problem, self.device)):
                self._tell(trial, config, Status.invalid, None, {"reason": "; ".join(reasons), "config": config.name})
            elif (owner := self._claimed_elsewhere(trial, key)) is not None:
                trial.set_user_attr("duplicate_of", owner)
                self._finish(trial, state=TrialState.FAIL)  # FAIL: samplers ignore it
            else:
                batch.append((trial, config))
                continue
            idle += 1
        return batch, idle

    def recorded(self) -> dict[tuple, TrialRecord]:
        """recorded_trials(study), read a trial once: a finished trial's outcome does not change."""
        for trial in self.study.get_trials(deepcopy=False, states=FINISHED):
            if trial.number in self.seen:
                continue
            self.seen.add(trial.number)
            if readable(trial):
                record = self.records[params_key(trial.params)] = record_of(trial, self.problem)
                if record.status is not Status.invalid:
                    self.tried.add(record.config)
        return self.records

    def space_covered(self, in_hand: list[KernelConfig]) -> bool:
        """Whether every configuration that passes the static checks has an outcome (as of the last read of the
        record: _run reads it before each batch, _fill_batch after each ask) or is being compiled."""
        return len(self.tried.union(in_hand)) >= self.space_size

    def _queue_untried(self, in_hand: list[KernelConfig], budget: int) -> None:
        """Queue up to `budget` of the runnable configurations that have no outcome and are not in hand, in the
        space's order (once a run)."""
        self.queued_untried = True
        waiting = queued_keys(self.study)
        untried = [c for c in self.runnable if c not in self.tried and c not in in_hand
                   and params_key(joint_params(c)) not in waiting]
        for config in untried[:max(0, budget)]:
            self.study.enqueue_trial(joint_params(config), user_attrs={"untried": True})

    def _answer_from_record(self, trial: optuna.Trial, recorded: TrialRecord) -> None:
        attrs = {k: v for k, v in recorded.attrs.items() if k not in (FROM_RECORD, "run", "worker")}
        attrs[FROM_RECORD] = recorded.number
        self._tell(trial, recorded.config, recorded.status, recorded.median_us, attrs)

    def _evaluate(self, trial: optuna.Trial, config: KernelConfig, result: CompileResult) -> None:
        attrs = compile_attrs(result)
        if result.transient:  # killed or timed out, not the configuration's fault: FAIL, tried again later
            set_trial_attrs(trial, {**attrs, "reason": result.error, "transient": True})
            self._finish(trial, state=TrialState.FAIL)
            return
        if not result.ok:
            self._tell(trial, config, Status.compile_failed, None, {**attrs, "reason": result.error})
            return
        started = time.monotonic()
        evaluation = self.evaluator.evaluate(result.binary, self.problem, Candidate.of(config, self.problem).launch,
                                             seed=self.inputs_seed)
        self.clock.on_gpu += time.monotonic() - started
        value = evaluation.measurement.median_us if evaluation.status is Status.ok else None
        attrs.update(evaluation_attrs(evaluation, self.problem))
        self._tell(trial, config, evaluation.status, value, attrs)

    def _tell(self, trial: optuna.Trial, config: KernelConfig, status: Status, value: float | None, attrs: dict) -> None:
        attrs = {**attrs, "status": status.value}
        set_trial_attrs(trial, attrs)
        state = status.trial_state
        self._finish(trial, value if state is TrialState.COMPLETE else None, state=state)
        self.progress.on_evaluated(TrialRecord(trial.number, config, status, value, attrs))
