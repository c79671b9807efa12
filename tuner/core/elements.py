"""How each DataType's elements are held in a NumPy or CuPy array, and read back as numbers. CuPy has no
bfloat16 and no float8: a bf16 tensor is its 16-bit patterns in a uint16 array, an e4m3 tensor its 8-bit
codes in a uint8 array, made and read with integer operations (and e4m3 read through a table of its 256
codes). A tf32 operand is an f32 tensor (the tensor cores drop its low mantissa bits themselves)."""
from __future__ import annotations

import numpy

from dataclasses import dataclass

from tuner.core.arrays import array_module
from tuner.core.dtypes import DataType

STORAGE = {DataType.f16: "float16", DataType.bf16: "uint16", DataType.f32: "float32", DataType.tf32: "float32",
           DataType.e4m3: "uint8"}
# The bits of a NaN in each storage: what an output is poisoned with before a kernel writes it.
BF16_NAN = 0x7FC0
E4M3_NAN = 0x7F
E4M3_MAX = 448.0  # 0x7e: 2^8 x 1.75; encode saturates to it, as cvt.rn.satfinite.e4m3x2.f32 does
E4M3_MIN_NORMAL = 2.0 ** -6  # below it the codes are subnormal, m x 2^-9


def _e4m3_values() -> numpy.ndarray:
    """The float64 value of each of the 256 codes: sign, 4 exponent bits (bias 7), 3 mantissa bits."""
    codes = numpy.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = numpy.where(exponent == 0, mantissa * 2.0 ** -9, (1 + mantissa / 8) * 2.0 ** (exponent - 7.0))
    magnitude = numpy.where((exponent == 0xF) & (mantissa == 0x7), numpy.nan, magnitude)
    return numpy.where(codes & 0x80, -magnitude, magnitude)


E4M3_VALUES = _e4m3_values()


@dataclass(frozen=True)
class OperandScales:
    """An e4m3 problem's per-tensor scales: the input tensor stands for its codes' values times `input`, the
    filter for theirs times `filter`, so the convolution is alpha = input x filter times that of the codes'
    values, and the kernel's epilogue folds alpha in: y = act(scale[k] x alpha x acc + bias[k] + beta x residual).
    Run-time operands, as the epilogue's vectors are (the kernel reads them from device memory, as
    torch._scaled_mm does): the problem, its key and its kernel do not depend on their values."""

    input: float
    filter: float

    @property
    def alpha(self) -> float:
        return self.input * self.filter

    @property
    def values(self) -> tuple[float, float]:
        """(input, filter): the f32[2] the kernel reads."""
        return self.input, self.filter


def storage_dtype(dtype: DataType) -> str:
    """The array dtype that holds the elements (numpy's name, which CuPy takes too)."""
    return STORAGE[dtype]


def encode(values, dtype: DataType):
    """`values` (a float32 array) as elements of `dtype`, rounded to nearest even."""
    xm = array_module(values)
    values = values.astype(xm.float32)
    if dtype is DataType.e4m3:
        return _encode_e4m3(values, xm)
    if dtype is not DataType.bf16:
        return values.astype(STORAGE[dtype])
    bits = values.view(xm.uint32)
    rounded = (bits + xm.uint32(0x7FFF) + ((bits >> 16) & xm.uint32(1))) >> 16
    nan = (bits & xm.uint32(0x7FFFFFFF)) > xm.uint32(0x7F800000)
    return xm.where(nan, xm.uint32(BF16_NAN), rounded).astype(xm.uint16)


def _encode_e4m3(values, xm):
    """float32 values as e4m3 codes: rounded to nearest even at the spacing of the value's binade (2^-9 below
    the smallest normal), magnitudes of 448 and more (infinities too) saturated to 448, NaN to 0x7f; the
    sign kept (-0.0 is 0x80)."""
    sign = ((values.view(xm.uint32) >> 31) << 7).astype(xm.uint8)
    magnitude = xm.abs(values)
    in_range = xm.where(magnitude < E4M3_MAX, magnitude, xm.float32(0))  # NaN, Inf and the saturated: codes below
    # the spacing of the codes around the value: 2^(e-3) in binade 2^e, e >= -6 (f32 biased exponent 121)
    exponent = xm.maximum((in_range.view(xm.uint32) >> 23), xm.uint32(121))
    spacing = ((exponent - xm.uint32(3)) << 23).view(xm.float32)
    steps = xm.rint(in_range / spacing)  # exact: the spacing is a power of two; rint ties to even
    rounded = (steps * spacing).view(xm.uint32)
    # a normal result's code is its f32 exponent rebiased (127 -> 7) and its top three mantissa bits; a
    # subnormal one's is its count of 2^-9 steps (8 of them make 2^-6, code 0x08, so the two agree there)
    normal = (((rounded >> 23) - xm.uint32(120)) << 3) | ((rounded >> 20) & xm.uint32(7))
    code = xm.where(in_range < E4M3_MIN_NORMAL, steps.astype(xm.uint32), normal)
    code = xm.where(magnitude >= E4M3_MAX, xm.uint32(0x7E), code)
    code = xm.where(xm.isnan(values), xm.uint32(E4M3_NAN), code)
    return code.astype(xm.uint8) | sign


def decode(stored, dtype: DataType):
    """The float64 values of elements held as `storage_dtype(dtype)`."""
    xm = array_module(stored)
    if dtype is DataType.e4m3:
        return xm.asarray(E4M3_VALUES)[stored.astype(xm.int32)]
    if dtype is not DataType.bf16:
        return stored.astype(xm.float64)
    return (stored.astype(xm.uint32) << 16).view(xm.float32).astype(xm.float64)


def poison(array, dtype: DataType) -> None:
    """Fill `array` (elements of `dtype`) with NaN: an element a kernel leaves unwritten reads as NaN."""
    array.fill({DataType.bf16: BF16_NAN, DataType.e4m3: E4M3_NAN}.get(dtype, float("nan")))


def empty_poisoned(shape: tuple[int, ...], dtype: DataType, xm):
    """A new array of `dtype` elements, every one NaN."""
    array = xm.empty(shape, dtype=STORAGE[dtype])
    poison(array, dtype)
    return array
