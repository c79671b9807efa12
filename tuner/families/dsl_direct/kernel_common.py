"""What dsl_direct's two kernels (kernel.py, kernel_mma.py) share: where a CTA's output tile lies, and the fused
epilogue (per-channel scale and bias, then the activation). Plain functions, called while a kernel is traced: their
`if`s and loops run in Python, on values fixed at compile time."""
from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

SQRT_HALF = 1 / math.sqrt(2.0)


def activate(v, activation: str):
    """The epilogue's activation of one f32 value; `activation` is fixed when the kernel is traced."""
    f32 = cutlass.Float32
    if activation == "relu":
        v = cute.math.max(v, f32(0.0))
    elif activation == "silu":
        v = v / (f32(1.0) + cute.math.exp(-v, fastmath=True))
    elif activation == "gelu":
        v = f32(0.5) * v * (f32(1.0) + cute.math.erf(v * f32(SQRT_HALF)))
    return v


def channel_vectors(epilogue, m_scale, m_bias, first: int, count: int):
    """The epilogue's scale and bias of channels first .. first + count - 1 in registers, as f32 (each left unset
    where the epilogue has none)."""
    scales = cute.make_rmem_tensor((count,), cutlass.Float32)
    biases = cute.make_rmem_tensor((count,), cutlass.Float32)
    for i in range(count):
        if epilogue.scale:
            scales[i] = m_scale[first + i]
        if epilogue.bias:
            biases[i] = m_bias[first + i]
    return scales, biases


def epilogue_value(value, epilogue, scales, biases, i: int):
    """acc -> act(scale * acc + bias) for the i-th channel of channel_vectors' registers."""
    if epilogue.scale:
        value = value * scales[i]
    if epilogue.bias:
        value = value + biases[i]
    return activate(value, epilogue.activation)


def cta_tile_origin(problem, tile):
    """(image, first output row, first output column) of this CTA's tile_p x tile_q tile: blockIdx.x runs over the
    tiles of a row of tiles, then the rows, then the images."""
    tiles_q = -(-problem.q // tile.tile_q)
    tiles_p = -(-problem.p // tile.tile_p)
    bx, _, _ = cute.arch.block_idx()
    rest = bx // tiles_q
    return rest // tiles_p, (rest % tiles_p) * tile.tile_p, (bx % tiles_q) * tile.tile_q
