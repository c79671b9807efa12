"""The sm80 family's C++: the kernel alias of a configuration, emitted from templates/kernel.h.in."""
from __future__ import annotations

from pathlib import Path

from tuner.cutlass_pkg import library as cutlass_lib
from tuner.families.base import ELEMENT_TAGS, CppPieces, read_template
from tuner.families.sm80.space import IteratorAlgorithm, Sm80Config

TEMPLATES = Path(__file__).parent / "templates"

ITERATOR_TAGS = {
    IteratorAlgorithm.optimized: cutlass_lib.IteratorAlgorithmTag[cutlass_lib.IteratorAlgorithm.Optimized],
    IteratorAlgorithm.analytic: cutlass_lib.IteratorAlgorithmTag[cutlass_lib.IteratorAlgorithm.Analytic],
    IteratorAlgorithm.few_channels: cutlass_lib.IteratorAlgorithmTag[cutlass_lib.IteratorAlgorithm.FewChannels],
    IteratorAlgorithm.fixed_channels: cutlass_lib.IteratorAlgorithmTag[cutlass_lib.IteratorAlgorithm.FixedChannels],
}
SWIZZLE_TAGS = {
    1: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.Identity1],
    2: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.Identity2],
    4: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.Identity4],
    8: cutlass_lib.SwizzlingFunctorTag[cutlass_lib.SwizzlingFunctor.Identity8],
}
INCLUDES = ("cutlass/conv/kernel/default_conv2d_fprop.h", "cutlass/conv/device/implicit_gemm_convolution.h")


def kernel_alias(config: Sm80Config, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::ImplicitGemmConvolution<...>;` for the compiled config."""
    compiled = config.compiled
    warp, inst = compiled.warp_tile, compiled.instruction
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        alias=alias,
        config_name=compiled.name,
        element_a=ELEMENT_TAGS[compiled.input_type],
        element_b=ELEMENT_TAGS[compiled.filter_type],
        element_c=ELEMENT_TAGS[compiled.output_type],
        element_accumulator=ELEMENT_TAGS[compiled.accumulator_type],
        tile_m=compiled.tile.m, tile_n=compiled.tile.n, tile_k=compiled.tile.k,
        warp_m=warp.m, warp_n=warp.n, warp_k=warp.k,
        inst_m=inst.m, inst_n=inst.n, inst_k=inst.k,
        alignment_ab=compiled.alignment_ab,
        alignment_c=compiled.alignment_c,
        swizzle=SWIZZLE_TAGS[compiled.swizzle],
        stages=compiled.stages,
        iterator=ITERATOR_TAGS[compiled.iterator],
    )


def cpp_pieces() -> CppPieces:
    return CppPieces(INCLUDES, ((TEMPLATES / "runner.h").read_text(),), "Sm80Runner")
