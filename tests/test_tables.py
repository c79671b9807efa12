"""Tables at 100 columns keep every column and every figure whole; --json and --csv are one parseable
document on stdout."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, tune_in_process

ONNX_MODEL = None


def tune(*args: str, columns: int | None = 100) -> subprocess.CompletedProcess:
    return tune_in_process(*args, env={"COLUMNS": None if columns is None else str(columns)})


def long_named_model(tmp_path: Path) -> Path:
    """A chain of convolutions named the way the torch exporter names them (long, slash-separated)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    nodes, weights, x = [], [], "x"
    for index in range(12):
        name = f"/layer{index // 3 + 1}/layer{index // 3 + 1}.{index % 3}/conv{index % 3 + 1}/Conv"
        weights.append(numpy_helper.from_array(np.zeros((16, 16, 3, 3), np.float32), f"w{index}"))
        nodes.append(helper.make_node("Conv", [x, f"w{index}"], [f"y{index}"], name=name, pads=[1, 1, 1, 1]))
        x = f"y{index}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], weights)
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def assert_fits(text: str, width: int, headers: list[str], figures: list[str]) -> None:
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    flat = " ".join(text.split())
    for header in headers:  # a header may wrap at its spaces, never vanish
        assert all(word in flat for word in header.split()), header
    cells = {cell.strip() for line in text.splitlines() for cell in re.split(r"[│┃]", line)}
    for figure in figures:
        assert figure in cells, figure


def test_the_layer_table_at_100_columns_keeps_every_column_and_figure():
    result = tune("--list-layers")
    assert result.returncode == 0, result.stderr
    rows = json.loads(tune("--list-layers", "--json").stdout)["layers"]
    assert_fits(result.stdout, 100, ["name", "N", "H", "W", "C", "K", "filter", "types", "epilogue", "GFLOP",
                                     "families"],
                [f"{row['gflop']:.3f}" for row in rows] + [str(row["c"]) for row in rows])
    assert "total:" in result.stdout and str(len(rows)) in result.stdout


def test_an_onnx_listing_piped_stays_short_and_whole(tmp_path):
    model = long_named_model(tmp_path)
    result = tune("--onnx", str(model), "--batch", "8", "--list-layers", columns=None)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) < 80
    narrow = tune("--onnx", str(model), "--batch", "8", "--list-layers")
    assert_fits(narrow.stdout, 100, ["name", "GFLOP", "families", "count", "nodes"], ["12"])


def test_list_layers_json_and_csv_are_documents_alone_on_stdout(tmp_path):
    document = json.loads(tune("--list-layers", "--json").stdout)
    assert document["totals"]["layers"] == len(document["layers"]) > 50
    assert {"name", "n", "gflop", "families"} <= set(document["layers"][0])
    rows = list(csv.DictReader(io.StringIO(tune("--list-layers", "--csv").stdout)))
    assert [row["name"] for row in rows] == [row["name"] for row in document["layers"]]
    imported = json.loads(tune("--onnx", str(long_named_model(tmp_path)), "--batch", "8", "--list-layers",
                               "--json").stdout)
    assert imported["totals"]["convolutions"] == 12


def test_json_without_list_layers_is_a_one_line_error():
    result = tune("--layer", "conv_1", "--json")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "--list-layers" in result.stderr


@pytest.mark.slow
def test_report_json_csv_and_its_table_at_100_columns(tmp_path):
    model = long_named_model(tmp_path)
    common = ("report", "--onnx", str(model), "--batch", "32", "--gpu", "h100", "--png", str(tmp_path / "r.png"))
    document = json.loads(tune(*common, "--json").stdout)
    assert document["totals"]["convolutions"] == 12 and len(document["layers"]) >= 1
    assert list(csv.DictReader(io.StringIO(tune(*common, "--csv").stdout)))[0]["count"]
    table = tune(*common)
    assert table.returncode == 0, table.stderr
    assert_fits(table.stdout.split("convolutions alone")[0], 100,
                ["node", "count", "tuned conv", "cuDNN", "PyTorch eager", "torch.compile"], ["12"])


def test_bench_replay_json_and_only_the_chosen_layers(tmp_path):
    args = ("bench", "--replay-only", "--layers", "conv_1", "--seeds", "1", "--budgets", "16")
    result = tune(*args, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [row["layer"] for row in document["layers"]] == ["conv_1"]
    assert set(document["one_run"]) <= {"conv_1"}
    text = tune(*args).stdout
    assert "r50f_" not in text and "fused layers" not in text
    assert_fits(text.split("replayed TPE")[0], 100, ["layer", "best µs", "TPE16", "cuDNN µs", "%peak", "%bw"],
                [f"{document['layers'][0]['cudnn_us']:.2f}"])


@pytest.mark.slow
def test_predict_csv_and_its_table_at_100_columns():
    common = ("predict", "--gpu", "rtx3060", "--layer", "conv_1", "--top", "3")
    document = json.loads(tune(*common, "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(tune(*common, "--csv").stdout)))
    assert [row["name"] for row in rows] == [row["name"] for row in document]
    assert [float(row["predicted_us"]) for row in rows] == [row["predicted_us"] for row in document]
    table = tune(*common)
    assert table.returncode == 0, table.stderr
    ranking = table.stdout.split("~: modelled")[0].split("\n", 2)[2]  # the lines before the table are prose
    assert_fits(ranking, 100,
                ["rank", "family", "configuration", "µs", "source", "vs rank 1", "blocks", "waves", "blocks/SM",
                 "note"], [f"~{document[0]['predicted_us']:.2f}", "modelled"])
    refused = tune(*common, "--csv", "--config", "128x128x64,w2x2x1,s3")
    assert refused.returncode == 2 and "leave out --config" in refused.stderr


def test_diagnose_csv_and_its_table_at_100_columns():
    common = ("diagnose", str(REPO / "tests" / "data" / "ncu" / "h100_cudnn_conv_details.txt"))
    document = json.loads(tune(*common, "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(tune(*common, "--csv").stdout)))
    assert [row["kernel"] for row in rows] == [kernel["kernel"] for kernel in document["kernels"]]
    assert rows[0]["grid"] == "15x8x1" and rows[0]["waste"] == "small_grid;occupancy_limit"
    table = tune(*common)
    assert table.returncode == 0, table.stderr
    assert_fits(table.stdout.split("GPU: ")[0], 100,
                ["kernel", "launches", "median µs", "grid", "block", "regs", "smem/block", "occupancy", "waste"],
                ["25.28", "15x8x1", "384x1x1", "231.4 KB"])


def test_bench_replay_csv_is_the_table_a_line_per_layer():
    args = ("bench", "--replay-only", "--layers", "conv_1", "--seeds", "1", "--budgets", "16")
    document = json.loads(tune(*args, "--json").stdout)
    result = tune(*args, "--csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["layer"] for row in rows] == ["conv_1"]
    assert float(rows[0]["cudnn_us"]) == pytest.approx(document["layers"][0]["cudnn_us"])
    assert {"best_us", "tpe16_ratio", "tpe16_prior_ratio", "pct_peak"} <= set(rows[0])
    for refused in (("--summary", "--csv"), ("--compile-only", "--gpu", "h100", "--csv")):
        result = tune("bench", *refused)
        assert result.returncode == 2 and "leave out --csv" in result.stderr, result.stderr
