"""What the audit of issue 27 found still broken, each case planted: names that the exported header
itself declares, matplotlib's mathtext in layer names, damaged journal records Optuna replays with a
traceback, abbreviated --json/--csv, and --json that printed no document."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import H100, write_best
from test_fault_run import HEADER, SLUG, one_line, results_with, run, sound_entry
from tuner.store.results import BEST_FILE

# Names the header declares or reaches in a GPU's namespace: its runners and tables, CUTLASS's and the
# standard library's namespaces, a family's helper namespace, a CuTe type used unqualified.
HEADER_NAMES = ("Sm80Runner", "TunedLayer", "kLayers", "find_layer", "cutlass", "std", "cute", "sm80_depthwise",
                "Stride", "TunerEpilogue", "problem_array")


# --- a layer or GPU named like something the header declares ----------------------------------------------

def header_with_layers(tmp_path: Path, capsys, names) -> str:
    for name in names:
        write_best(tmp_path / "results" / SLUG, name, sound_entry(), HEADER)
    code, err = run(capsys, "export", "--results-dir", str(tmp_path / "results"))
    assert code == 0, err
    return (tmp_path / "results" / SLUG / "best_configs.h").read_text()


@pytest.mark.parametrize("name", HEADER_NAMES)
def test_a_layer_named_like_a_name_of_the_header_gets_an_alias_of_its_own(name):
    from tuner.pipeline.export import cpp_identifier

    assert cpp_identifier(name) == name + "_"


def test_the_committed_layer_names_keep_their_aliases():
    from tuner.pipeline.export import cpp_identifier
    from tuner.store.best import read_best

    repo = Path(__file__).resolve().parents[1] / "results"
    names = [name for path in repo.glob(f"*/{BEST_FILE}") for name in read_best(path.parent)["layers"]]
    assert names and all(cpp_identifier(name) == name for name in names if name.isidentifier())


def test_the_header_of_such_layers_declares_each_name_once(tmp_path, capsys):
    header = header_with_layers(tmp_path, capsys, HEADER_NAMES)
    for name in HEADER_NAMES:
        assert f"using {name}_ = " in header and f"using {name}_runner" not in header, name
    assert header.count("class Sm80Runner {") == 1


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_header_of_such_layers_compiles(tmp_path, capsys):
    """Before the fix `using Sm80Runner = ...` redeclared the runner, and `using cutlass = ...` hid CUTLASS's
    namespace from every kernel after it."""
    import subprocess

    from test_docs_cpp import NVCC_FLAGS
    from tuner.build.nvcc import cutlass_include_dirs

    header_with_layers(tmp_path, capsys, ("Sm80Runner", "cutlass", "std", "TunedLayer", "kLayers"))
    source = tmp_path / "use.cu"
    source.write_text('#include "best_configs.h"\n'
                      f"namespace t = cutlass_conv_tuner::{SLUG.replace('-', '_')};\n"
                      "static_assert(t::kLayerCount == 5, \"layers\");\n"
                      "using Runner = t::cutlass__runner;\n")
    result = subprocess.run(["nvcc", *NVCC_FLAGS, f"-I{tmp_path / 'results' / SLUG}",
                             *(f"-I{d}" for d in cutlass_include_dirs()), "-c", str(source),
                             "-o", str(tmp_path / "use.o")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


# --- plots: a '$' in a layer or GPU name is text, not matplotlib's TeX ----------------------------------------

@pytest.fixture(scope="module")
def replayed_results(tmp_path_factory, conv_1, sm80_space) -> Path:
    """A results folder whose GPU journal holds a replayed study: replayed once, copied for each name drawn."""
    from test_plots import replayed_study
    from tuner.store.journal import default_storage

    root = tmp_path_factory.mktemp("replayed")
    replayed_study(default_storage(root, H100.slug), "study", conv_1, sm80_space, H100)
    return root


@pytest.mark.parametrize("layer", ["x$\\foo{$y", "a$b$c", "$"])
def test_a_dollar_in_a_layer_name_is_drawn_as_it_is(tmp_path, replayed_results, conv_1, h100, layer):
    pytest.importorskip("matplotlib")
    from rich.console import Console

    from tuner.cli import plots
    from tuner.core.problem import problem_to_dict
    from tuner.store.results import gpu_dir

    shutil.copytree(replayed_results, tmp_path, dirs_exist_ok=True)
    write_best(gpu_dir(tmp_path, h100.slug), layer,
               {"problem": problem_to_dict(conv_1), "family": "sm80", "params": {"tile": "64x64x32"}, "kernel": "k",
                "runtime_us": 4.0, "study": {"name": "study"}},
               {"device": {"name": "GPU $\\bad{$", "slug": h100.slug}})
    assert plots.main(["--results-dir", str(tmp_path)], Console(width=200)) == 0
    assert len(list((gpu_dir(tmp_path, h100.slug) / "plots").glob("*.png"))) == 3


# --- the journal: a record Optuna replays with a traceback, a whole last line that is no record ---------------

def journal_with(tmp_path: Path, line: str) -> Path:
    import optuna

    from tuner.store.journal import default_storage
    from tuner.store.results import JOURNAL_FILE

    study = optuna.create_study(study_name="s", storage=default_storage(tmp_path, "gpu"))
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    path = tmp_path / "gpu" / JOURNAL_FILE
    with open(path, "a") as handle:
        handle.write(line + "\n")
    return path


@pytest.mark.parametrize("record", ['{"op_code": 5}', '{"op_code": 4, "worker_id": "w", "study_id": 0}'])
def test_a_record_of_a_known_operation_without_its_fields_is_one_line(tmp_path, record):
    from tuner.store.journal import default_storage
    from tuner.store.results import ResultsError

    journal_with(tmp_path, record)
    with pytest.raises(ResultsError, match="cannot be replayed"):
        default_storage(tmp_path, "gpu")


def test_plots_over_such_a_record_is_one_line(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    folder = results_with(tmp_path)
    journal_with(tmp_path / "results", '{"op_code": 5}').rename(folder / "optuna.journal")
    assert "cannot be replayed" in one_line(*run(capsys, "plots", "--results-dir", str(tmp_path / "results")))


@pytest.mark.parametrize("line", ["garbage", "[]", '{"op_code": 999}'])
def test_a_whole_last_line_that_is_no_record_is_refused_before_anything_is_appended(tmp_path, line):
    from tuner.store.journal import default_storage
    from tuner.store.results import ResultsError

    path = journal_with(tmp_path, line)
    lines = path.read_text().count("\n")
    with pytest.raises(ResultsError, match=f"line {lines} is not a journal record"):
        default_storage(tmp_path, "gpu")


def test_a_last_line_still_being_written_is_no_damage(tmp_path):
    import optuna

    from tuner.store.journal import _open_journal

    path = journal_with(tmp_path, '{"op_code": 4, "worker_id": "w", "study_id": 0, "datetime_start"')
    path.write_bytes(path.read_bytes()[:-1])  # no newline yet: another writer is mid-append
    storage, damaged = _open_journal(path)
    assert damaged is None and len(optuna.load_study(study_name="s", storage=storage).trials) == 2


# --- --json: abbreviated as argparse allows, and on bench --summary / --compile-only --------------------------

@pytest.mark.parametrize("flag", ["--js", "--jso", "--json"])
def test_an_abbreviated_json_flag_keeps_stdout_to_the_document(tmp_path, capsys, flag):
    from tuner.cli import main as cli

    results_with(tmp_path)
    assert cli.main(["export", "--results-dir", str(tmp_path / "results"), flag]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["exports"][0]["gpu"] == SLUG and "wrote" in err


def test_bench_summary_json_is_one_document(tmp_path, capsys):
    from tuner.cli import main as cli

    results_with(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("x\n")
    assert cli.main(["bench", "--summary", "--json", "--results-dir", str(tmp_path / "results"),
                     "--summary-file", str(tmp_path / "results.md"), "--readme", str(readme)]) == 0
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["summary_file"] == str(tmp_path / "results.md") and document["readme"] is None
    assert [gpu["gpu"] for gpu in document["gpus"]] == [SLUG] and "wrote" in err


def test_compile_only_refuses_json(tmp_path, capsys, monkeypatch):
    from tuner.cli import bench

    monkeypatch.setattr(bench, "compile_landscapes", lambda *a: pytest.fail("compiled the landscapes"))
    assert "leave out --json" in one_line(*run(capsys, "bench", "--compile-only", "--gpu", "h100", "--json",
                                               "--results-dir", str(tmp_path)))


# --- what is not a file: never replaced by a written one, never read to its end ----------------------------

@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_written_file_never_replaces_what_is_not_a_file(tmp_path, capsys, kind):
    """As root, `--write-layers /dev/full` renamed the layers file over the device node."""
    import os

    from test_fault_run import conv_node, onnx_model

    target = tmp_path / "target"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    model = onnx_model(tmp_path / "m.onnx", [conv_node("c", "x", "w", "out")], {"w": (16, 16, 3, 3)})
    err = one_line(*run(capsys, "--onnx", str(model), "--write-layers", str(target)))
    assert "it exists and is not a file" in err
    assert (target.is_fifo() if kind == "fifo" else target.is_dir()) and len(list(tmp_path.iterdir())) == 2


def test_a_device_given_as_a_model_is_read_with_a_cap(capsys, monkeypatch):
    """`--onnx /dev/zero` read until memory ran out (the process was killed)."""
    from tuner.importers import onnx_import

    monkeypatch.setattr(onnx_import, "MAX_STREAM_BYTES", 1 << 20)
    assert "is not a file and gives more than 1 MB" in one_line(*run(capsys, "--onnx", "/dev/zero", "--list-layers"))
    assert "no ONNX graph" in one_line(*run(capsys, "--onnx", "/dev/null", "--list-layers"))
