"""A conv and the batch norm after it, folded for either kernel form: the kernel with a scale gets the norm's
scale, the one without gets it folded into the filter; both compute what conv + BatchNorm2d (eval) compute."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.torch_ops.fold import NotFoldable, fold, kernel_filter  # noqa: E402


def conv_and_norm(bias: bool):
    torch.manual_seed(0)
    conv, norm = nn.Conv2d(8, 16, 3, padding=1, bias=bias).double(), nn.BatchNorm2d(16).double().eval()
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)
    norm.weight.data.uniform_(0.5, 1.5)
    norm.bias.data.uniform_(-1, 1)
    return conv, norm


@pytest.mark.parametrize("kernel", ["scale+bias+relu", "bias+relu"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-conv-bias", "conv-bias"])
def test_both_kernel_forms_compute_conv_then_batch_norm(kernel, bias):
    conv, norm = conv_and_norm(bias)
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    folded = fold(conv, norm, parse_epilogue(kernel))
    assert (folded.scale is not None) == ("scale" in kernel) and folded.bias is not None
    y = F.conv2d(x, folded.weight.double(), None, padding=1)
    if folded.scale is not None:
        y = y * folded.scale.double().view(1, -1, 1, 1)
    y = y + folded.bias.double().view(1, -1, 1, 1)
    assert torch.allclose(y.float(), norm(conv(x)).float(), rtol=1e-5, atol=1e-5)


def test_a_scale_kernel_on_a_layer_without_a_norm_gets_ones_and_zeros():
    conv = nn.Conv2d(8, 16, 1, bias=False)
    folded = fold(conv, None, parse_epilogue("scale+bias+relu"))
    assert torch.equal(folded.scale, torch.ones(16)) and torch.equal(folded.bias, torch.zeros(16))
    assert torch.equal(folded.weight, conv.weight.detach())


def test_what_does_not_fold_is_refused_with_why():
    with pytest.raises(NotFoldable, match="track_running_stats=False"):
        fold(nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16, track_running_stats=False), parse_epilogue("scale+bias"))
    with pytest.raises(NotFoldable, match="bias that the kernel was not built to add"):
        fold(nn.Conv2d(8, 16, 1, bias=True), None, parse_epilogue("relu"))


def test_the_filter_is_padded_and_channels_last():
    weight = torch.randn(16, 3, 3, 3)
    padded = kernel_filter(weight, 8, torch.float16)
    assert padded.shape == (16, 8, 3, 3) and padded.dtype == torch.float16
    assert padded.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(padded[:, :3].float(), weight.half().float()) and not padded[:, 3:].any()
