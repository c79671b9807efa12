"""Conv2d fprop problem sizes, their implicit-GEMM arithmetic, and the layer table."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.core.epilogue import Epilogue, EpilogueError, parse_epilogue
from tuner.core.yamlfile import YamlFileError, brief, read_yaml


INT32_MAX = 2**31 - 1
# A layer's name becomes file names (landscapes, plots) and C++ literals: one of 5,000 characters failed
# with "File name too long", and a NUL cut the C++ string short.
MAX_LAYER_NAME = 200


def layer_name_problem(name: object) -> str | None:
    """Why a layer name cannot be used, or None."""
    if not isinstance(name, str) or not name:
        return "a layer name must be non-empty text"
    if len(name) > MAX_LAYER_NAME:
        return f"the layer name is {len(name)} characters long; at most {MAX_LAYER_NAME} are taken"
    if "\0" in name:
        return "the layer name holds a NUL character"
    return None


class ProblemError(ValueError):
    """A layer table, layer name or shape that cannot describe a convolution."""


class DataType(enum.Enum):
    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    tf32 = "tf32"  # an f32 tensor that the tensor cores read as TF32 (its low 13 mantissa bits dropped)

    @property
    def bits(self) -> int:
        """Bits an element takes in memory (a TF32 operand is stored as f32)."""
        return 32 if self in (DataType.f32, DataType.tf32) else 16

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def significand_bits(self) -> int:
        """Significand bits of the values the arithmetic sees, the implicit leading one included."""
        return {DataType.f16: 11, DataType.bf16: 8, DataType.f32: 24, DataType.tf32: 11}[self]

    @property
    def stored_significand_bits(self) -> int:
        """Significand bits of the values memory holds: a TF32 operand keeps all of f32's until the MMA."""
        return DataType.f32.significand_bits if self is DataType.tf32 else self.significand_bits


# What --dtype names: the input, filter, output and accumulator types of a problem.
DTYPE_CHOICES = {
    "f16": (DataType.f16, DataType.f16, DataType.f16, DataType.f32),
    "bf16": (DataType.bf16, DataType.bf16, DataType.bf16, DataType.f32),
    "tf32": (DataType.tf32, DataType.tf32, DataType.f32, DataType.f32),
}


def dtype_fields(name: str) -> dict[str, DataType]:
    """ConvProblem's four type fields for a --dtype name."""
    if name not in DTYPE_CHOICES:
        raise ProblemError(f"--dtype {name!r} is not one of {', '.join(DTYPE_CHOICES)}")
    return dict(zip(("input_type", "filter_type", "output_type", "accumulator_type"), DTYPE_CHOICES[name]))


def dtype_name(problem: "ConvProblem") -> str | None:
    """The --dtype name of the problem's types, or None where they are no --dtype's."""
    types = (problem.input_type, problem.filter_type, problem.output_type, problem.accumulator_type)
    return next((name for name, choice in DTYPE_CHOICES.items() if choice == types), None)


def output_extent(size: int, taps: int, pad: int, stride: int, dilation: int) -> int:
    """Output rows (or columns) of a convolution along one axis."""
    return (size + 2 * pad - dilation * (taps - 1) - 1) // stride + 1


def transposed_extent(size: int, taps: int, pad: int, stride: int, dilation: int, output_padding: int) -> int:
    """Output rows (or columns) of a transposed convolution along one axis (torch.nn.ConvTranspose2d's
    formula): the input extent of the convolution whose data gradient it is."""
    return (size - 1) * stride - 2 * pad + dilation * (taps - 1) + output_padding + 1


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a convolution: the input's extent, the filter's taps, the padding on each side,
    the stride and the dilation along it."""

    size: int
    taps: int
    pad: int
    stride: int
    dilation: int

    @property
    def extent(self) -> int:
        """The output's extent along the axis."""
        return output_extent(self.size, self.taps, self.pad, self.stride, self.dilation)

    @property
    def span(self) -> int:
        """Input pixels one output's filter window spans."""
        return self.dilation * (self.taps - 1) + 1

    @property
    def touched(self) -> int:
        """Input pixels some filter tap reads: a stride wider than the window skips pixels."""
        outputs = self.extent
        covered = outputs * self.span if self.stride >= self.span else (outputs - 1) * self.stride + self.span
        return min(self.size, covered)


def pair_text(values: tuple[int, int]) -> str:
    """A per-axis pair as text: '3' where both axes agree, height x width ('0x3') where not."""
    return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"


def axes_key(pad: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> str:
    """'p3u2d1', or 'p0x3u1d1' where the pads differ by axis: the part of a problem key (study names, sm90_dsl
    kernel names) that symmetric problems have always had."""
    return f"p{pair_text(pad)}u{pair_text(stride)}d{pair_text(dilation)}"


# The per-axis fields; each has a symmetric keyword (pad, stride, dilation) that sets both.
AXIS_FIELDS = (("pad", "pad_h", "pad_w"), ("stride", "stride_h", "stride_w"), ("dilation", "dilation_h", "dilation_w"))
# A transposed convolution's output padding, per axis as well; absent from every other problem's dict and key.
OUTPUT_PADDING_FIELDS = ("output_padding", "output_padding_h", "output_padding_w")
AXIS_DEFAULTS = {"pad": 0, "stride": 1, "dilation": 1, "output_padding": 0}


def _per_axis(symmetric: str, both: int | None, height: int | None, width: int | None) -> tuple[int, int]:
    if both is not None and (height is not None or width is not None):
        raise ProblemError(f"give {symmetric} (both axes) or {symmetric}_h/{symmetric}_w, not both (dataclasses.replace "
                           f"passes {symmetric}_h and {symmetric}_w: replace those)")
    default = AXIS_DEFAULTS[symmetric] if both is None else both
    return (default if height is None else height), (default if width is None else width)


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
            values[height], values[width] = _per_axis(symmetric, *given[symmetric])
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
            values = [getattr(self, name) for name in _SHAPE_FIELDS] + [self.pad_h, self.stride_h, self.dilation_h]
        else:
            values = [getattr(self, name) for name in _SHAPE_FIELDS + _LONG_FIELDS]
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


def dtype_key(typed) -> str:
    """'f16_f16_f32_f32': input, filter, output and accumulator types of a problem or a config."""
    return "_".join(t.value for t in (typed.input_type, typed.filter_type, typed.output_type, typed.accumulator_type))


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
    values = {name: getattr(problem, name) for name in _SHAPE_FIELDS}
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
    values.update({name: getattr(problem, name).value for name in _TYPE_FIELDS})
    if problem.epilogue.fused:
        values["epilogue"] = problem.epilogue.key
    return values


@dataclass(frozen=True)
class Layer:
    name: str
    problem: ConvProblem


_SHAPE_FIELDS = ("n", "h", "w", "c", "k", "r", "s")
_OPTIONAL_FIELDS = ("pad", "stride", "dilation")
_LONG_FIELDS = ("pad_h", "pad_w", "stride_h", "stride_w", "dilation_h", "dilation_w")
_AXIS_KEYS = _OPTIONAL_FIELDS + _LONG_FIELDS + OUTPUT_PADDING_FIELDS
_TRANSPOSED_FIELD = "transposed"
_TYPE_FIELDS = ("input_type", "filter_type", "output_type", "accumulator_type")
_EPILOGUE_FIELD = "epilogue"
SHORT_SHAPE = "N,H,W,C,K,R,S[,pad,stride,dilation]"
LONG_SHAPE = "N,H,W,C,K,R,S,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w[,groups]"
TRANSPOSED_SHAPE = re.compile(r"t(?:([0-9]+)(?:x([0-9]+))?)?")
TRANSPOSED_HELP = ("a last field t makes it a transposed convolution (ConvTranspose2d: H, W, C its input, K its output "
                   "channels), t1 or t1x0 with its output padding (height x width)")


def _transposed_fields(last: str) -> dict | None:
    """The transposed fields of --shape's last field 't', 't1' or 't1x0'; None where it is a number."""
    match = TRANSPOSED_SHAPE.fullmatch(last.lower())
    if match is None:
        return None
    height = int(match.group(1) or 0)
    return {"transposed": True, "output_padding_h": height,
            "output_padding_w": int(match.group(2)) if match.group(2) is not None else height}


def parse_shape(text: str, dtypes: dict[str, DataType] | None = None) -> ConvProblem:
    """Parse `N,H,W,C,K,R,S[,pad,stride,dilation]` or the long form, per axis and with groups, as given
    to --shape; either may end in 't' (TRANSPOSED_HELP)."""
    parts = [p.strip() for p in text.split(",")]
    transposed = _transposed_fields(parts[-1]) if len(parts) > 1 else None
    if transposed is not None:
        parts = parts[:-1]
    if not (7 <= len(parts) <= 10 or 13 <= len(parts) <= 14):
        raise ProblemError(f"--shape {text!r} has {len(parts)} numbers; give {SHORT_SHAPE} (7 to 10 numbers) "
                           f"or {LONG_SHAPE} (13 or 14), either followed by t for a transposed convolution")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ProblemError(f"--shape {text!r} must be whole numbers: {SHORT_SHAPE} or {LONG_SHAPE}, either followed "
                           "by t, t1 or t1x0 for a transposed convolution") from None
    names = _SHAPE_FIELDS + (_OPTIONAL_FIELDS if len(parts) <= 10 else _LONG_FIELDS + ("groups",))
    return ConvProblem(**dict(zip(names, values)), **(dtypes or {}), **(transposed or {}))


def _parse_int(layer: str, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProblemError(f"layer {layer!r}: {field} must be a whole number, got {brief(value)}")
    return value


def _parse_type(layer: str, field: str, value: object) -> DataType:
    try:
        return DataType(value)
    except ValueError:
        known = ", ".join(t.value for t in DataType)
        raise ProblemError(f"layer {layer!r}: {field}={brief(value)} is not one of {known}") from None


def _axis_values(name: str, entry: dict, defaults: dict) -> dict[str, int]:
    """The per-axis fields of a layer: each from the layer's own pad_h (say), else its pad, else the defaults'
    pad_h, else their pad. One mapping may not give both pad and pad_h or pad_w."""
    values = {}
    for symmetric, height, width in AXIS_FIELDS + (OUTPUT_PADDING_FIELDS,):
        for mapping in (entry, defaults):
            if symmetric in mapping and (height in mapping or width in mapping):
                raise ProblemError(f"layer {name!r}: give {symmetric} (both axes) or {height}/{width}, not both")
        for field in (height, width):
            given = next(((key, m[key]) for m in (entry, defaults) for key in (field, symmetric) if key in m), None)
            if given is not None:
                values[field] = _parse_int(name, *given)
    return values


def _parse_layer(name: str, entry: object, defaults: dict) -> Layer:
    if not isinstance(entry, dict):
        raise ProblemError(f"layer {name!r} must be a mapping of shape fields, got {brief(entry)}")
    merged = {**defaults, **entry}
    unknown = set(merged) - set(_SHAPE_FIELDS + _AXIS_KEYS + ("groups", _TRANSPOSED_FIELD) + _TYPE_FIELDS
                                + (_EPILOGUE_FIELD,))
    if unknown:
        raise ProblemError(f"layer {name!r}: unknown field(s) {brief(', '.join(sorted(map(str, unknown))))}")
    missing = [f for f in _SHAPE_FIELDS if f not in merged]
    if missing:
        raise ProblemError(f"layer {name!r}: missing {', '.join(missing)}")
    ints = {f: _parse_int(name, f, merged[f]) for f in _SHAPE_FIELDS + ("groups",) if f in merged}
    types = {f: _parse_type(name, f, merged[f]) for f in _TYPE_FIELDS if f in merged}
    transposed = merged.get(_TRANSPOSED_FIELD, False)
    if not isinstance(transposed, bool):
        raise ProblemError(f"layer {name!r}: transposed must be true or false, got {brief(transposed)}")
    try:
        axes = _axis_values(name, entry, defaults)
        epilogue = parse_epilogue(merged[_EPILOGUE_FIELD]) if _EPILOGUE_FIELD in merged else Epilogue()
        return Layer(name, ConvProblem(**ints, **axes, **types, epilogue=epilogue, transposed=transposed))
    except (ProblemError, EpilogueError) as error:
        message = str(error)
        raise ProblemError(message if message.startswith(f"layer {name!r}") else f"layer {name!r}: {message}") from None


def load_layers(path: Path) -> dict[str, Layer]:
    """Read search_spaces/layers.yaml: a `defaults` mapping and a `layers` mapping of name -> fields."""
    try:
        document = read_yaml(path, "layer table")
    except YamlFileError as error:
        hint = "; pass --layers-file PATH" if str(error).endswith("not found") else ""
        raise ProblemError(f"{error}{hint}") from None
    if not isinstance(document, dict) or not isinstance(document.get("layers"), dict):
        raise ProblemError(f"layer table {path} needs a top-level 'layers:' mapping")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ProblemError(f"layer table {path}: 'defaults' must be a mapping")
    for name in document["layers"]:
        if (problem := layer_name_problem(str(name))):
            raise ProblemError(f"layer table {path}: layer {brief(str(name))}: {problem}")
    return {str(name): _parse_layer(str(name), entry, defaults) for name, entry in document["layers"].items()}


def find_layer(layers: dict[str, Layer], name: str) -> Layer:
    if name not in layers:
        close = [n for n in layers if name in n or n in name][:5]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ProblemError(f"unknown layer {name!r}{hint}; see --list-layers")
    return layers[name]
