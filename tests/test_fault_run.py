"""Every finding of the fault run on a fresh clone (hostile input, kills, concurrent writers; issue 27,
item 7) planted: silent wrong results and corruption, memory exhaustion, tracebacks where one line and
exit 2 belong, and the smaller points. Each case is built here; nothing outside the repository is read."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from conftest import write_best
from tuner.cli import main as cli
from tuner.cli import tune as tune_command
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.store.results import BEST_FILE, ResultsError
from tuner.search.space import make_config

SLUG = "nvidia-h100-80gb-hbm3"
HEADER = {"device": {"name": "NVIDIA H100 80GB HBM3", "slug": SLUG, "compute_capability": "9.0", "sm_count": 132,
                     "l2_bytes": 52428800},
          "toolchain": {"nvcc": "13.0.88", "cutlass": "4.2.0.0", "driver": "13.0"}}
PROBLEM = ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1)
PARAMS = {"tile": "64x64x32", "warps": "2x2x1", "stages": 4, "swizzle": 2, "iterator": "optimized", "split_k": 1}
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


def sound_entry(problem: ConvProblem = PROBLEM, **params) -> dict:
    config = make_config(problem, "sm80", {**PARAMS, **params})
    return {"problem": problem_to_dict(problem), "family": "sm80", "params": config.search_params,
            "kernel": config.name, "runtime_us": 12.5, "date": "2026-11-24"}


def results_with(tmp_path: Path, layers: int = 1) -> Path:
    """results/<slug>/best.yaml as the tool writes it, `layers` sound sm80 layers."""
    folder = tmp_path / "results" / SLUG
    for index in range(layers):
        write_best(folder, f"conv_{index}", sound_entry(), HEADER)
    return folder


def run(capsys, *argv: str) -> tuple[int, str]:
    """tune.py in-process: the exit status and what went to stderr (one line for a refusal)."""
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def export(capsys, tmp_path: Path) -> tuple[int, str]:
    return run(capsys, "export", "--results-dir", str(tmp_path / "results"))


# --- 1. best.yaml: duplicate keys, the family's static check, a cut file ----------------------------------

def test_the_sound_file_exports(tmp_path, capsys):
    results_with(tmp_path, 2)
    code, err = export(capsys, tmp_path)
    assert code == 0, err
    assert (tmp_path / "results" / SLUG / "best_configs.h").is_file()


@pytest.mark.parametrize("edit, words", [
    (lambda text: text.replace("toolchain:", "device:\n  name: Other GPU\n  compute_capability: '8.6'\n"
                               "  sm_count: 28\ntoolchain:"), "'device' is given twice"),
    (lambda text: text.replace("    runtime_us: 12.5\n", "    runtime_us: 12.5\n    runtime_us: 0.001\n", 1),
     "'runtime_us' is given twice"),
])
def test_a_key_given_twice_in_best_yaml_is_refused(tmp_path, capsys, edit, words):
    folder = results_with(tmp_path)
    (folder / BEST_FILE).write_text(edit((folder / BEST_FILE).read_text()))
    assert words in one_line(*export(capsys, tmp_path))
    assert not (folder / "best_configs.h").exists()


@pytest.mark.parametrize("change, words", [
    ({"stages": 1}, "cannot run"),
    ({"tile": "8x8x8"}, "cannot run"),
    ({"split_k": 0}, "cannot run"),
    ({"stages": 10**6}, "cannot run"),
    ({"unroll": 4}, "sm80 has no knob 'unroll'"),
])
def test_a_hand_edited_kernel_is_refused_before_export(tmp_path, capsys, change, words):
    folder = results_with(tmp_path)
    document = yaml.safe_load((folder / BEST_FILE).read_text())
    params = document["layers"]["conv_0"]["params"]
    params.update(change)
    if "unroll" not in change:  # the name follows the knobs, as a careful hand would make it
        try:
            document["layers"]["conv_0"]["kernel"] = make_config(PROBLEM, "sm80", params).name
        except Exception:  # noqa: BLE001 - the family refuses the value outright: also a refusal
            pass
    (folder / BEST_FILE).write_text(yaml.safe_dump(document, sort_keys=False))
    err = one_line(*export(capsys, tmp_path))
    assert "conv_0" in err and (words in err or "unreadable kernel parameters" in err), err


def test_an_epilogue_added_by_hand_is_refused(tmp_path, capsys):
    folder = results_with(tmp_path)
    document = yaml.safe_load((folder / BEST_FILE).read_text())
    document["layers"]["conv_0"]["problem"]["epilogue"] = "bias+relu"
    (folder / BEST_FILE).write_text(yaml.safe_dump(document, sort_keys=False))
    err = one_line(*export(capsys, tmp_path))
    assert "conv_0" in err and "edited by hand" in err


def test_a_file_cut_at_an_entry_boundary_without_its_count_is_refused(tmp_path, capsys):
    folder = results_with(tmp_path, 3)
    text = (folder / BEST_FILE).read_text()
    cut = "\n".join(line for line in text[:text.index("  conv_2:")].splitlines() if not line.startswith("layer_count"))
    (folder / BEST_FILE).write_text(cut + "\n")
    assert "no layer_count line" in one_line(*export(capsys, tmp_path))


# --- 2. --epilogue residual*BETA: beta in the layer's name, keyed exactly ---------------------------------

def test_each_residual_scale_is_a_layer_of_its_own():
    names = {beta: tune_command.shape_layer("1,8,8,8,8,1,1", f"residual*{beta}").name
             for beta in ("0.5", "2", "0.1234567", "0.123457", "1")}
    assert len(set(names.values())) == 5, names
    assert names["1"] == tune_command.shape_layer("1,8,8,8,8,1,1", "residual").name
    assert all(name.isidentifier() for name in names.values())


def test_the_residual_scale_is_keyed_exactly():
    from tuner.core.epilogue import parse_epilogue

    keys = {text: parse_epilogue(text).key for text in ("residual*0.1234567", "residual*0.123457", "residual*0.5",
                                                         "residual*2", "residual*-3e-09")}
    assert keys["residual*0.5"] == "residual*0.5" and keys["residual*2"] == "residual*2"
    assert keys["residual*0.1234567"] == "residual*0.1234567" != keys["residual*0.123457"]
    assert all(parse_epilogue(key) == parse_epilogue(text) for text, key in keys.items())  # the key reads back


# --- 3. --write-layers: node names in '#' comments cannot add a layer -------------------------------------
# --- 6. ONNX: other convolutions listed as not tuned, an inconsistent weight refused ----------------------

def onnx_model(path: Path, nodes: list, weights: dict, channels: int = 16, x_dims=None, opset: int = 17) -> Path:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims or [1, channels, 8, 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.ones(shape, dtype=np.float32), name) for name, shape in weights.items()]
    graph = helper.make_graph(nodes, "net", [x], [out], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def conv_node(name: str, x: str, w: str, y: str, op: str = "Conv"):
    from onnx import helper

    return helper.make_node(op, [x, w], [y], name=name, pads=[1, 1, 1, 1])


INJECTED = "conv_a\n  injected_layer: {n: 7, h: 7, w: 7, c: 8, k: 8, r: 1, s: 1, epilogue: relu}\n  #"


@pytest.mark.parametrize("node", [INJECTED, "plain\nnewline", "cr\rand\u2028line\x85sep"])
def test_written_layers_hold_exactly_the_imported_layers(tmp_path, capsys, node):
    from tuner.core.layers import load_layers

    model = onnx_model(tmp_path / "m.onnx", [conv_node(node, "x", "w", "out")], {"w": (16, 16, 3, 3)})
    code, err = run(capsys, "--onnx", str(model), "--write-layers", str(tmp_path / "layers.yaml"))
    assert code == 0, err
    layers = load_layers(tmp_path / "layers.yaml")  # the tool takes its own file back
    assert len(layers) == 1 and "injected_layer" not in layers


def test_a_conv_transpose_is_a_transposed_layer_beside_the_convs(tmp_path):
    from tuner.importers.onnx_import import from_onnx

    model = onnx_model(tmp_path / "m.onnx", [conv_node("plain", "x", "w", "y"),
                                             conv_node("up", "y", "wt", "out", op="ConvTranspose")],
                       {"w": (16, 16, 3, 3), "wt": (16, 16, 3, 3)})
    network = from_onnx(model, batch=1)
    assert network.unsupported == ()
    assert [(layer.nodes, layer.problem.transposed) for layer in network.layers] == [(("plain",), False),
                                                                                    (("up",), True)]


def test_a_model_of_only_transposed_convolutions_lists_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # the listing's width; at 80 the layer's name wraps
    model = onnx_model(tmp_path / "m.onnx", [conv_node("up", "x", "wt", "out", op="ConvTranspose")],
                       {"wt": (16, 16, 3, 3)})
    assert cli.main(["--onnx", str(model), "--list-layers"]) == 0
    out = capsys.readouterr().out
    assert "m_b1_up" in out and "transposed" in out  # the layer's shape text says what it is


def test_a_weight_that_does_not_match_its_input_is_refused(tmp_path, capsys):
    model = onnx_model(tmp_path / "m.onnx", [conv_node("bad", "x", "w", "out")], {"w": (16, 32, 3, 3)},
                       channels=64)
    assert "32 channels per group x 1 group(s), its input has 64" in one_line(
        *run(capsys, "--onnx", str(model), "--list-layers"))


@pytest.mark.parametrize("content", [b"", None])
def test_an_empty_onnx_file_is_not_called_an_opset(tmp_path, capsys, content):
    path = Path("/dev/null") if content is None else tmp_path / "empty.onnx"
    if content is not None:
        path.write_bytes(content)
    err = one_line(*run(capsys, "--onnx", str(path), "--list-layers"))
    assert "opset" not in err and "no ONNX graph" in err


def test_a_zero_dimension_is_not_called_symbolic(tmp_path, capsys):
    model = onnx_model(tmp_path / "m.onnx", [conv_node("c", "x", "w", "out")], {"w": (16, 16, 3, 3)},
                       x_dims=[1, 16, 0, 8])
    err = one_line(*run(capsys, "--onnx", str(model), "--list-layers"))
    assert "symbolic" not in err and "is 0" in err


def test_a_nul_in_a_node_name_is_refused(tmp_path, capsys):
    model = onnx_model(tmp_path / "m.onnx", [conv_node("a\0c", "x", "w", "out")], {"w": (16, 16, 3, 3)})
    assert "NUL" in one_line(*run(capsys, "--onnx", str(model), "--list-layers"))


# --- rich markup in names is printed, not parsed -------------------------------------------------------------

@pytest.mark.parametrize("name", ["[/]", "[bold]x[/bold][/]"])
def test_markup_in_a_node_name_is_printed_as_it_is(tmp_path, capsys, name):
    model = onnx_model(tmp_path / "m.onnx", [conv_node(name, "x", "w", "y"),
                                             conv_node(name + "t", "y", "wt", "out", op="ConvTranspose")],
                       {"w": (16, 16, 3, 3), "wt": (16, 16, 3, 3)})
    code, err = run(capsys, "--onnx", str(model), "--list-layers")
    assert code == 0, err


@pytest.mark.parametrize("name", ["'[/]'", "'[bold]x[/bold][/]'"])
def test_markup_in_a_layer_name_is_printed_as_it_is(tmp_path, capsys, name):
    table = tmp_path / "layers.yaml"
    table.write_text(f"layers:\n  {name}: {{n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}}\n")
    code, err = run(capsys, "--layers-file", str(table), "--list-layers")
    assert code == 0, err


# --- 4. plots: paths never built from raw layer names ------------------------------------------------------

@pytest.mark.parametrize("layer", ["../../../../x/ESCAPED", "../../etc/passwd", ".hidden", "a/b", "x" * 200])
def test_plots_stay_in_their_folder(tmp_path, layer):
    pytest.importorskip("matplotlib")
    import optuna

    from tuner.analysis.plots import layer_plots

    study = optuna.create_study()
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    folder = tmp_path / "results" / "gpu" / "plots"
    written = layer_plots(study, layer, folder)
    assert written and all(path.parent == folder and path.is_file() for path in written)
    assert sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()) == ["results"]


def test_a_nul_in_a_layer_name_is_one_line(tmp_path, capsys):
    folder = results_with(tmp_path)
    text = (folder / BEST_FILE).read_text().replace("  conv_0:", '  "a\\0c":')
    (folder / BEST_FILE).write_text(text)
    for command in ("export", "plots"):
        assert "NUL" in one_line(*run(capsys, command, "--results-dir", str(tmp_path / "results")))


def test_landscape_files_stay_in_their_folder(tmp_path):
    from tuner.store.landscape import landscape_path

    assert landscape_path(tmp_path, "sm80", "../../x").parent == tmp_path / "landscape" / "sm80"
    assert landscape_path(tmp_path, "sm80", "conv_1").name == "conv_1.csv"  # the committed names stay


# --- 5. appends repair a cut last line first ---------------------------------------------------------------

def test_history_appends_after_a_cut_line_stay_parseable(tmp_path):
    import json

    from tuner.store.history import append_history
    from tuner.store.results import HISTORY_FILE
    from tuner.store.schema import HistoryEvent

    def event(layer: str) -> HistoryEvent:
        return HistoryEvent(layer, "k", 1.0, 1, "study", "run")

    append_history(tmp_path, event("a"))
    append_history(tmp_path, event("b"))
    path = tmp_path / HISTORY_FILE
    path.write_bytes(path.read_bytes()[:-10])  # killed mid-write
    append_history(tmp_path, event("c"))
    assert [json.loads(line)["layer"] for line in path.read_text().splitlines()] == ["a", "c"]


def test_a_journal_cut_short_is_repaired_before_the_next_append(tmp_path):
    import optuna

    from tuner.store.journal import default_storage
    from tuner.store.results import JOURNAL_FILE

    study = optuna.create_study(study_name="s", storage=default_storage(tmp_path, "gpu"))
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    path = tmp_path / "gpu" / JOURNAL_FILE
    path.write_bytes(path.read_bytes()[:-40])
    study = optuna.load_study(study_name="s", storage=default_storage(tmp_path, "gpu"))
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    again = optuna.load_study(study_name="s", storage=default_storage(tmp_path, "gpu"))
    assert len(again.trials) >= 4 and path.read_bytes().endswith(b"\n")


def test_a_journal_record_of_an_unknown_operation_is_one_line(tmp_path, capsys):
    import json

    import optuna

    from tuner.store.journal import default_storage
    from tuner.store.results import JOURNAL_FILE

    optuna.create_study(study_name="s", storage=default_storage(tmp_path, "gpu"))
    path = tmp_path / "gpu" / JOURNAL_FILE
    with open(path, "a") as handle:
        handle.write(json.dumps({"op_code": 999, "worker_id": "w"}) + "\n")
    with pytest.raises(ResultsError, match="line 2 is not a journal record"):
        default_storage(tmp_path, "gpu")


# --- 7. the compile cache removes the scratch folders of killed builds ---------------------------------------

def test_stale_scratch_folders_are_removed(tmp_path):
    import time

    from tuner.build.compile_cache import remove_stale_scratch
    from tuner.build.nvcc import COMPILE_TIMEOUT_S

    stale, fresh, entry = tmp_path / ".0123456789ab-x1", tmp_path / ".0123456789ab-x2", tmp_path / "0123456789abcd"
    for folder in (stale, fresh, entry):
        folder.mkdir()
        (folder / "candidate.so").write_bytes(b"\x7fELF")
    old = time.time() - COMPILE_TIMEOUT_S - 3600
    os.utime(stale, (old, old))
    os.utime(entry, (old, old))
    assert remove_stale_scratch(tmp_path) == [stale]
    assert fresh.is_dir() and entry.is_dir() and not stale.exists()


def test_a_build_sweeps_its_folder_first(tmp_path, h100, monkeypatch):
    import subprocess
    import time

    from tuner.build.compile import Compiler
    from tuner.build.nvcc import COMPILE_TIMEOUT_S

    (tmp_path / "ab").mkdir()
    stale = tmp_path / "ab" / ".abcdef012345-killed"
    stale.mkdir()
    old = time.time() - COMPILE_TIMEOUT_S - 3600
    os.utime(stale, (old, old))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "error: planted"))
    Compiler(h100, cache_dir=tmp_path)._nvcc("int x;", [], "ab" + "0" * 62)
    assert not stale.exists()


def stale_scratch(folder: Path, name: str = ".abcdef012345-killed") -> Path:
    """A scratch folder as a SIGKILLed build leaves it, older than any build may run."""
    import time

    from tuner.build.nvcc import COMPILE_TIMEOUT_S

    scratch = folder / name
    scratch.mkdir(parents=True)
    (scratch / "candidate.so").write_bytes(b"\x7fELF")
    old = time.time() - COMPILE_TIMEOUT_S - 3600
    os.utime(scratch, (old, old))
    return scratch


def test_a_build_sweeps_the_whole_cache_once_per_process(tmp_path, h100, monkeypatch):
    """A killed build's scratch folder sat in its key's folder until a later build landed in the same one."""
    import subprocess

    from tuner.build.compile import Compiler

    elsewhere = stale_scratch(tmp_path / "cd")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "error: planted"))
    compiler = Compiler(h100, cache_dir=tmp_path)
    compiler._nvcc("int x;", [], "ab" + "0" * 62)
    assert not elsewhere.exists()
    later = stale_scratch(tmp_path / "cd", ".cdef01234567-killed")
    compiler._nvcc("int y;", [], "cd" + "1" * 62)
    Compiler(h100, cache_dir=tmp_path)._nvcc("int z;", [], "cd" + "2" * 62)
    assert later.exists()  # swept once per process and cache: a scan of a large cache per build is too dear


def test_a_scratch_folder_a_live_build_holds_is_not_swept(tmp_path):
    from tuner.build.compile_cache import CompileCache, remove_stale_scratch

    cache = CompileCache(tmp_path)
    held = cache.scratch("ab" + "0" * 62)
    old = held.stat().st_mtime - 10**6  # a build stopped (SIGSTOP, a suspended host) for longer than any timeout
    os.utime(held, (old, old))
    dead = stale_scratch(held.parent)
    assert remove_stale_scratch(held.parent) == [dead] and held.is_dir()
    cache.discard(held)
    assert not held.exists() and not cache.held


# --- memory: aliases refused, files read with a byte cap ---------------------------------------------------

@pytest.mark.parametrize("kind", ["layers", "space", "best", "bench"])
def test_an_alias_bomb_is_refused_in_every_file_read(tmp_path, capsys, kind):
    bomb = BOMB
    if kind == "layers":
        path = tmp_path / "layers.yaml"
        path.write_text(bomb + "layers:\n  x: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1, input_type: *i}\n")
        err = one_line(*run(capsys, "--layers-file", str(path), "--list-layers"))
    elif kind == "space":
        path = tmp_path / "space.yaml"
        path.write_text(bomb + "family: sm80\nstages: *i\n")
        err = one_line(*run(capsys, "--shape", "1,8,8,8,8,1,1", "--space-file", str(path)))
    elif kind == "best":
        folder = results_with(tmp_path)
        (folder / BEST_FILE).write_text(bomb + (folder / BEST_FILE).read_text().replace("family: sm80", "family: *i"))
        err = one_line(*run(capsys, "export", "--results-dir", str(tmp_path / "results")))
    else:
        from tuner.store.bench_record import read_bench

        folder = results_with(tmp_path)
        (folder / "bench.yaml").write_text(bomb + "layers: *i\n")
        with pytest.raises(ResultsError) as refused:
            read_bench(folder)
        err = str(refused.value)
    assert "alias" in err, err


def test_a_character_device_is_read_with_a_cap(tmp_path, capsys):
    assert "larger files are refused" in one_line(*run(capsys, "--layers-file", "/dev/zero", "--list-layers"))


def test_a_huge_value_is_cut_short_in_the_message(tmp_path, capsys):
    path = tmp_path / "layers.yaml"
    path.write_text("layers:\n  x: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1, epilogue: " + "relu" * 500_000 + "}\n")
    err = one_line(*run(capsys, "--layers-file", str(path), "--list-layers"))
    assert len(err) < 1000


@pytest.mark.parametrize("command", ["export", "plots"])
def test_a_binary_best_yaml_is_one_line(tmp_path, capsys, command):
    folder = results_with(tmp_path)
    (folder / BEST_FILE).write_bytes(b"\x7fELF\xff\xfe\x00\x01" * 64)
    one_line(*run(capsys, command, "--results-dir", str(tmp_path / "results")))
    assert not list(folder.glob("plots/*.png"))


# --- tracebacks where one line and exit 2 belong --------------------------------------------------------------

def tune_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--shape", "1,8,8,8,8,1,1", "--results-dir", str(tmp_path / "results"), *extra]


@pytest.mark.parametrize("extra, words", [
    (["--seed", "99999999999"], "--seed must be from 0"),
    (["--seed", "-5"], "--seed must be from 0"),
    (["--storage", "junk"], "not a database URL"),
    (["--storage", "redis://localhost/0"], "not a database URL"),
    (["--storage", ""], "not a database URL"),
    (["--storage", "sqlite:////nonexistent/x.db"], "does not exist"),
    (["--gpus", ""], "--gpus"),
    (["--family", "sm80,sm80"], "names a family twice"),
    (["--stale-after", "1"], "--stale-after must be from"),
])
def test_bad_flags_are_one_line_before_any_gpu_work(tmp_path, capsys, monkeypatch, extra, words):
    monkeypatch.setattr(tune_command, "nvcc_version", lambda: pytest.fail("reached the toolchain"))
    assert words in one_line(*run(capsys, *tune_args(tmp_path, *extra)))


@pytest.mark.parametrize("url", ["postgresql://127.0.0.1:1/x", "mysql://127.0.0.1:1/x"])
def test_an_unreachable_database_is_one_line(tmp_path, url):
    from tuner.store.journal import study_storage

    with pytest.raises(ResultsError, match="cannot be opened"):
        study_storage(url, tmp_path, "gpu")


def test_plots_with_a_junk_storage_is_one_line(tmp_path, capsys):
    results_with(tmp_path)
    assert "not a database URL" in one_line(*run(capsys, "plots", "--results-dir", str(tmp_path / "results"),
                                                 "--storage", "junk"))


@pytest.mark.parametrize("under", [False, True])
def test_a_results_dir_that_is_a_file_is_one_line(tmp_path, capsys, under):
    (tmp_path / "file").write_text("x")
    results = tmp_path / "file" / "results" if under else tmp_path / "file"
    assert "is a file" in one_line(*run(capsys, "--shape", "1,8,8,8,8,1,1", "--results-dir", str(results)))


def test_a_read_only_results_dir_is_one_line(tmp_path, capsys, monkeypatch):
    import tuner.pipeline.export

    results_with(tmp_path)

    def refused(path, text):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(tuner.pipeline.export, "atomic_write", refused)
    assert "Permission denied" in one_line(*export(capsys, tmp_path))
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    assert "not writable" in one_line(*run(capsys, *tune_args(tmp_path)))


def test_a_write_layers_into_a_missing_place_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    model = onnx_model(tmp_path / "m.onnx", [conv_node("c", "x", "w", "out")], {"w": (16, 16, 3, 3)})
    one_line(*run(capsys, "--onnx", str(model), "--write-layers", str(tmp_path / "file" / "layers.yaml")))


def test_a_binary_bench_yaml_is_one_line(tmp_path):
    from tuner.store.bench_record import read_bench

    folder = results_with(tmp_path)
    (folder / "bench.yaml").write_bytes(b"\xff\xfe\x00\x01" * 64)
    with pytest.raises(ResultsError, match="cannot be read"):
        read_bench(folder)


def test_a_5000_character_layer_name_is_one_line(tmp_path, capsys):
    table = tmp_path / "layers.yaml"
    table.write_text(f"layers:\n  ? {'x' * 5000}\n  : {{n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}}\n")
    err = one_line(*run(capsys, "--layers-file", str(table), "--list-layers"))
    assert "5000 characters long" in err and len(err) < 400


# --- smaller points -------------------------------------------------------------------------------------------

def test_sms_is_bounded(tmp_path, capsys):
    report = tmp_path / "r.txt"
    report.write_text("x")
    assert "more SMs than any GPU" in one_line(*run(capsys, "diagnose", str(report), "--sms", "99999999999"))


def test_a_date_given_as_a_mapping_is_refused(tmp_path, capsys):
    folder = results_with(tmp_path)
    (folder / BEST_FILE).write_text((folder / BEST_FILE).read_text().replace("date: '2026-11-24'",
                                                                             "date: {a: 1}"))
    assert "is not a date" in one_line(*export(capsys, tmp_path))


def test_the_cross_host_grace_is_a_flag(tmp_path):
    from tuner.store.journal import heartbeat_for

    args = cli.build_parser().parse_args(tune_args(tmp_path, "--stale-after", "30"))
    options = tune_command.options_from(args, None)
    assert options.stale_after_s == 30 and heartbeat_for(30) == 10 and heartbeat_for(120) == 20
    storage = __import__("tuner.store.journal", fromlist=["x"]).study_storage(
        f"sqlite:///{tmp_path / 's.db'}", tmp_path, "gpu", heartbeat_s=heartbeat_for(30), grace_s=30)
    assert storage.grace_period == 30 and storage.get_heartbeat_interval() == 10
