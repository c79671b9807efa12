"""Is the kernel's output right? Checked against an independent float64 reference."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.core.arrays import array_module
from tuner.core.dtypes import DataType
from tuner.core.elements import OperandScales, decode
from tuner.core.problem import ConvProblem

# How far above the expected rounding error (rounding_error) a kernel's relative L2 error may be. At 10 the
# f16 threshold is 1.9e-3, where it stood (2e-3) before the thresholds were derived; a wrong kernel is off by
# order 1 (a dropped tap of 9: about 0.3).
TOLERANCE_MARGIN = 10.0
# Significand bits the tensor cores keep where they add an fp8 MMA's products into its f32 accumulator: about 14,
# not f32's 24 (DeepSeek-V3's report, section 3.3.2, on the H800). On the H100, torch._scaled_mm with
# use_fast_accum (its wgmma chain accumulates as the DSL kernel's does, with no promotion to CUDA cores) gave a
# relative L2 error of 2^-15.4 sqrt(K) at most for K from 32 to 18432 (uniform(-1, 1) operands: 3.8e-5 at
# K=32, 1.3e-3 at 4608, 3.1e-3 at 18432), under the 2^-14 sqrt(K) taken here.
MMA_ACCUMULATOR_BITS = {DataType.e4m3: 14}


def unit_roundoff(significand_bits: int) -> float:
    """Half an ulp of 1, relative: 2^-p for p significand bits."""
    return 2.0 ** -significand_bits


def rounding_error(problem: ConvProblem) -> float:
    """The relative L2 error a right kernel is expected to show against the float64 reference, from the
    roundings it makes that the reference does not (first order, independent errors of mean zero over
    many outputs; u = 2^-p the unit roundoff of p significand bits):
    - the output, rounded to nearest: the error of an element is uniform on half an ulp each side, an ulp
      being 2u m for a value m 2^e (1 <= m < 2); over values spread evenly within their binades,
      E[err^2] / E[y^2] = (2u)^2/12 / E[m^2] = u^2 / 7 (E[m^2] = 7/3), so 0.38 u;
    - inputs the arithmetic rounds below their stored precision (TF32 reads of f32, 11 bits of 24): the
      tensor cores truncate, an error uniform on one ulp towards zero, E[d^2] = (2u)^2/3 / E[m^2] = 4u^2/7
      per operand; each product carries both, and with signs at random the sum's relative error is the
      products' (8/7)^0.5 u = 1.07 u;
    - the accumulation of the C*R*S products: u_acc (C*R*S)^0.5 (errors of random sign), u_acc the
      accumulator's, or the fewer bits an fp8 MMA keeps (MMA_ACCUMULATOR_BITS).
    The f16, bf16 and e4m3 inputs are exact in the reference (it reads the very values the kernel reads, and
    an e4m3 problem's scales multiply the sum in float64: the kernel's f32 product of them is exact to 2^-24).
    Against the H100's best.yaml: f16 outputs, 0.38 x 2^-11 = 1.9e-4 expected, 2.1e-4 recorded on most
    layers (3.2e-4 at most, with an approximated activation); conv_1 (f32 out, C*R*S 288) 1.0e-6
    expected, 3.7e-7 recorded."""
    out = unit_roundoff(problem.output_type.significand_bits) ** 2 / 7
    inputs = 0.0
    for operand in (problem.input_type, problem.filter_type):
        if operand.significand_bits < operand.stored_significand_bits:
            inputs += 4 * unit_roundoff(operand.significand_bits) ** 2 / 7
    _, _, depth = problem.gemm_mnk
    accumulator_bits = min(problem.accumulator_type.significand_bits,
                           MMA_ACCUMULATOR_BITS.get(problem.input_type, problem.accumulator_type.significand_bits))
    accumulation = unit_roundoff(accumulator_bits) ** 2 * depth
    return math.sqrt(out + inputs + accumulation)


def tolerance(problem: ConvProblem) -> float:
    """The relative L2 error above which the kernel's output is wrong: TOLERANCE_MARGIN x rounding_error."""
    return TOLERANCE_MARGIN * rounding_error(problem)


@dataclass(frozen=True)
class Validation:
    passed: bool
    error: float
    reason: str | None = None


def reference_fprop(x, w, problem: ConvProblem):
    """y[n,p,q,k] = sum_{r,s,c} x[n, p*stride_h - pad_h + r*dil_h, q*stride_w - pad_w + s*dil_w, c] * w[k,r,s,c]
    over the channels c of k's group (w is K x R x S x C/groups), in float64: per filter tap, one matrix
    product, or one batch of them with a product per group, sharing no code with CUTLASS. x and w are elements
    of the problem's input and filter types (tuner/core/elements.py)."""
    xm = array_module(x)
    rows, cols = problem.axis_h, problem.axis_w
    xp = xm.pad(decode(x, problem.input_type), ((0, 0), (rows.pad, rows.pad), (cols.pad, cols.pad), (0, 0)))
    w64 = decode(w, problem.filter_type)
    out = xm.zeros((problem.n, problem.p, problem.q, problem.k), dtype=xm.float64)
    row_span = rows.stride * (problem.p - 1) + 1
    col_span = cols.stride * (problem.q - 1) + 1
    groups, c_group, k_group = problem.groups, problem.channels_per_group, problem.k // problem.groups
    pixels = problem.n * problem.p * problem.q
    for r in range(problem.r):
        for s in range(problem.s):
            top, left = r * rows.dilation, s * cols.dilation
            window = xp[:, top:top + row_span:rows.stride, left:left + col_span:cols.stride, :]
            if groups == 1:
                out += window @ w64[:, r, s, :].T
            else:  # a batch of products, one a group (not a Python loop over hundreds of depthwise channels)
                by_group = window.reshape(pixels, groups, c_group).transpose(1, 0, 2)
                taps = w64[:, r, s, :].reshape(groups, k_group, c_group).transpose(0, 2, 1)
                out += (by_group @ taps).transpose(1, 0, 2).reshape(out.shape)
    return out


def reference_transposed(x, w, problem: ConvProblem):
    """The transposed convolution in float64, scattered tap by tap: every input pixel (i, j) adds
    x[n,i,j,:] @ w[:,r,s,:] to y[n, i*stride_h - pad_h + r*dil_h, j*stride_w - pad_w + s*dil_w, :] where that
    lies inside y (w is C x R x S x K); sharing no code with CUTLASS's dgrad, which gathers instead. The
    scatter lands on an unpadded canvas, of which y is the window that the padding leaves."""
    xm = array_module(x)
    rows, cols = problem.axis_h, problem.axis_w
    x64, w64 = decode(x, problem.input_type), decode(w, problem.filter_type)
    height = (problem.h - 1) * rows.stride + rows.span + problem.output_padding_h
    width = (problem.w - 1) * cols.stride + cols.span + problem.output_padding_w
    canvas = xm.zeros((problem.n, height, width, problem.k), dtype=xm.float64)
    row_span = rows.stride * (problem.h - 1) + 1
    col_span = cols.stride * (problem.w - 1) + 1
    for r in range(problem.r):
        for s in range(problem.s):
            top, left = r * rows.dilation, s * cols.dilation
            canvas[:, top:top + row_span:rows.stride, left:left + col_span:cols.stride, :] += x64 @ w64[:, r, s, :]
    return canvas[:, rows.pad:rows.pad + problem.p, cols.pad:cols.pad + problem.q, :]


def reference_output(x, w, problem: ConvProblem, scales: OperandScales | None = None):
    """The float64 reference of the problem's convolution, transposed or not (before its epilogue); of an e4m3
    problem, times its operands' per-tensor scales."""
    out = reference_transposed(x, w, problem) if problem.transposed else reference_fprop(x, w, problem)
    return out if scales is None else out * scales.alpha


def relative_l2(output, reference) -> float:
    xm = array_module(output)
    difference = xm.linalg.norm((output.astype(xm.float64) - reference).ravel())
    scale = xm.linalg.norm(reference.ravel())
    return float(difference / scale) if float(scale) > 0 else float(difference)


def check_output(output, reference, problem: ConvProblem) -> Validation:
    """The kernel's output (elements of the problem's output type) against the float64 reference."""
    xm = array_module(output)
    values = decode(output, problem.output_type)
    finite = xm.isfinite(values)
    if not bool(finite.all()):
        bad = int(values.size - finite.sum())
        return Validation(False, math.inf, f"{bad} of {values.size} outputs NaN or Inf (unwritten or overflowed)")
    error = relative_l2(values, reference)
    limit = tolerance(problem)
    if error > limit:
        return Validation(False, error, f"relative L2 error {error:.2e} exceeds {limit:.1e}, the tolerance of "
                                        f"{problem.dtype_key}")
    return Validation(True, error)
