import math
from dataclasses import replace

import numpy as np
import pytest

from tuner.core.dtypes import DataType, dtype_fields
from tuner.core.elements import OperandScales, decode, encode
from tuner.core.problem import ConvProblem
from tuner.measure.validate import (MMA_ACCUMULATOR_BITS, array_module, check_output, reference_fprop, reference_output,
                                   relative_l2, rounding_error, tolerance)


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
    ConvProblem(n=2, h=6, w=5, c=16, k=16, r=3, s=3, pad=1, groups=2),                 # groups of 8 (RegNet)
    ConvProblem(n=1, h=7, w=7, c=3, k=6, r=5, s=5, pad=2, dilation=2, groups=3),       # depthwise, 2 outputs each
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


CASE = ConvProblem(n=2, h=8, w=8, c=8, k=16, r=3, s=3, pad=1, output_type=DataType.f32)


@pytest.fixture(scope="module")
def case():
    x, w = random_inputs(CASE, seed=1)
    return CASE, reference_fprop(x, w, CASE)


def test_correct_f32_output_passes(case):
    _, reference = case
    result = check_output(reference.astype(np.float32), reference, CASE)
    assert result.passed and result.reason is None
    assert result.error < 1e-7


def test_nan_poisoned_partial_output_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[:, :, 5:, :] = np.nan  # the kernel never wrote the last three columns
    unwritten = 2 * 8 * 3 * 16
    result = check_output(output, reference, CASE)
    assert not result.passed and math.isinf(result.error)
    assert f"{unwritten} of {output.size}" in result.reason
    assert "NaN" in result.reason


def test_a_single_nan_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[1, 7, 7, 15] = np.nan
    result = check_output(output, reference, CASE)
    assert not result.passed and result.reason.startswith(f"1 of {output.size}")


def test_inf_output_is_counted(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 0, 0, :4] = np.inf
    result = check_output(output, reference, CASE)
    assert not result.passed
    assert result.reason.startswith(f"4 of {output.size}")


def test_inf_output_fails(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 0, 0, 0] = -np.inf
    assert not check_output(output, reference, CASE).passed


def test_output_of_the_wrong_stride_fails():
    """A kernel that ignored the stride: the stride-1 result cropped to the stride-2 output shape."""
    strided = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1, stride=2, output_type=DataType.f32)
    unit = ConvProblem(n=1, h=8, w=8, c=4, k=4, r=3, s=3, pad=1, output_type=DataType.f32)
    x, w = random_inputs(strided, seed=2)
    reference = reference_fprop(x, w, strided)
    wrong = reference_fprop(x, w, unit)[:, :strided.p, :strided.q, :].astype(np.float32)
    assert wrong.shape == reference.shape
    result = check_output(wrong, reference, strided)
    assert not result.passed and result.error > 0.1
    assert "relative L2 error" in result.reason and "f32" in result.reason


def test_output_in_the_wrong_layout_fails(case):
    """NKPQ written where NPQK was expected: the same numbers at the wrong element strides."""
    _, reference = case
    wrong = np.ascontiguousarray(reference.transpose(0, 3, 1, 2)).reshape(reference.shape).astype(np.float32)
    assert not check_output(wrong, reference, CASE).passed


def test_one_wrong_element_fails_f32(case):
    _, reference = case
    output = reference.astype(np.float32)
    output[0, 3, 3, 3] += 0.5
    result = check_output(output, reference, CASE)
    assert not result.passed and 1e-4 < result.error < 1e-1


def test_all_zero_output_fails(case):
    _, reference = case
    result = check_output(np.zeros(reference.shape, np.float32), reference, CASE)
    assert not result.passed and result.error == pytest.approx(1.0)


def test_f16_output_rounding_passes_f16_but_not_f32(case):
    _, reference = case
    rounded = reference.astype(np.float16)
    f16 = check_output(rounded, reference, replace(CASE, output_type=DataType.f16))
    assert f16.passed and 1e-5 < f16.error < tolerance(replace(CASE, output_type=DataType.f16))
    assert not check_output(rounded, reference, CASE).passed


def test_bf16_output_rounding_passes_bf16_but_not_f32(case):
    _, reference = case
    stored = encode(reference.astype(np.float32), DataType.bf16)
    result = check_output(stored, reference, replace(CASE, output_type=DataType.bf16))
    assert result.passed and 1e-4 < result.error < tolerance(replace(CASE, output_type=DataType.bf16))
    assert not check_output(decode(stored, DataType.bf16).astype(np.float32), reference, CASE).passed


def test_tolerances_follow_the_significand():
    def of(**types):
        return tolerance(replace(CASE, **types))

    f32, f16, bf16 = of(), of(output_type=DataType.f16), of(output_type=DataType.bf16)
    tf32 = of(input_type=DataType.tf32, filter_type=DataType.tf32)
    assert f32 < f16 < tf32 < bf16
    assert bf16 / f16 == pytest.approx(8, rel=1e-3)  # 8 significand bits against 11
    assert f16 == pytest.approx(1.85e-3, rel=0.01)    # where the f16 threshold stood (2e-3) before
    assert tolerance(replace(CASE, c=4096)) > f32     # a deeper sum rounds more


BF16_INPUTS = ConvProblem(n=2, h=9, w=8, c=40, k=24, r=3, s=3, pad=1, input_type=DataType.bf16,
                          filter_type=DataType.bf16, output_type=DataType.bf16)
TF32_INPUTS = ConvProblem(n=2, h=9, w=8, c=40, k=24, r=3, s=3, pad=1, input_type=DataType.tf32,
                          filter_type=DataType.tf32, output_type=DataType.f32)


def uniform(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_bf16_reference_reads_the_stored_bits_as_torch_does():
    torch = pytest.importorskip("torch")
    problem = BF16_INPUTS
    x = encode(uniform((problem.n, problem.h, problem.w, problem.c), 3), DataType.bf16)
    w = encode(uniform((problem.k, problem.r, problem.s, problem.c), 4), DataType.bf16)
    assert x.dtype == np.uint16
    reference = reference_fprop(x, w, problem)
    tx = torch.from_numpy(uniform((problem.n, problem.h, problem.w, problem.c), 3)).to(torch.bfloat16)
    tw = torch.from_numpy(uniform((problem.k, problem.r, problem.s, problem.c), 4)).to(torch.bfloat16)
    expected = torch.nn.functional.conv2d(tx.double().permute(0, 3, 1, 2), tw.double().permute(0, 3, 1, 2),
                                          padding=problem.pads).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(reference, expected, rtol=1e-12, atol=1e-12)
    # a kernel's bf16 output, rounded as torch rounds it, is within the derived tolerance, near the estimate
    output = torch.from_numpy(reference).float().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    result = check_output(output, reference, problem)
    assert result.passed and 0.7 < result.error / rounding_error(problem) < 1.5


def truncate_to_tf32(values: np.ndarray) -> np.ndarray:
    """What the tensor cores read of an f32 operand: its low 13 mantissa bits dropped."""
    return (values.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def test_tf32_tolerance_covers_the_tensor_cores_truncating_the_inputs():
    problem = TF32_INPUTS
    x = uniform((problem.n, problem.h, problem.w, problem.c), 5)
    w = uniform((problem.k, problem.r, problem.s, problem.c), 6)
    reference = reference_fprop(x, w, problem)
    tf32 = reference_fprop(truncate_to_tf32(x), truncate_to_tf32(w), problem).astype(np.float32)
    result = check_output(tf32, reference, problem)
    assert result.passed and 0.7 < result.error / rounding_error(problem) < 1.5


def test_f16_rounding_error_matches_the_estimate(case):
    problem = replace(CASE, output_type=DataType.f16)
    _, reference = case
    error = relative_l2(reference.astype(np.float16), reference)
    assert 0.7 < error / rounding_error(problem) < 1.5


def test_relative_l2():
    reference = np.array([3.0, 4.0])
    assert relative_l2(np.array([3.0, 4.0], np.float32), reference) == 0.0
    assert relative_l2(np.array([3.0, 4.5], np.float32), reference) == pytest.approx(0.1)
    assert relative_l2(np.array([0.0, 1.0]), np.zeros(2)) == pytest.approx(1.0)  # absolute when the reference is 0


# --- the transposed convolution's reference -------------------------------------------------------------------

TRANSPOSED_CASES = [
    ConvProblem(n=2, h=5, w=6, c=8, k=4, r=2, s=2, stride=2, transposed=True),             # a UNet decoder's 2x2
    ConvProblem(n=1, h=5, w=6, c=8, k=4, r=4, s=4, pad=1, stride=2, transposed=True),      # DCGAN's 4x4
    ConvProblem(n=1, h=5, w=6, c=8, k=4, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True),
    ConvProblem(n=2, h=5, w=6, c=8, k=4, r=3, s=3, pad=1, transposed=True),                # stride 1
    ConvProblem(n=1, h=5, w=6, c=8, k=4, r=3, s=3, pad=1, dilation=2, transposed=True),
    ConvProblem(n=1, h=5, w=6, c=4, k=3, r=3, s=2, pad_h=1, pad_w=0, stride_h=2, stride_w=3, dilation_h=1,
                dilation_w=2, output_padding_h=1, output_padding_w=2, transposed=True),
]


def transposed_inputs(problem: ConvProblem, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, problem.input_shape).astype(np.float16),
            rng.uniform(-1, 1, problem.filter_shape).astype(np.float16))


@pytest.mark.parametrize("problem", TRANSPOSED_CASES, ids=lambda p: p.key)
def test_transposed_reference_matches_torch_conv_transpose2d(problem):
    torch = pytest.importorskip("torch")
    x, w = transposed_inputs(problem)
    expected = torch.nn.functional.conv_transpose2d(
        torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2),
        torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2),  # C,R,S,K -> ConvTranspose2d's C,K,R,S
        stride=problem.strides, padding=problem.pads, output_padding=problem.output_paddings,
        dilation=problem.dilations).permute(0, 2, 3, 1).numpy()
    result = reference_output(x, w, problem)
    assert result.shape == problem.output_shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)


def test_transposed_reference_is_the_adjoint_of_the_conv_reference():
    """<conv(y, w), x> = <y, conv_transpose(x, w)>: the transposed conv is the conv's data gradient."""
    up = TRANSPOSED_CASES[2]
    conv = ConvProblem(n=up.n, h=up.p, w=up.q, c=up.k, k=up.c, r=up.r, s=up.s, pad=1, stride=2)
    x, w = transposed_inputs(up)
    y = np.random.default_rng(1).uniform(-1, 1, up.output_shape).astype(np.float16)
    forward = reference_fprop(y, w, conv)  # w is C x R x S x K: the conv's KRSC filter
    assert forward.shape == x.shape
    assert np.vdot(forward, x.astype(np.float64)) == pytest.approx(np.vdot(y.astype(np.float64),
                                                                            reference_output(x, w, up)), rel=1e-12)


def test_a_transposed_output_of_the_plain_conv_fails():
    """Validation tells the transposed conv from a conv run on the same buffers."""
    problem = TRANSPOSED_CASES[3]  # stride 1, pad 1: the conv's output has the same shape
    x, w = transposed_inputs(problem)
    flipped = np.ascontiguousarray(w.transpose(3, 1, 2, 0))  # as a KRSC filter of a conv C -> K
    wrong = reference_fprop(x, flipped, replace(problem, transposed=False))
    assert wrong.shape == problem.output_shape
    assert not check_output(encode(wrong, DataType.f16), reference_output(x, w, problem), problem).passed
    assert check_output(encode(reference_output(x, w, problem), DataType.f16), reference_output(x, w, problem),
                        problem).passed


# --- e4m3 operands with per-tensor scales ----------------------------------------------------------------

E4M3_INPUTS = ConvProblem(n=2, h=9, w=8, c=64, k=24, r=3, s=3, pad=1, **dtype_fields("e4m3"))
E4M3_SCALES = OperandScales(input=0.75, filter=2.5)


def e4m3_case(problem: ConvProblem = E4M3_INPUTS):
    x = encode(uniform((problem.n, problem.h, problem.w, problem.c), 7), DataType.e4m3)
    w = encode(uniform((problem.k, problem.r, problem.s, problem.c), 8), DataType.e4m3)
    return x, w


def truncate_to_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """`values` with their significands cut to `bits` bits, towards zero."""
    significand, exponent = np.frexp(values)
    return np.ldexp(np.trunc(significand * 2.0 ** bits) / 2.0 ** bits, exponent)


def simulated_e4m3_kernel(x, w, problem: ConvProblem, scales: OperandScales, drop_tap: bool = False) -> np.ndarray:
    """What an e4m3 wgmma kernel computes, pessimistically: each 32-deep MMA's products added into an
    accumulator that keeps MMA_ACCUMULATOR_BITS, truncated; then alpha x acc rounded to the f16 output."""
    x64 = np.pad(decode(x, DataType.e4m3), ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = np.concatenate([x64[:, r:r + problem.p, s:s + problem.q, :] for r in range(problem.r)
                              for s in range(problem.s)], axis=-1).reshape(-1, problem.gemm_mnk[2])
    filters = decode(w, DataType.e4m3).reshape(problem.k, -1)
    if drop_tap:
        filters[:, :problem.c] = 0
    acc = np.zeros((patches.shape[0], problem.k))
    for first in range(0, patches.shape[1], 32):
        acc = truncate_to_bits(acc + patches[:, first:first + 32] @ filters[:, first:first + 32].T,
                               MMA_ACCUMULATOR_BITS[DataType.e4m3])
    return (acc * scales.alpha).reshape(problem.output_shape).astype(np.float16)


def test_e4m3_tolerance_is_the_f16_output_and_the_fp8_mma_accumulation():
    problem = E4M3_INPUTS
    depth = problem.gemm_mnk[2]
    expected = math.sqrt((2.0 ** -11) ** 2 / 7 + (2.0 ** -14) ** 2 * depth)  # no input term: the codes are exact
    assert rounding_error(problem) == pytest.approx(expected, rel=1e-12)
    assert tolerance(problem) == pytest.approx(10 * expected, rel=1e-12)
    f16 = replace(problem, **dtype_fields("f16"))
    assert tolerance(f16) < tolerance(problem) < 0.05  # far under a dropped tap of 9 (about 0.33)


def test_e4m3_reference_reads_the_codes_as_torch_does_and_applies_the_scales():
    torch = pytest.importorskip("torch")
    problem = E4M3_INPUTS
    x, w = e4m3_case()
    tx = torch.from_numpy(x).view(torch.float8_e4m3fn).double().permute(0, 3, 1, 2)
    tw = torch.from_numpy(w).view(torch.float8_e4m3fn).double().permute(0, 3, 1, 2)
    expected = torch.nn.functional.conv2d(tx, tw, padding=problem.pads).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(reference_output(x, w, problem), expected, rtol=1e-12, atol=1e-12)
    scaled = reference_output(x, w, problem, E4M3_SCALES)
    np.testing.assert_allclose(scaled, expected * 0.75 * 2.5, rtol=1e-12, atol=1e-12)


def test_an_e4m3_kernel_passes_and_one_that_drops_the_scales_or_a_tap_fails():
    problem = E4M3_INPUTS
    x, w = e4m3_case()
    reference = reference_output(x, w, problem, E4M3_SCALES)
    right = check_output(simulated_e4m3_kernel(x, w, problem, E4M3_SCALES), reference, problem)
    assert right.passed and right.error < rounding_error(problem)
    for wrong in (simulated_e4m3_kernel(x, w, problem, OperandScales(1.0, 1.0)),     # scales dropped
                  simulated_e4m3_kernel(x, w, problem, OperandScales(0.75, 1.0)),    # the filter's dropped
                  simulated_e4m3_kernel(x, w, problem, E4M3_SCALES, drop_tap=True)):
        assert not check_output(wrong, reference, problem).passed
