"""Measurements recorded on a GPU, replayed without one: a compiler and an evaluator that answer
from a CSV of (configuration, outcome, µs). CPU tests of the search and of several workers use it,
and so does the benchmark's replayed tuner. Configurations the recording lacks are answered
infra_error, never with an invented number."""
from __future__ import annotations

from pathlib import Path

import optuna

from tuner.core.device import volume
from tuner.build.compile_cache import CompileResult
from tuner.build.compile_queue import CompletedQueue
from tuner.measure.evaluate import Evaluation
from tuner.families import registry
from tuner.families.base import KernelConfig, LaunchArgs
from tuner.measure.timing import Measurement
from tuner.core.problem import ConvProblem
from tuner.build.abi import KernelBinary
from tuner.store.landscape import recorded_rows
from tuner.store.schema import LandscapeRow, Recorded
from tuner.core.status import Status
from tuner.search.trials import recorded_trials


def read_record(path: Path, problem: ConvProblem, family: str) -> dict[str, Recorded]:
    """Configuration name -> what was recorded for one family's candidates."""
    return {config.name: recorded for config, recorded in recorded_rows(path, problem, family)}


def record_rows(study: optuna.Study, problem: ConvProblem, family: str) -> list[LandscapeRow]:
    """One family's measured trials of a study as record rows."""
    rows = []
    for record in recorded_trials(study, problem).values():
        if record.status is Status.invalid or record.config.family != family:  # invalid: never compiled
            continue
        measurement = record.attrs.get("measurement") or {}
        rows.append(LandscapeRow(tuple(record.config.search_params.items()),
                                 Recorded(record.status, record.median_us, measurement.get("p10_us"),
                                          measurement.get("p90_us"), record.attrs.get("error")),
                                 volume(record.attrs.get("grid") or (0, 0, 0)),
                                 (record.attrs.get("attributes") or {}).get("max_active_blocks_per_sm")))
    return sorted(rows, key=lambda row: [str(dict(row.knobs)[knob]) for knob in registry.get(family).knobs])


class ReplayCompiler:
    """'Compiles' instantly; the library path names the configuration for ReplayEvaluator. Under the
    study's pipeline every compile is finished when submitted, so each candidate is asked with the
    batch's others (jobs - 1) still untold, as on a GPU host where compiles finish one by one."""

    def __init__(self, jobs: int = 8):
        self.jobs = jobs
        self.kernels: set[str] = set()

    def open_queue(self) -> CompletedQueue:
        return CompletedQueue(self.compile_many)

    def compile_many(self, configs: list[KernelConfig], on_done=None) -> list[CompileResult]:
        results = []
        for config in configs:
            self.kernels.add(config.compiled.name)
            result = CompileResult(config, config.name, Path("replay") / config.name, 0.0, False, None, None)
            if on_done:
                on_done(result)
            results.append(result)
        return results


class ReplayEvaluator:
    def __init__(self, record: dict[str, Recorded], log: Path | None = None):
        self.record = record
        self.log = log
        self.evaluated: list[str] = []

    def evaluate(self, binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs,
                 seed: int | None = None) -> Evaluation:
        name = binary.path.name
        self.evaluated.append(name)
        if self.log:
            with open(self.log, "a") as handle:
                handle.write(name + "\n")
        recorded = self.record.get(name)
        if recorded is None:
            return Evaluation(Status.infra_error, reason="not in the recording being replayed")
        if recorded.status is not Status.ok:
            return Evaluation(recorded.status, reason="recorded outcome", error=recorded.error)
        measurement = Measurement(recorded.median_us, recorded.p10_us or recorded.median_us,
                                  recorded.p90_us or recorded.median_us, 0, 0, 0)
        return Evaluation(Status.ok, error=recorded.error, measurement=measurement)
