"""The sm90_conv family's C++: the kernel alias of a configuration (templates/kernel.h.in) and its runner."""
from __future__ import annotations

from pathlib import Path

from tuner.core.epilogue import Epilogue
from tuner.families.base import ACTIVATION_TAGS, ELEMENT_TAGS, VECTOR_TYPE, CppPieces, read_template
from tuner.core.dtypes import DataType
from tuner.families.sm90_conv.space import AUTO_STAGES, EpilogueSchedule, Sm90ConvConfig

TEMPLATES = Path(__file__).parent / "templates"
EPILOGUE_TAGS = {
    EpilogueSchedule.tma: "cutlass::epilogue::TmaWarpSpecialized",
    EpilogueSchedule.nosmem: "cutlass::epilogue::NoSmemWarpSpecialized",
}
INCLUDES = (
    "cute/tensor.hpp",
    "cutlass/device_kernel.h",
    "cutlass/kernel_hardware_info.hpp",  # before the conv builders: the sm100 collective needs it
    "cutlass/conv/convolution.h",
    "cutlass/conv/convnd_problem_shape.hpp",
    "cutlass/conv/dispatch_policy.hpp",
    "cutlass/conv/collective/collective_builder.hpp",
    "cutlass/epilogue/collective/collective_builder.hpp",
    "cutlass/epilogue/fusion/operations.hpp",
    "cutlass/epilogue/thread/activation.h",
    "cutlass/gemm/kernel/tile_scheduler.hpp",
    "cutlass/conv/kernel/conv_universal.hpp",
    "cutlass/conv/device/conv_universal_adapter.hpp",
)


def stage_tag(stages: int, alias: str) -> str:
    if stages == AUTO_STAGES:
        # As NVIDIA's generator does: the mainloop gets what the epilogue's shared memory leaves.
        return ("cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>("
                "sizeof(typename CollectiveEpilogue::SharedStorage))>")
    return f"cutlass::conv::collective::StageCount<{stages}>"


def source_tag(fusion: Epilogue, output_type: DataType) -> str:
    """The epilogue's source tensor C: the residual, of the output's type, or none."""
    return ELEMENT_TAGS[output_type] if fusion.residual else "void"


def fusion_tag(fusion: Epilogue, output_type: DataType, accumulator_type: DataType, per_row: bool = False) -> str:
    """The 3.x fusion operation: the builder's default LinearCombination (alpha 1, beta 0) for a bare
    conv; else act(alpha[k] * acc + bias[k] + beta * C) with per-channel alpha (the scale) and bias,
    whose absent parts are null pointers at run time (tuner_fill_epilogue): CUTLASS's
    PerColLinCombPerColBiasEltAct with its vectors prefetched at kernel start
    (templates/prefetch_fusion.h). `per_row`: the output channels are the GEMM's rows (sm90_gemm
    swapped), PerRowLinCombPerRowBiasEltAct, prefetched alike."""
    out, acc = ELEMENT_TAGS[output_type], ELEMENT_TAGS[accumulator_type]
    source = source_tag(fusion, output_type)
    if not fusion.fused:
        return f"cutlass::epilogue::fusion::LinearCombination<{out}, {acc}, void, {acc}>"
    vector = ELEMENT_TAGS[VECTOR_TYPE]
    return (f"cutlass::epilogue::fusion::TunerPrefetchedLinCombBiasEltAct<{'true' if per_row else 'false'}, "
            f"{ACTIVATION_TAGS[fusion.activation]}, {out}, {acc}, {vector}, {source}, {vector}>")


def early_residual_wrap(reads_residual: bool) -> dict[str, str]:
    """The kernel type's wrapper (templates/early_residual.h) for a non-persistent kernel that reads a
    residual: its loads go out under the MMAs instead of after them."""
    if not reads_residual:
        return {"kernel_open": "", "kernel_close": ""}
    return {"kernel_open": "cutlass::gemm::kernel::TunerEarlyResidual<", "kernel_close": ">"}


def kernel_alias(config: Sm90ConvConfig, alias: str) -> str:
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        **early_residual_wrap(config.fusion.residual),
        alias=alias, config_name=config.name,
        tile_m=config.tile.m, tile_n=config.tile.n, tile_k=config.tile.k,
        cluster_m=config.cluster.m, cluster_n=config.cluster.n,
        stages=stage_tag(config.stages, alias),
        epilogue_schedule=EPILOGUE_TAGS[config.epilogue],
        element_a=ELEMENT_TAGS[config.input_type], element_b=ELEMENT_TAGS[config.filter_type],
        element_c=ELEMENT_TAGS[config.output_type], element_accumulator=ELEMENT_TAGS[config.accumulator_type],
        alignment_c=config.alignment_c,
        element_source=source_tag(config.fusion, config.output_type),
        fusion=fusion_tag(config.fusion, config.output_type, config.accumulator_type),
    )


# CUTLASS extensions the sm90 families share: the fused epilogue's prefetching callbacks and the kernel
# that loads a residual early.
PREAMBLE = ((TEMPLATES / "prefetch_fusion.h").read_text(), (TEMPLATES / "early_residual.h").read_text())


def cpp_pieces() -> CppPieces:
    return CppPieces(INCLUDES, ((TEMPLATES / "fusion.h").read_text(), (TEMPLATES / "runner.h").read_text()),
                     "Sm90ConvRunner", PREAMBLE)
