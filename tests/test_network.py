"""ONNX models the tests build themselves (onnx.helper) become the tuner's layers: shapes from the graph,
epilogues from what follows each conv, identical problems once, unsupported convolutions listed."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from conftest import MODEL_DTYPE_CASES, tune_in_process  # noqa: E402
from tuner.importers.frontend import NetworkError  # noqa: E402
from tuner.importers.network import write_layers  # noqa: E402
from tuner.importers.onnx_import import from_onnx  # noqa: E402
from tuner.core.layers import load_layers  # noqa: E402


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
    assert network.unsupported == ()  # the grouped conv d (4 channels a group) is sm80_group's
    assert (by_node["conv_d"].problem.groups, by_node["conv_d"].problem.channels_per_group) == (4, 4)


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
    assert set(by_node) == {"conv_1x7", "conv_7x1", "grouped"}
    wide, tall = by_node["conv_1x7"], by_node["conv_7x1"]
    assert (wide.r, wide.s, wide.pads, wide.p, wide.q) == (1, 7, (0, 3), 16, 16)
    assert (tall.r, tall.s, tall.pads, tall.epilogue.key) == (7, 1, (3, 0), "scale+bias+relu")
    assert wide.key == "n4h16w16c16k16r1s7p0x3u1d1"
    unsupported = {item.node: item for item in network.unsupported}
    assert set(unsupported) == {"one_sided"}
    assert unsupported["one_sided"].reason.startswith("one-sided padding: pads [top, left, bottom, right] = [1, 1, 0, 0]")
    # (16 + 1 - 3) // 2 + 1 = 8 rows and columns; the grouped conv sees 8x8 with pad 1, 4 channels a group
    assert unsupported["one_sided"].flops == 2 * 4 * 8 * 8 * 16 * 16 * 9
    assert by_node["grouped"].flops == 2 * 4 * 8 * 8 * 16 * 4 * 9 and by_node["grouped"].groups == 4


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


def test_depthwise_and_grouped_convs_are_layers_and_those_no_family_runs_are_listed(tmp_path):
    """16 channels: a depthwise conv (sm80_depthwise's) and one of 4 channels a group (sm80_group's) are layers;
    at 12 channels, a depthwise conv (not whole 8-channel vectors) and one of 3 channels a group (6 bytes, no
    whole 4-byte copies) are listed with the grouped families' reasons."""
    nodes = [conv("dw", "x", "w", "a", group=16), conv("g4", "a", "w4", "b", group=4),
             conv("to12", "b", "w12", "c"), conv("dw12", "c", "wd12", "d", group=12),
             conv("g3", "d", "w3", "out", group=4)]
    inits = [weight("w", 16, 1, 3, 3), weight("w4", 16, 4, 3, 3), weight("w12", 12, 16, 3, 3),
             weight("wd12", 12, 1, 3, 3), weight("w3", 12, 3, 3, 3)]
    network = from_onnx(save(tmp_path / "dw.onnx", nodes, inits), batch=1)
    assert {layer.nodes[0]: layer.problem.groups for layer in network.layers} == {"dw": 16, "g4": 4, "to12": 1}
    reasons = {item.node: item.reason for item in network.unsupported}
    assert reasons["dw12"].startswith("depthwise convolution: dsl_direct: ")
    assert "sm80_depthwise: " in reasons["dw12"] and "C=12 is not a multiple of 8" in reasons["dw12"]
    assert reasons["g3"].startswith("grouped convolution: 4 groups; dsl_direct: ")
    assert "this is 3 channels a group" in reasons["g3"]


def test_written_layers_are_a_table_the_tool_reads_as_it_is(tmp_path):
    network = from_onnx(resnet_block(tmp_path / "block.onnx"), batch=8)
    write_layers(network, tmp_path / "layers.yaml")
    table = load_layers(tmp_path / "layers.yaml")
    assert {name: layer.problem for name, layer in table.items()} == {l.name: l.problem for l in network.layers}
    assert "groups: 4" in (tmp_path / "layers.yaml").read_text() and "not tuned" not in (tmp_path / "layers.yaml").read_text()


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
    return tune_in_process(*args, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "220"},
                           clean_env=True)


def test_list_layers_of_a_model_on_the_command_line(tmp_path):
    model = resnet_block(tmp_path / "block.onnx")
    result = tune("--onnx", str(model), "--batch", "8", "--list-layers", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "conv_a" in result.stdout and "scale+bias+residual+relu" in result.stdout
    assert "conv_d" in result.stdout and "not tuned" not in result.stdout
    written = tmp_path / "net.yaml"
    result = tune("--onnx", str(model), "--batch", "8", "--write-layers", str(written), tmp_path=tmp_path)
    assert result.returncode == 0 and len(load_layers(written)) == 4  # conv_d, grouped, among them


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


# --- names the newer (torch.export) exporter gives: node_Conv_344, with the module in the metadata ---------------

def scoped(node, scopes: str | None = None, namespace: str | None = None):
    """The node with the metadata the torch exporter writes: its name scopes (a Python list's repr) and/or the
    older namespace string."""
    for key, value in (("pkg.torch.onnx.name_scopes", scopes), ("namespace", namespace)):
        if value is not None:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
    return node


def newer_exporter_model(path: Path) -> Path:
    """Four convs named as the newer exporter names them, one named as the legacy exporter does: a module path
    from the scopes, one from the namespace, one module that made two convs, one node with no metadata."""
    nodes = [scoped(conv("node_Conv_12", "x", "w", "a"), scopes="['', 'backbone', 'backbone.bn1', "
                                                                "'_native_batch_norm_legit_no_training']"),
             scoped(conv("node_conv2d_1", "a", "w", "b"),
                    namespace=": Net/backbone: Seq/backbone.layer1.conv2: torch.nn.modules.conv.Conv2d/conv2d_1: "
                              "aten.conv2d.default"),
             scoped(conv("node_conv2d_2", "b", "w", "c"), scopes="['', 'head', 'conv2d_2']"),
             scoped(conv("node_conv2d_3", "c", "w", "d"), scopes="['', 'head', 'conv2d_3']"),
             conv("node_Conv_40", "d", "w", "e"),
             scoped(conv("/head/out/Conv", "e", "w", "f"), scopes="['', 'head.out', 'conv2d_4']"),
             scoped(conv("", "f", "w", "out"), scopes="['', 'tail', 'conv2d_5']")]
    return save(path, nodes, [weight("w", 16, 16, 3, 3)])


def test_generated_node_names_fall_back_to_the_module_that_made_them(tmp_path):
    network = from_onnx(newer_exporter_model(tmp_path / "newer.onnx"), batch=1)
    assert network.layers[0].nodes == ("backbone.bn1", "backbone.layer1.conv2", "head", "head (node_conv2d_3)",
                                       "node_Conv_40", "/head/out/Conv", "tail")
    assert network.layers[0].name == "newer_b1_backbone_bn1"


@pytest.mark.parametrize("scopes", ["not a list", "['only one']", "[1, 2]", "['', '', 'conv2d']",
                                    "__import__('os').system('false')", "[" * 200 + "]" * 200, "['x'" * 5000])
def test_unreadable_scopes_leave_the_nodes_own_name(tmp_path, scopes):
    model = save(tmp_path / "m.onnx", [scoped(conv("node_Conv_7", "x", "w", "out"), scopes=scopes)],
                 [weight("w", 16, 16, 3, 3)])
    assert from_onnx(model, batch=1).layers[0].nodes == ("node_Conv_7",)


def test_a_fallback_name_of_other_convolutions_too(tmp_path):
    nodes = [conv("node_Conv_1", "x", "w", "y"),
             scoped(helper.make_node("ConvTranspose", ["y", "wt"], ["out"], name="node_ConvTranspose_2"),
                    scopes="['', 'decoder.up', 'conv_transpose2d']")]
    network = from_onnx(save(tmp_path / "m.onnx", nodes, [weight("w", 16, 16, 3, 3), weight("wt", 16, 16, 2, 2)]),
                        batch=1)
    assert network.unsupported == ()
    assert [layer.nodes for layer in network.layers] == [("node_Conv_1",), ("decoder.up",)]
    assert network.layers[1].problem.transposed  # a ConvTranspose is a transposed layer, named after its module


# --- a size only known when the model runs (the legacy exporter's DeepLabV3) ---------------------------------------

def test_a_size_computed_at_run_time_says_which_exporter_to_use(tmp_path):
    """ASPP pooling as the legacy exporter writes it: a Resize whose size is the Shape of another tensor; the
    Concat after it has a channel count shape inference cannot know."""
    nodes = [conv("/aspp/conv/Conv", "x", "w", "a"),
             helper.make_node("GlobalAveragePool", ["a"], ["pooled"], name="/aspp/pool/GlobalAveragePool"),
             helper.make_node("Shape", ["a"], ["size"], name="/aspp/Shape"),
             helper.make_node("Resize", ["pooled", "", "", "size"], ["up"], name="/aspp/pool/Resize"),
             helper.make_node("Concat", ["a", "up"], ["cat"], name="/aspp/Concat", axis=1),
             conv("/aspp/project/Conv", "cat", "wp", "out", pads=(0, 0, 0, 0))]
    path = save(tmp_path / "deeplab.onnx", nodes, [weight("w", 16, 16, 3, 3), weight("wp", 16, 32, 1, 1)])
    with pytest.raises(NetworkError) as error:
        from_onnx(path, batch=1)
    message = str(error.value)
    assert "Resize node '/aspp/pool/Resize'" in message and "dynamo=True" in message and "--torchvision" in message
    assert "export the model with fixed spatial sizes" not in message  # it was: the advice that did not help


def test_a_batch_computed_at_run_time_is_not_called_symbolic(tmp_path):
    """A legacy export of a fixed batch of 1 whose F.interpolate(size=...) feeds a conv: shape inference leaves
    every dimension of the Resize's output unknown, the batch too, and the importer said 'the batch dimension is
    symbolic; pass --batch N', which the model's fixed batch does not need and which does not help."""
    nodes = [conv("/backbone/Conv", "x", "w", "a"),
             helper.make_node("Shape", ["x"], ["size"], name="/Shape"),
             helper.make_node("Resize", ["a", "", "", "size"], ["up"], name="/head/Resize"),
             conv("/head/Conv", "up", "wp", "out", pads=(0, 0, 0, 0))]
    path = save(tmp_path / "fixed.onnx", nodes, [weight("w", 16, 16, 3, 3), weight("wp", 16, 16, 1, 1)], batch=1)
    for batch in (None, 1):
        with pytest.raises(NetworkError) as error:
            from_onnx(path, batch=batch)
        message = str(error.value)
        assert "pass --batch" not in message and "batch dimension is symbolic" not in message
        assert ("dimensions 0 (batch), 1 (channels), 2 (height), 3 (width) of 'up' are computed when the model runs, "
                "not symbolic: no --batch sets them (the model's input batch is a fixed 1)") in message
        assert "Resize node '/head/Resize'" in message and "dynamo=True" in message and "--torchvision" in message


# --- data types ------------------------------------------------------------------------------------------------

def typed_model(path: Path, element: int) -> Path:
    """x -> conv a (ReLU) -> conv b, every tensor of ONNX element type `element`."""
    def typed_weight(name: str, k: int, c: int) -> object:
        return helper.make_tensor(name, element, (k, c, 3, 3), [0.5] * (k * c * 9))

    nodes = [conv("conv_a", "x", "wa", "a"), helper.make_node("Relu", ["a"], ["a_r"], name="relu_a"),
             conv("conv_b", "a_r", "wb", "out")]
    x = helper.make_tensor_value_info("x", element, [2, 16, 16, 16])
    out = helper.make_tensor_value_info("out", element, None)
    graph = helper.make_graph(nodes, "net", [x], [out], initializer=[typed_weight("wa", 16, 16),
                                                                      typed_weight("wb", 16, 16)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


ONNX_ELEMENTS = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


@pytest.mark.parametrize("element, dtype, key, tag", MODEL_DTYPE_CASES)
def test_the_models_element_type_or_dtype_types_its_layers(tmp_path, element, dtype, key, tag):
    network = from_onnx(typed_model(tmp_path / "typed.onnx", ONNX_ELEMENTS[element]), dtype=dtype)
    assert [layer.problem.dtype_key for layer in network.layers] == [key, key]
    assert [layer.name for layer in network.layers] == [f"typed{tag}_b2_conv_a", f"typed{tag}_b2_conv_b"]


def test_a_float64_model_is_listed_with_the_reason(tmp_path):
    network = from_onnx(typed_model(tmp_path / "double.onnx", TensorProto.DOUBLE))
    assert not network.layers and len(network.unsupported) == 2
    assert all("float64" in item.reason and "--dtype" in item.reason for item in network.unsupported)


@pytest.mark.parametrize("dtype", ["bf16", "tf32", "e4m3"])
def test_written_layers_keep_their_types(tmp_path, dtype):
    network = from_onnx(typed_model(tmp_path / "typed.onnx", TensorProto.FLOAT), dtype=dtype)
    write_layers(network, tmp_path / "layers.yaml")
    layers = load_layers(tmp_path / "layers.yaml")
    assert {name: layer.problem for name, layer in layers.items()} == {layer.name: layer.problem for layer in network.layers}


def test_dtype_with_a_layer_of_the_table_is_exit_2():
    result = tune_in_process("--layer", "conv_1", "--dtype", "bf16")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--dtype goes with --shape" in result.stderr


# --- transposed convolutions (a UNet's decoder) ----------------------------------------------------------------

def conv_transpose(name: str, x: str, w: str, y: str, pads=(0, 0, 0, 0), strides=(2, 2), output_padding=None,
                   bias: str | None = None, **attributes):
    inputs = [x, w] + ([bias] if bias else [])
    extra = {"output_padding": list(output_padding)} if output_padding else {}
    return helper.make_node("ConvTranspose", inputs, [y], name=name, pads=list(pads), strides=list(strides),
                            **extra, **attributes)


def unet(path: Path) -> Path:
    """x (16 ch, 16x16) -> down (3x3 s2) -> up (2x2 s2 ConvTranspose, bias) -> concat with x -> up2 (4x4 s2
    pad 1, BN, ReLU) -> up3 (3x3 s2 pad 1 output_padding 1) -> out."""
    bn_2, init_2 = bn("bn_up2", "u2", "u2_bn", 8)
    nodes = [conv("down", "x", "wd", "d", strides=(2, 2)),
             conv_transpose("up", "d", "wu", "u", bias="bu"),
             helper.make_node("Concat", ["u", "x"], ["cat"], name="cat", axis=1),
             conv_transpose("up2", "cat", "wu2", "u2", pads=(1, 1, 1, 1)), bn_2,
             helper.make_node("Relu", ["u2_bn"], ["u2_r"], name="relu_up2"),
             conv_transpose("up3", "u2_r", "wu3", "out", pads=(1, 1, 1, 1), output_padding=(1, 1))]
    inits = [weight("wd", 32, 16, 3, 3), weight("wu", 32, 16, 2, 2), vector("bu", 16), weight("wu2", 32, 8, 4, 4),
             weight("wu3", 8, 8, 3, 3), *init_2]  # a ConvTranspose's weight is C, K, R, S
    return save(path, nodes, inits)


def test_a_unet_s_conv_transposes_are_transposed_layers(tmp_path):
    network = from_onnx(unet(tmp_path / "unet.onnx"), batch=2)
    by_node = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert set(by_node) == {"down", "up", "up2", "up3"} and network.unsupported == ()
    up, up2, up3 = by_node["up"], by_node["up2"], by_node["up3"]
    assert up.transposed and (up.n, up.h, up.w, up.c, up.k, up.r, up.p, up.q) == (2, 8, 8, 32, 16, 2, 16, 16)
    assert up.key == "n2h8w8c32k16r2s2p0u2d1t"
    assert (up2.c, up2.k, up2.r, up2.pads, up2.p) == (32, 8, 4, (1, 1), 32)
    assert up3.output_paddings == (1, 1) and (up3.p, up3.q) == (64, 64) and up3.key.endswith("t1")
    assert not any(problem.epilogue.fused for problem in (up, up2, up3))  # the bias and the BN+ReLU stay the model's
    assert network.not_fused == (
        "up -> bias (no family fuses an epilogue into a transposed convolution yet)",
        "up2 -> scale+bias+relu (no family fuses an epilogue into a transposed convolution yet)")
    table = tmp_path / "layers.yaml"
    write_layers(network, table)
    assert {layer.problem for layer in load_layers(table).values()} == set(by_node.values())


def test_the_coverage_counts_transposed_convolutions_with_their_flops(tmp_path):
    from tuner.pipeline.network_report import TOTAL, TUNABLE, coverage

    network = from_onnx(unet(tmp_path / "unet.onnx"), batch=2)
    rows = {row.state: row for row in coverage(network)}
    flops = sum(layer.problem.flops for layer in network.layers)
    assert rows[TUNABLE].convolutions == rows[TOTAL].convolutions == 4
    assert rows[TUNABLE].flops == rows[TOTAL].flops == flops
    assert network.layers[1].problem.flops == 2 * 2 * 8 * 8 * 32 * 16 * 2 * 2  # every input pixel times every tap


@pytest.mark.parametrize("node, says", [
    (lambda: conv_transpose("up", "x", "w", "out", group=2), "grouped transposed convolution: 2 groups"),
    (lambda: conv_transpose("up", "x", "w", "out", output_shape=[32, 32]), "ConvTranspose with output_shape"),
    (lambda: conv_transpose("up", "x", "w", "out", pads=(0, 0, 1, 1)), "one-sided padding"),
], ids=["grouped", "output_shape", "one-sided"])
def test_transposed_convolutions_no_family_takes_are_listed(tmp_path, node, says):
    grouped = "group" in says
    path = save(tmp_path / "m.onnx", [node()], [weight("w", 16, 8 if grouped else 16, 2, 2)])
    [item] = from_onnx(path, batch=1).unsupported
    assert item.node == "up" and says in item.reason
    assert (item.flops is None) == ("output_shape" in says)  # a reason the frontend found: no shape read
