"""ONNX models the tests build themselves (onnx.helper) become the tuner's layers: shapes from the graph,
epilogues from what follows each conv, identical problems once, unsupported convolutions listed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tuner.network import NetworkError, from_onnx, write_layers  # noqa: E402
from tuner.problem import load_layers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def weight(name: str, k: int, c: int, r: int, s: int):
    return numpy_helper.from_array(np.ones((k, c, r, s), dtype=np.float32), name)


def vector(name: str, k: int):
    return numpy_helper.from_array(np.ones((k,), dtype=np.float32), name)


def conv(name: str, x: str, w: str, y: str, pads=(1, 1, 1, 1), strides=(1, 1), group=1, bias: str | None = None):
    inputs = [x, w] + ([bias] if bias else [])
    return helper.make_node("Conv", inputs, [y], name=name, pads=list(pads), strides=list(strides), group=group)


def bn(name: str, x: str, y: str, k: int) -> tuple:
    node = helper.make_node("BatchNormalization", [x, f"{name}_g", f"{name}_b", f"{name}_m", f"{name}_v"], [y],
                            name=name)
    return node, [vector(f"{name}_{p}", k) for p in ("g", "b", "m", "v")]


def save(path: Path, nodes: list, initializers: list, batch="N", height=16, opset=17) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16, height, 16])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "net", [x], [out], initializer=initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def resnet_block(path: Path, **options) -> Path:
    """x -> conv a (BN, ReLU) -> conv b (BN, + x, ReLU) -> conv c (same shape as b, bias, ReLU)
    -> grouped conv d; b and c share a problem only without their epilogues (c has no BN)."""
    bn_a, init_a = bn("bn_a", "a", "a_bn", 16)
    bn_b, init_b = bn("bn_b", "b", "b_bn", 16)
    nodes = [conv("conv_a", "x", "wa", "a"), bn_a, helper.make_node("Relu", ["a_bn"], ["a_r"], name="relu_a"),
             conv("conv_b", "a_r", "wb", "b"), bn_b, helper.make_node("Add", ["b_bn", "x"], ["sum"], name="add"),
             helper.make_node("Relu", ["sum"], ["b_r"], name="relu_b"),
             conv("conv_c", "b_r", "wc", "c", bias="bc"), helper.make_node("Relu", ["c"], ["c_r"], name="relu_c"),
             conv("conv_d", "c_r", "wd", "out", group=4)]
    inits = [weight("wa", 16, 16, 3, 3), weight("wb", 16, 16, 3, 3), weight("wc", 16, 16, 3, 3), vector("bc", 16),
             weight("wd", 16, 4, 3, 3), *init_a, *init_b]
    return save(path, nodes, inits, **options)


def test_a_block_becomes_layers_with_their_epilogues(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    by_node = {layer.nodes[0]: layer for layer in network.layers}
    a, b, c = by_node["conv_a"].problem, by_node["conv_b"].problem, by_node["conv_c"].problem
    assert (a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.pads, a.strides) == (8, 16, 16, 16, 16, 3, 3, (1, 1), (1, 1))
    assert a.epilogue.key == "scale+bias+relu"
    assert b.epilogue.key == "scale+bias+residual+relu"
    assert c.epilogue.key == "bias+relu"
    assert [(u.node, "grouped convolution: 4 groups" in u.reason) for u in network.unsupported] == [("conv_d", True)]


def inception_branch(path: Path) -> Path:
    """x (16 channels, 16x16) -> 1x7 (pads 0, 3) -> 7x1 (pads 3, 0, BN, ReLU) -> a 3x3 padded on the top and
    left only (pads 1, 1, 0, 0, stride 2) -> a grouped 3x3."""
    bn_b, init_b = bn("bn_b", "b", "b_bn", 16)
    nodes = [conv("conv_1x7", "x", "wa", "a", pads=(0, 3, 0, 3)),
             conv("conv_7x1", "a", "wb", "b", pads=(3, 0, 3, 0)), bn_b,
             helper.make_node("Relu", ["b_bn"], ["b_r"], name="relu_b"),
             conv("one_sided", "b_r", "wc", "c", pads=(1, 1, 0, 0), strides=(2, 2)),
             conv("grouped", "c", "wd", "out", group=4)]
    inits = [weight("wa", 16, 16, 1, 7), weight("wb", 16, 16, 7, 1), weight("wc", 16, 16, 3, 3),
             weight("wd", 16, 4, 3, 3), *init_b]
    return save(path, nodes, inits)


def test_per_axis_convs_are_layers_and_one_sided_pads_and_groups_are_listed(tmp_path):
    network = from_onnx(inception_branch(tmp_path / "branch.onnx"), batch=4)
    by_node = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert set(by_node) == {"conv_1x7", "conv_7x1"}
    wide, tall = by_node["conv_1x7"], by_node["conv_7x1"]
    assert (wide.r, wide.s, wide.pads, wide.p, wide.q) == (1, 7, (0, 3), 16, 16)
    assert (tall.r, tall.s, tall.pads, tall.epilogue.key) == (7, 1, (3, 0), "scale+bias+relu")
    assert wide.key == "n4h16w16c16k16r1s7p0x3u1d1"
    unsupported = {item.node: item for item in network.unsupported}
    assert set(unsupported) == {"one_sided", "grouped"}
    assert unsupported["one_sided"].reason.startswith("one-sided padding: pads [top, left, bottom, right] = [1, 1, 0, 0]")
    assert unsupported["grouped"].reason == "grouped convolution: 4 groups; no family runs grouped convolutions yet"
    # (16 + 1 - 3) // 2 + 1 = 8 rows and columns; the grouped conv sees 8x8 with pad 1, 4 channels a group
    assert unsupported["one_sided"].flops == 2 * 4 * 8 * 8 * 16 * 16 * 9
    assert unsupported["grouped"].flops == 2 * 4 * 8 * 8 * 16 * 4 * 9


def test_written_per_axis_layers_read_back_as_they_were(tmp_path):
    network = from_onnx(inception_branch(tmp_path / "branch.onnx"), batch=4)
    write_layers(network, tmp_path / "layers.yaml")
    text = (tmp_path / "layers.yaml").read_text()
    assert "r: 1, s: 7, pad_h: 0, pad_w: 3, stride: 1, dilation: 1}" in text
    assert "# not tuned: one_sided: one-sided padding" in text
    table = load_layers(tmp_path / "layers.yaml")
    assert {name: layer.problem for name, layer in table.items()} == {l.name: l.problem for l in network.layers}


def test_identical_problems_are_tuned_once_with_their_count_and_nodes(tmp_path):
    nodes = [conv("first", "x", "w1", "y1"), conv("second", "y1", "w2", "out")]
    network = from_onnx(save(tmp_path / "twice.onnx", nodes, [weight("w1", 16, 16, 3, 3), weight("w2", 16, 16, 3, 3)]),
                        batch=2)
    assert len(network.layers) == 1 and network.layers[0].count == 2
    assert network.layers[0].nodes == ("first", "second") and network.layers[0].name == "twice_b2_first"


def test_a_depthwise_conv_is_listed_with_its_reason(tmp_path):
    nodes = [conv("dw", "x", "w", "out", group=16)]
    network = from_onnx(save(tmp_path / "dw.onnx", nodes, [weight("w", 16, 1, 3, 3)]), batch=1)
    assert network.layers == () and "depthwise convolution" in network.unsupported[0].reason


def test_written_layers_are_a_table_the_tool_reads_as_it_is(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    write_layers(network, tmp_path / "layers.yaml")
    table = load_layers(tmp_path / "layers.yaml")
    assert {name: layer.problem for name, layer in table.items()} == {l.name: l.problem for l in network.layers}
    assert "# not tuned: conv_d: grouped convolution: 4 groups" in (tmp_path / "layers.yaml").read_text()


@pytest.mark.parametrize("make, says", [
    (lambda p: p.write_bytes(b"\x00not a model at all"), "is not an ONNX model"),
    (lambda p: save(p, [helper.make_node("Relu", ["x"], ["out"])], []), "has no Conv node"),
    (lambda p: resnet_block(p, opset=3), "opset 3 is not one this importer reads"),
    (lambda p: resnet_block(p, height="H"), "dimension 2 of 'x' is symbolic ('H')"),
])
def test_models_the_importer_cannot_read_are_one_line_errors(tmp_path, make, says):
    path = tmp_path / "model.onnx"
    make(path)
    with pytest.raises(NetworkError, match=say_pattern(says)):
        from_onnx(path, batch=4)


def say_pattern(text: str) -> str:
    import re

    return re.escape(text)


def test_a_symbolic_batch_needs_batch(tmp_path):
    path = resnet_block(tmp_path / "block.onnx")
    with pytest.raises(NetworkError, match="pass --batch N"):
        from_onnx(path)
    assert from_onnx(path, batch=3).layers[0].problem.n == 3


def tune(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tune.py"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "220"})


def test_list_layers_of_a_model_on_the_command_line(tmp_path):
    model = resnet_block(tmp_path / "block.onnx")
    result = tune("--onnx", str(model), "--batch", "8", "--list-layers", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "conv_a" in result.stdout and "scale+bias+residual+relu" in result.stdout
    assert "not tuned: conv_d: grouped convolution: 4 groups" in result.stdout
    written = tmp_path / "net.yaml"
    result = tune("--onnx", str(model), "--batch", "8", "--write-layers", str(written), tmp_path=tmp_path)
    assert result.returncode == 0 and len(load_layers(written)) == 3


@pytest.mark.parametrize("args, says", [
    (("--onnx", "{tmp}/missing.onnx", "--batch", "8", "--list-layers"), "no such file"),
    (("--onnx", "{tmp}/block.onnx", "--list-layers"), "pass --batch N"),
    (("--onnx", "{tmp}/block.onnx", "--batch", "0", "--list-layers"), "--batch must be at least 1"),
    (("--layer", "conv_1", "--batch", "8"), "--batch and --write-layers go with --onnx"),
])
def test_bad_network_input_is_one_line_exit_2(tmp_path, args, says):
    resnet_block(tmp_path / "block.onnx")
    result = tune(*(a.format(tmp=tmp_path) for a in args), tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_silu_as_exported_and_an_unfusable_tail(tmp_path):
    """x * sigmoid(x) after a conv is its SiLU; a Clip after one is left to the framework and said so."""
    nodes = [conv("c1", "x", "w1", "y1"), helper.make_node("Sigmoid", ["y1"], ["g"], name="sig"),
             helper.make_node("Mul", ["y1", "g"], ["y1s"], name="mul"),
             conv("c2", "y1s", "w2", "y2", strides=(2, 2)), helper.make_node("Clip", ["y2"], ["out"], name="clip")]
    network = from_onnx(save(tmp_path / "silu.onnx", nodes, [weight("w1", 16, 16, 3, 3), weight("w2", 16, 16, 3, 3)]),
                        batch=2)
    by_node = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert by_node["c1"].epilogue.key == "silu" and by_node["c2"].strides == (2, 2) and not by_node["c2"].epilogue.fused
    assert network.not_fused == ("c2 -> Clip",)


def test_a_conv_no_family_runs_is_listed_with_each_familys_reason(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tuner.families import registry

    refusing = SimpleNamespace(problem_reason=lambda problem: f"K={problem.k}: pad K to 8")
    monkeypatch.setattr(registry, "families", lambda: {"only": refusing})
    nodes = [conv("odd", "x", "w", "out")]
    network = from_onnx(save(tmp_path / "odd.onnx", nodes, [weight("w", 7, 16, 3, 3)]), batch=1)
    assert network.layers == ()
    assert [(u.node, u.reason) for u in network.unsupported] == [("odd", "no family runs it: only: K=7: pad K to 8")]
