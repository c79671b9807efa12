"""What the CUTLASS 2.x implicit-GEMM families share of their C++: the kernel templates' fields of a configuration,
the runner that binds an ImplicitGemmConvolution to the tuner's problem array (templates/runner.h), and the
visitor-tree epilogue's kernel (templates/conv2d_fprop_evt.h)."""
from __future__ import annotations

from pathlib import Path

from tuner.core.cutlass_pkg import library as cutlass_lib
from tuner.families.base import ACTIVATION_TAGS, ELEMENT_TAGS, VECTOR_TYPE, CppPieces
from tuner.families.sm80_common.space import ImplicitGemmConfig, IteratorAlgorithm

# The shared C++ stays in sm80's templates/, where the comments emitted with it say it is: a header's bytes key the
# compile cache and the committed best_configs.h.
TEMPLATES = Path(__file__).parents[1] / "sm80" / "templates"

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
# templates/conv2d_fprop_evt.h's, only in translation units that hold a fused kernel: visitors.hpp brings in
# the 3.x visitors and cute, about 40 % more nvcc time for a bare sm80 kernel.
FUSION_INCLUDES = (
    "cutlass/epilogue/thread/activation.h",
    "cutlass/epilogue/threadblock/epilogue_with_visitor_callbacks.h",
    "cutlass/epilogue/threadblock/fusion/visitors.hpp",
)


def residual_tag(config: ImplicitGemmConfig) -> str:
    """The residual's element: the output's, or void where the kernel reads none."""
    return ELEMENT_TAGS[config.output_type] if config.fusion.residual else "void"


def kernel_values(config: ImplicitGemmConfig, alias: str) -> dict:
    """The kernel templates' fields of the compiled configuration (the fused ones only where it is fused)."""
    compiled = config.compiled
    warp, inst = compiled.warp_tile, compiled.instruction
    fusion = compiled.fusion
    fused = {} if not fusion.fused else {
        "element_residual": residual_tag(compiled),
        "element_vector": ELEMENT_TAGS[VECTOR_TYPE],
        "has_scale": str(fusion.scale).lower(), "has_bias": str(fusion.bias).lower(),
        "activation": ACTIVATION_TAGS[fusion.activation],
    }
    return dict(
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
        **fused,
    )


def runner_pieces(fused: bool) -> CppPieces:
    """sm80's includes and its runner, with the visitor-tree epilogue's kernel and includes where `fused`."""
    runner = (TEMPLATES / "runner.h").read_text()
    if not fused:
        return CppPieces(INCLUDES, (runner,), "Sm80Runner")
    return CppPieces(INCLUDES + FUSION_INCLUDES, ((TEMPLATES / "conv2d_fprop_evt.h").read_text(), runner),
                     "Sm80Runner")
