"""Measurements recorded on a GPU, replayed without one: a compiler and an evaluator that answer
from a CSV of (configuration, outcome, µs). CPU tests of the search and of several workers use it,
and so does the benchmark's replayed tuner. Configurations the recording lacks are answered
infra_error, never with an invented number."""
from __future__ import annotations

import csv
from dataclasses import dataclass
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
from tuner.search.space import make_config
from tuner.store.results import ResultsError
from tuner.core.status import Status
from tuner.search.study import recorded_trials

OUTCOME_FIELDS = ("status", "median_us", "p10_us", "p90_us", "error", "grid_blocks", "blocks_per_sm")


def fields(family: str) -> tuple[str, ...]:
    """A family's record columns: its knobs, then the outcome."""
    return (*registry.get(family).knobs, *OUTCOME_FIELDS)


@dataclass(frozen=True)
class Recorded:
    status: Status
    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    error: float | None


def _number(text: str) -> float | None:
    return float(text) if text not in ("", "None") else None


def recorded_rows(path: Path, problem: ConvProblem, family: str) -> list[tuple[KernelConfig, Recorded]]:
    """Each data row of a record (lines starting with # are comments) as its configuration and outcome;
    a damaged row (a truncated file, an edit) is refused with its line number."""
    knobs = registry.get(family).knobs
    parsed = []
    try:
        with open(path, newline="") as handle:
            lines = [(number, line) for number, line in enumerate(handle, start=1) if not line.startswith("#")]
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{path} cannot be read ({type(error).__name__})") from None
    rows = csv.DictReader(line for _, line in lines)
    for row in rows:
        number = lines[rows.line_num - 1][0] if rows.line_num <= len(lines) else len(lines)
        try:
            if None in row.values() or None in row:
                raise ValueError("fields missing or extra")
            # a knob added after the record was written is absent: the family reads its default
            parsed.append((make_config(problem, family, {k: row[k] for k in knobs if k in row}),
                           Recorded(Status(row["status"]), _number(row["median_us"]), _number(row["p10_us"]),
                                    _number(row["p90_us"]), _number(row["error"]))))
        except (KeyError, TypeError, ValueError) as error:
            raise ResultsError(f"{path} line {number} is not a {family} record row ({error}); record the landscape "
                               "again with `tune.py bench --steps landscape`") from None
    return parsed


def read_record(path: Path, problem: ConvProblem, family: str) -> dict[str, Recorded]:
    """Configuration name -> what was recorded for one family's candidates."""
    return {config.name: recorded for config, recorded in recorded_rows(path, problem, family)}


def fastest_recorded(path: Path, problem: ConvProblem, family: str, count: int) -> list[KernelConfig]:
    """The `count` fastest valid configurations of a recorded landscape, fastest first."""
    valid = [(recorded.median_us, config) for config, recorded in recorded_rows(path, problem, family)
             if recorded.status is Status.ok and recorded.median_us is not None]
    return [config for _, config in sorted(valid, key=lambda pair: pair[0])[:count]]


def record_rows(study: optuna.Study, problem: ConvProblem, family: str) -> list[dict]:
    """One family's measured trials of a study as record rows."""
    rows = []
    for record in recorded_trials(study, problem).values():
        if record.status is Status.invalid or record.config.family != family:  # invalid: never compiled
            continue
        measurement = record.attrs.get("measurement") or {}
        rows.append({**record.config.search_params, "status": record.status.value,
                     "median_us": record.median_us, "p10_us": measurement.get("p10_us"),
                     "p90_us": measurement.get("p90_us"), "error": record.attrs.get("error"),
                     "grid_blocks": volume(record.attrs.get("grid") or (0, 0, 0)),
                     "blocks_per_sm": (record.attrs.get("attributes") or {}).get("max_active_blocks_per_sm")})
    return sorted(rows, key=lambda r: [str(r[f]) for f in registry.get(family).knobs])


def write_record(path: Path, rows: list[dict], comment: str, family: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        for line in comment.splitlines():
            handle.write(f"# {line}\n")
        writer = csv.DictWriter(handle, fieldnames=fields(family))
        writer.writeheader()
        writer.writerows(rows)


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
