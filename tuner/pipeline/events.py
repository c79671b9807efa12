"""What a tuning run tells whoever runs it, as typed events handed to a sink in the order they happen. The
library prints nothing; tune.py draws them with rich (tuner/cli/tuning_view.py), a test records them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tuner.analysis.report import Confirmed, FinalistWaste
from tuner.build.compile import CompileResult
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import KernelConfig
from tuner.search.study import StudyClock
from tuner.search.trials import TrialRecord


class Event:
    """Something a tuning run has to say."""


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


@dataclass(frozen=True)
class DeviceFound(Event):
    device: DeviceFacts


@dataclass(frozen=True)
class FamilySkipped(Event):
    """This machine cannot build the family's kernels; `reason` says what to install."""

    family: str
    reason: str


@dataclass(frozen=True)
class LayerTunedAs(Event):
    """An imported layer whose problem best.yaml holds under another name: not tuned again."""

    layer: str
    twin: str


@dataclass(frozen=True)
class LayerFinishedEarlier(Event):
    """A resumed run's layer that an earlier attempt of the same run finished."""

    layer: str
    run_id: str


@dataclass(frozen=True)
class FamilySpace:
    family: str
    candidates: int  # the space's size
    valid: int  # candidates that pass the family's static checks on this layer
    kernels: int  # distinct kernels among them, each compiled once


@dataclass(frozen=True)
class LayerStarted(Event):
    """The layer's problem and its joint space; `left_out`: families a superseding family searches in place of."""

    layer: str
    problem: ConvProblem
    spaces: tuple[FamilySpace, ...]
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class OrphansFailed(Event):
    """Trials a killed worker of this host left running, marked FAIL to be retried."""

    count: int


@dataclass(frozen=True)
class StudyStarted(Event):
    study: str
    trials: int  # candidates this run measures


@dataclass(frozen=True)
class CandidatesAsked(Event):
    count: int


@dataclass(frozen=True)
class KernelCompiled(Event):
    result: CompileResult


@dataclass(frozen=True)
class TrialEvaluated(Event):
    record: TrialRecord


@dataclass(frozen=True)
class StudyEnded(Event):
    study: str
    trials: int  # in the study, every run's
    outcomes: tuple[tuple[str, int], ...]  # this run's, by analysis.report.outcome_name, in name order
    clock: StudyClock
    wall_s: float


@dataclass(frozen=True)
class TrialsFailed(Event):
    """The candidates that did not count, the first of each reason (analysis.report.first_failures)."""

    records: tuple[TrialRecord, ...]


@dataclass(frozen=True)
class NoCandidatePassed(Event):
    layer: str


@dataclass(frozen=True)
class FinalistNotCompiled(Event):
    label: str
    config: KernelConfig
    error: str | None


@dataclass(frozen=True)
class FinalistsFailed(Event):
    """Every finalist failed when re-measured: nothing is recorded."""

    layer: str


@dataclass(frozen=True)
class FinalistsConfirmed(Event):
    rows: tuple[Confirmed, ...]
    problem: ConvProblem
    device: DeviceFacts


@dataclass(frozen=True)
class WinnerChosen(Event):
    """The fastest finalist against the reference configuration (None: it cannot run the problem here);
    `wider`: the fastest candidate of the study that launched more blocks than the winner."""

    winner: Confirmed
    reference: Confirmed | None
    sm_count: int
    wider: TrialRecord | None


@dataclass(frozen=True)
class ProfilerMissing(Event):
    """ncu cannot profile here; the waste rows are the static diagnosis alone."""

    reason: str


@dataclass(frozen=True)
class WasteFound(Event):
    rows: tuple[FinalistWaste, ...]


@dataclass(frozen=True)
class LayerTimed(Event):
    layer: str
    total_s: float
    setup_s: float
    study_s: float
    finish_s: float  # finalists and results


@dataclass(frozen=True)
class BestWritten(Event):
    layer: str
    path: Path


@dataclass(frozen=True)
class ChainedBuilt(Event):
    """The kept kernels' builds for programmatic dependent launch (Family.chained), made into the compile cache."""
    built: int
    failed: tuple[str, ...]  # "<kernel>: <the builder's first line>" for each that did not build
    seconds: float
