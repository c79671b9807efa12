"""The measurement database of a GPU: best.yaml, the landscapes and the Optuna record, queried as one."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from conftest import config_for, params, write_best
from tuner.core.problem import problem_to_dict
from tuner.core.status import Status
from tuner.search.measurements import MeasurementDB, Source
from tuner.search.space import JointSpace, joint_params
from tuner.search.study import open_study
from tuner.search.trials import joint_distributions, problem_of_study, study_name
from tuner.store.landscape import landscape_path, recorded_rows

RESULTS = Path(__file__).resolve().parents[1] / "results" / "nvidia-h100-80gb-hbm3"
LAYER = "r50_s4_1x1_512to256_b32"  # tuned, with the landscapes of sm80, sm90_conv and sm90_gemm

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_top_k_of_a_landscape_are_its_fastest_rows_that_ran(layers):
    problem = layers[LAYER].problem
    rows = [(recorded.median_us, config) for config, recorded in recorded_rows(landscape_path(RESULTS, "sm80", LAYER),
                                                                              problem, "sm80")
            if recorded.status is Status.ok]
    fastest = [config for _, config in sorted(rows, key=lambda row: row[0])[:3]]
    found = MeasurementDB(RESULTS).top_k(problem, 3, layer=LAYER, family="sm80", sources=(Source.landscape,))
    assert [m.config for m in found] == fastest
    assert all(m.source is Source.landscape and m.where == f"landscape/sm80/{LAYER}.csv" for m in found)
    assert MeasurementDB(RESULTS).top_k(problem, 3, layer="no_such_layer", sources=(Source.landscape,)) == []
    assert MeasurementDB(None).top_k(problem, 3, layer=LAYER) == []


def test_get_serves_predicts_measured_rows(layers):
    """tune.py predict's measurements of a layer: best.yaml's tuned kernel first, then every kernel the
    landscapes timed, each once (bench.yaml's libraries are predict's own)."""
    from tuner.analysis.measured_ranking import LIBRARY_FAMILY, layer_measurements

    layer = layers[LAYER]
    shown = [(m.name, m.family, m.us) for m in layer_measurements(RESULTS, layer) if m.family != LIBRARY_FAMILY]
    measured = MeasurementDB(RESULTS).get(layer.problem, layer=LAYER, sources=(Source.best, Source.landscape))
    assert measured[0].source is Source.best and measured[0].where == "best.yaml"
    assert [(m.kernel, m.family, m.median_us) for m in measured if m.status is Status.ok] == shown


def test_a_best_entry_of_a_family_this_checkout_lacks_is_measured_without_its_configuration(tmp_path, conv_1):
    write_best(tmp_path, "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm70", "params": {"tile": "t"},
                                    "kernel": "an_old_kernel", "runtime_us": 5.0}, {})
    [measured] = MeasurementDB(tmp_path).get(conv_1)
    assert (measured.kernel, measured.family, measured.median_us) == ("an_old_kernel", "sm70", 5.0)
    assert measured.config is None
    assert MeasurementDB(tmp_path).get(conv_1, layer="another_layer") == []


def _measured_study(storage, name: str, problem, joint: JointSpace, results: list[tuple[dict, float | None]]):
    """A study of `problem` whose trials measured each (sm80 knobs, µs); no µs: a wrong result."""
    study = open_study(name, storage, seed=0)
    for knobs, us in results:
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE if us else optuna.trial.TrialState.PRUNED, value=us,
            params=joint_params(config_for(problem, **knobs)), distributions=joint_distributions(joint, "sm80"),
            user_attrs={"status": "ok" if us else "wrong_result"}))


SMALL = {"tile": "64x64x32", "warps": "2x2x1", "stages": 4}


@pytest.fixture
def record(conv_1, h100, sm80_space):
    """Two studies of conv_1 under two layer names (the second measured the reference again, faster),
    and one of another problem."""
    storage, joint = optuna.storages.InMemoryStorage(), JointSpace((sm80_space,))
    _measured_study(storage, study_name(h100, "conv_1", conv_1, joint), conv_1, joint,
                    [({}, 9.5), (SMALL, 4.0), ({**SMALL, "swizzle": 2}, None)])
    _measured_study(storage, study_name(h100, "net_conv", conv_1, joint), conv_1, joint, [({}, 9.0)])
    wider = replace(conv_1, k=conv_1.k * 2)
    _measured_study(storage, study_name(h100, "wider", wider, joint), wider, joint, [(SMALL, 3.0)])
    return storage, joint


def test_the_record_holds_each_configuration_once_its_newest(record, conv_1, h100):
    storage, joint = record
    name = study_name(h100, "conv_1", conv_1, joint)
    trials = MeasurementDB(storage=storage).trials(problem_of_study(name))
    assert sorted((t.params["sm80.tile"], t.params["sm80.swizzle"], t.value) for t in trials) == sorted(
        [("128x128x64", 1, 9.0), ("64x64x32", 1, 4.0), ("64x64x32", 2, None)])
    assert len(MeasurementDB(storage=storage).trials(problem_of_study(name), exclude=name)) == 1


def test_a_studys_measurements_are_found_by_their_problem_and_committed_to_another(record, tmp_path, conv_1, h100):
    storage, joint = record
    folder = tmp_path / h100.slug
    found = MeasurementDB(folder, storage).top_k(conv_1, None, sources=(Source.study,))
    assert [(m.median_us, m.where.split("/")[1]) for m in found] == [(4.0, "conv_1"), (9.0, "net_conv")]
    assert found[0].config == config_for(conv_1, **SMALL)
    copy = optuna.create_study(study_name="copy", storage=storage)
    measurements = MeasurementDB(folder, storage)
    assert measurements.commit(copy, joint, [m.trial for m in measurements.get(conv_1, sources=(Source.study,))]) == 3
    assert sorted((t.state.name, t.value) for t in copy.trials) == [("COMPLETE", 4.0), ("COMPLETE", 9.0),
                                                                     ("PRUNED", None)]
    assert params(**SMALL, swizzle=2) in [
        {key.split(".")[1]: value for key, value in t.params.items() if key != "family"} for t in copy.trials]


def test_the_tuned_study_is_the_one_best_yaml_names(record, tmp_path, conv_1, h100):
    storage, joint = record
    name = study_name(h100, "net_conv", conv_1, joint)
    write_best(tmp_path, "net_conv", {"problem": problem_to_dict(conv_1), "family": "sm80", "params": params(),
                                      "kernel": "k", "runtime_us": 9.0, "study": {"name": name}}, {})
    [tuned] = MeasurementDB(tmp_path, storage).get(conv_1, sources=(Source.tuned,))
    assert (tuned.median_us, tuned.where, tuned.source) == (9.0, name, Source.tuned)
