"""The layer table (tuner/core/layers.py): search_spaces/layers.yaml, --shape, and finding layers by name or
pattern."""
import dataclasses
import re
from pathlib import Path

import pytest

from conftest import one_line
from tuner.core.dtypes import DataType
from tuner.core.epilogue import Epilogue
from tuner.core.errors import ProblemError, UsageError
from tuner.core.layers import Layer, find_layer, load_layers, matching_layers, parse_shape
from tuner.core.problem import ConvProblem


# --- the layer table ------------------------------------------------------------------------------

def test_conv_1_is_exactly_the_reference_case(layers):
    assert layers["conv_1"] == Layer("conv_1", ConvProblem(
        n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, stride=1, dilation=1,
        input_type=DataType.f16, filter_type=DataType.f16, output_type=DataType.f32,
        accumulator_type=DataType.f32))


def resnet50_v15_convs() -> set[tuple]:
    """Every distinct conv of torchvision's ResNet-50 (v1.5: stride on the 3x3) at 224x224, derived
    from the architecture: (h, w, c, k, r, s, pad, stride)."""
    convs = {(224, 224, 3, 64, 7, 7, 3, 2)}
    stages = [  # (input channels, bottleneck width, output channels, input size, stride, blocks)
        (64, 64, 256, 56, 1, 3), (256, 128, 512, 56, 2, 4), (512, 256, 1024, 28, 2, 6), (1024, 512, 2048, 14, 2, 3)]
    for c_in, mid, c_out, size, stride, blocks in stages:
        out = size // stride
        convs |= {(size, size, c_in, mid, 1, 1, 0, 1), (size, size, mid, mid, 3, 3, 1, stride),
                  (out, out, mid, c_out, 1, 1, 0, 1), (size, size, c_in, c_out, 1, 1, 0, stride)}
        for _ in range(blocks - 1):
            convs |= {(out, out, c_out, mid, 1, 1, 0, 1), (out, out, mid, mid, 3, 3, 1, 1),
                      (out, out, mid, c_out, 1, 1, 0, 1)}
    return convs


@pytest.mark.parametrize("batch", [1, 32])
def test_table_holds_every_resnet50_conv_at_batch(layers, batch):
    expected = resnet50_v15_convs()
    assert len(expected) == 23
    at_batch = {name: layer.problem for name, layer in layers.items()
                if name.endswith(f"_b{batch}") and not layer.problem.epilogue.fused}
    assert len(at_batch) == 23
    assert not any(p.per_axis for p in at_batch.values())
    shapes = {(p.h, p.w, p.c, p.k, p.r, p.s, p.pad_h, p.stride_h) for p in at_batch.values()}
    assert shapes == expected
    for name, p in at_batch.items():
        assert name.startswith("r50_")
        assert p.n == batch and p.dilations == (1, 1), name
        assert p.dtype_key == "f16_f16_f16_f32", name


def test_table_is_conv_1_plus_both_batches_bare_and_fused(layers):
    assert len(layers) == 1 + 23 + 23 + 24 + 24
    assert set(layers) - {n for n in layers if n.startswith(("r50_", "r50f_"))} == {"conv_1"}
    for name, layer in layers.items():
        assert layer.name == name
        if name.endswith("_b1"):
            twin = layers[name[:-len("_b1")] + "_b32"].problem
            assert twin == dataclasses.replace(layer.problem, n=32)


def test_r50_stem_and_stage4_values(layers):
    stem = layers["r50_stem_b32"].problem
    assert (stem.n, stem.c, stem.k, stem.p, stem.q) == (32, 3, 64, 112, 112)
    s4 = layers["r50_s4_3x3_b32"].problem
    assert s4.gemm_mnk == (32 * 14 * 14, 256, 2304)
    assert round(s4.flops / 1e9, 3) == 7.399


@pytest.mark.parametrize("batch", [1, 32])
def test_fused_resnet50_layers_carry_the_epilogues_the_network_runs(layers, batch):
    """Each conv with its folded batch-norm and ReLU; the expanding 1x1 adds the shortcut before the
    ReLU; the downsample branch has no activation (stage 2's is 64to256 at stride 1)."""
    fused = {n: l.problem for n, l in layers.items() if n.startswith("r50f_") and n.endswith(f"_b{batch}")}
    assert len(fused) == 24
    for name, problem in fused.items():
        bare = dataclasses.replace(problem, epilogue=Epilogue())
        twin = layers.get(name.replace("r50f_", "r50_")) or layers[f"r50_s2_1x1_64to256_b{batch}"]
        assert twin.problem == bare, name
        expand = re.search(r"_1x1_(\d+)to(\d+)_", name)
        if "down" in name:
            assert problem.epilogue.key == "scale+bias", name
        elif expand and int(expand.group(2)) == 4 * int(expand.group(1)):
            assert problem.epilogue.key == "scale+bias+residual+relu", name
        else:
            assert problem.epilogue.key == "scale+bias+relu", name


# --- --shape --------------------------------------------------------------------------------------

def test_parse_shape_seven_numbers_takes_defaults():
    problem = parse_shape("1,32,32,32,32,3,3")
    assert problem == ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3)
    assert (problem.pads, problem.strides, problem.dilations, problem.groups) == ((0, 0), (1, 1), (1, 1), 1)
    assert problem.dtype_key == "f16_f16_f16_f32"


def test_parse_shape_all_ten_numbers_with_spaces():
    problem = parse_shape(" 2, 56,56 ,64,128, 3,3, 1, 2, 1 ")
    assert problem == ConvProblem(n=2, h=56, w=56, c=64, k=128, r=3, s=3, pad=1, stride=2, dilation=1)
    assert (problem.p, problem.q) == (28, 28)


def test_parse_shape_with_dtypes():
    problem = parse_shape("1,32,32,32,32,3,3,1", {"output_type": DataType.f32})
    assert problem.output_type is DataType.f32 and problem.pads == (1, 1)


@pytest.mark.parametrize(
    "text, word",
    [
        ("1,32,32,32,32,3", "6 numbers"),
        ("1,32,32,32,32,3,3,1,1,1,1", "11 numbers"),
        ("", "1 numbers"),
        ("1,32,32,32,32,3,3.0", "whole numbers"),
        ("1,32,32,32,thirty,3,3", "whole numbers"),
        ("1,32,32,,32,3,3", "whole numbers"),
        ("1,32,32,32,32,3,-3", "s=-3"),
        ("1,32,32,32,32,3,3,-1", "pad=-1"),
        ("1,32,32,32,32,3,3,0,0", "stride=0"),
        ("1,2,2,32,32,3,3", "empty"),                # output size 0x0
        ("1,4,4,32,32,3,3,0,1,2", "empty"),          # dilated 3x3 spans 5 > 4
    ],
)
def test_parse_shape_refuses(text, word):
    with pytest.raises(ProblemError) as error:
        parse_shape(text)
    assert word in one_line(error)


@pytest.mark.parametrize("text, fields", [
    ("32,17,17,128,128,1,7,0,3,1,1,1,1", dict(pad_h=0, pad_w=3)),
    ("1,9,9,8,8,3,3,1,1,2,1,1,2", dict(pad=1, stride_h=2, stride_w=1, dilation_h=1, dilation_w=2)),
    ("1,8,8,64,64,3,3,1,1,1,1,1,1,32", dict(pad=1, groups=32)),
])
def test_parse_shape_long_form(text, fields):
    n, h, w, c, k, r, s = (int(v) for v in text.split(",")[:7])
    expected = ConvProblem(n=n, h=h, w=w, c=c, k=k, r=r, s=s, **fields)
    assert parse_shape(text) == expected
    assert parse_shape(expected.shape_arg) == expected
    assert expected.shape_arg == text  # per axis or grouped: the long form


@pytest.mark.parametrize("text, word", [
    ("1,32,32,32,32,3,3,1,1,1,1,1", "12 numbers; give N,H,W,C,K,R,S[,pad,stride,dilation] (7 to 10 numbers) or "
                                    "N,H,W,C,K,R,S,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w[,groups]"),
    ("1,32,32,32,32,3,3,1,1,1,1,1,1,1,1", "15 numbers"),
    ("1,32,32,32,32,1,7,0,-3,1,1,1,1", "pad_w=-3"),
    ("1,32,32,30,32,3,3,1,1,1,1,1,1,4", "groups=4 must divide"),
])
def test_parse_shape_long_form_refuses(text, word):
    with pytest.raises(ProblemError) as error:
        parse_shape(text)
    assert word in one_line(error)


def test_parse_shape_reads_the_transposed_field():
    assert parse_shape("1,32,32,128,64,2,2,0,2,1,t").transposed
    assert parse_shape("1,32,32,128,64,2,2,0,2,1,T").key.endswith("t")
    problem = parse_shape("1,16,16,64,32,3,3,1,1,2,2,1,1,t1x0")
    assert problem.output_paddings == (1, 0) and (problem.p, problem.q) == (32, 31)
    with pytest.raises(ProblemError, match="whole numbers"):
        parse_shape("1,32,32,128,64,2,2,0,2,x")


# --- load_layers ----------------------------------------------------------------------------------

def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "layers.yaml"
    path.write_text(text)
    return path


GOOD = "{n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3}"


def test_load_layers_minimal_table_applies_defaults(tmp_path):
    path = write(tmp_path, f"defaults: {{pad: 1, output_type: f32}}\nlayers:\n  a: {GOOD}\n  b: {{n: 2, h: 8, w: 8, c: 4, k: 4, r: 1, s: 1, pad: 0}}\n")
    layers = load_layers(path)
    assert list(layers) == ["a", "b"]
    assert layers["a"].problem.pads == (1, 1) and layers["a"].problem.output_type is DataType.f32
    assert layers["b"].problem.pads == (0, 0) and layers["b"].problem.n == 2


@pytest.mark.parametrize(
    "text, words",
    [
        ("layers:\n  a: {n: 1, h: 8\n", ["not valid YAML"]),
        ("layers: [a, b]\n  - c\n", ["not valid YAML"]),
        ("defaults: {pad: 1}\n", ["'layers:'"]),
        ("layers: [conv_1]\n", ["'layers:'"]),
        ("- just a list\n", ["'layers:'"]),
        ("", ["'layers:'"]),
        ("defaults: [1]\nlayers:\n  a: " + GOOD + "\n", ["'defaults' must be a mapping"]),
        ("layers:\n  a: 3\n", ["'a'", "mapping"]),
        ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, bias: 1}\n", ["'a'", "unknown", "bias"]),
        ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3}\n", ["'a'", "missing", "s"]),
        ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, output_type: f64}\n", ["'a'", "output_type", "f64"]),
        ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, input_type: [f16]}\n", ["'a'", "input_type"]),
        ("layers:\n  a: {n: true, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3}\n", ["'a'", "n must be a whole number", "True"]),
        ("layers:\n  a: {n: 1, h: 8.0, w: 8, c: 4, k: 4, r: 3, s: 3}\n", ["'a'", "h must be a whole number"]),
        ("layers:\n  a: {n: 1, h: '8', w: 8, c: 4, k: 4, r: 3, s: 3}\n", ["'a'", "h must be a whole number"]),
        ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, pad: -1}\n", ["'a'", "pad=-1"]),
        ("layers:\n  a: {n: 1, h: 2, w: 2, c: 4, k: 4, r: 3, s: 3}\n", ["'a'", "empty"]),
    ],
)
def test_load_layers_refuses(tmp_path, text, words):
    with pytest.raises(ProblemError) as error:
        load_layers(write(tmp_path, text))
    message = one_line(error)
    for word in words:
        assert word in message


def test_load_layers_yaml_error_names_the_line(tmp_path):
    with pytest.raises(ProblemError) as error:
        load_layers(write(tmp_path, "layers:\n  a: " + GOOD + "\n  b: {n: 1, h: 8\n"))
    assert "at line" in one_line(error)


def test_load_layers_missing_file(tmp_path):
    with pytest.raises(ProblemError) as error:
        load_layers(tmp_path / "nope.yaml")
    message = one_line(error)
    assert "nope.yaml" in message and "not found" in message


def test_load_layers_unknown_integer_field(tmp_path):
    with pytest.raises(ProblemError) as error:
        load_layers(write(tmp_path, "layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, 7: 1, bias: 0}\n"))
    assert "unknown" in one_line(error)


@pytest.mark.parametrize("kind", ["directory", "binary"])
def test_load_layers_unreadable_file(tmp_path, kind):
    if kind == "directory":
        path = tmp_path / "layers.yaml"
        path.mkdir()
    else:
        path = tmp_path / "layers.yaml"
        path.write_bytes(b"\xff\xfe\x00layers")
    with pytest.raises(ProblemError) as error:
        load_layers(path)
    assert "layers.yaml" in one_line(error)


def test_a_layer_table_takes_each_type(tmp_path):
    path = tmp_path / "layers.yaml"
    path.write_text("defaults: {input_type: bf16, filter_type: bf16, output_type: bf16}\nlayers:\n"
                    "  a: {n: 1, h: 8, w: 8, c: 16, k: 16, r: 3, s: 3, pad: 1}\n"
                    "  b: {n: 1, h: 8, w: 8, c: 16, k: 16, r: 1, s: 1, input_type: tf32, filter_type: tf32, "
                    "output_type: f32}\n")
    layers = load_layers(path)
    assert layers["a"].problem.dtype_key == "bf16_bf16_bf16_f32"
    assert layers["b"].problem.dtype_key == "tf32_tf32_f32_f32"


def test_layer_tables_take_the_per_axis_fields_and_groups(tmp_path):
    path = write(tmp_path, "defaults: {pad: 1, stride: 1}\nlayers:\n"
                           "  a: {n: 1, h: 17, w: 17, c: 8, k: 8, r: 1, s: 7, pad_h: 0, pad_w: 3}\n"
                           "  b: {n: 1, h: 17, w: 17, c: 8, k: 8, r: 7, s: 1, pad_w: 0}\n"
                           "  c: {n: 1, h: 17, w: 17, c: 8, k: 8, r: 3, s: 3, stride_h: 2, groups: 4}\n"
                           "  d: {n: 1, h: 17, w: 17, c: 8, k: 8, r: 3, s: 3}\n")
    layers = load_layers(path)
    assert layers["a"].problem == ConvProblem(n=1, h=17, w=17, c=8, k=8, r=1, s=7, pad_h=0, pad_w=3)
    assert layers["b"].problem.pads == (1, 0)  # pad_h from the defaults' pad
    assert (layers["c"].problem.strides, layers["c"].problem.groups) == ((2, 1), 4)
    assert layers["d"].problem.pads == (1, 1) and not layers["d"].problem.per_axis


@pytest.mark.parametrize("text, words", [
    ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, pad: 1, pad_w: 0}\n",
     ["'a'", "give pad (both axes) or pad_h/pad_w, not both"]),
    ("defaults: {stride: 1, stride_h: 2}\nlayers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3}\n",
     ["'a'", "give stride (both axes) or stride_h/stride_w, not both"]),
    ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, dilation_w: x}\n", ["'a'", "dilation_w must be a whole"]),
    ("layers:\n  a: {n: 1, h: 8, w: 8, c: 4, k: 4, r: 3, s: 3, groups: 3}\n", ["'a'", "groups=3 must divide"]),
])
def test_layer_tables_refuse_bad_per_axis_fields(tmp_path, text, words):
    with pytest.raises(ProblemError) as error:
        load_layers(write(tmp_path, text))
    message = one_line(error)
    assert message.count("layer 'a'") == 1
    for word in words:
        assert word in message


def test_a_layer_table_refuses_a_transposed_field_that_is_not_a_truth_value(tmp_path):
    table = tmp_path / "layers.yaml"
    table.write_text("layers:\n  up: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 2, s: 2, stride: 2, transposed: 1}\n")
    with pytest.raises(ProblemError, match="layer 'up': transposed must be true or false"):
        load_layers(table)


# --- find_layer and matching_layers ---------------------------------------------------------------

def test_find_layer(layers):
    assert find_layer(layers, "r50_s4_3x3_b32").problem.k == 256


def test_find_layer_unknown_with_hint(layers):
    with pytest.raises(ProblemError) as error:
        find_layer(layers, "conv")
    message = one_line(error)
    assert "'conv'" in message and "conv_1" in message and "--list-layers" in message


def test_find_layer_unknown_without_hint(layers):
    with pytest.raises(ProblemError) as error:
        find_layer(layers, "vgg16_conv5")
    message = one_line(error)
    assert "'vgg16_conv5'" in message and "did you mean" not in message


def test_matching_layers_takes_a_name_or_a_shell_pattern(layers):
    assert matching_layers(layers, "conv_1") == [layers["conv_1"]]
    stems = matching_layers(layers, "r50*_stem_b*")
    assert [layer.name for layer in stems] == ["r50_stem_b1", "r50_stem_b32", "r50f_stem_b1", "r50f_stem_b32"]
    with pytest.raises(ProblemError, match="did you mean"):
        matching_layers(layers, "conv")
    with pytest.raises(UsageError) as error:
        matching_layers(layers, "vgg*")
    assert "--layers pattern 'vgg*' matches no layer" in one_line(error)
