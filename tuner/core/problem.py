"""A conv2d problem (ConvProblem): its sizes, types and epilogue, its implicit-GEMM arithmetic, its key and its
dict form."""
from __future__ import annotations

from dataclasses import dataclass, replace

from tuner.core.axes import (AXIS_FIELDS, OUTPUT_PADDING_FIELDS, PER_AXIS_FIELDS, Axis, axes_key, axis_pair, pair_text,
                             transposed_extent)
from tuner.core.dtypes import TYPE_FIELDS, DataType, dtype_key
from tuner.core.epilogue import Epilogue, parse_epilogue
from tuner.core.errors import ProblemError
from tuner.core.yamlfile import brief


INT32_MAX = 2**31 - 1
SHAPE_FIELDS = ("n", "h", "w", "c", "k", "r", "s")


@dataclass(frozen=True, init=False)
class ConvProblem:
    """One NHWC conv2d fprop: x[N,H,W,C] * w[K,R,S,C/groups] -> y[N,P,Q,K]; pad (each side), stride and
    dilation per axis (height _h, width _w); the epilogue applied to it before the store (tuner/core/epilogue.py).
    Built with pad=, stride=, dilation= for both axes, or pad_h=, pad_w=, ... for one.

    transposed=True: the forward pass of a transposed convolution (torch.nn.ConvTranspose2d), which is the
    data gradient (dgrad) of the convolution y -> x. x[N,H,W,C] is still its input and y[N,P,Q,K] its output,
    with P = (H-1)*stride_h - 2*pad_h + dilation_h*(R-1) + output_padding_h + 1 (Q alike); its weight is
    w[C,R,S,K] (ConvTranspose2d's [C,K,R,S] with the channels of y last), which is the KRSC filter of that
    convolution. output_padding (< stride) adds rows and columns at the bottom and right of y."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    groups: int
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    epilogue: Epilogue
    transposed: bool
    output_padding_h: int
    output_padding_w: int

    def __init__(self, n: int, h: int, w: int, c: int, k: int, r: int, s: int, pad: int | None = None,
                 stride: int | None = None, dilation: int | None = None, input_type: DataType = DataType.f16,
                 filter_type: DataType = DataType.f16, output_type: DataType = DataType.f16,
                 accumulator_type: DataType = DataType.f32, epilogue: Epilogue = Epilogue(), *,
                 pad_h: int | None = None, pad_w: int | None = None, stride_h: int | None = None,
                 stride_w: int | None = None, dilation_h: int | None = None, dilation_w: int | None = None,
                 groups: int = 1, transposed: bool = False, output_padding: int | None = None,
                 output_padding_h: int | None = None, output_padding_w: int | None = None) -> None:
        values = dict(n=n, h=h, w=w, c=c, k=k, r=r, s=s, groups=groups, input_type=input_type,
                      filter_type=filter_type, output_type=output_type, accumulator_type=accumulator_type,
                      epilogue=epilogue, transposed=transposed)
        given = {"pad": (pad, pad_h, pad_w), "stride": (stride, stride_h, stride_w),
                 "dilation": (dilation, dilation_h, dilation_w),
                 "output_padding": (output_padding, output_padding_h, output_padding_w)}
        for symmetric, height, width in AXIS_FIELDS + (OUTPUT_PADDING_FIELDS,):
            values[height], values[width] = axis_pair(symmetric, *given[symmetric])
        for field, value in values.items():
            object.__setattr__(self, field, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        for field in ("n", "h", "w", "c", "k", "r", "s", "stride_h", "stride_w", "dilation_h", "dilation_w",
                      "groups"):
            if getattr(self, field) < 1:
                raise ProblemError(f"{self.field_name(field)}={getattr(self, field)} must be at least 1")
        for field in ("pad_h", "pad_w", "output_padding_h", "output_padding_w"):
            if getattr(self, field) < 0:
                raise ProblemError(f"{self.field_name(field)}={getattr(self, field)} must not be negative")
        self._check_transposed()
        for field in ("output_type", "accumulator_type"):
            if getattr(self, field) is DataType.tf32:
                raise ProblemError(f"{field}=tf32: TF32 is how the tensor cores read f32 inputs; the output and "
                                   "accumulator of such a problem are f32")
        for field in ("n", "h", "w", "c", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h",
                      "dilation_w"):
            if getattr(self, field) > INT32_MAX:
                raise ProblemError(f"{self.field_name(field)}={getattr(self, field)} exceeds {INT32_MAX}, the int32 "
                                   "the kernels take their sizes in")
        if self.c % self.groups or self.k % self.groups:
            raise ProblemError(f"groups={self.groups} must divide both C={self.c} and K={self.k}")
        if self.transposed and (self.p < 1 or self.q < 1):
            raise ProblemError(f"output size {self.p}x{self.q} of the transposed convolution is empty: pad "
                               f"{pair_text(self.pads)} takes more than the {self.r}x{self.s} filter adds to the "
                               f"{self.h}x{self.w} input")
        if self.p < 1 or self.q < 1:
            if not self.per_axis:
                raise ProblemError(
                    f"output size {self.p}x{self.q} is empty: the {self.r}x{self.s} filter "
                    f"(dilation {self.dilation_h}) does not fit the {self.h}x{self.w} input with pad {self.pad_h}")
            raise ProblemError(
                f"output size {self.p}x{self.q} is empty: the {self.r}x{self.s} filter (dilation "
                f"{self.dilation_h}x{self.dilation_w}) does not fit the {self.h}x{self.w} input with pad "
                f"{self.pad_h}x{self.pad_w} (height x width)")
        # CUTLASS indexes the implicit GEMM's M, N, K (and the problem array hands over P and Q) in int32.
        for what, value in (("N*P*Q (GEMM M)", self.n * self.p * self.q), ("C*R*S (GEMM K)", self.c * self.r * self.s),
                            ("N*H*W*C (input elements)", self.n * self.h * self.w * self.c),
                            ("N*P*Q*K (output elements)", self.n * self.p * self.q * self.k)):
            if value > INT32_MAX:
                raise ProblemError(f"{what} = {value} exceeds {INT32_MAX}, the int32 range CUTLASS's problem sizes "
                                   "use; split the batch")

    def _check_transposed(self) -> None:
        if not self.transposed:
            if self.output_paddings != (0, 0):
                raise ProblemError(f"{self.field_name('output_padding_h')}={pair_text(self.output_paddings)}: output "
                                   "padding belongs to a transposed convolution; add transposed: true or drop it")
            return
        if self.groups != 1:
            raise ProblemError(f"groups={self.groups}: transposed convolutions are described with groups=1 only")
        for field, stride in (("output_padding_h", "stride_h"), ("output_padding_w", "stride_w")):
            if getattr(self, field) >= getattr(self, stride):
                raise ProblemError(f"{self.field_name(field)}={getattr(self, field)} must be less than "
                                   f"{self.field_name(stride)}={getattr(self, stride)}: a larger one adds rows that "
                                   "no input pixel reaches (the convolution whose data gradient this is would not "
                                   "map its output back to the input's size)")

    def field_name(self, field: str) -> str:
        """A per-axis field's name as messages give it: 'pad' where both axes agree, else 'pad_h' or 'pad_w'."""
        for symmetric, height, width in AXIS_FIELDS + (OUTPUT_PADDING_FIELDS,):
            if field in (height, width) and getattr(self, height) == getattr(self, width):
                return symmetric
        return field

    @property
    def per_axis(self) -> bool:
        """Whether pad, stride, dilation or output padding differs between the height and the width axis."""
        return ((self.pad_h, self.stride_h, self.dilation_h, self.output_padding_h)
                != (self.pad_w, self.stride_w, self.dilation_w, self.output_padding_w))

    @property
    def output_paddings(self) -> tuple[int, int]:
        return self.output_padding_h, self.output_padding_w

    @property
    def axis_h(self) -> Axis:
        return Axis(self.h, self.r, self.pad_h, self.stride_h, self.dilation_h)

    @property
    def axis_w(self) -> Axis:
        return Axis(self.w, self.s, self.pad_w, self.stride_w, self.dilation_w)

    @property
    def p(self) -> int:
        if self.transposed:
            return transposed_extent(self.h, self.r, self.pad_h, self.stride_h, self.dilation_h, self.output_padding_h)
        return self.axis_h.extent

    @property
    def q(self) -> int:
        if self.transposed:
            return transposed_extent(self.w, self.s, self.pad_w, self.stride_w, self.dilation_w, self.output_padding_w)
        return self.axis_w.extent

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return self.n, self.h, self.w, self.c

    @property
    def filter_shape(self) -> tuple[int, int, int, int]:
        """The weight as the tuner holds it: KRSC (K x R x S x C/groups), or of a transposed convolution CRSK,
        which is the KRSC filter of the convolution whose data gradient it is."""
        if self.transposed:
            return self.c, self.r, self.s, self.k
        return self.k, self.r, self.s, self.channels_per_group

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return self.n, self.p, self.q, self.k

    @property
    def channels_per_group(self) -> int:
        return self.c // self.groups

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        """The implicit GEMM's M, N, K; of a grouped conv, its groups' GEMMs side by side along N (each
        K/groups wide, C/groups*R*S deep). Of a transposed conv, CUTLASS's dgrad GEMM: an output pixel's K
        channels from C*R*S products, of which a stride skips all but about 1/(stride_h*stride_w)."""
        return self.n * self.p * self.q, self.k, self.channels_per_group * self.r * self.s

    @property
    def flops(self) -> int:
        """2 x the multiply-adds; of a transposed conv those of the convolution whose data gradient it is
        (every input pixel times every tap), as profilers count ConvTranspose2d."""
        if self.transposed:
            return 2 * self.n * self.h * self.w * self.c * self.k * self.r * self.s
        m, n, k = self.gemm_mnk
        return 2 * m * n * k

    @property
    def input_elements(self) -> int:
        return self.n * self.h * self.w * self.c

    @property
    def filter_elements(self) -> int:
        return self.k * self.r * self.s * self.channels_per_group

    @property
    def output_elements(self) -> int:
        return self.n * self.p * self.q * self.k

    @property
    def touched_input_elements(self) -> int:
        """Input elements some filter tap reads: a stride wider than the filter skips pixels (a transposed
        conv reads every input pixel)."""
        if self.transposed:
            return self.input_elements
        return self.n * self.axis_h.touched * self.axis_w.touched * self.c

    @property
    def bytes_moved(self) -> int:
        """Bytes that must cross device memory at least once: each tensor read or written once
        (of the input, the pixels the filter windows touch)."""
        return (
            self.touched_input_elements * self.input_type.bytes
            + self.filter_elements * self.filter_type.bytes
            + self.output_elements * self.output_type.bytes
        )

    @property
    def pads(self) -> tuple[int, int]:
        return self.pad_h, self.pad_w

    @property
    def strides(self) -> tuple[int, int]:
        return self.stride_h, self.stride_w

    @property
    def dilations(self) -> tuple[int, int]:
        return self.dilation_h, self.dilation_w

    @property
    def key(self) -> str:
        """'n1h224w224c3k64r7s7p3u2d1': the problem's shape in study names and kernel names. Per-axis values
        appear only where the axes differ ('p0x3'), groups only where not 1 ('g32'), so that a symmetric,
        ungrouped problem keeps the key it always had."""
        groups = f"g{self.groups}" if self.groups != 1 else ""
        return (f"n{self.n}h{self.h}w{self.w}c{self.c}k{self.k}r{self.r}s{self.s}"
                f"{axes_key(self.pads, self.strides, self.dilations)}{groups}{self.transposed_key}")

    @property
    def transposed_key(self) -> str:
        """'' for a convolution; 't' for a transposed one, 't1' or 't1x0' with its output padding (which is
        also how --shape's last field writes it)."""
        if not self.transposed:
            return ""
        return "t" + (pair_text(self.output_paddings) if self.output_paddings != (0, 0) else "")

    @property
    def shape_text(self) -> str:
        shape = f"N={self.n} H={self.h} W={self.w} C={self.c} K={self.k} R={self.r} S={self.s} "
        if self.per_axis:
            shape += (f"pad_h={self.pad_h} pad_w={self.pad_w} stride_h={self.stride_h} stride_w={self.stride_w} "
                      f"dilation_h={self.dilation_h} dilation_w={self.dilation_w}")
        else:
            shape += f"pad={self.pad_h} stride={self.stride_h} dilation={self.dilation_h}"
        if self.transposed:
            shape += " transposed" + (f" output_padding={pair_text(self.output_paddings)}"
                                      if self.output_paddings != (0, 0) else "")
        return shape + (f" groups={self.groups}" if self.groups != 1 else "")

    @property
    def shape_arg(self) -> str:
        """The problem as --shape takes it (parse_shape's inverse), every field spelled out: the short form
        where the axes agree and groups is 1, else the long one."""
        if not self.per_axis and self.groups == 1:
            values = [getattr(self, name) for name in SHAPE_FIELDS] + [self.pad_h, self.stride_h, self.dilation_h]
        else:
            values = [getattr(self, name) for name in SHAPE_FIELDS + PER_AXIS_FIELDS]
            values += [self.groups] if self.groups != 1 else []
        return ",".join(map(str, values)) + (f",{self.transposed_key}" if self.transposed else "")

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def variant_key(self) -> str:
        """The types, and the epilogue where there is one: 'f16_f16_f16_f32' or
        'f16_f16_f16_f32+scale+bias+relu' (the last segment of a study's name)."""
        return self.dtype_key + (f"+{self.epilogue.key}" if self.epilogue.fused else "")


def canonical_problem(problem: ConvProblem) -> ConvProblem:
    """The problem in the canonical fused form (Epilogue.canonical): the key under which best.yaml's entries
    are found, whichever frontend imported the layer and whether its batch norm was folded or not."""
    return replace(problem, epilogue=problem.epilogue.canonical)


def problem_from_dict(values: dict) -> ConvProblem:
    """A problem from its dict form (worker requests, best.yaml entries): pad, stride and dilation for both
    axes, or their _h and _w forms; groups where not 1."""
    try:
        types = {k: DataType(v) for k, v in values.items() if k.endswith("_type")}
        ints = {k: int(v) for k, v in values.items() if not k.endswith("_type") and k not in ("epilogue", "transposed")}
        epilogue = parse_epilogue(values["epilogue"]) if "epilogue" in values else Epilogue()
        transposed = values.get("transposed", False)
        if not isinstance(transposed, bool):
            raise ValueError(f"transposed={transposed!r} is not true or false")
        return ConvProblem(**ints, **types, epilogue=epilogue, transposed=transposed)
    except (TypeError, ValueError) as error:
        raise ProblemError(f"unreadable problem {brief(values)}: {brief(error, 200)}") from None


def problem_to_dict(problem: ConvProblem) -> dict:
    """Ints and type names; pad, stride and dilation once where both axes agree (a symmetric problem's
    entry reads as it did before per-axis problems existed), as _h and _w where not; groups only where
    not 1; transposed (and a non-zero output padding) only where the problem is transposed; the epilogue
    as its text, and only where there is one."""
    values = {name: getattr(problem, name) for name in SHAPE_FIELDS}
    for symmetric, height, width in AXIS_FIELDS:
        pair = getattr(problem, height), getattr(problem, width)
        values.update({symmetric: pair[0]} if pair[0] == pair[1] else {height: pair[0], width: pair[1]})
    if problem.groups != 1:
        values["groups"] = problem.groups
    if problem.transposed:
        values["transposed"] = True
        pair = problem.output_paddings
        if pair != (0, 0):
            values.update({"output_padding": pair[0]} if pair[0] == pair[1] else
                          {"output_padding_h": pair[0], "output_padding_w": pair[1]})
    values.update({name: getattr(problem, name).value for name in TYPE_FIELDS})
    if problem.epilogue.fused:
        values["epilogue"] = problem.epilogue.key
    return values
