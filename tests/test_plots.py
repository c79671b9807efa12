"""Pictures from a storage and a best.yaml, no GPU: a replayed study stands in for a real one."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from rich.console import Console

from conftest import write_best
from tuner.analysis import plots
from tuner.cli import plots as plots_command
from tuner.core.problem import problem_to_dict
from tuner.search.space import JointSpace
from tuner.search.replay import ReplayCompiler, ReplayEvaluator, read_record
from tuner.store.journal import default_storage
from tuner.store.results import gpu_dir
from tuner.search.study import StudyRunner, open_study

pytest.importorskip("matplotlib")
RECORD = Path(__file__).parent / "data" / "h100_conv_1_record.csv"


def test_plots_for_a_layer_and_the_summary(tmp_path, conv_1, sm80_space, h100):
    replayed_study(default_storage(tmp_path, h100.slug), "conv_1-study", conv_1, sm80_space, h100)
    entry = {"problem": problem_to_dict(conv_1), "family": "sm80", "params": {"tile": "64x64x32"}, "kernel": "k",
             "runtime_us": 4.0, "tflops": 4.7, "gbps": 54.0, "study": {"name": "conv_1-study"}}
    write_best(gpu_dir(tmp_path, h100.slug), "conv_1", entry, {"device": {"name": h100.name, "slug": h100.slug}})
    assert plots_command.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    folder = gpu_dir(tmp_path, h100.slug) / "plots"
    for name in ("conv_1_history.png", "conv_1_importances.png", "summary.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_layer_is_a_results_error(tmp_path, h100, conv_1):
    from tuner.store.results import ResultsError

    write_best(gpu_dir(tmp_path, h100.slug), "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm80",
                                                         "params": {"tile": "64x64x32"}, "kernel": "k",
                                                         "runtime_us": 4.0, "study": {"name": "x"}},
               {"device": {"name": h100.name, "slug": h100.slug}})
    with pytest.raises(ResultsError, match="not in"):
        plots_command.main(["--results-dir", str(tmp_path), "--layers", "nope"], Console())


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
    from tuner.store.results import ResultsError

    for slug, name in ((h100.slug, h100.name), ("nvidia-h200", "NVIDIA H200")):
        write_best(gpu_dir(tmp_path, slug), "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm80",
                                                       "params": {"tile": "64x64x32"}, "kernel": "k",
                                                       "runtime_us": 4.0, "study": {"name": "x"}},
                   {"device": {"name": name, "slug": slug}})
    assert plots_command.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    for slug in (h100.slug, "nvidia-h200"):
        assert (gpu_dir(tmp_path, slug) / "plots" / "summary.png").is_file()
    with pytest.raises(ResultsError, match="say which with --gpu"):
        plots_command.main(["--results-dir", str(tmp_path), "--layers", "conv_1"], Console())


# --- what the pictures say: titles whole, units named, axes from 0 -----------------------------------------

LONG_LAYER = "regnety400_trunk_output_block1_block1_0_f_a_0_b32_" + "x" * 70  # 120 characters, as imports make


def replayed_study(storage, name: str, conv_1, sm80_space, h100, trials: int = 24):
    study = open_study(name, storage, 0)
    with open(RECORD) as handle:  # start from recorded configurations, so enough trials complete
        rows = [line.split(",") for line in handle if not line.startswith(("#", "tile"))]
    for row in rows[:12]:
        knobs = zip(("tile", "warps", "stages", "swizzle", "iterator", "split_k"),
                    (row[0], row[1], int(row[2]), int(row[3]), row[4], int(row[5])))
        study.enqueue_trial({"family": "sm80", **{f"sm80.{name}": value for name, value in knobs}})
    StudyRunner(study, conv_1, JointSpace((sm80_space,)), h100, ReplayCompiler(),
                ReplayEvaluator(read_record(RECORD, conv_1, "sm80")), run_id="plots").run(trials)
    return study


def test_titles_and_labels_are_whole_with_their_units(tmp_path, monkeypatch, conv_1, sm80_space, h100):
    study = replayed_study(optuna.storages.InMemoryStorage(), "s", conv_1, sm80_space, h100)
    figures = []
    save = plots.save_figure

    def keep(plt, figure, path, *args, **kwargs):  # saved as ever, left open to be measured
        figures.append(figure)
        return save(SimpleNamespace(close=lambda figure: None), figure, path, *args, **kwargs)

    monkeypatch.setattr(plots, "save_figure", keep)
    plots.layer_plots(study, LONG_LAYER, tmp_path, "sm80")
    assert len(figures) == 2
    for figure in figures:
        renderer = figure.canvas.get_renderer()
        axes = figure.axes[0]
        for text in (axes.title, axes.xaxis.label, axes.yaxis.label):
            box = text.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= figure.bbox.x1 and box.y1 <= figure.bbox.y1, text.get_text()
        assert LONG_LAYER in axes.title.get_text().replace("\n", "")
        words = " ".join(t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text")))
        assert "Objective" not in words and "Hyperparameter" not in words, words
        plots._pyplot().close(figure)
    history, importances = (figure.axes[0] for figure in figures)
    assert "µs" in history.get_ylabel() and history.get_ylim()[0] == 0
    assert "measured trials of" in history.get_title()
    assert "share of the importance" in importances.get_xlabel() and "sm80" in importances.get_title()


def test_the_dashboard_journal_has_one_study_per_layer_with_its_unit(tmp_path, conv_1, sm80_space, h100):
    from tuner.store.journal import journal_backend

    storage = default_storage(tmp_path, h100.slug)
    # one layer over two studies (two search spaces), as the tuner keeps it, and another layer
    replayed_study(storage, f"{h100.slug}/conv_1/shape/sm80@aaaa/f16", conv_1, sm80_space, h100, trials=8)
    replayed_study(storage, f"{h100.slug}/conv_1/shape/sm80+sm90_conv@bbbb/f16", conv_1, sm80_space, h100, trials=16)
    replayed_study(storage, f"{h100.slug}/other/shape/sm80@aaaa/f16", conv_1, sm80_space, h100, trials=4)
    path = tmp_path / "plots" / plots.DASHBOARD_FILE
    assert plots.dashboard_journal(storage, path) == 2
    merged = optuna.storages.JournalStorage(journal_backend(path))
    studies = {s.study_name: s for s in optuna.get_all_study_summaries(merged)}
    assert set(studies) == {"conv_1", "other"}
    conv = optuna.load_study(study_name="conv_1", storage=merged)
    assert conv.metric_names == ["median µs"]
    assert conv.user_attrs["merged_from"] == [f"{h100.slug}/conv_1/shape/sm80@aaaa/f16",
                                              f"{h100.slug}/conv_1/shape/sm80+sm90_conv@bbbb/f16"]
    keys = [tuple(sorted(t.params.items())) for t in conv.trials]
    measured = {tuple(sorted(t.params.items())) for name in conv.user_attrs["merged_from"]
                for t in optuna.load_study(study_name=name, storage=storage).trials
                if t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL}
    assert sorted(keys) == sorted(measured) and len(keys) > 16  # each configuration once, from both studies
    assert plots.dashboard_journal(storage, path, {"other"}) == 1  # written anew, not appended to


def test_json_says_what_was_written_and_what_was_left_out(tmp_path, capsys, conv_1, sm80_space, h100):
    import json

    from tuner.cli import main as cli
    storage = default_storage(tmp_path, h100.slug)
    replayed_study(storage, "conv_1-study", conv_1, sm80_space, h100)
    folder = gpu_dir(tmp_path, h100.slug)
    for layer, study in (("conv_1", "conv_1-study"), ("lost", "gone")):
        write_best(folder, layer, {"problem": problem_to_dict(conv_1), "family": "sm80", "params": {"tile": "64x64x32"},
                                   "kernel": "k", "runtime_us": 4.0, "study": {"name": study}},
                   {"device": {"name": h100.name, "slug": h100.slug}})
    assert cli.main(["plots", "--results-dir", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    [drawn] = json.loads(out)["gpus"]
    assert drawn["gpu"] == h100.slug and drawn["files"][-1].endswith("summary.png")
    assert {Path(f).name for f in drawn["files"]} == {"conv_1_history.png", "conv_1_importances.png", "summary.png"}
    assert drawn["left_out"] == [{"layer": "lost", "reason": "its study is not in the storage"}]
    assert drawn["dashboard"].endswith(plots.DASHBOARD_FILE) and "wrote" in err


def test_what_plots_writes_is_ignored_by_git(tmp_path, h100, conv_1):
    import subprocess

    write_best(gpu_dir(tmp_path, h100.slug), "conv_1", {"problem": problem_to_dict(conv_1), "family": "sm80",
                                                        "params": {"tile": "64x64x32"}, "kernel": "k",
                                                        "runtime_us": 4.0, "study": {"name": "x"}},
               {"device": {"name": h100.name, "slug": h100.slug}})
    before = set(tmp_path.rglob("*"))
    assert plots_command.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    written = [p.relative_to(tmp_path) for p in set(tmp_path.rglob("*")) - before if p.is_file()]
    assert written and all(p.parts[1] == "plots" for p in written), written
    repo = Path(__file__).resolve().parents[1]
    for path in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", str(Path("results") / path)], cwd=repo)
        assert ignored.returncode == 0, f"results/{path} would be committed"
