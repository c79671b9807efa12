"""NumPy or CuPy, whichever holds an array: the reference and the checks run on the device in the
worker and on the CPU in tests with the same code."""
from __future__ import annotations


def array_module(array):
    """CuPy for device arrays, NumPy otherwise."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    import numpy

    return numpy
