"""Load a compiled candidate with ctypes and run it on CuPy buffers (worker process only)."""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from tuner.build.abi import ABI_VERSION, PROBLEM_FIELDS, KernelBinary
from tuner.core.device import volume
from tuner.core.dtypes import DataType
from tuner.core.elements import OperandScales, empty_poisoned, encode
from tuner.core.epilogue import Epilogue
from tuner.families.base import LaunchArgs
from tuner.core.problem import INT32_MAX, ConvProblem



class LaunchError(RuntimeError):
    """The kernel refused the problem or its launch failed."""


@dataclass(frozen=True)
class KernelAttributes:
    registers_per_thread: int
    static_smem_bytes: int
    dynamic_smem_bytes: int
    local_bytes_per_thread: int
    threads_per_block: int
    max_active_blocks_per_sm: int


@dataclass(frozen=True)
class LaunchGrid:
    """The launch of one problem: the grid in blocks (CTAs) and the cluster shape (1x1x1 before sm90)."""

    grid: tuple[int, int, int]
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def blocks(self) -> int:
        return volume(self.grid)


def problem_array(problem: ConvProblem, launch: LaunchArgs) -> ctypes.Array:
    """The int32[20] the entry points read (tuner/templates/problem.h): N,H,W,C,K,R,S, pad_h,pad_w,
    stride_h,stride_w, dilation_h,dilation_w, groups, split_k,P,Q,raster,swizzle,0 with C the kernel's channels."""
    values = (problem.n, problem.h, problem.w, launch.kernel_channels, problem.k, problem.r, problem.s,
              *problem.pads, *problem.strides, *problem.dilations, problem.groups, launch.split_k, problem.p,
              problem.q, launch.raster, launch.swizzle, 0)
    if max(values) > INT32_MAX:
        raise LaunchError(f"a problem extent exceeds CUTLASS's int32 limit ({INT32_MAX})")
    return (ctypes.c_int32 * PROBLEM_FIELDS)(*values)


class EpilogueOperands(ctypes.Structure):
    """tuner/templates/problem.h's TunerEpilogue: device addresses (0: none) and the residual's beta."""

    _fields_ = [("scale", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("residual", ctypes.c_void_p),
                ("beta", ctypes.c_float)]


class ScaledEpilogueOperands(ctypes.Structure):
    """What an e4m3 kernel's create takes where the others take TunerEpilogue (tuner/families/sm90_dsl/
    entry.c.in's TunerScaledEpilogue): TunerEpilogue, then the device addresses of the input's and the filter's
    per-tensor f32 scale (OperandScales), which it must have."""

    _fields_ = [("epilogue", EpilogueOperands), ("input_scale", ctypes.c_void_p), ("filter_scale", ctypes.c_void_p)]


class KernelLibrary:
    """The entry points of one kernel of a compiled candidate library (tuner_k<index>_*)."""

    def __init__(self, binary: KernelBinary):
        self.binary = binary
        lib = ctypes.CDLL(str(binary.path))
        for name, restype in (("tuner_abi_version", ctypes.c_int32), ("tuner_kernel_count", ctypes.c_int32)):
            if not hasattr(lib, name):
                raise LaunchError(f"{binary.path} lacks {name}: not a candidate of this tuner; clear the compile cache")
            getattr(lib, name).argtypes, getattr(lib, name).restype = [], restype
        if lib.tuner_abi_version() != ABI_VERSION:
            raise LaunchError(f"{binary.path} speaks ABI {lib.tuner_abi_version()}, expected {ABI_VERSION}: "
                              "clear the compile cache")
        if not 0 <= binary.index < lib.tuner_kernel_count():
            raise LaunchError(f"{binary.path} holds {lib.tuner_kernel_count()} kernel(s), not kernel {binary.index}")
        int_p, void_p = ctypes.POINTER(ctypes.c_int32), ctypes.c_void_p
        signatures = {
            "can_implement": ([int_p], ctypes.c_int32),
            "workspace_bytes": ([int_p], ctypes.c_int64),
            "grid": ([int_p, int_p], None),
            "kernel_attributes": ([int_p], ctypes.c_int32),
            "create": ([int_p, void_p, void_p, void_p, ctypes.POINTER(EpilogueOperands), void_p, void_p, int_p],
                       void_p),
            "launch": ([void_p, void_p], ctypes.c_int32),
            "destroy": ([void_p], None),
        }
        self.functions = {}
        for name, (argtypes, restype) in signatures.items():
            function = getattr(lib, f"tuner_k{binary.index}_{name}")
            function.argtypes, function.restype = argtypes, restype
            self.functions[name] = function

    def can_implement(self, problem: ctypes.Array) -> int:
        return self.functions["can_implement"](problem)

    def workspace_bytes(self, problem: ctypes.Array) -> int:
        return self.functions["workspace_bytes"](problem)

    def grid(self, problem: ctypes.Array) -> LaunchGrid:
        grid = (ctypes.c_int32 * 6)()
        self.functions["grid"](problem, grid)
        return LaunchGrid((grid[0], grid[1], grid[2]), (grid[3], grid[4], grid[5]))

    def attributes(self) -> KernelAttributes:
        values = (ctypes.c_int32 * 6)()
        error = self.functions["kernel_attributes"](values)
        if error:
            raise LaunchError(f"reading kernel attributes failed with cudaError {error}")
        return KernelAttributes(*values)

    def create(self, problem: ctypes.Array, x: int, w: int, y: int, workspace: int, stream: int,
               epilogue: "EpilogueOperands | ScaledEpilogueOperands | None" = None) -> int:
        status = ctypes.c_int32(0)
        operands = None
        if epilogue is not None:  # a scaled one begins with the TunerEpilogue the signature names
            operands = ctypes.cast(ctypes.pointer(epilogue), ctypes.POINTER(EpilogueOperands))
        handle = self.functions["create"](problem, x, w, y, operands, workspace or None, stream or None,
                                          ctypes.byref(status))
        if not handle:
            raise LaunchError(f"CUTLASS refused the problem (cutlass::Status {status.value})")
        return handle

    def launch(self, handle: int, stream: int) -> None:
        status = self.functions["launch"](handle, stream or None)
        if status:
            raise LaunchError(f"kernel launch failed (cutlass::Status {status})")

    def destroy(self, handle: int) -> None:
        self.functions["destroy"](handle)


@dataclass
class TensorSet:
    """Device buffers for one launch: x and w as the kernel sees them (C padded), y, the epilogue's operands
    where the layer has them (f32 scale[K] and bias[K], the residual shaped and typed as y) and an e4m3
    problem's per-tensor scales (f32[2], OperandScales.values)."""

    x: object
    w: object
    y: object
    scale: object = None
    bias: object = None
    residual: object = None
    operand_scales: object = None

    @property
    def tensors(self) -> tuple:
        return tuple(t for t in (self.x, self.w, self.y, self.scale, self.bias, self.residual, self.operand_scales)
                     if t is not None)

    @property
    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in self.tensors)

    def copy(self) -> "TensorSet":
        """Another set with the same inputs and operands and a fresh y (for rotating past L2)."""
        import cupy

        def again(t):
            return None if t is None else t.copy()
        return TensorSet(self.x.copy(), self.w.copy(), cupy.empty_like(self.y), again(self.scale), again(self.bias),
                         again(self.residual), again(self.operand_scales))

    def epilogue_operands(self, epilogue: Epilogue) -> EpilogueOperands | ScaledEpilogueOperands | None:
        operands = None
        if epilogue.fused:
            operands = EpilogueOperands(pointer(self.scale) or None, pointer(self.bias) or None,
                                        pointer(self.residual) or None,
                                        epilogue.residual_scale if epilogue.residual else 0.0)
        if self.operand_scales is None:
            return operands
        scales = pointer(self.operand_scales)
        return ScaledEpilogueOperands(operands or EpilogueOperands(None, None, None, 0.0), scales,
                                      scales + self.operand_scales.itemsize)


def random_inputs(problem: ConvProblem, rng) -> tuple[object, object]:
    """Fresh uniform(-1, 1) x[N,H,W,C] and w (problem.filter_shape: K,R,S,C/groups, or a transposed conv's
    C,R,S,K) at the problem's own C, as elements of the input and filter types (tuner/core/elements.py); never zeros."""
    import cupy

    x = rng.uniform(-1.0, 1.0, problem.input_shape, dtype=cupy.float32)
    w = rng.uniform(-1.0, 1.0, problem.filter_shape, dtype=cupy.float32)
    return encode(x, problem.input_type), encode(w, problem.filter_type)


def random_operand_scales(problem: ConvProblem, rng) -> OperandScales | None:
    """An e4m3 problem's per-tensor scales, each uniform(0.5, 2) (None for the other types): a kernel that
    drops one, or applies one twice, is off by far more than the tolerance."""
    if problem.input_type is not DataType.e4m3:
        return None
    values = rng.uniform(0.5, 2.0, 2)
    return OperandScales(float(values[0]), float(values[1]))


def operand_scales_array(scales: OperandScales | None):
    """The f32[2] on the device that the kernel reads the scales from, or None."""
    import cupy

    return None if scales is None else cupy.asarray(scales.values, dtype=cupy.float32)


def random_epilogue_operands(problem: ConvProblem, rng) -> tuple[object, object, object]:
    """scale, bias, residual for the layer's epilogue (None where it has none). Bias and residual are as
    large as the conv's outputs tend to be (uniform inputs: about sqrt(C*R*S)/3), so that a dropped or
    misplaced part moves the result far beyond the tolerance."""
    import cupy

    epilogue, k = problem.epilogue, problem.k
    magnitude = max(1.0, math.sqrt(problem.gemm_mnk[2]) / 3)
    scale = rng.uniform(0.5, 1.5, (k,), dtype=cupy.float32) if epilogue.scale else None
    bias = rng.uniform(-magnitude, magnitude, (k,), dtype=cupy.float32) if epilogue.bias else None
    residual = None
    if epilogue.residual:
        residual = rng.uniform(-magnitude, magnitude, (problem.n, problem.p, problem.q, k), dtype=cupy.float32)
        residual = encode(residual, problem.output_type)
    return scale, bias, residual


def pad_channels(tensor, channels: int):
    """Zero-pad the last (C) axis to the kernel's channel count."""
    import cupy

    extra = channels - tensor.shape[-1]
    if extra == 0:
        return cupy.ascontiguousarray(tensor)
    return cupy.pad(tensor, [(0, 0)] * (tensor.ndim - 1) + [(0, extra)])


def padded_filter_channels(problem: ConvProblem, kernel_channels: int) -> int:
    """The last axis of the filter the kernel reads: the kernel's channels, or for a grouped conv its channels
    per group, which no family pads (padding C would move every group's channels)."""
    if problem.groups == 1:
        return kernel_channels
    if kernel_channels != problem.c:
        raise LaunchError(f"a grouped convolution's channels are not padded (C={problem.c}, the kernel reads "
                          f"{kernel_channels})")
    return problem.channels_per_group


def make_tensor_set(problem: ConvProblem, x, w, kernel_channels: int, operands: tuple = (None, None, None),
                    scales: OperandScales | None = None) -> TensorSet:
    import cupy

    y = empty_poisoned(problem.output_shape, problem.output_type, cupy)
    operands = (*operands, operand_scales_array(scales))
    if problem.transposed:  # its filter's C is its first axis: the families that run it pad no channels
        if kernel_channels != problem.c:
            raise LaunchError(f"a transposed convolution's channels are not padded (C={problem.c}, the kernel "
                              f"reads {kernel_channels})")
        return TensorSet(cupy.ascontiguousarray(x), cupy.ascontiguousarray(w), y, *operands)
    return TensorSet(pad_channels(x, kernel_channels), pad_channels(w, padded_filter_channels(problem, kernel_channels)),
                     y, *operands)


def pointer(array) -> int:
    return 0 if array is None else int(array.data.ptr)
