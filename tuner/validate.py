"""Is the kernel's output right? Checked against an independent float64 reference."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.arrays import array_module
from tuner.problem import ConvProblem, DataType

# Relative L2 error allowed per output type. f16 inputs are exact in the reference, so what
# remains is f32 accumulation order and the rounding of the output itself.
TOLERANCE = {DataType.f32: 1e-4, DataType.f16: 2e-3, DataType.bf16: 1.6e-2}


@dataclass(frozen=True)
class Validation:
    passed: bool
    error: float
    reason: str | None = None


def reference_fprop(x, w, problem: ConvProblem):
    """y[n,p,q,k] = sum_{r,s,c} x[n, p*stride_h - pad_h + r*dil_h, q*stride_w - pad_w + s*dil_w, c] * w[k,r,s,c]
    over the channels c of k's group (w is K x R x S x C/groups), in float64: one matrix product per filter
    tap and group, sharing no code with CUTLASS."""
    xm = array_module(x)
    rows, cols = problem.axis_h, problem.axis_w
    xp = xm.pad(x.astype(xm.float64), ((0, 0), (rows.pad, rows.pad), (cols.pad, cols.pad), (0, 0)))
    w64 = w.astype(xm.float64)
    out = xm.zeros((problem.n, problem.p, problem.q, problem.k), dtype=xm.float64)
    row_span = rows.stride * (problem.p - 1) + 1
    col_span = cols.stride * (problem.q - 1) + 1
    c_group, k_group = problem.channels_per_group, problem.k // problem.groups
    for g in range(problem.groups):
        channels, outputs = slice(g * c_group, (g + 1) * c_group), slice(g * k_group, (g + 1) * k_group)
        for r in range(problem.r):
            for s in range(problem.s):
                top, left = r * rows.dilation, s * cols.dilation
                window = xp[:, top:top + row_span:rows.stride, left:left + col_span:cols.stride, channels]
                out[..., outputs] += window @ w64[outputs, r, s, :].T
    return out


def relative_l2(output, reference) -> float:
    xm = array_module(output)
    difference = xm.linalg.norm((output.astype(xm.float64) - reference).ravel())
    scale = xm.linalg.norm(reference.ravel())
    return float(difference / scale) if float(scale) > 0 else float(difference)


def check_output(output, reference, output_type: DataType) -> Validation:
    xm = array_module(output)
    if not bool(xm.isfinite(output).all()):
        bad = int(output.size - xm.isfinite(output).sum())
        return Validation(False, math.inf, f"{bad} of {output.size} outputs NaN or Inf (unwritten or overflowed)")
    error = relative_l2(output, reference)
    tolerance = TOLERANCE[output_type]
    if error > tolerance:
        return Validation(False, error, f"relative L2 error {error:.2e} exceeds {tolerance:.0e} for {output_type.value}")
    return Validation(True, error)
