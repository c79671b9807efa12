"""How each DataType's elements are held in a NumPy or CuPy array, and read back as numbers. CuPy has no
bfloat16: a bf16 tensor is its 16-bit patterns in a uint16 array, made and read with integer operations.
A tf32 operand is an f32 tensor (the tensor cores drop its low mantissa bits themselves)."""
from __future__ import annotations

from tuner.core.arrays import array_module
from tuner.core.dtypes import DataType

STORAGE = {DataType.f16: "float16", DataType.bf16: "uint16", DataType.f32: "float32", DataType.tf32: "float32"}
# The bits of a NaN in each storage: what an output is poisoned with before a kernel writes it.
BF16_NAN = 0x7FC0


def storage_dtype(dtype: DataType) -> str:
    """The array dtype that holds the elements (numpy's name, which CuPy takes too)."""
    return STORAGE[dtype]


def encode(values, dtype: DataType):
    """`values` (a float32 array) as elements of `dtype`, rounded to nearest even."""
    xm = array_module(values)
    values = values.astype(xm.float32)
    if dtype is not DataType.bf16:
        return values.astype(STORAGE[dtype])
    bits = values.view(xm.uint32)
    rounded = (bits + xm.uint32(0x7FFF) + ((bits >> 16) & xm.uint32(1))) >> 16
    nan = (bits & xm.uint32(0x7FFFFFFF)) > xm.uint32(0x7F800000)
    return xm.where(nan, xm.uint32(BF16_NAN), rounded).astype(xm.uint16)


def decode(stored, dtype: DataType):
    """The float64 values of elements held as `storage_dtype(dtype)`."""
    xm = array_module(stored)
    if dtype is not DataType.bf16:
        return stored.astype(xm.float64)
    return (stored.astype(xm.uint32) << 16).view(xm.float32).astype(xm.float64)


def poison(array, dtype: DataType) -> None:
    """Fill `array` (elements of `dtype`) with NaN: an element a kernel leaves unwritten reads as NaN."""
    array.fill(BF16_NAN if dtype is DataType.bf16 else float("nan"))


def empty_poisoned(shape: tuple[int, ...], dtype: DataType, xm):
    """A new array of `dtype` elements, every one NaN."""
    array = xm.empty(shape, dtype=STORAGE[dtype])
    poison(array, dtype)
    return array
