"""A convolution's operands as a tuned kernel takes them: the batch norm after it folded in (eval mode, its
running statistics), and the filter at the kernel's channel count, channels_last (KRSC in memory)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tuner.core.epilogue import Epilogue


class NotFoldable(ValueError):
    """A batch norm that is no fixed per-channel scale and shift."""


@dataclass(frozen=True)
class FoldedConv:
    """weight [K, C/groups, R, S] float32: the conv's filter, times the batch norm's scale where the kernel has no
    scale of its own; scale and bias float32 [K], each present exactly where the kernel reads it."""

    weight: torch.Tensor
    scale: torch.Tensor | None
    bias: torch.Tensor | None


def batch_norm_affine(norm: torch.nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) with norm(y) = scale[k] * y + shift[k] in eval mode, in float32."""
    if norm.running_mean is None or norm.running_var is None:
        raise NotFoldable("BatchNorm2d without running statistics (track_running_stats=False) normalises by "
                          "each batch's own: not a fixed scale")
    variance, mean = norm.running_var.detach().float(), norm.running_mean.detach().float()
    gamma = norm.weight.detach().float() if norm.weight is not None else torch.ones_like(mean)
    beta = norm.bias.detach().float() if norm.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(variance + norm.eps)
    return scale, beta - mean * scale


def fold(conv: torch.nn.Conv2d, norm: torch.nn.BatchNorm2d | None, kernel: Epilogue) -> FoldedConv:
    """The operands of conv (+ norm) for a kernel compiled with epilogue `kernel`: y = scale * conv(x, w) +
    bias. A kernel without a scale gets it folded into the filter; one with a scale gets ones where the layer
    has none; a bias the layer lacks is zeros. A layer bias the kernel cannot add is refused."""
    weight = conv.weight.detach().float()
    bias = conv.bias.detach().float() if conv.bias is not None else None
    scale = None
    if norm is not None:
        scale, shift = batch_norm_affine(norm)
        bias = shift if bias is None else bias * scale + shift
    k = weight.shape[0]
    if scale is not None and not kernel.scale:
        weight, scale = weight * scale.view(k, 1, 1, 1), None
    if kernel.scale and scale is None:
        scale = torch.ones(k, device=weight.device)
    if kernel.bias and bias is None:
        bias = torch.zeros(k, device=weight.device)
    if bias is not None and not kernel.bias:
        raise NotFoldable("the layer adds a bias that the kernel was not built to add")
    return FoldedConv(weight, None if scale is None else scale.contiguous(),
                      None if bias is None else bias.contiguous())


def kernel_filter(weight: torch.Tensor, channels: int, dtype: torch.dtype) -> torch.Tensor:
    """[K, C/groups, R, S] as the kernel reads it: zero-padded to `channels` (those the kernel reads a filter),
    in `dtype`, channels_last."""
    extra = channels - weight.shape[1]
    if extra:
        weight = torch.nn.functional.pad(weight, (0, 0, 0, 0, 0, extra))
    return weight.to(dtype).contiguous(memory_format=torch.channels_last)
