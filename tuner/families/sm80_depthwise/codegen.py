"""The sm80_depthwise family's C++: the kernel alias of a configuration (templates/kernel.h.in, on
templates/direct_conv_fused.h's kernel) and its runner (templates/runner.h)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.families.base import ACTIVATION_TAGS, ELEMENT_TAGS, CppPieces, read_template
from tuner.families.sm80_depthwise.space import ALIGNMENT, Sm80DepthwiseConfig

TEMPLATES = Path(__file__).parent / "templates"
INCLUDES = ("cutlass/conv/kernel/default_depthwise_fprop.h", "cutlass/conv/device/direct_convolution.h",
            "cutlass/epilogue/thread/activation.h")


def kernel_alias(config: Sm80DepthwiseConfig, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::DirectConvolution<...>;` for the compiled configuration."""
    compiled = config.compiled
    fusion = compiled.fusion
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        alias=alias,
        config_name=compiled.name,
        element=ELEMENT_TAGS[compiled.input_type],
        element_accumulator=ELEMENT_TAGS[compiled.accumulator_type],
        tile_pixels=compiled.output_tile.pixels, tile_p=compiled.output_tile.p, tile_q=compiled.output_tile.q,
        channels=compiled.channels,
        taps=compiled.filter[0] * compiled.filter[1],
        filter_r=compiled.filter[0], filter_s=compiled.filter[1],
        warp_pixels=compiled.warp_pixels,
        alignment=ALIGNMENT,
        has_scale=str(fusion.scale).lower(), has_bias=str(fusion.bias).lower(),
        activation=ACTIVATION_TAGS[fusion.activation],
        stages=compiled.stages,
        stride_h=compiled.stride[0], stride_w=compiled.stride[1],
        dilation_h=compiled.dilation[0], dilation_w=compiled.dilation[1],
    )


def cpp_pieces(configs: Sequence[Sm80DepthwiseConfig] = ()) -> CppPieces:
    return CppPieces(INCLUDES, ((TEMPLATES / "direct_conv_fused.h").read_text(), (TEMPLATES / "runner.h").read_text()),
                     "Sm80DepthwiseRunner")
