"""What one GPU's results hold measured, as one database: best.yaml's tuned kernels, the landscapes
`tune.py bench` recorded and the Optuna record of every trial. get finds a problem's measurements, top_k
its fastest, commit copies measured trials into a study: what seeds a layer's study (search/seeds.py),
what a new study carries over from the problem's others (study.open_study) and what `tune.py predict`
shows as measured."""
from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.core.problem import ConvProblem
from tuner.core.status import Status
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.search.space import FAMILY_PARAM, JointSpace, make_config
from tuner.search.trials import (FINISHED, FROM_RECORD, joint_distributions, params_key, problem_of_study, readable,
                                 record_of)
from tuner.store.best import best_entries
from tuner.store.landscape import LANDSCAPE_DIR, landscape_path, recorded_rows
from tuner.store.schema import BestEntry

StudyKey = tuple[str, str, str]  # (GPU, shape, data types): the problem a study's name holds (problem_of_study)


class Source(enum.Enum):
    best = "best.yaml"              # a layer's tuned kernel
    landscape = "landscape"         # every candidate of a family's landscape, timed on a layer
    tuned = "tuned study"           # the trials of the studies best.yaml names for the problem's layers
    study = "study"                 # the trials of every study of the problem in the storage


@dataclass(frozen=True)
class Measured:
    """One configuration measured on one problem, and where: `where` is the file under the GPU's
    results folder or the study's name."""

    kernel: str
    family: str
    status: Status
    median_us: float | None
    source: Source
    where: str
    config: KernelConfig | None = None  # None: a best.yaml entry of a family or knob this checkout lacks
    trial: FrozenTrial | None = None    # the trial, where the Optuna record measured it


class MeasurementDB:
    """The measurements of one GPU: `folder` is its results/<gpu>/ (None: no files), `storage` its study
    storage (None: no Optuna record). Each query reads the sources it asks."""

    def __init__(self, folder: Path | None = None, storage: optuna.storages.BaseStorage | str | None = None):
        self.folder = folder
        self.storage = storage

    @cached_property
    def entries(self) -> dict[str, BestEntry]:
        return best_entries(self.folder) if self.folder is not None else {}

    def get(self, problem: ConvProblem, *, layer: str | None = None, family: str | None = None,
            sources: Iterable[Source] = tuple(Source)) -> list[Measured]:
        """What the sources (in their order) measured of `problem`, each configuration once, as the first
        source gives it; of `family` only, where given. best.yaml and the tuned studies are the named layer's
        where `layer` is given (any layer's of the problem otherwise), the landscapes always the layer's."""
        return list(_once(self._measured(problem, layer, family, tuple(sources))))

    def top_k(self, problem: ConvProblem, k: int | None, *, layer: str | None = None, family: str | None = None,
              sources: Iterable[Source] = tuple(Source)) -> list[Measured]:
        """The `k` fastest measurements that ran (status ok; all of them where `k` is None), fastest first,
        each configuration once; the rest as get's."""
        ran = [m for m in self._measured(problem, layer, family, tuple(sources))
               if m.status is Status.ok and m.median_us is not None]
        return list(_once(sorted(ran, key=lambda m: m.median_us)))[:k]

    def commit(self, study: optuna.Study, joint: JointSpace, trials: Iterable[FrozenTrial]) -> int:
        """Copy measured trials into `study` (as trials of its joint space); returns how many."""
        copies = [optuna.trial.create_trial(
            state=trial.state, value=trial.value if trial.state is TrialState.COMPLETE else None,
            params=trial.params, distributions=joint_distributions(joint, trial.params[FAMILY_PARAM]),
            user_attrs=trial.user_attrs) for trial in trials]
        study.add_trials(copies)
        return len(copies)

    def trials(self, key: StudyKey, exclude: str | None = None) -> list[FrozenTrial]:
        """The measured trials of every study of the problem `key` names but `exclude` (any layer name, any
        search space), each configuration once: its newest."""
        return [trial for _, trial in self._newest(key, exclude)]

    def _newest(self, key: StudyKey, exclude: str | None = None) -> list[tuple[str, FrozenTrial]]:
        newest: dict[tuple, tuple[str, FrozenTrial]] = {}
        for name in optuna.study.get_all_study_names(self.storage) if self.storage is not None else ():
            if name == exclude or problem_of_study(name) != key:
                continue
            for trial in _measured_trials(optuna.load_study(study_name=name, storage=self.storage)):
                held = newest.get(params_key(trial.params))
                if held is None or _completed(trial) > _completed(held[1]):
                    newest[params_key(trial.params)] = name, trial
        return list(newest.values())

    def _measured(self, problem: ConvProblem, layer: str | None, family: str | None,
                  sources: tuple[Source, ...]) -> Iterator[Measured]:
        for source in sources:
            entries = self._entries(problem, layer) if source in (Source.best, Source.tuned) else []
            if source is Source.best:
                found = (self._best(problem, entry) for entry in entries)
            elif source is Source.landscape:
                found = self._landscapes(problem, layer, family)
            elif source is Source.tuned:
                names = dict.fromkeys(entry.study_name for entry in entries if entry.study_name)
                found = (m for name in names for m in self._tuned(problem, name))
            else:
                found = (m for name, trial in self._newest(self._key(problem))
                         for m in self._from_trials(problem, (trial,), Source.study, name))
            yield from (m for m in found if family is None or m.family == family)

    def _entries(self, problem: ConvProblem, layer: str | None) -> list[BestEntry]:
        return [entry for name, entry in self.entries.items()
                if entry.problem == problem and (layer is None or name == layer)]

    @staticmethod
    def _best(problem: ConvProblem, entry: BestEntry) -> Measured:
        try:
            config = make_config(problem, entry.family, entry.knobs)
        except (KeyError, ValueError, SpaceError):  # a family or knob this checkout no longer has
            config = None
        return Measured(entry.kernel, entry.family, Status.ok, entry.runtime_us, Source.best, "best.yaml", config)

    def _landscapes(self, problem: ConvProblem, layer: str | None, family: str | None) -> Iterator[Measured]:
        if self.folder is None or layer is None:
            return
        for each in (family,) if family else registry.names():
            path = landscape_path(self.folder, each, layer)
            if path.is_file():
                where = f"{LANDSCAPE_DIR}/{each}/{path.name}"
                for config, recorded in recorded_rows(path, problem, each):
                    yield Measured(config.name, each, recorded.status, recorded.median_us, Source.landscape, where,
                                   config)

    def _tuned(self, problem: ConvProblem, name: str) -> Iterator[Measured]:
        try:
            study = optuna.load_study(study_name=name, storage=self.storage)
        except (KeyError, optuna.exceptions.OptunaError):  # not in this storage
            return
        yield from self._from_trials(problem, _measured_trials(study), Source.tuned, name)

    @staticmethod
    def _from_trials(problem: ConvProblem, trials: Iterable[FrozenTrial], source: Source,
                     study: str) -> Iterator[Measured]:
        for trial in trials:
            try:
                record = record_of(trial, problem)
            except (KeyError, TypeError, ValueError, SpaceError):  # a trial of a family or knob this checkout lacks
                continue
            yield Measured(record.config.name, record.config.family, record.status, record.median_us, source, study,
                           record.config, trial)

    def _key(self, problem: ConvProblem) -> StudyKey:
        return (self.folder.name if self.folder else "", problem.key, problem.variant_key)


def _measured_trials(study: optuna.Study) -> list[FrozenTrial]:
    """A study's finished trials with an outcome, those answered from the record left out."""
    return [trial for trial in study.get_trials(deepcopy=False, states=FINISHED)
            if readable(trial) and FROM_RECORD not in trial.user_attrs]


def _completed(trial: FrozenTrial) -> dt.datetime:
    return trial.datetime_complete or dt.datetime.min


def _once(measured: Iterable[Measured]) -> Iterator[Measured]:
    seen = set()
    for each in measured:
        if each.kernel not in seen:
            seen.add(each.kernel)
            yield each
