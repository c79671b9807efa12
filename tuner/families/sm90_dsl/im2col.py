"""TMA im2col loads of a convolution's A operand, in plain Python: the descriptor's corners, paddings and strides for
one problem, and the limits of its fields. No DSL import: the family's checks, geometry and tests use it as it is.

With tile_q TILE_Q_IM2COL a conv kernel's M tiles run over the n*p*q output pixels in order, as a GEMM's do, and each
k tile's A is one im2col TMA load of tile_m pixels x tile_k channels at one filter tap: the TMA unit works out each
pixel's input position and zero-fills what falls in the padding, for any stride and dilation. No tile computes padded
pixels (the tile-load boxes put 12.5 to 23 % of their rows on padding at 7x7 to 56x56 outputs) and no stride phase is
needed. The k tiles run over (channel block, s, r), channels fastest; the filter is read in the same order."""
from __future__ import annotations

from dataclasses import dataclass

TILE_Q_IM2COL = -1        # the tile_q value that asks for im2col loads (0 picks a box width, >0 is one)
# The descriptor's fields, as NVIDIA's CuTe DSL convolution examples bound them for a rank-5 map (a 2-D conv's map is
# rank 4, whose fields are wider): pixel-box corners in a signed 5-bit field, element strides 1 to 8, and a filter
# offset ((taps - 1) * dilation) in an unsigned 5-bit field, which wraps silently past 31.
CORNER_RANGE = (-16, 15)
MAX_ELEMENT_STRIDE = 8
MAX_FILTER_OFFSET = 31


@dataclass(frozen=True)
class Im2colAxis:
    """One spatial axis of the descriptor (w or h): the pixel box runs from the lower corner to the input's extent
    plus the upper corner, stepping by the stride, so that it holds exactly the output's positions; the filter taps
    step by the dilation."""

    lower_corner: int
    upper_corner: int
    lower_padding: int
    upper_padding: int  # the padding the output uses: (out - 1) * stride + (taps - 1) * dilation + 1 - extent - lower
    stride: int
    dilation: int
    filter_offset: int  # (taps - 1) * dilation, the farthest tap


def im2col_axis(extent: int, out: int, taps: int, pad: int, stride: int, dilation: int) -> Im2colAxis:
    reach = (taps - 1) * dilation
    upper = (out - 1) * stride + reach + 1 - extent - pad
    return Im2colAxis(-pad, upper - reach, pad, upper, stride, dilation, reach)


def im2col_axes(problem) -> tuple[Im2colAxis, Im2colAxis]:
    """(w, h) of a ProblemSpec (or any problem with its fields), the order the descriptor takes them in."""
    return (im2col_axis(problem.w, problem.q, problem.s, problem.pad_w, problem.stride_w, problem.dilation_w),
            im2col_axis(problem.h, problem.p, problem.r, problem.pad_h, problem.stride_h, problem.dilation_h))


def im2col_problem(problem) -> str | None:
    """Why im2col loads cannot serve this convolution, or None: the one statement of the rule, raised by
    geometry.geometry and reported by the family's static checks."""
    if problem.is_gemm:
        return "a 1x1, stride-1, unpadded layer is a GEMM: it has no im2col"
    if problem.gathers:
        return f"C={problem.c} is gathered by the producer warps, not loaded by TMA"
    low, high = CORNER_RANGE
    for name, axis in zip("wh", im2col_axes(problem)):
        if not (low <= axis.lower_corner <= high and low <= axis.upper_corner <= high):
            return (f"im2col: the {name} axis's pixel-box corners ({axis.lower_corner}, {axis.upper_corner}) fall "
                    f"outside the descriptor's [{low}, {high}] (padding {axis.lower_padding}, filter reach "
                    f"{axis.filter_offset})")
        if axis.stride > MAX_ELEMENT_STRIDE:
            return f"im2col: stride {axis.stride} on {name} is past the descriptor's {MAX_ELEMENT_STRIDE}"
        if axis.filter_offset > MAX_FILTER_OFFSET:
            return (f"im2col: the {name} filter offset (taps - 1) x dilation = {axis.filter_offset} is past the "
                    f"{MAX_FILTER_OFFSET} the descriptor holds")
    return None
