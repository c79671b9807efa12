"""The C ABI between a compiled candidate and whoever loads it (the worker, the PyTorch op, best_configs.h):
its version, the problem array's length, and the compiled library as a value."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# 2 added raster/swizzle and the cluster shape, 3 several kernels per library (tuner_kernel_count,
# tuner_k<index>_*), 4 create() takes the epilogue's operands, 5 the problem array is per axis (pad,
# stride, dilation as _h, _w) with groups. The DSL's entry points (families/sm90_dsl/entry.c.in) state it too.
ABI_VERSION = 5
PROBLEM_FIELDS = 20


@dataclass(frozen=True)
class KernelBinary:
    """A compiled kernel: the shared library, and the kernel's index among those compiled with it."""

    path: Path
    index: int = 0
