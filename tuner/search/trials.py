"""A layer's study as the Optuna record holds it: its name (the GPU, layer, problem, families and space),
each trial's parameters under their joint names and its outcome in user attributes, read back typed
(TrialRecord), and the candidates a run's workers have finished or hold."""
from __future__ import annotations

import datetime as dt
import warnings
from dataclasses import asdict, dataclass

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.build.compile_cache import CompileResult
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.core.status import Status
from tuner.families.base import KernelConfig
from tuner.measure.evaluate import Evaluation
from tuner.search.space import FAMILY_PARAM, JointSpace, config_from_params

# What a trial's value is, as Optuna's plots and optuna-dashboard label it (else "Objective 0").
METRIC_NAME = "median µs"
# The user attribute of a trial answered from the record (the number of the trial that measured it).
FROM_RECORD = "from_record"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the study holds it, typed."""

    number: int
    config: KernelConfig
    status: Status
    median_us: float | None
    attrs: dict

    @property
    def reason(self) -> str | None:
        return self.attrs.get("reason")


def study_name(device: DeviceFacts, layer: str, problem: ConvProblem, joint: JointSpace) -> str:
    """device/layer/shape/families@space-digest/dtypes[+epilogue]: a study per search space (see open_study)."""
    return f"{device.slug}/{layer}/{problem.key}/{joint.key}@{joint.digest}/{problem.variant_key}"


def problem_of_study(name: str) -> tuple[str, str, str] | None:
    """(device, shape, dtypes[+epilogue]) of a name study_name() made: the problem, whatever the layer
    name and the space; None for any other name."""
    parts = name.split("/")
    return (parts[0], parts[2], parts[4]) if len(parts) == 5 else None


def label_values(study: optuna.Study) -> None:
    """Name what a trial's value is (METRIC_NAME) for Optuna's plots and optuna-dashboard."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([METRIC_NAME])


def joint_distributions(joint: JointSpace, family: str) -> dict[str, CategoricalDistribution]:
    """What ask_config suggests for a trial of `family`."""
    distributions = {FAMILY_PARAM: CategoricalDistribution(list(joint.families))}
    for knob, choices in joint.space(family).choices.items():
        distributions[f"{family}.{knob}"] = CategoricalDistribution(list(choices))
    return distributions


def fits(params: dict, joint: JointSpace) -> bool:
    family = params.get(FAMILY_PARAM)
    if family not in joint.families:
        return False
    distributions = joint_distributions(joint, family)
    return set(params) == set(distributions) and all(params[name] in d.choices for name, d in distributions.items())


def params_key(params: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


# A trial's measurement detail (what the tables and the replay read back, nothing a query filters on)
# is written as one user attribute, DETAIL_ATTR: one journal line instead of one per field.
DETAIL_ATTR = "detail"
DETAIL_KEYS = frozenset({"measurement", "attributes", "ptxas", "grid", "cluster", "spread", "tflops", "gbps",
                         "measured_at", "compile_cached", "family"})


def trial_attrs(trial: FrozenTrial) -> dict:
    """Every attribute the tuner recorded for a trial, its detail merged in (journals written before the
    detail was one attribute hold the same keys at the top)."""
    attrs = dict(trial.user_attrs)
    return {**(attrs.pop(DETAIL_ATTR, None) or {}), **attrs}


def set_trial_attrs(trial: optuna.Trial, attrs: dict) -> None:
    detail = {key: value for key, value in attrs.items() if key in DETAIL_KEYS}
    for key, value in attrs.items():
        if key not in DETAIL_KEYS:
            trial.set_user_attr(key, value)
    if detail:
        trial.set_user_attr(DETAIL_ATTR, detail)


def record_of(trial: FrozenTrial, problem: ConvProblem) -> TrialRecord:
    return TrialRecord(trial.number, config_from_params(problem, trial.params),
                       Status(trial.user_attrs["status"]), trial.value, trial_attrs(trial))


def readable(trial: FrozenTrial) -> bool:
    """A finished trial with an outcome and a family (a study written before families were
    parameters has none: its trials are history, not candidates)."""
    return "status" in trial.user_attrs and FAMILY_PARAM in trial.params


def queued_keys(study: optuna.Study) -> set[tuple]:
    """The parameters of the trials queued (enqueue_trial's, kept as fixed params until asked) or running."""
    return {params_key(t.params or t.system_attrs.get("fixed_params", {}))
            for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))}


def recorded_trials(study: optuna.Study, problem: ConvProblem) -> dict[tuple, TrialRecord]:
    """Finished trials that carry an outcome (FAIL means interrupted: those are tried again)."""
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    return {params_key(t.params): record_of(t, problem) for t in finished if readable(t)}


def ranked(study: optuna.Study, problem: ConvProblem, family: str | None = None) -> list[TrialRecord]:
    """Measured configurations (of one family, if named), fastest first, each once (answers from
    the record left out)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    originals = [record_of(t, problem) for t in complete if FROM_RECORD not in t.user_attrs and readable(t)]
    if family is not None:
        originals = [r for r in originals if r.config.family == family]
    return sorted(originals, key=lambda r: r.median_us)


def compile_attrs(result: CompileResult) -> dict:
    attrs = {"config": result.config.name, "family": result.config.family, "compile_s": round(result.seconds, 2),
             "compile_cached": result.cached}
    if result.ptxas:
        attrs["ptxas"] = asdict(result.ptxas)
    return attrs


def evaluation_attrs(evaluation: Evaluation, problem: ConvProblem) -> dict:
    attrs: dict = {"status": evaluation.status.value, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    if evaluation.reason:
        attrs["reason"] = evaluation.reason
    if evaluation.error is not None:
        attrs["error"] = evaluation.error
    if evaluation.grid:
        attrs["grid"] = list(evaluation.grid)
        attrs["cluster"] = list(evaluation.cluster)
    if evaluation.attributes:
        attrs["attributes"] = asdict(evaluation.attributes)
    if evaluation.measurement:
        m = evaluation.measurement
        attrs.update(measurement=asdict(m), spread=m.spread, tflops=m.tflops(problem), gbps=m.gbps(problem))
    return attrs


def counted_in_run(study: optuna.Study, run_id: str) -> int:
    """Candidates compiled and evaluated under this run id, by any worker: what --trials counts. A
    compile that was killed or timed out counts too (FAIL, retried by a later run), or a run whose
    compiles keep dying would never end."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    return sum(1 for t in finished if t.user_attrs.get("run") == run_id and "compile_s" in t.user_attrs
               and FROM_RECORD not in t.user_attrs
               and (t.state is not TrialState.FAIL or t.user_attrs.get("transient")))


def in_flight_in_run(study: optuna.Study, run_id: str) -> int:
    """Candidates other workers of this run hold right now (asked, not yet told): they will count,
    so a worker does not start a batch that would overshoot --trials."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return sum(1 for t in running if t.user_attrs.get("run") == run_id)
