import dataclasses
import re
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import one_line
from tuner.core.dtypes import DataType, dtype_fields, dtype_name
from tuner.core.epilogue import parse_epilogue
from tuner.core.errors import ProblemError
from tuner.core.layers import load_layers, parse_shape
from tuner.core.problem import ConvProblem, problem_from_dict, problem_to_dict


# --- output size and implicit-GEMM arithmetic ----------------------------------------------------

@pytest.mark.parametrize(
    "shape, expected_pq",
    [
        (dict(h=32, w=32, r=3, s=3, pad=1), (32, 32)),                       # "same" 3x3
        (dict(h=32, w=32, r=3, s=3, pad=0), (30, 30)),                       # "valid" 3x3
        (dict(h=56, w=56, r=3, s=3, pad=1, stride=2), (28, 28)),             # ResNet 3x3 stride 2
        (dict(h=224, w=224, r=7, s=7, pad=3, stride=2), (112, 112)),         # ResNet stem
        (dict(h=56, w=56, r=1, s=1, pad=0, stride=2), (28, 28)),             # 1x1 downsample
        (dict(h=10, w=10, r=3, s=3, pad=0, dilation=2), (6, 6)),             # effective 5x5 filter
        (dict(h=10, w=10, r=3, s=3, pad=2, dilation=2), (10, 10)),
        (dict(h=9, w=6, r=3, s=1, pad=0, stride=2), (4, 3)),                 # non-square, floor division
        (dict(h=11, w=7, r=2, s=3, pad=1, stride=3, dilation=2), (4, 2)),
        (dict(h=1, w=1, r=3, s=3, pad=1), (1, 1)),
    ],
)
def test_output_size(shape, expected_pq):
    problem = ConvProblem(n=1, c=8, k=8, **shape)
    assert (problem.p, problem.q) == expected_pq


def test_conv_1_arithmetic(conv_1):
    # M = N*P*Q = 1*32*32, N = K = 32, K = C*R*S = 32*9
    assert conv_1.gemm_mnk == (1024, 32, 288)
    assert conv_1.flops == 2 * 1024 * 32 * 288 == 18_874_368
    # x: 32*32*32 f16, w: 32*3*3*32 f16, y: 32*32*32 f32
    assert conv_1.input_elements == 32768
    assert conv_1.filter_elements == 9216
    assert conv_1.output_elements == 32768
    assert conv_1.bytes_moved == 32768 * 2 + 9216 * 2 + 32768 * 4 == 215_040


def test_arithmetic_with_stride_batch_and_f16_output():
    problem = ConvProblem(n=32, h=56, w=56, c=128, k=128, r=3, s=3, pad=1, stride=2)
    assert (problem.p, problem.q) == (28, 28)
    assert problem.gemm_mnk == (32 * 28 * 28, 128, 128 * 9)
    assert problem.flops == 2 * 25088 * 128 * 1152
    assert problem.bytes_moved == (32 * 56 * 56 * 128 + 128 * 9 * 128 + 32 * 28 * 28 * 128) * 2


def test_datatype_sizes():
    assert [(t.bits, t.bytes) for t in (DataType.f16, DataType.bf16, DataType.f32)] == [(16, 2), (16, 2), (32, 4)]


def test_problem_is_frozen_and_hashable(conv_1):
    same = ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, output_type=DataType.f32)
    assert same == conv_1 and hash(same) == hash(conv_1)
    assert len({same, conv_1, dataclasses.replace(conv_1, k=64)}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        conv_1.n = 2


def test_shape_text_and_dtype_key(conv_1):
    assert conv_1.shape_text == "N=1 H=32 W=32 C=32 K=32 R=3 S=3 pad=1 stride=1 dilation=1"
    assert conv_1.dtype_key == "f16_f16_f32_f32"


@pytest.mark.parametrize(
    "fields, word",
    [
        (dict(n=0), "n=0"),
        (dict(c=-1), "c=-1"),
        (dict(stride=0), "stride=0"),
        (dict(dilation=0), "dilation=0"),
        (dict(pad=-1), "pad=-1"),
        (dict(h=2, w=2, r=3, s=3), "empty"),           # the 3x3 filter does not fit 2x2 without padding
        (dict(h=4, w=4, r=3, s=3, dilation=2), "empty"),
    ],
)
def test_impossible_problems_are_refused(fields, word):
    base = dict(n=1, h=8, w=8, c=4, k=4, r=3, s=3)
    with pytest.raises(ProblemError) as error:
        ConvProblem(**{**base, **fields})
    assert word in one_line(error)


def test_strided_1x1_reads_a_quarter_of_the_input():
    downsample = ConvProblem(n=32, h=56, w=56, c=256, k=512, r=1, s=1, stride=2)
    assert downsample.touched_input_elements == downsample.input_elements // 4
    assert downsample.bytes_moved == (downsample.input_elements // 4 + downsample.filter_elements
                                      + downsample.output_elements) * 2


def test_overlapping_windows_read_every_input_pixel():
    stem = ConvProblem(n=1, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)
    assert stem.touched_input_elements == stem.input_elements


@pytest.mark.parametrize("fields, words", [
    (dict(n=1, h=3_000_000_000, w=16, c=32, k=32, r=3, s=3, pad=1), "h=3000000000 exceeds 2147483647"),
    (dict(n=1_000_000, h=1024, w=1024, c=64, k=64, r=3, s=3, pad=1), "N*P*Q (GEMM M) = 1048576000000"),
    (dict(n=64, h=1024, w=1024, c=64, k=8, r=1, s=1), "N*H*W*C (input elements) = 4294967296"),
])
def test_sizes_beyond_int32_are_refused(fields, words):
    with pytest.raises(ProblemError, match=re.escape(words)):
        ConvProblem(**fields)


def test_epilogue_in_the_layer_table_and_the_dict_form(tmp_path):
    table = tmp_path / "layers.yaml"
    table.write_text("layers:\n  a: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1, epilogue: bias+relu}\n"
                     "  b: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1}\n")
    layers = load_layers(table)
    a, b = layers["a"].problem, layers["b"].problem
    assert a.epilogue == parse_epilogue("bias+relu") and not b.epilogue.fused
    assert a.variant_key == "f16_f16_f16_f32+bias+relu" and b.variant_key == b.dtype_key
    assert problem_from_dict(problem_to_dict(a)) == a
    assert "epilogue" not in problem_to_dict(b)  # a bare conv's entry reads as before epilogues
    table.write_text("layers:\n  a: {n: 1, h: 8, w: 8, c: 8, k: 8, r: 1, s: 1, epilogue: bias+tanh}\n")
    with pytest.raises(ProblemError, match="layer 'a'.*unknown part 'tanh'"):
        load_layers(table)


def test_shape_arg_is_what_parse_shape_reads_back():
    from tuner.core.layers import parse_shape
    from tuner.core.problem import ConvProblem

    problem = ConvProblem(n=32, h=56, w=56, c=64, k=128, r=3, s=3, pad=2, stride=2, dilation=2)
    assert problem.shape_arg == "32,56,56,64,128,3,3,2,2,2"
    assert parse_shape(problem.shape_arg) == problem


# --- data types --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [("f16", "f16_f16_f16_f32"), ("bf16", "bf16_bf16_bf16_f32"),
                                       ("tf32", "tf32_tf32_f32_f32"), ("e4m3", "e4m3_e4m3_f16_f32")])
def test_dtype_names_key_the_problem(name, key):
    problem = parse_shape("2,14,14,64,64,3,3,1", dtype_fields(name))
    assert problem.dtype_key == key and dtype_name(problem) == name
    assert problem_from_dict(problem_to_dict(problem)) == problem
    assert problem.variant_key == key


def test_tf32_is_stored_as_f32():
    problem = parse_shape("2,14,14,64,64,3,3,1", dtype_fields("tf32"))
    assert problem.input_type.bytes == 4 and problem.bytes_moved == 2 * parse_shape("2,14,14,64,64,3,3,1").bytes_moved
    assert DataType.tf32.significand_bits == 11 and DataType.tf32.stored_significand_bits == 24
    assert DataType.bf16.significand_bits == DataType.bf16.stored_significand_bits == 8


def test_e4m3_is_one_byte_an_operand_and_writes_f16():
    problem = parse_shape("2,14,14,64,64,3,3,1", dtype_fields("e4m3"))
    assert problem.input_type.bytes == problem.filter_type.bytes == 1 and problem.output_type is DataType.f16
    assert DataType.e4m3.significand_bits == DataType.e4m3.stored_significand_bits == 4
    # the per-tensor scales are run-time operands: nothing of them is in the problem, its dict form or its key
    assert problem_to_dict(problem) == {**problem_to_dict(parse_shape("2,14,14,64,64,3,3,1")), "input_type": "e4m3",
                                        "filter_type": "e4m3"}


def test_tf32_is_an_input_type_only():
    with pytest.raises(ProblemError, match="output_type=tf32"):
        ConvProblem(n=1, h=4, w=4, c=8, k=8, r=1, s=1, output_type=DataType.tf32)
    with pytest.raises(ProblemError, match="is not one of f16, bf16, tf32"):
        dtype_fields("f32")


# --- per-axis problems and groups ----------------------------------------------------------------

INCEPTION_1X7 = ConvProblem(n=32, h=17, w=17, c=128, k=128, r=1, s=7, pad_h=0, pad_w=3)


def test_per_axis_output_size_and_arithmetic():
    tall = ConvProblem(n=1, h=17, w=20, c=8, k=8, r=7, s=1, pad_h=3, pad_w=0, stride_h=1, stride_w=2)
    assert (tall.p, tall.q) == (17, 10) and tall.per_axis
    assert tall.gemm_mnk == (17 * 10, 8, 8 * 7)
    assert (INCEPTION_1X7.p, INCEPTION_1X7.q) == (17, 17)
    dilated = ConvProblem(n=1, h=10, w=10, c=8, k=8, r=3, s=3, dilation_h=2, dilation_w=1)
    assert (dilated.p, dilated.q) == (6, 8)
    # a stride wider than the window along one axis only skips pixels along that axis
    skip = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=1, s=1, stride_h=2, stride_w=1)
    assert skip.touched_input_elements == 4 * 8 * 4


def test_symmetric_keywords_set_both_axes_and_equal_the_long_form():
    assert ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1, stride=2, dilation=1) == ConvProblem(
        n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2, dilation_h=1, dilation_w=1)
    one_axis = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad_w=1)  # the other keeps the default
    assert one_axis.pads == (0, 1) and one_axis.per_axis
    assert not ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1).per_axis


@pytest.mark.parametrize("fields, word", [
    (dict(pad=1, pad_w=2), "give pad (both axes) or pad_h/pad_w, not both"),
    (dict(stride_h=0), "stride_h=0"),
    (dict(dilation_w=0), "dilation_w=0"),
    (dict(pad_h=-1), "pad_h=-1"),
    (dict(groups=0), "groups=0"),
    (dict(groups=3), "groups=3 must divide both C=6 and K=4"),
    (dict(r=1, s=9, pad_w=1), "pad 0x1 (height x width)"),  # 9 columns do not fit 6 padded by 1
])
def test_impossible_per_axis_problems_are_refused(fields, word):
    with pytest.raises(ProblemError) as error:
        ConvProblem(**{**dict(n=1, h=6, w=6, c=6, k=4, r=3, s=3), **fields})
    assert word in one_line(error)


def test_replacing_the_symmetric_keyword_says_which_fields_to_replace():
    with pytest.raises(ProblemError, match="replace those"):
        dataclasses.replace(INCEPTION_1X7, stride=2)
    assert dataclasses.replace(INCEPTION_1X7, stride_h=2, stride_w=2).strides == (2, 2)


def test_groups_divide_the_filter_and_the_work():
    grouped = ConvProblem(n=1, h=8, w=8, c=64, k=128, r=3, s=3, pad=1, groups=32)
    assert grouped.channels_per_group == 2
    assert grouped.gemm_mnk == (64, 128, 2 * 9)
    assert grouped.flops == 2 * 64 * 128 * 18
    assert grouped.filter_elements == 128 * 9 * 2
    depthwise = ConvProblem(n=1, h=8, w=8, c=16, k=16, r=3, s=3, pad=1, groups=16)
    assert depthwise.flops == 2 * 64 * 16 * 9


def test_keys_of_symmetric_problems_are_as_before_and_the_rest_carry_what_differs(conv_1):
    assert conv_1.key == "n1h32w32c32k32r3s3p1u1d1"
    assert ConvProblem(n=1, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2).key == "n1h224w224c3k64r7s7p3u2d1"
    assert INCEPTION_1X7.key == "n32h17w17c128k128r1s7p0x3u1d1"
    strided = ConvProblem(n=1, h=9, w=9, c=8, k=8, r=3, s=3, pad=1, stride_h=2, stride_w=1, dilation_h=1, dilation_w=2)
    assert strided.key == "n1h9w9c8k8r3s3p1u2x1d1x2"
    assert ConvProblem(n=1, h=8, w=8, c=64, k=64, r=3, s=3, pad=1, groups=64).key == "n1h8w8c64k64r3s3p1u1d1g64"


def test_old_dicts_read_back_unchanged_and_per_axis_dicts_carry_only_what_differs(conv_1):
    old = {"n": 1, "h": 32, "w": 32, "c": 32, "k": 32, "r": 3, "s": 3, "pad": 1, "stride": 1, "dilation": 1,
           "input_type": "f16", "filter_type": "f16", "output_type": "f32", "accumulator_type": "f32"}
    assert problem_from_dict(old) == conv_1
    assert problem_to_dict(conv_1) == old and list(problem_to_dict(conv_1)) == list(old)  # same keys, same order
    values = problem_to_dict(INCEPTION_1X7)
    assert (values["pad_h"], values["pad_w"], values["stride"], values["dilation"]) == (0, 3, 1, 1)
    assert "pad" not in values and "groups" not in values
    grouped = ConvProblem(n=1, h=8, w=8, c=64, k=64, r=3, s=3, pad=1, groups=8)
    assert problem_to_dict(grouped)["groups"] == 8
    for problem in (INCEPTION_1X7, grouped):
        assert problem_from_dict(problem_to_dict(problem)) == problem


def test_the_committed_best_yaml_entries_read_back_unchanged_under_their_study_keys():
    """Every committed result: its problem's dict form is the stored one, byte for byte, and its key is the
    shape part of the study name it was tuned under."""
    from tuner.search.trials import problem_of_study
    from tuner.core.yamlfile import read_yaml

    repo = Path(__file__).resolve().parents[1]
    checked = 0
    for path in sorted((repo / "results").glob("*/best.yaml")):
        for name, entry in read_yaml(path, "best.yaml")["layers"].items():
            problem = problem_from_dict(entry["problem"])
            assert problem_to_dict(problem) == entry["problem"], name
            assert problem_of_study(entry["study"]["name"])[1] == problem.key, name
            checked += 1
    assert checked > 100


def test_shape_text_names_the_axes_where_they_differ(conv_1):
    assert conv_1.shape_text == "N=1 H=32 W=32 C=32 K=32 R=3 S=3 pad=1 stride=1 dilation=1"
    assert INCEPTION_1X7.shape_text.endswith("pad_h=0 pad_w=3 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1")
    assert ConvProblem(n=1, h=8, w=8, c=8, k=8, r=3, s=3, groups=2).shape_text.endswith("dilation=1 groups=2")


def test_the_canonical_form_folds_the_scale_into_the_filter_and_keeps_the_rest():
    from tuner.core.problem import canonical_problem

    base = ConvProblem(n=8, h=14, w=14, c=64, k=64, r=3, s=3, pad=1)
    with_norm = dataclasses.replace(base, epilogue=parse_epilogue("scale+bias+residual*0.5+relu"))
    folded = dataclasses.replace(base, epilogue=parse_epilogue("bias+residual*0.5+relu"))
    assert canonical_problem(with_norm) == canonical_problem(folded) == folded
    assert canonical_problem(dataclasses.replace(base, epilogue=parse_epilogue("scale"))) == base
    # what the scale cannot stand for stays apart: a bias, a residual, the activation, the batch
    for other in ("relu", "bias", "bias+residual+relu", "scale+bias+gelu"):
        assert canonical_problem(dataclasses.replace(base, epilogue=parse_epilogue(other))) != folded
    assert canonical_problem(dataclasses.replace(with_norm, n=1)) != folded


# --- transposed convolutions (ConvTranspose2d forward, the dgrad of a conv) -----------------------------------

def test_a_transposed_problem_has_torch_s_output_size_and_its_own_key():
    up = ConvProblem(n=1, h=32, w=32, c=128, k=64, r=2, s=2, stride=2, transposed=True)
    assert (up.p, up.q) == (64, 64) and up.output_shape == (1, 64, 64, 64)
    assert up.filter_shape == (128, 2, 2, 64)  # C, R, S, K: the KRSC filter of the conv whose dgrad it is
    assert up.key == "n1h32w32c128k64r2s2p0u2d1t"
    bare = ConvProblem(n=1, h=32, w=32, c=128, k=64, r=2, s=2, stride=2)
    assert bare.key == "n1h32w32c128k64r2s2p0u2d1" and bare.key != up.key  # unchanged for a conv
    padded = ConvProblem(n=1, h=32, w=32, c=64, k=32, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True)
    assert (padded.p, padded.q) == (64, 64) and padded.key.endswith("u2d1t1")
    per_axis = replace(padded, output_padding_h=1, output_padding_w=0)
    assert (per_axis.p, per_axis.q) == (64, 63) and per_axis.key.endswith("t1x0")
    assert "transposed output_padding=1" in padded.shape_text


def test_a_transposed_problem_s_flops_are_those_of_the_conv_whose_dgrad_it_is():
    up = ConvProblem(n=2, h=16, w=16, c=64, k=32, r=4, s=4, pad=1, stride=2, transposed=True)
    conv = ConvProblem(n=2, h=up.p, w=up.q, c=32, k=64, r=4, s=4, pad=1, stride=2)
    assert (conv.p, conv.q) == (16, 16) and up.flops == conv.flops
    assert up.touched_input_elements == up.input_elements


@pytest.mark.parametrize("problem", [
    ConvProblem(n=1, h=32, w=32, c=128, k=64, r=2, s=2, stride=2, transposed=True),
    ConvProblem(n=8, h=16, w=16, c=64, k=32, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True),
    ConvProblem(n=1, h=16, w=15, c=64, k=32, r=3, s=3, pad_h=1, pad_w=0, stride_h=2, stride_w=3, dilation_h=1,
                dilation_w=1, output_padding_h=1, output_padding_w=2, transposed=True, input_type=DataType.bf16,
                filter_type=DataType.bf16, output_type=DataType.bf16),
])
def test_transposed_problems_round_trip(problem, tmp_path):
    assert parse_shape(problem.shape_arg, {f: getattr(problem, f) for f in
                                           ("input_type", "filter_type", "output_type")}) == problem
    assert problem_from_dict(problem_to_dict(problem)) == problem
    assert problem_to_dict(problem)["transposed"] is True
    table = tmp_path / "layers.yaml"
    fields = ", ".join(f"{key}: {str(value).lower() if isinstance(value, bool) else value}"
                       for key, value in problem_to_dict(problem).items())
    table.write_text(f"layers:\n  up: {{{fields}}}\n")
    assert load_layers(table)["up"].problem == problem


def test_a_conv_s_dict_holds_no_transposed_field():
    values = problem_to_dict(ConvProblem(n=1, h=8, w=8, c=8, k=8, r=3, s=3, pad=1))
    assert "transposed" not in values and not any(key.startswith("output_padding") for key in values)


@pytest.mark.parametrize("fields, word", [
    ({"output_padding": 1}, "belongs to a transposed convolution"),
    ({"output_padding": 2, "stride": 2, "transposed": True}, "must be less than stride=2"),
    ({"output_padding": 1, "transposed": True}, "must be less than stride=1"),
    ({"output_padding": -1, "stride": 2, "transposed": True}, "must not be negative"),
    ({"groups": 2, "transposed": True}, "groups=1 only"),
    ({"pad": 5, "transposed": True}, "is empty"),
])
def test_transposed_problems_refuse(fields, word):
    with pytest.raises(ProblemError, match=word):
        ConvProblem(n=1, h=4, w=4, c=8, k=8, r=3, s=3, **fields)


