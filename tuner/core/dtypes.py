"""The element types of a problem's tensors and accumulator, and the --dtype names of their combinations."""
from __future__ import annotations

import enum

from tuner.core.errors import ProblemError


class DataType(enum.Enum):
    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    tf32 = "tf32"  # an f32 tensor that the tensor cores read as TF32 (its low 13 mantissa bits dropped)
    # OCP FP8 E4M3 (torch.float8_e4m3fn): 4 exponent bits (bias 7), 3 mantissa bits, largest value 448, no
    # infinities, NaN 0x7f / 0xff; stored as uint8 (tuner/core/elements.py)
    e4m3 = "e4m3"

    # Identity tests, not a dict: a study's static checks ask these millions of times (an sm90_gemm space of 311 K
    # configurations), and an Enum member's hash is computed in Python.
    @property
    def bits(self) -> int:
        """Bits an element takes in memory (a TF32 operand is stored as f32)."""
        if self is DataType.f32 or self is DataType.tf32:
            return 32
        return 8 if self is DataType.e4m3 else 16

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def significand_bits(self) -> int:
        """Significand bits of the values the arithmetic sees, the implicit leading one included."""
        return {DataType.f16: 11, DataType.bf16: 8, DataType.f32: 24, DataType.tf32: 11, DataType.e4m3: 4}[self]

    @property
    def stored_significand_bits(self) -> int:
        """Significand bits of the values memory holds: a TF32 operand keeps all of f32's until the MMA."""
        return DataType.f32.significand_bits if self is DataType.tf32 else self.significand_bits


# What --dtype names (after the input type): the input, filter, output and accumulator types of a problem.
# An e4m3 problem writes f16, and its kernel takes two per-tensor scales at run time (core/elements.py's
# OperandScales), which are no part of the problem.
DTYPE_CHOICES = {
    "f16": (DataType.f16, DataType.f16, DataType.f16, DataType.f32),
    "bf16": (DataType.bf16, DataType.bf16, DataType.bf16, DataType.f32),
    "tf32": (DataType.tf32, DataType.tf32, DataType.f32, DataType.f32),
    "e4m3": (DataType.e4m3, DataType.e4m3, DataType.f16, DataType.f32),
}
# ConvProblem's type fields, in the order of DTYPE_CHOICES' types.
TYPE_FIELDS = ("input_type", "filter_type", "output_type", "accumulator_type")


def dtype_fields(name: str) -> dict[str, DataType]:
    """ConvProblem's four type fields for a --dtype name."""
    if name not in DTYPE_CHOICES:
        raise ProblemError(f"--dtype {name!r} is not one of {', '.join(DTYPE_CHOICES)}")
    return dict(zip(TYPE_FIELDS, DTYPE_CHOICES[name]))


def dtype_name(problem) -> str | None:
    """The --dtype name of the problem's types, or None where they are no --dtype's."""
    types = (problem.input_type, problem.filter_type, problem.output_type, problem.accumulator_type)
    return next((name for name, choice in DTYPE_CHOICES.items() if choice == types), None)


def dtype_key(typed) -> str:
    """'f16_f16_f32_f32': input, filter, output and accumulator types of a problem or a config."""
    return "_".join(t.value for t in (typed.input_type, typed.filter_type, typed.output_type, typed.accumulator_type))

