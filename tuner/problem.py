"""Conv2d fprop problem sizes, their implicit-GEMM arithmetic, and the layer table."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tuner.epilogue import Epilogue, EpilogueError, parse_epilogue
from tuner.yamlfile import YamlFileError, brief, read_yaml


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


@dataclass(frozen=True)
class ConvProblem:
    """One NHWC conv2d fprop: x[N,H,W,C] * w[K,R,S,C] -> y[N,P,Q,K]; symmetric pad, stride, dilation;
    the epilogue applied to it before the store (tuner/epilogue.py)."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    pad: int = 0
    stride: int = 1
    dilation: int = 1
    input_type: DataType = DataType.f16
    filter_type: DataType = DataType.f16
    output_type: DataType = DataType.f16
    accumulator_type: DataType = DataType.f32
    epilogue: Epilogue = Epilogue()

    def __post_init__(self) -> None:
        for field in ("n", "h", "w", "c", "k", "r", "s", "stride", "dilation"):
            if getattr(self, field) < 1:
                raise ProblemError(f"{field}={getattr(self, field)} must be at least 1")
        if self.pad < 0:
            raise ProblemError(f"pad={self.pad} must not be negative")
        for field in ("output_type", "accumulator_type"):
            if getattr(self, field) is DataType.tf32:
                raise ProblemError(f"{field}=tf32: TF32 is how the tensor cores read f32 inputs; the output and "
                                   "accumulator of such a problem are f32")
        for field in ("n", "h", "w", "c", "k", "r", "s", "pad", "stride", "dilation"):
            if getattr(self, field) > INT32_MAX:
                raise ProblemError(f"{field}={getattr(self, field)} exceeds {INT32_MAX}, the int32 the kernels take "
                                   "their sizes in")
        if self.p < 1 or self.q < 1:
            raise ProblemError(
                f"output size {self.p}x{self.q} is empty: the {self.r}x{self.s} filter "
                f"(dilation {self.dilation}) does not fit the {self.h}x{self.w} input with pad {self.pad}"
            )
        # CUTLASS indexes the implicit GEMM's M, N, K (and the problem array hands over P and Q) in int32.
        for what, value in (("N*P*Q (GEMM M)", self.n * self.p * self.q), ("C*R*S (GEMM K)", self.c * self.r * self.s),
                            ("N*H*W*C (input elements)", self.n * self.h * self.w * self.c),
                            ("N*P*Q*K (output elements)", self.n * self.p * self.q * self.k)):
            if value > INT32_MAX:
                raise ProblemError(f"{what} = {value} exceeds {INT32_MAX}, the int32 range CUTLASS's problem sizes "
                                   "use; split the batch")

    @property
    def p(self) -> int:
        return output_extent(self.h, self.r, self.pad, self.stride, self.dilation)

    @property
    def q(self) -> int:
        return output_extent(self.w, self.s, self.pad, self.stride, self.dilation)

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        return self.n * self.p * self.q, self.k, self.c * self.r * self.s

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_mnk
        return 2 * m * n * k

    @property
    def input_elements(self) -> int:
        return self.n * self.h * self.w * self.c

    @property
    def filter_elements(self) -> int:
        return self.k * self.r * self.s * self.c

    @property
    def output_elements(self) -> int:
        return self.n * self.p * self.q * self.k

    @property
    def touched_input_elements(self) -> int:
        """Input elements some filter tap reads: a stride wider than the filter skips pixels."""
        def touched(size: int, outputs: int, taps: int) -> int:
            span = self.dilation * (taps - 1) + 1
            covered = outputs * span if self.stride >= span else (outputs - 1) * self.stride + span
            return min(size, covered)

        return self.n * touched(self.h, self.p, self.r) * touched(self.w, self.q, self.s) * self.c

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
    def shape_text(self) -> str:
        return (
            f"N={self.n} H={self.h} W={self.w} C={self.c} K={self.k} R={self.r} S={self.s} "
            f"pad={self.pad} stride={self.stride} dilation={self.dilation}"
        )

    @property
    def shape_arg(self) -> str:
        """The problem as --shape takes it (parse_shape's inverse), every field spelled out."""
        return ",".join(str(getattr(self, name)) for name in _SHAPE_FIELDS + _OPTIONAL_FIELDS)

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
    """A problem from its dict form (worker requests, best.yaml entries)."""
    try:
        types = {k: DataType(v) for k, v in values.items() if k.endswith("_type")}
        ints = {k: int(v) for k, v in values.items() if not k.endswith("_type") and k != "epilogue"}
        epilogue = parse_epilogue(values["epilogue"]) if "epilogue" in values else Epilogue()
        return ConvProblem(**ints, **types, epilogue=epilogue)
    except (TypeError, ValueError) as error:
        raise ProblemError(f"unreadable problem {brief(values)}: {brief(error, 200)}") from None


def problem_to_dict(problem: ConvProblem) -> dict:
    """Ints and type names; the epilogue as its text, and only where there is one (a bare conv's entry
    reads as it did before epilogues existed)."""
    values = {k: (v.value if isinstance(v, DataType) else v) for k, v in asdict(problem).items() if k != "epilogue"}
    if problem.epilogue.fused:
        values["epilogue"] = problem.epilogue.key
    return values


@dataclass(frozen=True)
class Layer:
    name: str
    problem: ConvProblem


_SHAPE_FIELDS = ("n", "h", "w", "c", "k", "r", "s")
_OPTIONAL_FIELDS = ("pad", "stride", "dilation")
_TYPE_FIELDS = ("input_type", "filter_type", "output_type", "accumulator_type")
_EPILOGUE_FIELD = "epilogue"


def parse_shape(text: str, dtypes: dict[str, DataType] | None = None) -> ConvProblem:
    """Parse `N,H,W,C,K,R,S[,pad,stride,dilation]` as given to --shape."""
    parts = [p.strip() for p in text.split(",")]
    if not 7 <= len(parts) <= 10:
        raise ProblemError(
            f"--shape {text!r} has {len(parts)} numbers; give N,H,W,C,K,R,S[,pad,stride,dilation]"
        )
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ProblemError(f"--shape {text!r} must be whole numbers: N,H,W,C,K,R,S[,pad,stride,dilation]") from None
    names = _SHAPE_FIELDS + _OPTIONAL_FIELDS
    return ConvProblem(**dict(zip(names, values)), **(dtypes or {}))


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


def _parse_layer(name: str, entry: object, defaults: dict) -> Layer:
    if not isinstance(entry, dict):
        raise ProblemError(f"layer {name!r} must be a mapping of shape fields, got {brief(entry)}")
    merged = {**defaults, **entry}
    unknown = set(merged) - set(_SHAPE_FIELDS + _OPTIONAL_FIELDS + _TYPE_FIELDS + (_EPILOGUE_FIELD,))
    if unknown:
        raise ProblemError(f"layer {name!r}: unknown field(s) {brief(', '.join(sorted(map(str, unknown))))}")
    missing = [f for f in _SHAPE_FIELDS if f not in merged]
    if missing:
        raise ProblemError(f"layer {name!r}: missing {', '.join(missing)}")
    ints = {f: _parse_int(name, f, merged[f]) for f in _SHAPE_FIELDS + _OPTIONAL_FIELDS if f in merged}
    types = {f: _parse_type(name, f, merged[f]) for f in _TYPE_FIELDS if f in merged}
    try:
        epilogue = parse_epilogue(merged[_EPILOGUE_FIELD]) if _EPILOGUE_FIELD in merged else Epilogue()
        return Layer(name, ConvProblem(**ints, **types, epilogue=epilogue))
    except (ProblemError, EpilogueError) as error:
        raise ProblemError(f"layer {name!r}: {error}") from None


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
