import math

import numpy as np
import pytest

from tuner.problem import ConvProblem, DataType
from tuner.validate import TOLERANCE, array_module, check_output, reference_fprop, relative_l2


def naive_conv(x: np.ndarray, w: np.ndarray, problem: ConvProblem) -> np.ndarray:
    """The definition, one output element at a time, with explicit bounds checks for the padding; output
    channel k reads the input channels of its group."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    y = np.zeros((problem.n, problem.p, problem.q, problem.k))
    per_group, outputs_per_group = problem.c // problem.groups, problem.k // problem.groups
    for n in range(problem.n):
        for p in range(problem.p):
            for q in range(problem.q):
                for r in range(problem.r):
                    h = p * problem.stride_h - problem.pad_h + r * problem.dilation_h
                    if not 0 <= h < problem.h:
                        continue
                    for s in range(problem.s):
                        col = q * problem.stride_w - problem.pad_w + s * problem.dilation_w
                        if not 0 <= col < problem.w:
                            continue
                        for k in range(problem.k):
                            first = k // outputs_per_group * per_group
                            y[n, p, q, k] += sum(x[n, h, col, first + c] * w[k, r, s, c] for c in range(per_group))
    return y


def random_inputs(problem: ConvProblem, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (problem.n, problem.h, problem.w, problem.c)).astype(np.float16)
    w = rng.uniform(-1, 1, (problem.k, problem.r, problem.s, problem.c // problem.groups)).astype(np.float16)
    return x, w


SMALL_PROBLEMS = [
    ConvProblem(n=1, h=5, w=5, c=2, k=3, r=3, s=3, pad=1),                          # same padding
    ConvProblem(n=2, h=7, w=6, c=3, k=4, r=3, s=2, pad=1, stride=2),                # C=3, stride 2, non-square
    ConvProblem(n=1, h=9, w=9, c=4, k=2, r=3, s=3, pad=2, dilation=2),              # dilation 2
    ConvProblem(n=1, h=11, w=10, c=3, k=5, r=7, s=7, pad=3, stride=2),              # a small stem
    ConvProblem(n=2, h=6, w=6, c=5, k=3, r=1, s=1, stride=2),                       # 1x1 downsample
    ConvProblem(n=1, h=12, w=9, c=2, k=2, r=3, s=2, pad=1, stride=3, dilation=2),   # everything at once
    ConvProblem(n=1, h=4, w=4, c=3, k=2, r=3, s=3),                                 # valid, no padding
]
PER_AXIS_PROBLEMS = [
    ConvProblem(n=1, h=7, w=7, c=3, k=4, r=1, s=7, pad_h=0, pad_w=3),                 # Inception's 1x7
    ConvProblem(n=1, h=7, w=7, c=3, k=4, r=7, s=1, pad_h=3, pad_w=0),                 # and its 7x1
    ConvProblem(n=2, h=9, w=8, c=2, k=3, r=3, s=3, pad_h=1, pad_w=0, stride_h=2, stride_w=1),
    ConvProblem(n=1, h=10, w=11, c=2, k=2, r=3, s=2, pad_h=2, pad_w=1, dilation_h=2, dilation_w=3, stride_w=2),
]
GROUPED_PROBLEMS = [
    ConvProblem(n=1, h=6, w=6, c=4, k=6, r=3, s=3, pad=1, groups=2),                   # grouped
    ConvProblem(n=2, h=7, w=5, c=3, k=3, r=3, s=1, pad_h=1, pad_w=0, stride=2, groups=3),  # depthwise, per axis
]


@pytest.mark.parametrize("problem", SMALL_PROBLEMS + PER_AXIS_PROBLEMS + GROUPED_PROBLEMS,
                         ids=lambda p: p.shape_text.replace(" ", ","))
def test_reference_matches_the_definition(problem):
    x, w = random_inputs(problem)
    reference = reference_fprop(x, w, problem)
    assert reference.shape == (problem.n, problem.p, problem.q, problem.k)
    assert reference.dtype == np.float64
    np.testing.assert_allclose(reference, naive_conv(x, w, problem), rtol=1e-12, atol=1e-12)
    assert np.abs(reference).max() > 0.1  # not a trivially zero case


@pytest.mark.parametrize("problem", SMALL_PROBLEMS + PER_AXIS_PROBLEMS + GROUPED_PROBLEMS,
                         ids=lambda p: p.shape_text.replace(" ", ","))
def test_reference_matches_torch_conv2d(problem):
    """PyTorch's conv2d (NCHW, per-axis tuples, groups) on the CPU agrees with the reference."""
    torch = pytest.importorskip("torch")
    x, w = random_inputs(problem, seed=3)
    nchw = (lambda array: torch.from_numpy(array.astype(np.float64)).permute(0, 3, 1, 2))
    expected = torch.nn.functional.conv2d(nchw(x), nchw(w), stride=problem.strides, padding=problem.pads,
                                          dilation=problem.dilations, groups=problem.groups)
    np.testing.assert_allclose(reference_fprop(x, w, problem), expected.permute(0, 2, 3, 1).numpy(), rtol=1e-12,
                               atol=1e-12)


def test_reference_of_a_known_case():
    # all-ones 3x3x1 input and filter, pad 1: each output counts the filter taps inside the image
    problem = ConvProblem(n=1, h=3, w=3, c=1, k=1, r=3, s=3, pad=1)
    y = reference_fprop(np.ones((1, 3, 3, 1), np.float16), np.ones((1, 3, 3, 1), np.float16), problem)
    assert y[0, :, :, 0].tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]


def test_array_module_is_numpy_for_numpy_arrays():
    assert array_module(np.zeros(2)) is np


@pytest.fixture(scope="module")
def case():
    problem = ConvProblem(n=2, h=8, w=8, c=8, k=16, r=3, s=3, pad=1, output_type=DataType.f32)
    x, w = random_inputs(problem, seed=1)
    return problem, reference_fprop(x, w, problem)


def test_correct_f32_output_passes(case):
    _, reference = case
    result = check_output(reference.astype(np.float32), reference, DataType.f32)
    assert result.passed and result.reason is None
    assert result.error < 1e-7


def test_nan_poisoned_partial_output_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[:, :, 5:, :] = np.nan  # the kernel never wrote the last three columns
    unwritten = 2 * 8 * 3 * 16
    result = check_output(output, reference, DataType.f32)
    assert not result.passed and math.isinf(result.error)
    assert f"{unwritten} of {output.size}" in result.reason
    assert "NaN" in result.reason


def test_a_single_nan_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[1, 7, 7, 15] = np.nan
    result = check_output(output, reference, DataType.f32)
    assert not result.passed and result.reason.startswith(f"1 of {output.size}")


def test_inf_output_is_counted(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 0, 0, :4] = np.inf
    result = check_output(output, reference, DataType.f32)
    assert not result.passed
    assert result.reason.startswith(f"4 of {output.size}")


def test_inf_output_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 0, 0, 0] = -np.inf
    assert not check_output(output, reference, DataType.f32).passed


def test_output_of_the_wrong_stride_fails():
    """A kernel that ignored the stride: the stride-1 result cropped to the stride-2 output shape."""
    strided = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1, stride=2, output_type=DataType.f32)
    unit = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1, output_type=DataType.f32)
    x, w = random_inputs(strided, seed=2)
    reference = reference_fprop(x, w, strided)
    wrong = reference_fprop(x, w, unit)[:, :strided.p, :strided.q, :].astype(np.float32)
    assert wrong.shape == reference.shape
    result = check_output(wrong, reference, DataType.f32)
    assert not result.passed and result.error > 0.1
    assert "relative L2 error" in result.reason and "f32" in result.reason


def test_output_in_the_wrong_layout_fails(case):
    """NKPQ written where NPQK was expected: the same numbers at the wrong element strides."""
    _, reference = case
    wrong = np.ascontiguousarray(reference.transpose(0, 3, 1, 2)).reshape(reference.shape).astype(np.float32)
    assert not check_output(wrong, reference, DataType.f32).passed


def test_one_wrong_element_fails_f32(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 3, 3, 3] += 0.5
    result = check_output(output, reference, DataType.f32)
    assert not result.passed and 1e-4 < result.error < 1e-1


def test_all_zero_output_fails(case):
    _, reference = case
    result = check_output(np.zeros(reference.shape, np.float32), reference, DataType.f32)
    assert not result.passed and result.error == pytest.approx(1.0)


def test_f16_output_rounding_passes_f16_but_not_f32(case):
    _, reference = case
    rounded = reference.astype(np.float16)
    f16 = check_output(rounded, reference, DataType.f16)
    assert f16.passed and 1e-5 < f16.error < TOLERANCE[DataType.f16]
    assert not check_output(rounded, reference, DataType.f32).passed


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even on 8 mantissa bits
    return rounded.astype(np.uint32).view(np.float32)


def test_bf16_output_rounding_passes_bf16(case):
    _, reference = case
    result = check_output(round_to_bf16(reference), reference, DataType.bf16)
    assert result.passed and 1e-4 < result.error < TOLERANCE[DataType.bf16]


def test_tolerances_per_dtype():
    assert TOLERANCE[DataType.f32] < TOLERANCE[DataType.f16] < TOLERANCE[DataType.bf16]
    assert set(TOLERANCE) == set(DataType)


def test_relative_l2():
    reference = np.array([3.0, 4.0])
    assert relative_l2(np.array([3.0, 4.0], np.float32), reference) == 0.0
    assert relative_l2(np.array([3.0, 4.5], np.float32), reference) == pytest.approx(0.1)
    assert relative_l2(np.array([0.0, 1.0]), np.zeros(2)) == pytest.approx(1.0)  # absolute when the reference is 0
