"""The tuned kernels as PyTorch operators: one torch.library custom op per kernel family,
`cutlass_conv_tuner::fprop_<family>(x, w, scale, bias, residual, kernel) -> y`, each with a fake (meta)
implementation, so that torch.compile traces it and CUDA graphs capture it.

`kernel` is the index of a kernel registered here: on the GPU a `LoadedKernel`, the very candidate library the
tuner validated (the compile cache's candidate.so, tuner/measure/run.py's KernelLibrary and problem_array), launched on
the caller's current stream. The op's contract: x [N, C', H, W] and w [K, C'/groups, R, S] channels_last at the
kernel's channel count C' (a grouped convolution's C' is its C: no family pads it); scale and bias f32 [K] where
the kernel has them; the residual [N, K, P, Q] channels_last; y comes back [N, K, P, Q] channels_last.
`TunedConv2d` (tuner/torch_ops/optimize.py) meets it."""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from tuner.core.epilogue import Epilogue
from tuner.families import registry
from tuner.families.base import LaunchArgs
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.measure.run import EpilogueOperands, KernelLibrary, LaunchError, padded_filter_channels, problem_array
from tuner.build.abi import KernelBinary

NAMESPACE = "cutlass_conv_tuner"
# Operator objects kept per kernel, one per set of tensor addresses and stream: a CUDA graph or a
# static-address loop meets the same few again; eager runs through the caching allocator meet a handful.
MAX_HANDLES = 16
TORCH_DTYPES = {DataType.f16: torch.float16, DataType.bf16: torch.bfloat16, DataType.f32: torch.float32}


class Kernel(Protocol):
    """What the op launches: a loaded tuned kernel, or in tests a stand-in on the CPU."""

    problem: ConvProblem   # the layer's problem (its epilogue: the parts the kernel applies)
    kernel_channels: int

    def launch(self, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scale: torch.Tensor | None,
               bias: torch.Tensor | None, residual: torch.Tensor | None) -> None: ...


_kernels: list[Kernel] = []
_lock = threading.Lock()


def register(kernel: Kernel) -> int:
    """The kernel's id for the op's `kernel` argument; kept for the life of the process."""
    with _lock:
        _kernels.append(kernel)
        return len(_kernels) - 1


def registered(kernel_id: int) -> Kernel:
    if not 0 <= kernel_id < len(_kernels):
        raise ValueError(f"no tuned kernel {kernel_id} is registered in this process: run tuner.torch_ops.optimize "
                         "on the model here (a saved optimized graph cannot be loaded into another process)")
    return _kernels[kernel_id]


def output_like(problem: ConvProblem, x: torch.Tensor) -> torch.Tensor:
    """y [N, K, P, Q], channels_last (NHWC in memory), in the problem's output type, on x's device."""
    n, k, p, q = problem.n, problem.k, problem.p, problem.q
    return torch.empty_strided((n, k, p, q), (k * p * q, 1, q * k, k), dtype=TORCH_DTYPES[problem.output_type],
                               device=x.device)


def _fprop(x: torch.Tensor, w: torch.Tensor, scale: Optional[torch.Tensor], bias: Optional[torch.Tensor],
           residual: Optional[torch.Tensor], kernel: int) -> torch.Tensor:
    tuned = registered(kernel)
    check_operands(tuned, x, w, scale, bias, residual)
    y = output_like(tuned.problem, x)
    tuned.launch(x, w, y, scale, bias, residual)
    return y


def _fprop_fake(x: torch.Tensor, w: torch.Tensor, scale: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                residual: Optional[torch.Tensor], kernel: int) -> torch.Tensor:
    return output_like(registered(kernel).problem, x)


def _define(family: str):
    op = torch.library.custom_op(f"{NAMESPACE}::fprop_{family}", _fprop, mutates_args=())
    op.register_fake(_fprop_fake)
    return op


# One op per family, so that a trace or a profile names the family whose kernel ran.
OPS = {name: _define(name) for name in registry.families()}


def op_for(family: str):
    return OPS[family]


def channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last)


def check_operands(kernel: Kernel, x, w, scale, bias, residual) -> None:
    """The op's contract, checked before a launch: a wrong tensor is a clear error, never a wrong read."""
    p = kernel.problem
    expected = {"x": (x, (p.n, kernel.kernel_channels, p.h, p.w), p.input_type),
                "w": (w, (p.k, padded_filter_channels(p, kernel.kernel_channels), p.r, p.s), p.filter_type),
                "residual": (residual, (p.n, p.k, p.p, p.q), p.output_type)}
    for name, (tensor, shape, dtype) in expected.items():
        if tensor is None:
            continue
        if tuple(tensor.shape) != shape or tensor.dtype != TORCH_DTYPES[dtype] or not channels_last(tensor):
            raise ValueError(f"{NAMESPACE} op: {name} must be {list(shape)} {TORCH_DTYPES[dtype]} channels_last, "
                             f"got {list(tensor.shape)} {tensor.dtype}"
                             f"{'' if channels_last(tensor) else ' not channels_last'}")
    for name, vector in (("scale", scale), ("bias", bias)):
        if vector is not None and (tuple(vector.shape) != (p.k,) or vector.dtype != torch.float32
                                   or not vector.is_contiguous()):
            raise ValueError(f"{NAMESPACE} op: {name} must be a contiguous float32 [{p.k}], got "
                             f"{list(vector.shape)} {vector.dtype}")
    devices = {t.device for t in (x, w, scale, bias, residual) if t is not None}
    if len(devices) != 1:
        raise ValueError(f"{NAMESPACE} op: every tensor must be on one device, got {sorted(map(str, devices))}")


@dataclass(frozen=True)
class Addresses:
    """What a created operator object is bound to."""

    x: int
    w: int
    y: int
    scale: int
    bias: int
    residual: int
    stream: int


def _address(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


class LoadedKernel:
    """One tuned kernel of a candidate library, bound to one problem: the problem array it was validated
    with, a zeroed workspace of its size, and its created operator objects, one per tensor addresses and
    stream (created on first use, the oldest destroyed past MAX_HANDLES)."""

    def __init__(self, binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs, fusion: Epilogue,
                 device: torch.device):
        self.library = KernelLibrary(binary)
        self.problem = problem
        self.kernel_channels = launch.kernel_channels
        self.fusion = fusion
        self.args = problem_array(problem, launch)
        refusal = self.library.can_implement(self.args)
        if refusal:
            raise LaunchError(f"the kernel refused the problem (cutlass::Status {refusal})")
        workspace_bytes = self.library.workspace_bytes(self.args)
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=device) if workspace_bytes else None
        self.handles: collections.OrderedDict[Addresses, int] = collections.OrderedDict()
        self.lock = threading.Lock()

    def launch(self, x, w, y, scale, bias, residual) -> None:
        if x.device.type != "cuda":
            raise ValueError(f"{NAMESPACE} op: a tuned kernel runs on a CUDA device, got a tensor on {x.device}")
        with torch.cuda.device(x.device):
            stream = torch.cuda.current_stream(x.device).cuda_stream
            handle = self.handle(Addresses(*map(_address, (x, w, y, scale, bias, residual)), stream))
            self.library.launch(handle, stream)

    def handle(self, addresses: Addresses) -> int:
        with self.lock:
            handle = self.handles.get(addresses)
            if handle is not None:
                self.handles.move_to_end(addresses)
                return handle
            operands = None
            if self.fusion.fused:
                operands = EpilogueOperands(addresses.scale or None, addresses.bias or None,
                                            addresses.residual or None,
                                            self.fusion.residual_scale if self.fusion.residual else 0.0)
            workspace = self.workspace.data_ptr() if self.workspace is not None else 0
            handle = self.library.create(self.args, addresses.x, addresses.w, addresses.y, workspace,
                                         addresses.stream, operands)
            self.handles[addresses] = handle
            while len(self.handles) > MAX_HANDLES:
                _, oldest = self.handles.popitem(last=False)
                self.library.destroy(oldest)
            return handle

    def close(self) -> None:
        with self.lock:
            for handle in self.handles.values():
                self.library.destroy(handle)
            self.handles.clear()
