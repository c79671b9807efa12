"""The layer table (search_spaces/layers.yaml): named problems, the --shape form of one, and the look-up of
layers by name or pattern."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from tuner.core.axes import AXIS_FIELDS, OUTPUT_PADDING_FIELDS, PER_AXIS_FIELDS
from tuner.core.dtypes import TYPE_FIELDS, DataType
from tuner.core.epilogue import Epilogue, EpilogueError, parse_epilogue
from tuner.core.errors import ProblemError, UsageError
from tuner.core.problem import SHAPE_FIELDS, ConvProblem
from tuner.core.yamlfile import YamlFileError, brief, read_yaml

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


@dataclass(frozen=True)
class Layer:
    name: str
    problem: ConvProblem


_OPTIONAL_FIELDS = ("pad", "stride", "dilation")
_AXIS_KEYS = _OPTIONAL_FIELDS + PER_AXIS_FIELDS + OUTPUT_PADDING_FIELDS
_TRANSPOSED_FIELD = "transposed"
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
    names = SHAPE_FIELDS + (_OPTIONAL_FIELDS if len(parts) <= 10 else PER_AXIS_FIELDS + ("groups",))
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
    unknown = set(merged) - set(SHAPE_FIELDS + _AXIS_KEYS + ("groups", _TRANSPOSED_FIELD) + TYPE_FIELDS
                                + (_EPILOGUE_FIELD,))
    if unknown:
        raise ProblemError(f"layer {name!r}: unknown field(s) {brief(', '.join(sorted(map(str, unknown))))}")
    missing = [f for f in SHAPE_FIELDS if f not in merged]
    if missing:
        raise ProblemError(f"layer {name!r}: missing {', '.join(missing)}")
    ints = {f: _parse_int(name, f, merged[f]) for f in SHAPE_FIELDS + ("groups",) if f in merged}
    types = {f: _parse_type(name, f, merged[f]) for f in TYPE_FIELDS if f in merged}
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


def matching_layers(layers: dict[str, Layer], pattern: str) -> list[Layer]:
    """A layer name, or a shell-style pattern such as 'r50_*_b32'."""
    if not any(char in pattern for char in "*?["):
        return [find_layer(layers, pattern)]
    matches = [layer for name, layer in layers.items() if fnmatch.fnmatchcase(name, pattern)]
    if not matches:
        raise UsageError(f"--layers pattern {pattern!r} matches no layer; see --list-layers")
    return matches
