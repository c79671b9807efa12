"""What a layer's tuning re-measures after the search (no GPU needed)."""
from __future__ import annotations

from conftest import params
from tuner.store.results import BestEntry
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.search.space import JointSpace
from tuner.core.status import Status
from tuner.search.study import TrialRecord
from tuner.pipeline.tuning import finalist_configs


def record(number: int, config, us: float) -> TrialRecord:
    return TrialRecord(number, config, Status.ok, us, {})


def previous_entry(problem, knobs: dict) -> BestEntry:
    return BestEntry(problem, "sm80", tuple(sorted(knobs.items())), "previous kernel", 5.0)


def test_previous_best_is_re_measured_beside_the_study_finalists(conv_1, h100):
    best = [record(0, make_config(conv_1, params("32x32x32", "2x1x1", stages=4)), 4.0),
            record(1, make_config(conv_1, params("64x32x32", "2x1x1", stages=4)), 4.5)]
    reference = make_config(conv_1, REFERENCE_PARAMS)
    previous = params("32x32x64", "2x1x1", stages=5, swizzle=2)
    finalists = finalist_configs(best, 2, reference, previous_entry(conv_1, previous), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "#2", "reference", "previous"]
    assert finalists[-1][1] == make_config(conv_1, previous)


def test_previous_best_already_a_finalist_is_not_added_twice(conv_1, h100):
    first = make_config(conv_1, params("32x32x32", "2x1x1", stages=4))
    finalists = finalist_configs([record(0, first, 4.0)], 2, make_config(conv_1, REFERENCE_PARAMS),
                                 previous_entry(conv_1, first.search_params), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "reference"]


def test_previous_entry_from_an_unknown_space_is_skipped(conv_1, h100):
    first = make_config(conv_1, params("32x32x32", "2x1x1", stages=4))
    finalists = finalist_configs([record(0, first, 4.0)], 1, make_config(conv_1, REFERENCE_PARAMS),
                                 previous_entry(conv_1, {"tile": "128x128x64", "warps": "2x2x1", "stages": 3,
                                                         "swizzle": 1, "iterator": "no_such_iterator",
                                                         "split_k": 1}), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "reference"]


def test_the_best_of_each_family_joins_the_finalists(conv_1, sm80_space, h100):
    best = [record(0, make_config(conv_1, params("32x32x32", "2x1x1", stages=4)), 4.0),
            record(1, make_config(conv_1, params("64x32x32", "2x1x1", stages=4)), 4.5)]
    finalists = finalist_configs(best, 1, None, None, conv_1, h100, JointSpace((sm80_space,)))
    assert [label for label, _ in finalists] == ["#1"]  # the fastest sm80 is #1 already








def test_an_imported_layer_whose_problem_is_tuned_under_another_name_is_skipped(tmp_path, conv_1):
    import yaml
    from rich.console import Console

    from tuner.core.problem import Layer, problem_to_dict
    from tuner.pipeline.tuning import TuningOptions, TuningSession

    entry = {"problem": problem_to_dict(conv_1), "family": "sm80", "params": dict(REFERENCE_PARAMS),
             "kernel": "k", "runtime_us": 3.9}
    (tmp_path / "best.yaml").write_text(yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": entry}}))
    options = TuningOptions(trials=4, top=1, confirm_rounds=1, ncu_top=0, no_ncu=True, seed=0, storage=None,
                            results_dir=tmp_path, cache_dir=None, jobs=1, timeout_s=10, run_id="net",
                            skip_tuned_problems=True)
    session = object.__new__(TuningSession)  # no GPU worker: the skip happens before anything is tuned
    session.folder, session.options, session.console = tmp_path, options, Console(record=True)
    outcome = session.tune_layer(Layer("net_b1_conv", conv_1))
    assert outcome.skipped and outcome.runtime_us == 3.9
    assert "the same problem is tuned as conv_1" in session.console.export_text()
