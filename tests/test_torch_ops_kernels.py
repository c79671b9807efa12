"""The custom ops: one per family, their fake implementation (the shape torch.compile traces with), the
contract they check before a launch, and the operator objects a loaded kernel keeps per tensor addresses."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_standins import CpuKernel  # noqa: E402
from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.families.base import LaunchArgs  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.torch_ops import kernels  # noqa: E402

PROBLEM = ConvProblem(n=2, h=8, w=8, c=16, k=32, r=3, s=3, pad=1, stride=2, epilogue=parse_epilogue("bias+relu"))


def operands(channels_last=True, dtype=torch.float16):
    x = torch.randn(2, 16, 8, 8, dtype=dtype)
    w = torch.randn(32, 16, 3, 3, dtype=dtype)
    if channels_last:
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    return x, w, None, torch.zeros(32), None


def test_one_op_per_family():
    assert set(kernels.OPS) == set(registry.families())
    assert hasattr(torch.ops.cutlass_conv_tuner, "fprop_sm90_dsl")


def test_the_op_runs_its_kernel_and_returns_channels_last():
    kernel = kernels.register(CpuKernel(PROBLEM, 16, PROBLEM.epilogue))
    y = kernels.op_for("sm80")(*operands(), kernel)
    assert y.shape == (2, 32, 4, 4) and y.dtype == torch.float16 and kernels.channels_last(y)
    assert (y >= 0).all()  # the ReLU


def test_the_fake_implementation_gives_the_shape_without_computing():
    from torch._subclasses import FakeTensorMode

    stand_in = CpuKernel(PROBLEM, 16, PROBLEM.epilogue)
    kernel = kernels.register(stand_in)
    with FakeTensorMode() as mode:
        x, w, _, bias, _ = (mode.from_tensor(t) if t is not None else None for t in operands())
        y = torch.ops.cutlass_conv_tuner.fprop_sm90_conv(x, w, None, bias, None, kernel)
    assert y.shape == (2, 32, 4, 4) and kernels.channels_last(y) and stand_in.launches == 0


@pytest.mark.parametrize("change, says", [
    ("nchw", "x must be [2, 16, 8, 8] torch.float16 channels_last, got [2, 16, 8, 8] torch.float16 not channels_last"),
    ("f32", "x must be [2, 16, 8, 8] torch.float16 channels_last, got [2, 16, 8, 8] torch.float32"),
    ("bias", "bias must be a contiguous float32 [32]"),
    ("unregistered", "no tuned kernel 1000000 is registered in this process"),
])
def test_the_contract_is_checked_before_a_launch(change, says):
    stand_in = CpuKernel(PROBLEM, 16, PROBLEM.epilogue)
    kernel = kernels.register(stand_in)
    x, w, scale, bias, residual = operands(channels_last=change != "nchw", dtype=torch.float32 if change == "f32"
                                           else torch.float16)
    if change == "bias":
        bias = bias.half()
    with pytest.raises(ValueError) as caught:
        kernels.op_for("sm80")(x, w, scale, bias, residual, 1_000_000 if change == "unregistered" else kernel)
    assert says in str(caught.value) and stand_in.launches == 0


class RecordingLibrary:
    """KernelLibrary's entry points, recorded: no shared library, no GPU."""

    def __init__(self, binary):
        self.created, self.destroyed = [], []

    def can_implement(self, args):
        return 0

    def workspace_bytes(self, args):
        return 0

    def create(self, args, x, w, y, workspace, stream, epilogue=None):
        self.created.append((x, y, epilogue.bias if epilogue else None))
        return len(self.created)

    def destroy(self, handle):
        self.destroyed.append(handle)


def test_operator_objects_are_kept_per_addresses_and_the_oldest_destroyed(monkeypatch):
    monkeypatch.setattr(kernels, "KernelLibrary", RecordingLibrary)
    loaded = kernels.LoadedKernel(None, PROBLEM, LaunchArgs(16), PROBLEM.epilogue, torch.device("cpu"))
    first = kernels.Addresses(x=1, w=2, y=3, scale=0, bias=4, residual=0, stream=7)
    assert loaded.handle(first) == loaded.handle(first) == 1  # created once
    assert loaded.library.created == [(1, 3, 4)]
    for y in range(100, 100 + kernels.MAX_HANDLES):
        loaded.handle(kernels.Addresses(1, 2, y, 0, 4, 0, 7))
    assert loaded.library.destroyed == [1] and len(loaded.handles) == kernels.MAX_HANDLES
    loaded.close()
    assert len(loaded.library.destroyed) == 1 + kernels.MAX_HANDLES
