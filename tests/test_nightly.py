"""The nightly's regressions and its one-process-per-GPU launch, without a GPU."""
from __future__ import annotations

import re

import pytest

from tuner.pipeline.nightly import (REGRESSION_THRESHOLD, default_run_id, parse_gpus, regressions, run_on_gpus,
                           without_gpus_flag)
from tuner.pipeline.tuning import LayerOutcome

OUTCOMES = [LayerOutcome("slower", 10.5, 10.0, "k1", 32), LayerOutcome("faster", 9.0, 10.0, "k2", 32),
            LayerOutcome("same", 10.2, 10.0, "k3", 32), LayerOutcome("new", 5.0, None, "k4", 32),
            LayerOutcome("failed", None, 7.0, None, 32)]


def test_a_layer_more_than_the_threshold_slower_is_a_regression():
    assert REGRESSION_THRESHOLD == 0.03
    assert [o.layer for o in regressions(OUTCOMES)] == ["slower"]
    assert regressions(OUTCOMES, threshold=0.06) == []


def test_runs_of_one_utc_day_share_an_id():
    assert re.fullmatch(r"nightly-\d{4}-\d{2}-\d{2}", default_run_id())


@pytest.mark.parametrize("text, gpus", [("0,1", ["0", "1"]), (" 2 , 3 ", ["2", "3"])])
def test_gpu_lists(text, gpus):
    assert parse_gpus(text) == gpus


@pytest.mark.parametrize("text", ["", "0,0", "a,1", "0;1"])
def test_bad_gpu_lists(text):
    with pytest.raises(ValueError, match="distinct GPU indices"):
        parse_gpus(text)


def test_the_children_get_the_arguments_without_gpus_and_with_the_run_id(tmp_path, monkeypatch):
    assert without_gpus_flag(["--all", "--gpus", "0,1", "--trials", "8", "--gpus=2"]) == ["--all", "--trials", "8"]
    script = tmp_path / "child.py"
    script.write_text("import os, sys\n"
                      "gpu = os.environ['CUDA_VISIBLE_DEVICES']\n"
                      "open(os.path.join(os.environ['CHILD_OUT'], gpu), 'w').write(' '.join(sys.argv[1:]))\n"
                      "sys.exit(int(gpu))\n")
    monkeypatch.setenv("CHILD_OUT", str(tmp_path))
    code = run_on_gpus(["--all", "--gpus", "0,3", "--trials", "8"], ["0", "3"], "nightly-x", script)
    assert code == 3  # the worst child's status
    for gpu in ("0", "3"):
        assert (tmp_path / gpu).read_text() == "--all --trials 8 --run-id nightly-x"
