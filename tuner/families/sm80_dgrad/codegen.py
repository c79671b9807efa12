"""The sm80_dgrad family's C++: the kernel alias of a configuration (templates/kernel.h.in), and its runner
(templates/runner.h) after sm80's, whose launch attributes it shares."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.core.cutlass_pkg import library as cutlass_lib
from tuner.families.base import CppPieces, read_template
from tuner.families.sm80_common import codegen as sm80_codegen
from tuner.families.sm80_dgrad.space import Sm80DgradConfig, StrideSupport

TEMPLATES = Path(__file__).parent / "templates"
INCLUDES = ("cutlass/conv/kernel/default_conv2d_dgrad.h", "cutlass/conv/device/implicit_gemm_convolution.h")
STRIDE_SUPPORT_TAGS = {
    StrideSupport.strided: cutlass_lib.StrideSupportTag[cutlass_lib.StrideSupport.Strided],
    StrideSupport.unity: cutlass_lib.StrideSupportTag[cutlass_lib.StrideSupport.Unity],
}
# The strided dgrad walks its stride phases through a swizzle of its own (CUTLASS's generator pairs them so).
STRIDED_SWIZZLE_TAGS = {
    1: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.StridedDgradIdentity1],
    4: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.StridedDgradIdentity4],
}


def swizzle_tag(config: Sm80DgradConfig) -> str:
    if config.stride_support is StrideSupport.strided:
        return STRIDED_SWIZZLE_TAGS[config.swizzle]
    return sm80_codegen.SWIZZLE_TAGS[config.swizzle]


def kernel_alias(config: Sm80DgradConfig, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::ImplicitGemmConvolution<...DefaultConv2dDgrad...>;`."""
    compiled = config.compiled
    values = sm80_codegen.kernel_values(compiled, alias)  # bare: sm80's fields with the dgrad's swizzle
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        {**values, "swizzle": swizzle_tag(compiled), "stride_support": STRIDE_SUPPORT_TAGS[compiled.stride_support]})


def cpp_pieces(configs: Sequence[Sm80DgradConfig] = ()) -> CppPieces:
    sm80 = sm80_codegen.runner_pieces(fused=False)
    return CppPieces(sm80.includes + INCLUDES, (*sm80.runners, (TEMPLATES / "runner.h").read_text()),
                     "Sm80DgradRunner")
