"""CUTLASS C++ for a configuration, emitted only from the templates in tuner/templates/."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template

from tuner.cutlass_pkg import library as cutlass_lib

from tuner.problem import DataType
from tuner.space import IteratorAlgorithm, KernelConfig

TEMPLATES = Path(__file__).parent / "templates"

# C++ tags come from CUTLASS's own generator tables, keyed by our typed enums.
ELEMENT_TAGS = {
    DataType.f16: cutlass_lib.DataTypeTag[cutlass_lib.DataType.f16],
    DataType.bf16: cutlass_lib.DataTypeTag[cutlass_lib.DataType.bf16],
    DataType.f32: cutlass_lib.DataTypeTag[cutlass_lib.DataType.f32],
}
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


@lru_cache(maxsize=None)
def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def kernel_alias(config: KernelConfig, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::ImplicitGemmConvolution<...>;` for the compiled config."""
    compiled = config.compiled
    warp, inst = compiled.warp_tile, compiled.instruction
    return _template("sm80_fprop_kernel.h.in").substitute(
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


def candidate_source(config: KernelConfig) -> str:
    """A whole translation unit: the kernel plus the extern "C" entry points the runner loads."""
    alias = "TunedConv"
    return _template("sm80_fprop_entry.cu.in").substitute(
        kernel_alias=kernel_alias(config, alias), alias=alias
    )
