"""Pictures from a storage and a best.yaml, no GPU: a replayed study stands in for a real one."""
from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from rich.console import Console

from tuner import plots
from tuner.problem import problem_to_dict
from tuner.space import JointSpace
from tuner.replay import ReplayCompiler, ReplayEvaluator, read_record
from tuner.results import default_storage, gpu_dir, update_best
from tuner.study import StudyRunner, open_study

pytest.importorskip("matplotlib")
RECORD = Path(__file__).parent / "data" / "h100_conv_1_record.csv"


def test_plots_for_a_layer_and_the_summary(tmp_path, conv_1, sm80_space, h100):
    storage = default_storage(tmp_path, h100.slug)
    study = open_study("conv_1-study", storage, 0)
    record = read_record(RECORD, conv_1, "sm80")
    with open(RECORD) as handle:  # start from recorded configurations, so enough trials complete
        rows = [line.split(",") for line in handle if not line.startswith(("#", "tile"))]
    for row in rows[:12]:
        knobs = zip(("tile", "warps", "stages", "swizzle", "iterator", "split_k"),
                    (row[0], row[1], int(row[2]), int(row[3]), row[4], int(row[5])))
        study.enqueue_trial({"family": "sm80", **{f"sm80.{name}": value for name, value in knobs}})
    StudyRunner(study, conv_1, JointSpace((sm80_space,)), h100, ReplayCompiler(), ReplayEvaluator(record), run_id="plots").run(24)
    entry = {"problem": problem_to_dict(conv_1), "family": "sm80", "params": {"tile": "64x64x32"}, "kernel": "k",
             "runtime_us": 4.0, "tflops": 4.7, "gbps": 54.0, "study": {"name": "conv_1-study"}}
    update_best(gpu_dir(tmp_path, h100.slug), "conv_1", entry, {"device": {"name": h100.name, "slug": h100.slug}})
    assert plots.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    folder = gpu_dir(tmp_path, h100.slug) / "plots"
    for name in ("conv_1_history.png", "conv_1_importances.png", "summary.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_layer_is_a_results_error(tmp_path, h100, conv_1):
    from tuner.results import ResultsError

    update_best(gpu_dir(tmp_path, h100.slug), "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm80",
                                                          "params": {"tile": "64x64x32"}, "kernel": "k",
                                                          "runtime_us": 4.0, "study": {"name": "x"}},
                {"device": {"name": h100.name, "slug": h100.slug}})
    with pytest.raises(ResultsError, match="not in"):
        plots.main(["--results-dir", str(tmp_path), "--layers", "nope"], Console())


def test_family_study_keeps_one_familys_knobs_under_their_own_names():
    from optuna.distributions import CategoricalDistribution

    study = optuna.create_study()
    for family, knob, value, us in (("sm80", "tile", "64x64x32", 5.0), ("sm90_conv", "tile", "128x128x64", 3.0),
                                    ("sm90_conv", "tile", "64x64x64", 4.0)):
        study.add_trial(optuna.trial.create_trial(
            params={"family": family, f"{family}.{knob}": value},
            distributions={"family": CategoricalDistribution(["sm80", "sm90_conv"]),
                           f"{family}.{knob}": CategoricalDistribution([value, "other"])}, value=us))
    sub = plots.family_study(study, "sm90_conv")
    assert [t.params for t in sub.trials] == [{"tile": "128x128x64"}, {"tile": "64x64x64"}]
    assert [t.value for t in sub.trials] == [3.0, 4.0]


def test_without_gpu_every_gpu_with_results_gets_its_summary(tmp_path, h100, conv_1):
    from tuner.results import ResultsError

    for slug, name in ((h100.slug, h100.name), ("nvidia-h200", "NVIDIA H200")):
        update_best(gpu_dir(tmp_path, slug), "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm80",
                                                        "params": {"tile": "64x64x32"}, "kernel": "k",
                                                        "runtime_us": 4.0, "study": {"name": "x"}},
                    {"device": {"name": name, "slug": slug}})
    assert plots.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    for slug in (h100.slug, "nvidia-h200"):
        assert (gpu_dir(tmp_path, slug) / "plots" / "summary.png").is_file()
    with pytest.raises(ResultsError, match="say which with --gpu"):
        plots.main(["--results-dir", str(tmp_path), "--layers", "conv_1"], Console())
