"""Replaying H100 measurements: the record round-trips, and several workers share one study."""
from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from tuner.search.space import JointSpace
from tuner.search.replay import ReplayCompiler, ReplayEvaluator, read_record
from tuner.families.base import LaunchArgs
from tuner.build.abi import KernelBinary
from tuner.families.sm80.space import make_config
from tuner.core.status import Status
from tuner.search.study import StudyRunner, open_study
from tuner.search.trials import counted_in_run

RECORD = Path(__file__).parent / "data" / "h100_conv_1_record.csv"
RUN = "ci-two-workers"
TRIALS = 24


def test_record_holds_real_h100_numbers(conv_1):
    record = read_record(RECORD, conv_1, "sm80")
    measured = [r.median_us for r in record.values() if r.status is Status.ok]
    assert len(measured) >= 100
    assert 3.5 < min(measured) < 5.0  # the conv_1 winners took about 4 µs
    assert max(measured) > 3 * min(measured)  # the search matters


def test_replay_answers_recorded_and_refuses_the_rest(conv_1):
    record = read_record(RECORD, conv_1, "sm80")
    name = next(n for n, r in record.items() if r.status is Status.ok)
    evaluator = ReplayEvaluator(record)
    assert evaluator.evaluate(KernelBinary(Path("replay") / name), conv_1, LaunchArgs(32)).measurement.median_us == record[name].median_us
    unknown = make_config(conv_1, {"tile": "64x64x64", "warps": "2x2x1", "stages": 6, "swizzle": 8,
                                   "iterator": "analytic", "split_k": 8})
    if unknown.name not in record:
        assert evaluator.evaluate(KernelBinary(Path("replay") / unknown.name), conv_1, LaunchArgs(32, split_k=8)).status is Status.infra_error


class PacedEvaluator(ReplayEvaluator):
    """A replay that takes a GPU's few milliseconds a measurement: with none, on a loaded 2-core CI machine the
    first worker ran all the trials before the second had started (both contribute is what the test checks)."""

    def evaluate(self, *args, **kwargs):
        time.sleep(0.05)
        return super().evaluate(*args, **kwargs)


def _worker(journal: str, log: str, seed: int, conv_1, space, device, started) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = JournalStorage(JournalFileBackend(journal))
    study = open_study("two-workers", storage, seed)
    evaluator = PacedEvaluator(read_record(RECORD, conv_1, "sm80"), Path(log))
    started.wait(timeout=120)  # both workers have the study open before either measures
    StudyRunner(study, conv_1, JointSpace((space,)), device, ReplayCompiler(jobs=4), evaluator, run_id=RUN).run(TRIALS)


@pytest.mark.slow
def test_two_workers_share_one_study(tmp_path, conv_1, sm80_space, h100):
    journal = str(tmp_path / "optuna.journal")
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    context = multiprocessing.get_context("spawn")
    started = context.Barrier(2)
    workers = [context.Process(target=_worker, args=(journal, str(log), i, conv_1, sm80_space, h100, started))
               for i, log in enumerate(logs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
        assert worker.exitcode == 0
    evaluated = [line for log in logs for line in log.read_text().split()]
    per_worker = [len(log.read_text().split()) for log in logs]
    assert all(count > 0 for count in per_worker), per_worker  # both contribute
    assert max(Counter(evaluated).values()) == 1  # no configuration measured twice
    study = optuna.load_study(study_name="two-workers", storage=JournalStorage(JournalFileBackend(journal)))
    assert counted_in_run(study, RUN) == len(evaluated)  # every measurement recorded, once
    assert TRIALS <= len(evaluated) <= TRIALS + 4  # shared: at most one batch (4) over the run's budget
    states = Counter(t.state for t in study.trials)
    assert states[optuna.trial.TrialState.RUNNING] == 0
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
