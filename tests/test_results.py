import json
import os
import re
import stat

import optuna
import pytest
import yaml

from tuner.store.results import (
    BEST_FILE,
    HISTORY_FILE,
    JOURNAL_FILE,
    ResultsError,
    append_history,
    atomic_write,
    default_storage,
    gpu_dir,
    read_best,
    update_best,
)

HEADER = {"device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3", "sm_count": 132},
          "toolchain": {"nvcc": "13.0.48", "cutlass": "4.2.0.0", "driver": "13.0"}}


CONV_1_PROBLEM = {"n": 1, "h": 32, "w": 32, "c": 32, "k": 32, "r": 3, "s": 3, "pad": 1, "stride": 1, "dilation": 1,
                  "input_type": "f16", "filter_type": "f16", "output_type": "f32", "accumulator_type": "f32"}


def entry(runtime_us: float, tile: str = "64x64x32") -> dict:
    return {"problem": CONV_1_PROBLEM, "family": "sm80", "params": {"tile": tile, "stages": 4},
            "kernel": f"{tile}_s4", "runtime_us": runtime_us, "tflops": 4.49}


def test_gpu_dir(tmp_path):
    assert gpu_dir(tmp_path, "nvidia-h100-80gb-hbm3") == tmp_path / "nvidia-h100-80gb-hbm3"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "deep" / "best.yaml"
    atomic_write(path, "first\n")
    atomic_write(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["best.yaml"]


def test_atomic_write_is_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "best.yaml", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "best.yaml").stat().st_mode) == 0o644


def test_atomic_write_failure_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "best.yaml"
    atomic_write(path, "old\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["best.yaml"]


def test_update_best_keeps_other_layers_and_rewrites_the_header(tmp_path):
    folder = tmp_path / "nvidia-h100-80gb-hbm3"
    update_best(folder, "r50_s4_3x3_b32", entry(23.3, "128x128x32"), HEADER)
    newer = {**HEADER, "toolchain": {**HEADER["toolchain"], "driver": "13.1"}}
    path = update_best(folder, "conv_1", entry(4.2), newer)
    assert path == folder / BEST_FILE
    document = yaml.safe_load(path.read_text())
    assert list(document) == ["device", "toolchain", "layer_count", "layers"] and document["layer_count"] == 2
    assert document["toolchain"]["driver"] == "13.1"
    assert list(document["layers"]) == ["conv_1", "r50_s4_3x3_b32"]  # sorted
    assert document["layers"]["r50_s4_3x3_b32"] == entry(23.3, "128x128x32")
    assert document["layers"]["conv_1"] == entry(4.2)
    # a layer tuned again replaces its own entry only
    update_best(folder, "conv_1", entry(4.1), newer)
    document = read_best(folder)
    assert document["layers"]["conv_1"]["runtime_us"] == 4.1
    assert document["layers"]["r50_s4_3x3_b32"]["runtime_us"] == 23.3
    assert sorted(p.name for p in folder.iterdir()) == sorted([BEST_FILE, ".lock"])


def test_read_best_of_a_new_folder(tmp_path):
    assert read_best(tmp_path / "nothing-yet") == {"layers": {}}


def test_corrupted_best_yaml_raises(tmp_path):
    (tmp_path / BEST_FILE).write_text("device: {name: H100\nlayers:\n  conv_1: [\n")
    with pytest.raises(ResultsError, match="not valid YAML"):
        read_best(tmp_path)
    with pytest.raises(ResultsError):
        update_best(tmp_path, "conv_1", entry(4.2), HEADER)
    assert (tmp_path / BEST_FILE).read_text().startswith("device: {name: H100")  # left for the user to restore


def test_best_yaml_without_a_layers_mapping_raises(tmp_path):
    (tmp_path / BEST_FILE).write_text("layers: [conv_1]\n")
    with pytest.raises(ResultsError, match="'layers' mapping"):
        read_best(tmp_path)


@pytest.mark.parametrize("text", ["- conv_1\n- r50_s4_3x3_b32\n", "just some text\n"])
def test_best_yaml_that_is_not_a_mapping_raises(tmp_path, text):
    (tmp_path / BEST_FILE).write_text(text)
    with pytest.raises(ResultsError):
        read_best(tmp_path)


def test_append_history_appends_json_lines(tmp_path):
    folder = tmp_path / "gpu"
    append_history(folder, {"layer": "conv_1", "runtime_us": 4.2})
    append_history(folder, {"layer": "r50_s4_3x3_b32", "runtime_us": 23.3, "measured": 64})
    lines = (folder / HISTORY_FILE).read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["layer"] == "conv_1" and first["runtime_us"] == 4.2
    assert (second["layer"], second["runtime_us"], second["measured"]) == ("r50_s4_3x3_b32", 23.3, 64)
    assert first["at"].endswith("+00:00") and len(first["at"]) == len("2026-01-01T00:00:00+00:00")


def test_default_storage_is_a_journal_in_the_gpu_folder(tmp_path):
    storage = default_storage(tmp_path, "nvidia-h100-80gb-hbm3")
    study = optuna.create_study(study_name="s", storage=storage)
    study.add_trial(optuna.trial.create_trial(value=1.0))
    journal = tmp_path / "nvidia-h100-80gb-hbm3" / JOURNAL_FILE
    assert journal.is_file() and journal.stat().st_size > 0
    again = optuna.load_study(study_name="s", storage=default_storage(tmp_path, "nvidia-h100-80gb-hbm3"))
    assert [t.value for t in again.trials] == [1.0]


def _journal_with_trials(folder, trials: int = 3):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from tuner.store.results import JOURNAL_FILE

    folder.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(folder / JOURNAL_FILE)))
    study = optuna.create_study(study_name="s", storage=storage)
    for value in range(trials):
        study.enqueue_trial({"x": value})
        study.optimize(lambda trial: trial.suggest_int("x", 0, 9), n_trials=1)
    return folder / JOURNAL_FILE


def test_a_damaged_journal_line_is_named_and_what_loads_is_kept(tmp_path):
    import optuna

    from tuner.store.results import ResultsError, default_storage, first_damaged_line, readable_journal

    path = _journal_with_trials(tmp_path / "gpu")
    assert first_damaged_line(path) is None
    lines = path.read_bytes().splitlines(keepends=True)
    whole = len(lines)
    path.write_bytes(b"".join(lines[:-4]) + b"{garbage\n" + b"".join(lines[-4:]))
    damaged = whole - 3
    assert first_damaged_line(path) == damaged
    with pytest.raises(ResultsError, match=f"line {damaged} is not a journal record.*head -n {damaged - 1}"):
        default_storage(tmp_path, "gpu")
    storage, line = readable_journal(path)
    assert line == damaged
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert 1 <= len(trials) < 3  # the records before the damaged line
    assert path.read_bytes().count(b"{garbage") == 1  # the file itself is untouched


def test_a_last_line_still_being_written_is_not_damage(tmp_path):
    from tuner.store.results import first_damaged_line

    path = _journal_with_trials(tmp_path / "gpu", trials=1)
    path.write_bytes(path.read_bytes() + b'{"op_code": 4, "worker_id"')
    assert first_damaged_line(path) is None


def test_a_killed_holder_leaves_no_journal_lock(tmp_path):
    """The journal's lock is released by the kernel when its holder dies (SIGKILL): the next process
    takes it at once. While a live process holds it, others wait."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tuner.store.results import KernelReleasedLock

    journal = tmp_path / "optuna.journal"
    holder = ("import os, signal, sys, time; sys.path.insert(0, %r); from pathlib import Path; "
              "from tuner.store.results import KernelReleasedLock; lock = KernelReleasedLock(Path(%r)); lock.acquire(); "
              "print('held', flush=True); time.sleep(float(sys.argv[1])); os.kill(os.getpid(), signal.SIGKILL)"
              % (str(Path(__file__).resolve().parents[1]), str(journal)))
    child = subprocess.Popen([sys.executable, "-c", holder, "1.5"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    lock = KernelReleasedLock(journal)
    started = time.monotonic()
    assert lock.acquire()  # waits for the holder, which is then killed holding it
    waited = time.monotonic() - started
    lock.release()
    child.wait()
    assert child.returncode == -9 and 0.5 < waited < 10
    started = time.monotonic()
    assert lock.acquire()
    lock.release()
    assert time.monotonic() - started < 0.5


def test_a_best_yaml_cut_short_at_an_entry_boundary_is_refused(tmp_path):
    """It still parses; the layer count it states does not match what it holds."""
    update_best(tmp_path, "conv_1", entry(4.2), HEADER)
    update_best(tmp_path, "r50_s4_3x3_b32", entry(23.3), HEADER)
    text = (tmp_path / BEST_FILE).read_text()
    (tmp_path / BEST_FILE).write_text(text[:text.index("  r50_s4_3x3_b32:")])
    with pytest.raises(ResultsError, match="states 2 layers but holds 1: it was cut short"):
        read_best(tmp_path)


@pytest.mark.parametrize("damage, says", [
    (lambda e: e.pop("problem"), "missing problem"),
    (lambda e: e.update(runtime_us=-3), "runtime_us -3 is not a positive number"),
    (lambda e: e.update(runtime_us=".nan"), "runtime_us '.nan' is not a positive number"),
    (lambda e: e.update(family="sm80; evil"), "is not a family name"),
    (lambda e: e.update(params=[1, 2]), "params is not a mapping"),
    (lambda e: e["problem"].update(k=0), "k=0 must be at least 1"),
    (lambda e: e.update(kernel=None), "kernel None is not a kernel name"),
])
def test_an_entry_that_does_not_fit_the_schema_is_refused_with_its_layer(tmp_path, damage, says):
    damaged = {**entry(4.2), "problem": dict(CONV_1_PROBLEM)}
    damage(damaged)
    (tmp_path / BEST_FILE).write_text(yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": damaged}}))
    with pytest.raises(ResultsError, match=re.escape(says)) as refused:
        read_best(tmp_path)
    assert "layer 'conv_1'" in str(refused.value) and "restore it" in str(refused.value)


def test_an_entry_the_schema_refuses_is_never_written(tmp_path):
    from tuner.store.results import BEST_FILE, ResultsError, update_best

    with pytest.raises(ResultsError, match="runtime_us"):
        update_best(tmp_path, "conv_1", {"problem": {"n": 1, "h": 8, "w": 8, "c": 8, "k": 8, "r": 1, "s": 1},
                                         "family": "sm80", "params": {"tile": "64x64x32"}, "kernel": "k",
                                         "runtime_us": -1.0}, {})
    assert not (tmp_path / BEST_FILE).exists()


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_a_typed_entry_round_trips_through_best_yaml(tmp_path, dtype):
    import dataclasses

    from tuner.core.dtypes import dtype_fields
    from tuner.core.problem import ConvProblem, problem_to_dict
    from tuner.store.results import best_entries
    from tuner.search.space import entry_config, make_config

    problem = ConvProblem(n=2, h=14, w=14, c=64, k=64, r=3, s=3, pad=1, **dtype_fields(dtype))
    config = make_config(problem, "sm80", {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1,
                                           "iterator": "optimized", "split_k": 1})
    update_best(tmp_path, f"layer_{dtype}", {"problem": problem_to_dict(problem), "family": "sm80",
                                             "params": config.search_params, "kernel": config.name,
                                             "runtime_us": 5.0}, HEADER)
    entry = best_entries(tmp_path)[f"layer_{dtype}"]
    assert entry.problem == problem and entry.problem.dtype_key in config.name
    assert entry_config(entry, f"layer_{dtype}", entry.problem) == config
    # another type of the same shape is another problem
    assert dataclasses.replace(problem, **dtype_fields("f16" if dtype != "f16" else "bf16")) != entry.problem


def test_problems_are_found_by_their_canonical_fused_form(tmp_path):
    """A conv tuned with its batch norm (scale+bias+relu) answers for the same conv with the norm folded
    (bias+relu) and the other way round; a different epilogue or batch does not."""
    import dataclasses

    from tuner.core.epilogue import parse_epilogue
    from tuner.core.problem import ConvProblem
    from tuner.store.results import BestEntry, names_by_problem

    base = ConvProblem(n=32, h=56, w=56, c=64, k=64, r=3, s=3, pad=1)
    norm, folded = (dataclasses.replace(base, epilogue=parse_epilogue(text)) for text in ("scale+bias+relu", "bias+relu"))
    named = names_by_problem({"tuned_with_norm": BestEntry(norm, "sm80", (("tile", "x"),), "k", 1.0)})
    assert named[folded] == named.get(norm) == "tuned_with_norm" and folded in named
    assert named.get(dataclasses.replace(folded, n=1)) is None and base not in named
    assert named.setdefault(folded, "other") == "tuned_with_norm" and len(named) == 1
