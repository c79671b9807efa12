"""The form every frontend (ONNX: tuner/importers/onnx_import.py, PyTorch: tuner/importers/torch_import.py) reads
a network's graph into: the operators as `Op`s in ONNX's vocabulary and each convolution's `ConvFacts`, with the
type its convolutions are tuned in."""
from __future__ import annotations

from dataclasses import dataclass


class NetworkError(ValueError):
    """A model file this importer cannot read: one line, what is wrong and how to mend it."""


@dataclass(frozen=True)
class Op:
    """One operator of an imported graph in ONNX's vocabulary ("Conv", "BatchNormalization", "Add", "Relu",
    "Gelu" (exact), "Silu", "Sigmoid", "Mul"; any other keeps its framework's name)."""

    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class ConvFacts:
    """One convolution as its frontend read it: x is N, C, H, W with the batch resolved; weight is
    K, C / groups, kernel dims (two for a 2-D conv); pads as ONNX writes them, every axis's begin, then every
    axis's end ([top, left, bottom, right]). `unsupported`: a reason the frontend already knows."""

    node: str
    output: str
    x: tuple[int, ...]
    weight: tuple[int, ...]
    groups: int = 1
    pads: tuple[int, ...] = (0, 0, 0, 0)
    strides: tuple[int, ...] = (1, 1)
    dilations: tuple[int, ...] = (1, 1)
    has_bias: bool = False
    unsupported: str | None = None
    element: str | None = None  # the input's element type as the frontend names it: float16, bfloat16, float32, ...
    # A transposed convolution (ONNX ConvTranspose, torch's ConvTranspose2d): its weight is C, K / groups, kernel
    # dims; output_padding per axis.
    transposed: bool = False
    output_padding: tuple[int, ...] = (0, 0)


# A model's element type -> the --dtype its convolutions are tuned in. An f32 model is tuned in f16, as the
# tuner always has (inference in half precision); --dtype tf32 keeps its f32 tensors, with TF32 math. An fp8
# E4M3 input (torch's float8_e4m3fn, ONNX's FLOAT8E4M3FN) is tuned in e4m3; --dtype e4m3 quantizes any model.
MODEL_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f16", "float8_e4m3fn": "e4m3",
                "float8e4m3fn": "e4m3"}


def conv_dtype(conv: ConvFacts, dtype: str | None) -> str | None:
    """The --dtype a convolution is tuned in: `dtype` where given, else its model's (MODEL_DTYPES; f16 where the
    frontend could not tell); None where its model's type is none of those."""
    if dtype is not None:
        return dtype
    return "f16" if conv.element is None else MODEL_DTYPES.get(conv.element)
