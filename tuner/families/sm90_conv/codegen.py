"""The sm90_conv family's C++: the kernel alias of a configuration (templates/kernel.h.in) and its runner."""
from __future__ import annotations

from pathlib import Path

from tuner.families.base import ELEMENT_TAGS, CppPieces, read_template
from tuner.families.sm90_conv.space import AUTO_STAGES, Epilogue, Sm90ConvConfig

TEMPLATES = Path(__file__).parent / "templates"
EPILOGUE_TAGS = {
    Epilogue.tma: "cutlass::epilogue::TmaWarpSpecialized",
    Epilogue.nosmem: "cutlass::epilogue::NoSmemWarpSpecialized",
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


def kernel_alias(config: Sm90ConvConfig, alias: str) -> str:
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        alias=alias, config_name=config.name,
        tile_m=config.tile.m, tile_n=config.tile.n, tile_k=config.tile.k,
        cluster_m=config.cluster.m, cluster_n=config.cluster.n,
        stages=stage_tag(config.stages, alias),
        epilogue_schedule=EPILOGUE_TAGS[config.epilogue],
        element_a=ELEMENT_TAGS[config.input_type], element_b=ELEMENT_TAGS[config.filter_type],
        element_c=ELEMENT_TAGS[config.output_type], element_accumulator=ELEMENT_TAGS[config.accumulator_type],
        alignment_c=config.alignment_c,
    )


def cpp_pieces() -> CppPieces:
    return CppPieces(INCLUDES, ((TEMPLATES / "runner.h").read_text(),), "Sm90ConvRunner")
