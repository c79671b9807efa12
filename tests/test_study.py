"""The Optuna loop with a fake compiler and a fake GPU, on the real sm80 space and conv_1."""
import dataclasses
import datetime
import itertools
import math
import os
import socket
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import Future
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from conftest import config_for
from conftest import params as sm80_params
import tuner.search.study as study_module
from tuner.build.compile_cache import CompileResult
from tuner.build.compile_queue import CompletedQueue
from tuner.build.nvcc import PtxasReport
from tuner.measure.evaluate import Evaluation
from tuner.measure.timing import Measurement
from tuner.measure.run import KernelAttributes
from tuner.families.base import SearchSpace
from tuner.families.sm80.space import reference_config
from tuner.families.sm80_common.space import IteratorAlgorithm
from tuner.search.space import JointSpace, config_from_params, static_problems
from tuner.core.status import Status
from tuner.search.study import (EXHAUSTED_AFTER_ASKS, QUEUE_UNTRIED_AFTER_ASKS, StudyProgress, StudyRunner, ask_config,
                                open_study, request_stop)
from tuner.search.trials import (DETAIL_ATTR, DETAIL_KEYS, counted_in_run, in_flight_in_run, params_key, ranked,
                                 recorded_trials, study_name, trial_attrs)
from tuner.search.workers import UNTAGGED_GRACE, fail_orphans

optuna.logging.set_verbosity(optuna.logging.WARNING)


def params(**overrides) -> dict:
    """sm80 parameters as the joint study stores them; defaults are the reference config."""
    return {"family": "sm80", **{f"sm80.{name}": value for name, value in sm80_params(**overrides).items()}}


def fake_median(config) -> float:
    """A made-up device time that depends on every parameter."""
    return round(2.0 + config.tile.m * config.tile.n / 4096 + 0.3 * config.stages + 0.05 * config.split_k
                 + 0.01 * config.swizzle + 0.001 * config.warps.m + 0.0001 * config.warps.n
                 + (0.5 if config.iterator is IteratorAlgorithm.analytic else 0.0), 6)


def wrong(config) -> bool:
    """The fake GPU computes garbage for swizzle 2."""
    return config.swizzle == 2


class FakeCompiler:
    """Records every configuration it is asked to compile; 'fails' the ones `fails` picks."""

    def __init__(self, jobs: int = 2, fails=lambda config: False):
        self.jobs = jobs
        self.fails = fails
        self.compiled = []
        self.kernel_of: dict[Path, object] = {}

    def compile_many(self, configs, on_done=None):
        results = []
        for config in configs:
            self.compiled.append(config)
            if self.fails(config):
                result = CompileResult(config, "k" + config.compiled.name, None, 2.0, False,
                                       "candidate.cu(40): error: no instance of constructor", None)
            else:
                library = Path("/fake-cache") / config.compiled.name / "candidate.so"
                self.kernel_of[library] = config.compiled
                result = CompileResult(config, "k" + config.compiled.name, library, 2.0, False, None,
                                       PtxasReport(96, 0, 0, 0))
            if on_done:
                on_done(result)
            results.append(result)
        return results

    def open_queue(self):
        return CompletedQueue(self.compile_many)


class StepQueue:
    """Compiles that finish when the test says so, in the order it picks, while the runner waits on
    them in a thread of its own (run_in_thread)."""

    def __init__(self, compiler: FakeCompiler):
        self.compiler = compiler
        self.submitted: list[tuple[object, Future]] = []  # (configuration, its future), in submission order
        self.submissions: list[int] = []  # the size of each submit
        self.changed = threading.Condition()
        self.closed = False

    def submit(self, configs):
        configs = list(configs)
        futures = [Future() for _ in configs]
        with self.changed:
            self.submitted += zip(configs, futures)
            self.submissions.append(len(configs))
            self.changed.notify_all()
        return futures

    def finish(self, index: int) -> None:
        config, future = self.submitted[index]
        future.set_result(self.compiler.compile_many([config])[0])

    def config(self, index: int):
        return self.submitted[index][0]

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.submitted) >= count, timeout=10), \
                f"{len(self.submitted)} submitted, {count} expected"

    def close(self) -> None:
        self.closed = True


def eventually(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def run_in_thread(tuner, candidates: int) -> tuple[threading.Thread, dict]:
    """The runner in a thread, so that the test can finish compiles while it waits; the outcome holds
    what run returned ("done") or raised ("error")."""
    outcome: dict = {}

    def target():
        try:
            outcome["done"] = tuner.run(candidates)
        except BaseException as error:  # noqa: BLE001 -- KeyboardInterrupt included: the test looks at it
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


class FakeEvaluator:
    def __init__(self, compiler: FakeCompiler, raise_on_call: int | None = None):
        self.compiler = compiler
        self.raise_on_call = raise_on_call
        self.calls = []

    def evaluate(self, library, problem, launch, seed=None):
        split_k = launch.split_k
        config = dataclasses.replace(self.compiler.kernel_of[library.path], split_k=split_k)
        self.calls.append(config)
        if self.raise_on_call is not None and len(self.calls) == self.raise_on_call:
            raise RuntimeError("the GPU fell off the bus")
        m, n, _ = problem.gemm_mnk
        grid = (math.ceil(m / config.tile.m), math.ceil(n / config.tile.n), split_k)
        attributes = KernelAttributes(96, 0, config.mainloop_smem_bytes, 0, config.threads, 2)
        if wrong(config):
            return Evaluation(Status.wrong_result, reason="relative L2 error 3.10e-01 exceeds 1e-04 for f32",
                              error=0.31, grid=grid, attributes=attributes)
        median = fake_median(config)
        return Evaluation(Status.ok, error=2e-7, measurement=Measurement(median, median * 0.98, median * 1.03, 30,
                                                                           732, 732),
                          grid=grid, attributes=attributes)


RUN_IDS = (f"test-run-{i}" for i in itertools.count())


class Setup:
    def __init__(self, problem, space, device, storage=None, seed=0, jobs=2, run_id=None, layer="conv_1",
                 **evaluator_options):
        self.problem, self.device = problem, device
        self.space = JointSpace((space,)) if isinstance(space, SearchSpace) else space
        self.storage = storage or optuna.storages.InMemoryStorage()
        self.name = study_name(device, layer, problem, self.space)
        self.study = open_study(self.name, self.storage, seed, self.space)
        self.compiler = FakeCompiler(jobs=jobs)
        self.evaluator = FakeEvaluator(self.compiler, **evaluator_options)
        self.events = {"batch": [], "compiled": [], "evaluated": []}
        progress = StudyProgress(on_batch=self.events["batch"].append,
                                 on_compiled=self.events["compiled"].append,
                                 on_evaluated=self.events["evaluated"].append)
        self.run_id = run_id or next(RUN_IDS)
        self.tuner = StudyRunner(self.study, problem, self.space, device, self.compiler, self.evaluator, progress,
                           run_id=self.run_id)

    def trials(self, *states):
        return self.study.get_trials(deepcopy=False, states=states or None)


@pytest.fixture
def setup(conv_1, sm80_space, h100):
    return Setup(conv_1, sm80_space, h100)


def config_of(trial, problem):
    return config_from_params(problem, trial.params)


def test_study_name(conv_1, h100, sm80_space):
    joint = JointSpace((sm80_space,))
    name = study_name(h100, "conv_1", conv_1, joint)
    assert name == f"nvidia-h100-80gb-hbm3/conv_1/n1h32w32c32k32r3s3p1u1d1/families=sm80@{joint.digest}/f16_f16_f32_f32"
    narrower = JointSpace((SearchSpace("sm80", tuple((k, v[:1]) for k, v in sm80_space.choices_items)),))
    assert study_name(h100, "conv_1", conv_1, narrower) != name
    other = study_name(h100, "conv_1", dataclasses.replace(conv_1, output_type=conv_1.input_type), joint)
    assert other != name and other.endswith("f16_f16_f16_f32")


def test_open_study_reopens_the_same_study(conv_1, h100):
    storage = optuna.storages.InMemoryStorage()
    first = open_study("s", storage, seed=0)
    first.add_trial(optuna.trial.create_trial(value=1.0))
    again = open_study("s", storage, seed=0)
    assert again.direction == optuna.study.StudyDirection.MINIMIZE
    assert len(again.trials) == 1 and isinstance(again.sampler, optuna.samplers.TPESampler)


def test_params_key_ignores_order_and_type():
    assert params_key({"stages": 3, "tile": "64x64x32"}) == params_key({"tile": "64x64x32", "stages": "3"})
    assert params_key(params()) != params_key(params(stages=4))


def test_ask_samples_the_family_then_its_knobs(sm80_space):
    study = open_study("ask", optuna.storages.InMemoryStorage(), seed=0)
    trial = ask_config(study, JointSpace((sm80_space,)))
    assert set(trial.params) == set(params())
    assert trial.params["family"] == "sm80" and trial.params["sm80.tile"] in sm80_space.choices["tile"]
    assert trial.distributions["sm80.tile"].choices == sm80_space.choices["tile"]


def test_run_compiles_exactly_n_new_configs(setup):
    assert setup.tuner.run(7) == 7
    compiled = setup.compiler.compiled
    assert len(compiled) == 7
    assert len({c.name for c in compiled}) == 7
    assert all(static_problems(c, setup.problem, setup.device) == [] for c in compiled)
    # the batch's places (the compile jobs) filled at the start, then one at a time as candidates are told
    assert setup.events["batch"] == [2, 1, 1, 1, 1, 1]
    assert len(setup.events["compiled"]) == 7
    assert setup.evaluator.calls == compiled
    measured = [t for t in setup.trials(TrialState.COMPLETE, TrialState.PRUNED)
                if t.user_attrs.get("status") != "invalid"]
    assert sorted(t.user_attrs["config"] for t in measured) == sorted(c.name for c in compiled)
    assert setup.trials(TrialState.RUNNING, TrialState.WAITING) == []


def test_statically_invalid_configs_are_pruned_without_compiling(setup):
    setup.tuner.run(6)
    invalid = [t for t in setup.trials() if t.user_attrs.get("status") == "invalid"]
    assert invalid, "the sm80 space holds many configs conv_1 cannot run; the sampler should have hit some"
    compiled_names = {c.name for c in setup.compiler.compiled}
    for trial in invalid:
        config = config_of(trial, setup.problem)
        assert trial.state is TrialState.PRUNED and trial.value is None
        assert trial.user_attrs["reason"] == "; ".join(static_problems(config, setup.problem, setup.device))
        assert trial.user_attrs["config"] == config.name
        assert config.name not in compiled_names


def test_enqueued_reference_is_the_first_candidate(setup):
    setup.study.enqueue_trial(params(), user_attrs={"reference": True})
    assert setup.tuner.run(1) == 1
    assert setup.compiler.compiled == [reference_config(setup.problem)]
    first = setup.trials()[0]
    assert first.params == params()
    assert first.user_attrs["reference"] is True
    assert first.state is TrialState.COMPLETE
    assert first.value == fake_median(reference_config(setup.problem))


def test_measured_trial_attributes(setup):
    setup.study.enqueue_trial(params())
    setup.tuner.run(1)
    trial = setup.trials()[0]
    attrs = trial_attrs(trial)
    config = reference_config(setup.problem)
    # the measurement detail is one journal line; what queries filter on stays at the top
    assert set(trial.user_attrs[DETAIL_ATTR]) <= DETAIL_KEYS and "measurement" not in trial.user_attrs
    assert {"status", "config", "compile_s", "run", "worker"} <= set(trial.user_attrs)
    assert attrs["status"] == "ok" and attrs["config"] == config.name
    assert attrs["compile_cached"] is False and attrs["ptxas"]["registers"] == 96
    assert attrs["measurement"]["median_us"] == fake_median(config)
    assert attrs["tflops"] == pytest.approx(setup.problem.flops / (fake_median(config) * 1e-6) / 1e12)
    assert attrs["grid"] == [8, 1, 1]  # 1024/128 x 32/128 tiles
    assert attrs["error"] == 2e-7


def test_wrong_results_are_pruned_and_never_ranked(setup):
    wrong_params = params(tile="64x64x32", swizzle=2)
    setup.study.enqueue_trial(wrong_params)
    setup.tuner.run(10)
    wrong_trials = [t for t in setup.trials() if t.user_attrs.get("status") == "wrong_result"]
    assert wrong_trials and wrong_trials[0].params == wrong_params
    for trial in wrong_trials:
        assert trial.state is TrialState.PRUNED and trial.value is None
        assert trial.user_attrs["error"] == 0.31 and "relative L2 error" in trial.user_attrs["reason"]
    best = ranked(setup.study, setup.problem)
    assert best, "some candidates should have measured"
    assert all(r.status is Status.ok and not wrong(r.config) for r in best)
    medians = [r.median_us for r in best]
    assert medians == sorted(medians)
    assert medians == sorted(fake_median(c) for c in setup.evaluator.calls if not wrong(c))
    assert all(r.median_us == fake_median(r.config) for r in best)


def test_a_config_twice_in_one_batch_is_measured_once(setup):
    setup.study.enqueue_trial(params(tile="64x64x32"))
    setup.study.enqueue_trial(params(tile="64x64x32"))
    setup.tuner.run(2)
    first, second = setup.trials()[:2]
    assert first.state is TrialState.COMPLETE
    assert second.state is TrialState.FAIL and second.user_attrs["duplicate_of"] == first.number
    names = [c.name for c in setup.compiler.compiled]
    assert names.count(config_for(setup.problem, tile="64x64x32").name) == 1
    assert len(names) == 2


def test_compile_failures_are_pruned_with_the_error(setup):
    setup.compiler.fails = lambda config: config.stages == 5
    setup.study.enqueue_trial(params(tile="64x64x32", stages=5))
    setup.tuner.run(1)
    trial = setup.trials()[0]
    assert trial.state is TrialState.PRUNED
    assert trial.user_attrs["status"] == "compile_failed"
    assert "error: no instance of constructor" in trial.user_attrs["reason"]
    assert setup.evaluator.calls == []


def test_second_run_answers_known_configs_from_the_record(conv_1, sm80_space, h100):
    first = Setup(conv_1, sm80_space, h100)
    first.study.enqueue_trial(params(tile="64x64x32"))                  # will measure
    first.study.enqueue_trial(params(tile="64x64x32", swizzle=2))       # will be wrong
    first.study.enqueue_trial(params(iterator="few_channels"))          # invalid for C=32
    first.tuner.run(4)
    by_key = {params_key(t.params): t for t in first.trials()}
    originals = [by_key[params_key(p)] for p in (params(tile="64x64x32"), params(tile="64x64x32", swizzle=2),
                                                  params(iterator="few_channels"))]

    second = Setup(conv_1, sm80_space, h100, storage=first.storage, seed=1)  # the same study, reopened
    assert len(second.study.trials) == len(first.study.trials)
    for original in originals:
        second.study.enqueue_trial(original.params)
    assert second.tuner.run(3) == 3

    answered = second.trials()[len(first.study.trials):len(first.study.trials) + 3]
    for original, answer in zip(originals, answered):
        assert answer.params == original.params
        assert answer.user_attrs["from_record"] == original.number
        assert answer.state is original.state and answer.value == original.value
        assert answer.user_attrs["status"] == original.user_attrs["status"]
        assert answer.user_attrs["run"] == second.run_id        # answered in this run, not counted by it
    assert counted_in_run(second.study, second.run_id) == 3
    assert len(second.compiler.compiled) == 3
    first_names = {c.name for c in first.compiler.compiled}
    assert not first_names & {c.name for c in second.compiler.compiled}   # nothing compiled twice
    # from-record answers are not ranked twice
    best = ranked(second.study, conv_1)
    assert len(best) == len({r.config.name for r in best})
    assert all("from_record" not in r.attrs for r in best)


def test_evaluator_exception_leaves_the_unfinished_trials_failed(conv_1, sm80_space, h100):
    broken = Setup(conv_1, sm80_space, h100, raise_on_call=3)   # the first call of the second batch
    with pytest.raises(RuntimeError, match="fell off the bus"):
        broken.tuner.run(6)
    assert broken.trials(TrialState.RUNNING, TrialState.WAITING) == []
    failed = [t for t in broken.trials(TrialState.FAIL) if "status" not in t.user_attrs]
    assert len(failed) == 2
    told = [t for t in broken.trials(TrialState.COMPLETE, TrialState.PRUNED) if t.user_attrs.get("status") != "invalid"]
    assert len(told) == 2
    recorded = recorded_trials(broken.study, conv_1)
    assert all(params_key(t.params) not in recorded for t in failed)

    resumed = Setup(conv_1, sm80_space, h100, storage=broken.storage)
    for trial in failed:
        resumed.study.enqueue_trial(trial.params)
    assert resumed.tuner.run(2) == 2
    assert sorted(c.name for c in resumed.compiler.compiled) == sorted(config_of(t, conv_1).name for t in failed)
    retried = resumed.trials()[-2:]
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) and "from_record" not in t.user_attrs
               for t in retried)


class Interrupted(Exception):
    """Stands in for Ctrl-C arriving while the progress display draws a result."""


def test_interrupt_in_a_progress_callback_propagates(conv_1, sm80_space, h100):
    run = Setup(conv_1, sm80_space, h100)

    def on_evaluated(record):
        if record.status is Status.ok:
            raise Interrupted()

    run.tuner.progress = StudyProgress(on_evaluated=on_evaluated)
    run.study.enqueue_trial(params(tile="64x64x32"))
    run.study.enqueue_trial(params(tile="128x128x32"))
    with pytest.raises(Interrupted):
        run.tuner.run(2)
    states = [t.state for t in run.trials()]
    assert states == [TrialState.COMPLETE, TrialState.FAIL]


def tiny_study(conv_1, h100) -> tuple[StudyRunner, optuna.Study, FakeCompiler]:
    space = JointSpace((SearchSpace("sm80", (("tile", ("64x64x32",)), ("warps", ("2x2x1", "1x8x1")), ("stages", (3,)),
                                             ("swizzle", (1,)), ("iterator", ("optimized", "few_channels")),
                                             ("split_k", (1, 2)))),))
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(study_name="tiny", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    compiler = FakeCompiler()
    return StudyRunner(study, conv_1, space, h100, compiler, FakeEvaluator(compiler), run_id="tiny"), study, compiler


def test_a_small_space_ends_once_each_runnable_configuration_has_an_outcome(conv_1, h100):
    tuner, study, compiler = tiny_study(conv_1, h100)
    assert tuner.space_size == 2  # only optimized, 2x2x1 warps, split-K 1 or 2 can run
    assert tuner.run(10) == 2
    assert sorted(c.split_k for c in compiler.compiled) == [1, 2]
    assert len(study.trials) < 40  # no more asks once both were measured (it was EXHAUSTED_AFTER_ASKS)


def test_configurations_the_sampler_never_proposes_are_queued(conv_1, h100):
    tuner, study, compiler = tiny_study(conv_1, h100)
    fixed = {"family": "sm80", "sm80.tile": "64x64x32", "sm80.warps": "2x2x1", "sm80.stages": 3, "sm80.swizzle": 1,
             "sm80.iterator": "optimized", "sm80.split_k": 1}
    study.sampler = optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0))
    assert tuner.run(10) == 2  # split-K 2, which the sampler never proposes, is measured too
    assert sorted(c.split_k for c in compiler.compiled) == [1, 2]
    assert len(study.trials) < 40 + QUEUE_UNTRIED_AFTER_ASKS


@pytest.mark.slow
def test_a_sampler_that_only_proposes_what_is_known_ends_the_study(conv_1, h100):
    tuner, study, compiler = tiny_study(conv_1, h100)
    tuner.space_size = 3  # a configuration the sampler can never propose: the idle asks end the study
    assert tuner.run(10) == 2
    assert len(study.trials) >= EXHAUSTED_AFTER_ASKS


def test_a_run_resumed_under_its_id_does_only_what_is_left(conv_1, sm80_space, h100):
    broken = Setup(conv_1, sm80_space, h100, run_id="nightly-2026-11-22", raise_on_call=3)
    with pytest.raises(RuntimeError):
        broken.tuner.run(5)
    assert counted_in_run(broken.study, "nightly-2026-11-22") == 2
    resumed = Setup(conv_1, sm80_space, h100, storage=broken.storage, run_id="nightly-2026-11-22")
    assert resumed.tuner.run(5) == 3
    assert counted_in_run(resumed.study, "nightly-2026-11-22") == 5
    assert resumed.tuner.run(5) == 0  # done: running it again does nothing
    other = Setup(conv_1, sm80_space, h100, storage=broken.storage, run_id="nightly-2026-11-23")
    assert other.tuner.run(2) == 2     # a new run id starts counting afresh


class FrozenClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime(2026, 11, 22, 3, 0, 0, 123456, tzinfo=tz)


def test_default_run_ids_are_unique(conv_1, sm80_space, h100, monkeypatch):
    import tuner.search.trials as trials_module
    import tuner.search.workers as workers_module

    for clocked in (trials_module, workers_module):  # the modules that read the time for a study's trials
        monkeypatch.setattr(clocked, "dt", types.SimpleNamespace(datetime=FrozenClock, timezone=datetime.timezone))
    storage = optuna.storages.InMemoryStorage()
    first = Setup(conv_1, sm80_space, h100, storage=storage)
    first_tuner = StudyRunner(first.study, conv_1, first.space, h100, first.compiler, first.evaluator)
    assert first_tuner.run(2) == 2
    second = Setup(conv_1, sm80_space, h100, storage=storage)
    second_tuner = StudyRunner(second.study, conv_1, second.space, h100, second.compiler, second.evaluator)
    assert second_tuner.run_id != first_tuner.run_id
    assert second_tuner.run(2) == 2


def test_fail_orphans(conv_1, sm80_space, h100):
    study = Setup(conv_1, sm80_space, h100).study
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    host = socket.gethostname()
    owners = [f"{host}:{dead_pid}", f"{host}:{os.getpid()}", f"elsewhere-{host}:{dead_pid}", ""]
    trials = []
    for owner in owners:
        trial = study.ask()
        if owner:
            trial.set_user_attr("worker", owner)
        trials.append(trial)
    assert fail_orphans(study) == 1
    states = [study.trials[t.number].state for t in trials]
    assert states == [TrialState.FAIL, TrialState.RUNNING, TrialState.RUNNING, TrialState.RUNNING]
    assert fail_orphans(study) == 0
    # the untagged one (a kill between ask and tag) is swept once it is older than the grace period
    later = study.trials[trials[-1].number].datetime_start + UNTAGGED_GRACE + datetime.timedelta(seconds=1)
    assert fail_orphans(study, now=later) == 1
    assert study.trials[trials[-1].number].state is TrialState.FAIL
    assert study.trials[trials[1].number].state is TrialState.RUNNING  # tagged and alive: never by age


def test_ask_config_tags_before_sampling(conv_1, sm80_space, h100):
    study = Setup(conv_1, sm80_space, h100).study
    seen = []
    original = optuna.Trial.suggest_categorical

    def watch(trial, name, choices):
        seen.append(dict(trial.user_attrs))  # what the storage holds for the trial so far
        return original(trial, name, choices)

    optuna.Trial.suggest_categorical = watch
    try:
        ask_config(study, JointSpace((sm80_space,)), {"worker": "h:1", "run": "r"})
    finally:
        optuna.Trial.suggest_categorical = original
    assert seen and all(attrs == {"worker": "h:1", "run": "r"} for attrs in seen)


def test_the_heartbeat_waits_the_storages_own_grace_period(tmp_path):
    """Optuna wraps an RDBStorage in its cache; the grace period a finished worker waits for a dead host's
    trials is the RDBStorage's (120 s), not Optuna's two-interval default for an unset one (40 s)."""
    from tuner.store.journal import study_storage
    from tuner.search.workers import Heartbeat

    storage = study_storage(f"sqlite:///{tmp_path / 'h.db'}", tmp_path, "gpu", heartbeat_s=20, grace_s=120)
    study = optuna.create_study(storage=storage)
    beating = Heartbeat(study, storage)
    assert beating.storage is not None and beating.stale_after_s == 120
    trial = study.ask()
    beating.hold(trial)
    assert list(beating.held) == [trial.number]
    beating.release(trial)
    beating.close()
    assert not beating.held
    memory = optuna.storages.InMemoryStorage()
    assert Heartbeat(optuna.create_study(storage=memory), memory).storage is None  # in memory: no heartbeats


def _with_tiles(space: SearchSpace, tiles: tuple) -> SearchSpace:
    return SearchSpace(space.family, tuple((k, tiles if k == "tile" else v) for k, v in space.choices_items))


def test_a_changed_space_is_a_new_study_that_carries_over_what_fits(conv_1, h100, sm80_space):
    """Optuna refuses a categorical whose choices changed within a study ("does not support dynamic
    value space"): a space file that narrows or widens the tiles must open a study of its own, seeded
    with the old study's measurements of the configurations it still holds."""
    storage = optuna.storages.InMemoryStorage()
    tiles = sm80_space.choices["tile"]
    old = Setup(conv_1, _with_tiles(sm80_space, tiles[:3]), h100, storage=storage)
    old.tuner.run(12)
    old_records = recorded_trials(old.study, conv_1)
    wider = Setup(conv_1, _with_tiles(sm80_space, tiles[:4]), h100, storage=storage)
    assert wider.name != old.name
    assert set(recorded_trials(wider.study, conv_1)) == set(old_records)
    wider.tuner.run(4)  # asks over the new choices without Optuna's ValueError
    assert counted_in_run(wider.study, wider.run_id) == 4
    narrow = Setup(conv_1, _with_tiles(sm80_space, tiles[:1]), h100, storage=storage)
    carried = recorded_trials(narrow.study, conv_1)
    assert carried and all(dict(key)["sm80.tile"] == str(tiles[0]) for key in carried)
    assert {k for k in recorded_trials(wider.study, conv_1) if dict(k)["sm80.tile"] == str(tiles[0])} == set(carried)
    reopened = Setup(conv_1, _with_tiles(sm80_space, tiles[:1]), h100, storage=storage)
    assert len(reopened.study.trials) == len(narrow.study.trials)  # carried once, when created


def test_the_same_problem_under_another_layer_name_starts_from_its_measurements(conv_1, h100, sm80_space):
    """An imported network's conv with the problem of a table layer (vgg11_b32_features_16 and the
    layer of the same shape, say) is tuned once: its study opens with the other's measurements."""
    storage = optuna.storages.InMemoryStorage()
    table = Setup(conv_1, sm80_space, h100, storage=storage)
    table.tuner.run(6)
    imported = Setup(conv_1, sm80_space, h100, storage=storage, layer="net_b1_conv")
    assert imported.name != table.name
    assert set(recorded_trials(imported.study, conv_1)) == set(recorded_trials(table.study, conv_1))
    other = dataclasses.replace(conv_1, k=conv_1.k * 2)
    assert recorded_trials(Setup(other, sm80_space, h100, storage=storage, layer="wider").study, other) == {}


def test_a_killed_compile_fails_the_trial_for_a_retry_instead_of_recording_it(conv_1, h100, sm80_space):
    setup = Setup(conv_1, sm80_space, h100)
    killed = []

    def compile_many(configs, on_done=None):
        results = [CompileResult(c, "k", None, 1.0, False, "nvcc error: cicc died due to signal 2", None,
                                 transient=True) for c in configs]
        killed.extend(results)
        return results
    setup.compiler.compile_many = compile_many
    setup.tuner.run(2, batch_size=2)
    assert len(killed) == 2 and counted_in_run(setup.study, setup.run_id) == 2  # the run ends
    assert all(r.status is Status.invalid for r in recorded_trials(setup.study, conv_1).values())
    failed = setup.trials(TrialState.FAIL)
    assert len(failed) == 2 and all(t.user_attrs["transient"] and "signal 2" in t.user_attrs["reason"] for t in failed)


# --- the pipeline: the next candidate is asked as soon as one compile finishes ------------------------

@pytest.fixture
def stepped(conv_1, sm80_space, h100, monkeypatch):
    """A run of 3 compile jobs whose compiles the test finishes one by one."""
    monkeypatch.setattr(study_module, "STOP_POLL_S", 0.01)
    run = Setup(conv_1, sm80_space, h100, jobs=3)
    run.queue = StepQueue(run.compiler)
    run.compiler.open_queue = lambda: run.queue
    yield run
    study_module._stop_requested.clear()


def test_the_next_candidate_is_asked_when_the_first_compile_finishes(stepped):
    thread, outcome = run_in_thread(stepped.tuner, 5)
    stepped.queue.wait_for(3)
    assert stepped.queue.submissions == [3] and stepped.evaluator.calls == []
    stepped.queue.finish(1)          # the batch's second compile finishes first
    stepped.queue.wait_for(4)        # its candidate is told and a fourth is asked in its place...
    assert stepped.evaluator.calls == [stepped.queue.config(1)]
    running = {t.user_attrs["config"] if "config" in t.user_attrs else config_of(t, stepped.problem).name
               for t in stepped.trials(TrialState.RUNNING)}
    # ...while the first and the third still compile
    assert running == {stepped.queue.config(i).name for i in (0, 2, 3)}
    for told, index in enumerate((2, 0, 3), start=2):
        stepped.queue.finish(index)
        eventually(lambda told=told: len(stepped.evaluator.calls) == told)
    stepped.queue.wait_for(5)
    stepped.queue.finish(4)
    thread.join(10)
    assert outcome == {"done": 5}
    assert stepped.queue.submissions == [3, 1, 1] and stepped.queue.closed
    assert stepped.evaluator.calls == [stepped.queue.config(i) for i in (1, 2, 0, 3, 4)]  # as they finished
    assert stepped.trials(TrialState.RUNNING, TrialState.WAITING) == []
    assert counted_in_run(stepped.study, stepped.run_id) == 5


def test_a_stop_while_compiles_run_fails_every_untold_candidate(stepped):
    thread, outcome = run_in_thread(stepped.tuner, 8)
    stepped.queue.wait_for(3)
    stepped.queue.finish(0)
    stepped.queue.wait_for(4)
    stepped.queue.finish(2)          # finished, not evaluated yet when the stop comes: not measured
    request_stop()
    thread.join(10)
    assert isinstance(outcome.get("error"), KeyboardInterrupt) and stepped.queue.closed
    assert stepped.trials(TrialState.RUNNING, TrialState.WAITING) == []
    assert stepped.evaluator.calls in ([stepped.queue.config(0)],
                                       [stepped.queue.config(0), stepped.queue.config(2)])
    told = {t.user_attrs["config"] for t in stepped.trials(TrialState.COMPLETE, TrialState.PRUNED)
            if t.user_attrs.get("status") != "invalid"}
    failed = {config_of(t, stepped.problem).name for t in stepped.trials(TrialState.FAIL)
              if "status" not in t.user_attrs and "duplicate_of" not in t.user_attrs}
    assert told | failed == {stepped.queue.config(i).name for i in range(4)} and not told & failed


def test_an_evaluator_failure_mid_pipeline_fails_the_candidates_still_compiling(stepped):
    stepped.evaluator.raise_on_call = 2
    thread, outcome = run_in_thread(stepped.tuner, 8)
    stepped.queue.wait_for(3)
    stepped.queue.finish(2)
    stepped.queue.wait_for(4)
    stepped.queue.finish(0)          # the GPU falls off the bus on this one
    thread.join(10)
    assert "fell off the bus" in str(outcome.get("error"))
    assert stepped.trials(TrialState.RUNNING, TrialState.WAITING) == [] and stepped.queue.closed
    assert counted_in_run(stepped.study, stepped.run_id) == 1
    failed = [t for t in stepped.trials(TrialState.FAIL) if "status" not in t.user_attrs
              and "duplicate_of" not in t.user_attrs]
    assert len(failed) == 3


def test_the_budget_is_never_overshot_with_candidates_in_flight(conv_1, sm80_space, h100):
    run = Setup(conv_1, sm80_space, h100, jobs=4)
    held_at_ask = []
    ask = run.tuner._ask

    def counting_ask():
        held_at_ask.append(counted_in_run(run.study, run.run_id) + in_flight_in_run(run.study, run.run_id))
        return ask()

    run.tuner._ask = counting_ask
    assert run.tuner.run(6) == 6
    assert max(held_at_ask) <= 5  # every ask has room for its candidate
    assert counted_in_run(run.study, run.run_id) == 6 and len(run.compiler.compiled) == 6
    assert run.events["batch"] == [4, 1, 1]


def test_other_workers_candidates_in_flight_count_against_the_budget(conv_1, sm80_space, h100):
    run = Setup(conv_1, sm80_space, h100, jobs=4)
    for _ in range(2):  # another worker of the run holds two candidates
        trial = run.study.ask()
        trial.set_user_attr("run", run.run_id)
        trial.set_user_attr("worker", f"elsewhere:{os.getpid()}")
    assert run.tuner.run(5) == 3
    assert run.events["batch"] == [3]
    assert in_flight_in_run(run.study, run.run_id) == 2


def test_queued_seeds_are_submitted_together_then_one_at_a_time(conv_1, sm80_space, h100, monkeypatch):
    monkeypatch.setattr(study_module, "STOP_POLL_S", 0.01)
    run = Setup(conv_1, sm80_space, h100, jobs=2)
    queue = StepQueue(run.compiler)
    run.compiler.open_queue = lambda: queue
    seeds = [params(tile="64x64x32", stages=s) for s in (2, 3, 4, 5)] + [params(tile="128x128x32")]
    for seed in seeds:
        run.study.enqueue_trial(seed)
    thread, outcome = run_in_thread(run.tuner, 6)
    queue.wait_for(4)
    # up to twice the batch at once: the compiler cuts them into units of several kernels where that pays
    assert queue.submissions == [4]
    assert [c.name for c, _ in queue.submitted] == [config_from_params(conv_1, p).name for p in seeds[:4]]
    for index in range(6):
        queue.wait_for(index + 1)
        queue.finish(index)
        eventually(lambda index=index: len(run.evaluator.calls) == index + 1)
    thread.join(10)
    assert outcome == {"done": 6}
    assert queue.submissions == [4, 1, 1]  # no place frees until fewer than the batch are in hand
    assert queue.config(4).name == config_from_params(conv_1, seeds[4]).name
