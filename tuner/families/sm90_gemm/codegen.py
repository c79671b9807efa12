"""The sm90_gemm family's C++: the kernel alias of a configuration (templates/kernel.h.in) and its runner."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.families.base import ELEMENT_TAGS, CppPieces, read_template
from tuner.families.sm90_common.codegen import TEMPLATES as SM90_TEMPLATES
from tuner.families.sm90_common.codegen import PREAMBLE, early_residual_wrap, fusion_tag, source_tag
from tuner.families.sm90_gemm.space import AUTO_STAGES, EpilogueSchedule, Schedule, Scheduler, Sm90GemmConfig

TEMPLATES = Path(__file__).parent / "templates"
KERNEL_SCHEDULE_TAGS = {
    Schedule.ws: "cutlass::gemm::KernelTmaWarpSpecialized",
    Schedule.cooperative: "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
}
# The TMA epilogue must match the kernel schedule (a cooperative kernel with the plain one fails to
# compile, sm90_epilogue_tma_warpspecialized.hpp:671; NVIDIA never pairs pingpong with the cooperative one).
TMA_EPILOGUE_TAGS = {
    Schedule.ws: "cutlass::epilogue::TmaWarpSpecialized",
    Schedule.cooperative: "cutlass::epilogue::TmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::epilogue::TmaWarpSpecialized",
}
SCHEDULER_TAGS = {Scheduler.persistent: "cutlass::gemm::PersistentScheduler",
                  Scheduler.stream_k: "cutlass::gemm::StreamKScheduler"}
INCLUDES = (
    "cute/tensor.hpp",
    "cutlass/device_kernel.h",
    "cutlass/kernel_hardware_info.h",
    "cutlass/gemm/dispatch_policy.hpp",
    "cutlass/gemm/collective/collective_builder.hpp",
    "cutlass/epilogue/collective/collective_builder.hpp",
    "cutlass/epilogue/fusion/operations.hpp",
    "cutlass/epilogue/thread/activation.h",
    "cutlass/gemm/kernel/gemm_universal.hpp",
    "cutlass/gemm/kernel/tile_scheduler.hpp",
    "cutlass/gemm/device/gemm_universal_adapter.h",
    "cutlass/util/packed_stride.hpp",
)


def epilogue_tag(config: Sm90GemmConfig) -> str:
    if config.epilogue is EpilogueSchedule.nosmem:
        return "cutlass::epilogue::NoSmemWarpSpecialized"
    return TMA_EPILOGUE_TAGS[config.schedule]


def epilogue_tile_tag(config: Sm90GemmConfig) -> str:
    if not config.epilogue_n:
        return "cutlass::epilogue::collective::EpilogueTileAuto"
    rows, cols = config.epilogue_subtile
    return f"cute::Shape<cute::Int<{rows}>, cute::Int<{cols}>>"


def stage_tag(stages: int) -> str:
    if stages == AUTO_STAGES:
        return ("cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>("
                "sizeof(typename CollectiveEpilogue::SharedStorage))>")
    return f"cutlass::gemm::collective::StageCount<{stages}>"


def kernel_alias(config: Sm90GemmConfig, alias: str) -> str:
    compiled = config.compiled
    return read_template(TEMPLATES / "kernel.h.in").substitute(
        # the persistent schedules have an epilogue load warp of their own
        **early_residual_wrap(compiled.fusion.residual and compiled.schedule is Schedule.ws),
        alias=alias, config_name=compiled.name,
        tile_m=compiled.tile.m, tile_n=compiled.tile.n, tile_k=compiled.tile.k,
        cluster_m=compiled.cluster.m, cluster_n=compiled.cluster.n,
        epilogue_schedule=epilogue_tag(compiled), epilogue_tile=epilogue_tile_tag(compiled),
        kernel_schedule=KERNEL_SCHEDULE_TAGS[compiled.schedule],
        tile_scheduler=SCHEDULER_TAGS[compiled.scheduler], stages=stage_tag(compiled.stages),
        element_a=ELEMENT_TAGS[compiled.filter_type if compiled.swap_ab else compiled.input_type],
        element_b=ELEMENT_TAGS[compiled.input_type if compiled.swap_ab else compiled.filter_type],
        element_c=ELEMENT_TAGS[compiled.output_type], element_accumulator=ELEMENT_TAGS[compiled.accumulator_type],
        alignment_c=compiled.alignment_c,
        layout_c="cutlass::layout::ColumnMajor" if compiled.swap_ab else "cutlass::layout::RowMajor",
        element_source=source_tag(compiled.fusion, compiled.output_type),
        # swapped, the output channels are the GEMM's rows: the per-channel vectors broadcast per row
        fusion=fusion_tag(compiled.fusion, compiled.output_type, compiled.accumulator_type,
                          per_row=compiled.swap_ab),
    )


def cpp_pieces(configs: Sequence[Sm90GemmConfig] = ()) -> CppPieces:
    # The epilogue binding is sm90_common's (the same 3.x fusion operations as the conv kernel's).
    return CppPieces(INCLUDES, ((SM90_TEMPLATES / "fusion.h").read_text(), (TEMPLATES / "runner.h").read_text()),
                     "Sm90GemmRunner", PREAMBLE)
