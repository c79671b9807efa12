"""`tune.py report`: a network's convolutions looked up by problem in best.yaml and bench.yaml's one run,
summed count x µs against cuDNN and PyTorch eager; what is not tuned or not timed is marked, not counted."""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

pytest.importorskip("onnx")

from conftest import tune_in_process  # noqa: E402
from test_network import resnet_block  # noqa: E402
from tuner.core.epilogue import Epilogue  # noqa: E402
from tuner.importers.onnx_import import from_onnx  # noqa: E402
from tuner.cli.report import summary_lines  # noqa: E402
from tuner.pipeline.network_report import layer_reports, totals  # noqa: E402
from tuner.core.problem import problem_to_dict  # noqa: E402

SLUG = "test-gpu"


def entry(problem) -> dict:
    return {"problem": problem_to_dict(problem), "family": "sm80", "params": {"tile": "128x128x32"},
            "kernel": "k", "runtime_us": 1.0}


def results(tmp_path: Path, network, one_run_for) -> Path:
    """best.yaml with the bare and the fused problem of every layer; bench.yaml's one run for those
    `one_run_for(name)` returns figures for."""
    folder = tmp_path / "results" / SLUG
    folder.mkdir(parents=True)
    layers, one_run = {}, {}
    for layer in network.layers:
        for name, problem in ((f"{layer.name}_bare", replace(layer.problem, epilogue=Epilogue())),
                              (f"{layer.name}_fused", layer.problem)):
            layers.setdefault(name, entry(problem))
            figures = one_run_for(name)
            if figures:
                one_run[name] = figures
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": len(layers), "layers": layers}))
    (folder / "bench.yaml").write_text(yaml.safe_dump({"one_run": one_run}))
    return folder


def test_sums_are_count_weighted_and_missing_figures_are_not_zero(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    names = [layer.name for layer in network.layers]
    figures = {f"{names[0]}_bare": {"tuned_us": 10.0, "cudnn_us": 20.0},
               f"{names[0]}_fused": {"tuned_us": 11.0, "eager_us": 40.0, "compiled_us": 22.0},
               f"{names[1]}_bare": {"tuned_us": 5.0, "cudnn_us": 5.0}}  # names[1] and [2] fused: never timed
    reports = layer_reports(network, results(tmp_path, network, figures.get))
    alone = totals(reports, lambda r: r.conv_alone)
    as_run = totals(reports, lambda r: r.as_run)
    # the block's three convs share one bare problem, held by names[0]_bare: best.yaml's first holder
    # conv_d, grouped, has a problem of its own, never timed
    assert (alone.tuned_us, alone.baseline_us, alone.counted, alone.of) == (30.0, 60.0, 3, 4)
    # conv_c (bias+relu) is conv_a (scale+bias+relu) in the canonical fused form: found as names[0]_fused
    assert reports[2].as_run.entry == f"{names[0]}_fused"
    assert (as_run.tuned_us, as_run.baseline_us, as_run.counted) == (22.0, 80.0, 2)
    assert "not in bench's one run" in reports[1].missing and not reports[2].missing
    lines = summary_lines(reports)
    assert lines[0].startswith("convolutions alone: tuned 30.0 µs vs cuDNN 60.0 µs, ratio 0.500 over 3 of 4")
    assert lines[1].endswith("tuned 22.0 µs vs PyTorch eager 80.0 µs, ratio 0.275 over 2 of 4 convolutions")
    assert "ratio 0.500 over 2 convolutions" in lines[2]  # torch.compile


def test_an_untuned_problem_is_marked(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    folder = tmp_path / "results" / SLUG
    folder.mkdir(parents=True)
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": 0, "layers": {}}))
    reports = layer_reports(network, folder)
    assert all(r.missing.startswith("conv not tuned") for r in reports)
    assert summary_lines(reports)[0].startswith("convolutions alone: nothing to compare yet")


def report(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return tune_in_process("report", *args, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "250"},
                           clean_env=True)


def test_report_on_the_command_line_prints_the_table_and_draws_the_chart(tmp_path):
    pytest.importorskip("matplotlib")
    model = resnet_block(tmp_path / "block.onnx")
    network = from_onnx(model, batch=8)
    results(tmp_path, network, lambda name: {"tuned_us": 2.0, "cudnn_us": 3.0, "eager_us": 6.0})
    result = report("--onnx", str(model), "--batch", "8", "--results-dir", str(tmp_path / "results"),
                    tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    # conv_d, grouped, is tuned (sm80_group's), and the PyTorch op runs it too
    assert "ratio 0.667 over 4 of 4" in result.stdout and "ratio 0.381 over 4 of 4" in result.stdout
    assert (tmp_path / "results" / SLUG / "plots" / "report_block_b8.png").stat().st_size > 1000
    # what tuner.torch_ops.optimize would do with each node, as its own report lists it
    assert "In PyTorch: tuner.torch_ops.optimize" in result.stdout
    assert "PyTorch (tuner.torch_ops.optimize, eval mode, f16): 4 of 4 convolutions replaced by tuned kernels" \
        in result.stdout
    document = report("--onnx", str(model), "--batch", "8", "--results-dir", str(tmp_path / "results"), "--json",
                      tmp_path=tmp_path)
    rows = {row["node"]: row for row in json.loads(document.stdout)["pytorch_op"]}
    assert rows["conv_a"]["replaced"] and rows["conv_a"]["best_yaml_layer"].startswith("block_b8_conv_a")
    assert rows["conv_d"]["replaced"] and rows["conv_d"]["best_yaml_layer"].startswith("block_b8_conv_d")


@pytest.mark.parametrize("args, says", [
    (("--results-dir", "{tmp}/results"), "report needs a network"),
    (("--onnx", "{tmp}/block.onnx", "--batch", "8", "--results-dir", "{tmp}/nothing"), "pass --gpu"),
    (("--onnx", "{tmp}/block.onnx", "--batch", "8", "--gpu", "../x", "--results-dir", "{tmp}/results"), "../x"),
])
def test_bad_report_input_is_one_line_exit_2(tmp_path, args, says):
    resnet_block(tmp_path / "block.onnx")
    (tmp_path / "results").mkdir()
    result = report(*(a.format(tmp=tmp_path) for a in args), tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_without_a_bare_twin_the_fused_kernel_bare_stands_for_the_conv(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    folder = tmp_path / "results" / SLUG
    folder.mkdir(parents=True)
    layer = network.layers[0]
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": 1, "layers": {"fused": entry(layer.problem)}}))
    (folder / "bench.yaml").write_text(yaml.safe_dump({"one_run": {"fused": {
        "tuned_us": 4.0, "bare_kernel_us": 3.0, "cudnn_us": 6.0, "eager_us": 8.0}}}))
    first = layer_reports(network, folder)[0]
    assert first.conv_alone.entry == "fused (its kernel bare)" and first.conv_alone.tuned_us == 3.0
    assert (first.as_run.tuned_us, first.as_run.baseline_us) == (4.0, 8.0) and first.missing == ""


def test_a_problem_tuned_under_two_names_is_reported_from_the_one_the_run_timed(tmp_path):
    """vgg11_b32_features_0 and the suite's vgg16f_features_0_b32 are one problem: the bench of the suite
    times the second, and the report finds it although best.yaml lists the first before it."""
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    first = network.layers[0]
    bare = replace(first.problem, epilogue=Epilogue())
    folder = tmp_path / "results" / SLUG
    folder.mkdir(parents=True)
    layers = {"older_name": entry(bare), "suite_name": entry(bare)}
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": 2, "layers": layers}))
    (folder / "bench.yaml").write_text(yaml.safe_dump({"one_run": {"suite_name": {"tuned_us": 3.0,
                                                                                  "cudnn_us": 4.0}}}))
    [report_0, *_] = layer_reports(network, folder)
    assert report_0.conv_alone is not None and report_0.conv_alone.entry == "suite_name"
    assert (report_0.conv_alone.tuned_us, report_0.conv_alone.baseline_us) == (3.0, 4.0)


# --- coverage ----------------------------------------------------------------------------------------

def test_coverage_counts_convolutions_and_flops_tuned_tunable_and_not_with_a_total(tmp_path):
    from test_network import inception_branch
    from tuner.pipeline.network_report import NOT_TUNABLE, TOTAL, TUNABLE, TUNED, coverage

    network = from_onnx(inception_branch(tmp_path / "branch.onnx"), batch=4)
    wide, tall = (next(layer.problem for layer in network.layers if layer.nodes == (node,))
                  for node in ("conv_1x7", "conv_7x1"))
    grouped = next(layer.problem for layer in network.layers if layer.nodes == ("grouped",))  # sm80_group's
    one_sided = next(item for item in network.unsupported if item.node == "one_sided")
    rows = coverage(network, {wide, replace(tall, epilogue=Epilogue())})  # the 7x1 tuned bare only, not as run
    assert [(row.state, row.reason, row.convolutions, row.flops) for row in rows] == [
        (TUNED, None, 1, wide.flops),
        (TUNABLE, None, 2, tall.flops + grouped.flops),
        (NOT_TUNABLE, "one-sided padding", 1, one_sided.flops),
        (TOTAL, None, 4, wide.flops + tall.flops + one_sided.flops + grouped.flops)]
    assert wide.flops == tall.flops == 2 * 4 * 16 * 16 * 16 * 16 * 7
    untuned = coverage(network)  # no GPU named: no tuned row
    assert [row.state for row in untuned] == [TUNABLE, NOT_TUNABLE, TOTAL]
    assert untuned[0].flops == wide.flops + tall.flops + grouped.flops and untuned[-1] == rows[-1]


def test_coverage_counts_a_conv_of_unknown_size_without_its_flops(tmp_path):
    from tuner.importers.frontend import ConvFacts
    from tuner.importers.network import ImportedLayer, Network, Unsupported
    from tuner.importers.tunable import conv_flops
    from tuner.pipeline.network_report import coverage

    transposed = ConvFacts("up", "y", (1, 16, 8, 8), (16, 16, 2, 2), unsupported="a transposed convolution: no")
    assert conv_flops(transposed) is None
    problem = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8).layers[0].problem
    network = Network((ImportedLayer("a", problem, ("n1", "n2")),),
                      (Unsupported("up", transposed.unsupported, conv_flops(transposed)),), ())
    rows = coverage(network)
    assert (rows[0].convolutions, rows[0].flops) == (2, 2 * problem.flops)
    assert (rows[1].reason, rows[1].convolutions, rows[1].flops, rows[1].flops_unknown) == (
        "a transposed convolution", 1, 0, 1)
    assert (rows[-1].convolutions, rows[-1].flops, rows[-1].flops_unknown) == (3, 2 * problem.flops, 1)


def test_report_json_and_table_carry_the_coverage(tmp_path):
    import json

    from test_network import inception_branch

    model = inception_branch(tmp_path / "branch.onnx")
    network = from_onnx(model, batch=4)
    results(tmp_path, network, lambda name: None)  # both layers tuned, bare and fused; nothing timed
    args = ("--onnx", str(model), "--batch", "4", "--results-dir", str(tmp_path / "results"))
    document = json.loads(report(*args, "--json", tmp_path=tmp_path).stdout)
    states = [(row["state"], row["reason"], row["convolutions"]) for row in document["coverage"]]
    assert states == [("tuned", None, 3), ("tunable", None, 0), ("not tunable", "one-sided padding", 1),
                      ("total", None, 4)]
    total = document["coverage"][-1]
    assert total["share_of_flops"] == 1.0 and total["gflop"] == round(total["flops"] / 1e9, 6)
    assert sum(row["flops"] for row in document["coverage"][:-1]) == total["flops"]
    table = report(*args, tmp_path=tmp_path)
    assert table.returncode == 0, table.stderr
    coverage_lines = table.stdout[table.stdout.index("coverage"):]
    assert "one-sided padding" in coverage_lines.split("In PyTorch")[0]
    assert "grouped convolution" not in coverage_lines.split("In PyTorch")[0]
    assert "100.0%" in coverage_lines


def test_list_layers_of_a_network_carries_its_coverage(tmp_path):
    import json

    from test_network import inception_branch, tune

    model = inception_branch(tmp_path / "branch.onnx")
    result = tune("--onnx", str(model), "--batch", "4", "--list-layers", "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    coverage = json.loads(result.stdout)["coverage"]
    assert [(row["state"], row["convolutions"]) for row in coverage] == [
        ("tunable", 3), ("not tunable", 1), ("total", 4)]
    table = tune("--onnx", str(model), "--batch", "4", "--list-layers", tmp_path=tmp_path)
    assert "coverage" in table.stdout and "one-sided padding" in table.stdout and "total" in table.stdout


def test_an_e4m3_networks_report_says_its_library_figures_are_f16s(tmp_path):
    """PyTorch reaches no fp8 conv of cuDNN's: an e4m3 network's report says its cuDNN and PyTorch figures are
    its f16 twins'; an f16 network's says nothing of it."""
    from rich.console import Console

    from tuner.cli.report import E4M3_BASELINES, report_table

    model = resnet_block(tmp_path / "block.onnx")
    for dtype, says in (("e4m3", True), (None, False)):
        network = from_onnx(model, batch=8, dtype=dtype)
        reports = layer_reports(network, results(tmp_path / (dtype or "f16"), network, lambda name: None))
        assert (E4M3_BASELINES in summary_lines(reports)) is says
        console = Console(width=250, record=True)
        console.print(report_table(reports, "block"))
        assert ("their cuDNN and PyTorch figures are f16's" in console.export_text()) is says
