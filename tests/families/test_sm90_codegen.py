"""The sm90 families' C++: the candidate translation unit holds the CUTLASS 3.x pieces of the configuration in
template order, the family's runner and the ABI; run-time knobs leave the source alone."""
import dataclasses
import re

import pytest

from conftest import assert_in_order

from tuner.build.codegen import CANDIDATE_ALIAS, candidate_source, kernel_alias
from tuner.build.abi import ABI_VERSION
from tuner.families import registry
from tuner.families.sm90_conv.codegen import EPILOGUE_TAGS
from tuner.families.sm90_conv.space import EpilogueSchedule as ConvEpilogue
from tuner.families.sm90_conv.space import make_config as conv_config
from tuner.families.sm90_gemm.codegen import KERNEL_SCHEDULE_TAGS, SCHEDULER_TAGS, TMA_EPILOGUE_TAGS
from tuner.families.sm90_gemm.space import Schedule, Scheduler
from tuner.families.sm90_gemm.space import make_config as gemm_config
from tuner.core.epilogue import parse_epilogue
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem

ENTRY_POINTS = ("tuner_abi_version", "tuner_kernel_count", "tuner_k0_can_implement", "tuner_k0_workspace_bytes",
                "tuner_k0_grid", "tuner_k0_kernel_attributes", "tuner_k0_create", "tuner_k0_launch",
                "tuner_k0_destroy")
ALIAS = f"{CANDIDATE_ALIAS}0"  # a candidate's one kernel is kernel 0 of its translation unit
CONV_PROBLEM = ConvProblem(n=1, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)
GEMM_PROBLEM = ConvProblem(n=32, h=28, w=28, c=256, k=128, r=1, s=1)
AUTO_CARVEOUT = "StageCountAutoCarveout<static_cast<int>(sizeof(typenameCollectiveEpilogue::SharedStorage))>"




def conv(tile="128x128x64", cluster="1x1x1", stages=0, epilogue="tma", problem=CONV_PROBLEM):
    return conv_config(problem, {"tile": tile, "cluster": cluster, "stages": stages, "epilogue": epilogue})


def gemm(tile="128x128x64", cluster="1x1x1", schedule="cooperative", scheduler="persistent", epilogue="tma",
         stages=0, raster=0, swizzle=1, split_k=1, problem=GEMM_PROBLEM, swap_ab=False, epilogue_n=0):
    return gemm_config(problem, {"tile": tile, "cluster": cluster, "schedule": schedule, "scheduler": scheduler,
                                 "epilogue": epilogue, "stages": stages, "raster": raster, "swizzle": swizzle,
                                 "split_k": split_k, "swap_ab": swap_ab, "epilogue_n": epilogue_n})


def assert_candidate_frame(source: str, runner_class: str, family: str) -> None:
    assert "$" not in source
    assert f"Tuning candidates of the {family} family" in source
    assert f"class {runner_class}" in source and "struct TunerProblem" in source
    assert f"using Runner0 = {runner_class}<{ALIAS}>;" in source
    assert ABI_VERSION == 5
    extern_block = source[source.index('extern "C" {'):]
    assert "int32_t tuner_abi_version() { return 5; }" in extern_block
    assert "int32_t tuner_kernel_count() { return 1; }" in extern_block
    for name in ENTRY_POINTS:
        assert re.search(rf"\b{name}\(", extern_block), name
    for header in registry.get(family).cpp().includes:
        assert source.count(f'#include "{header}"') == 1, header
    # the runner comes before the kernel alias, the alias before the Runner that binds it
    assert source.index(f"class {runner_class}") < source.index(f"using {ALIAS} =") < \
        source.index("using Runner0 =")


# --- sm90_conv ----------------------------------------------------------------------------------

def test_sm90_conv_source_in_template_order():
    source = candidate_source(conv(tile="128x64x32", cluster="1x2x1", stages=0, epilogue="tma"))
    assert_candidate_frame(source, "Sm90ConvRunner", "sm90_conv")
    assert_in_order(source, [
        "// Config: sm90c_128x64x32_c1x2x1_sauto_tma_a8_f16_f16_f16_f32",
        f"namespace {ALIAS}_detail {{",
        "using TileShape = cute::Shape<cute::Int<128>, cute::Int<64>, cute::Shape<cute::Int<32>>>;",
        "using ClusterShape = cute::Shape<cute::Int<1>, cute::Int<2>, cute::_1>;",
        "cutlass::epilogue::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,",
        "TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,",
        "void, cutlass::layout::TensorNHWC, 8, cutlass::half_t, cutlass::layout::TensorNHWC, 8,",
        "cutlass::epilogue::TmaWarpSpecialized, cutlass::epilogue::fusion::LinearCombination<cutlass::half_t, float, void, float> >::CollectiveOp;",
        "cutlass::conv::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,"
        " cutlass::conv::Operator::kFprop,",
        "cutlass::half_t, cutlass::layout::TensorNHWC, 8, cutlass::half_t, cutlass::layout::TensorNHWC, 8, float,",
        "TileShape, ClusterShape,",
        "cutlass::conv::collective::" + AUTO_CARVEOUT + ",",
        "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90 >::CollectiveOp;",
        "cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue,"
        " cutlass::gemm::PersistentScheduler>",
        f"using {ALIAS} = cutlass::conv::device::ConvUniversalAdapter<{ALIAS}_detail::Kernel>;",
        "using Runner0 = Sm90ConvRunner<TunedConv0>;",
    ])
    assert "cutlass::gemm::collective::StageCount" not in source


def test_sm90_conv_nosmem_explicit_stages_f32_output():
    f32_out = ConvProblem(n=1, h=32, w=32, c=32, k=12, r=3, s=3, pad=1, output_type=DataType.f32)
    source = candidate_source(conv(tile="64x256x64", cluster="2x2x1", stages=5, epilogue="nosmem", problem=f32_out))
    assert_in_order(source, [
        "cute::Shape<cute::Int<64>, cute::Int<256>, cute::Shape<cute::Int<64>>>",
        "cute::Shape<cute::Int<2>, cute::Int<2>, cute::_1>",
        "void, cutlass::layout::TensorNHWC, 4, float, cutlass::layout::TensorNHWC, 4,",
        "cutlass::epilogue::NoSmemWarpSpecialized, cutlass::epilogue::fusion::LinearCombination<float, float, void, float> >::CollectiveOp;",
        "cutlass::conv::collective::StageCount<5>,",
        "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90",
    ])
    assert "StageCountAutoCarveout" not in source
    assert "cutlass::epilogue::TmaWarpSpecialized" not in source


def test_sm90_conv_every_epilogue_has_a_tag():
    assert set(EPILOGUE_TAGS) == set(ConvEpilogue)
    assert EPILOGUE_TAGS[ConvEpilogue.tma] == "cutlass::epilogue::TmaWarpSpecialized"
    assert EPILOGUE_TAGS[ConvEpilogue.nosmem] == "cutlass::epilogue::NoSmemWarpSpecialized"


def test_sm90_conv_source_follows_the_config():
    base = candidate_source(conv())
    for changed in (conv(tile="128x128x32"), conv(cluster="2x1x1"), conv(stages=4), conv(epilogue="nosmem")):
        assert candidate_source(changed) != base


# --- sm90_gemm ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "schedule, scheduler, epilogue, kernel_tag, epilogue_tag, scheduler_tag",
    [
        ("cooperative", "persistent", "tma", "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
         "cutlass::epilogue::TmaWarpSpecializedCooperative", "cutlass::gemm::PersistentScheduler"),
        ("cooperative", "stream_k", "tma", "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
         "cutlass::epilogue::TmaWarpSpecializedCooperative", "cutlass::gemm::StreamKScheduler"),
        ("pingpong", "persistent", "tma", "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
         "cutlass::epilogue::TmaWarpSpecialized", "cutlass::gemm::PersistentScheduler"),
        ("ws", "persistent", "tma", "cutlass::gemm::KernelTmaWarpSpecialized",
         "cutlass::epilogue::TmaWarpSpecialized", "cutlass::gemm::PersistentScheduler"),
        ("cooperative", "persistent", "nosmem", "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
         "cutlass::epilogue::NoSmemWarpSpecialized", "cutlass::gemm::PersistentScheduler"),
        ("pingpong", "persistent", "nosmem", "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
         "cutlass::epilogue::NoSmemWarpSpecialized", "cutlass::gemm::PersistentScheduler"),
    ],
)
def test_sm90_gemm_source_in_template_order(schedule, scheduler, epilogue, kernel_tag, epilogue_tag, scheduler_tag):
    config = gemm(tile="256x128x64", cluster="2x1x1", schedule=schedule, scheduler=scheduler, epilogue=epilogue)
    source = candidate_source(config)
    assert_candidate_frame(source, "Sm90GemmRunner", "sm90_gemm")
    assert_in_order(source, [
        f"// Config: {config.name}",
        f"namespace {ALIAS}_detail {{",
        "using TileShape = cute::Shape<cute::Int<256>, cute::Int<128>, cute::Int<64>>;",
        "using ClusterShape = cute::Shape<cute::Int<2>, cute::Int<1>, cute::_1>;",
        "cutlass::epilogue::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,",
        "cutlass::epilogue::collective::EpilogueTileAuto,",
        "void, cutlass::layout::RowMajor, 8, cutlass::half_t, cutlass::layout::RowMajor, 8,",
        epilogue_tag + ",",   # the comma: TmaWarpSpecialized is no prefix match of TmaWarpSpecializedCooperative
        "cutlass::epilogue::fusion::LinearCombination<cutlass::half_t, float, void, float>",
        "cutlass::gemm::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,",
        "cutlass::half_t, cutlass::layout::RowMajor, 8, cutlass::half_t, cutlass::layout::ColumnMajor, 8, float,",
        "TileShape, ClusterShape,",
        "cutlass::gemm::collective::" + AUTO_CARVEOUT + ",",
        kernel_tag + ">::CollectiveOp;",
        "cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,"
        " CollectiveEpilogue, " + scheduler_tag + "> {};",
        f"using {ALIAS} = cutlass::gemm::device::GemmUniversalAdapter<{ALIAS}_detail::GemmKernel>;",
        "using Runner0 = Sm90GemmRunner<TunedConv0>;",
    ])
    assert "cutlass::conv::collective::" not in source


def test_sm90_gemm_swapped_runs_the_transposed_product():
    source = candidate_source(gemm(swap_ab=True))
    assert_in_order(source, [
        "void, cutlass::layout::ColumnMajor, 8, cutlass::half_t, cutlass::layout::ColumnMajor, 8,",
        "cutlass::half_t, cutlass::layout::RowMajor, 8, cutlass::half_t, cutlass::layout::ColumnMajor, 8, float,",
    ])
    assert "kSwapAB ? w : x" in source  # the runner reads the orientation off the kernel's D stride
    fused = ConvProblem(n=32, h=28, w=28, c=256, k=128, r=1, s=1, epilogue=parse_epilogue("scale+bias+residual+relu"))
    swapped = candidate_source(gemm(swap_ab=True, problem=fused))
    assert "fusion::TunerPrefetchedLinCombBiasEltAct<true, cutlass::epilogue::thread::ReLu," in swapped
    assert "TunerPrefetchedLinCombBiasEltAct<false" not in swapped.split("// Config:")[1]
    assert "fusion::TunerPrefetchedLinCombBiasEltAct<false, " in candidate_source(gemm(problem=fused))


def test_a_kernel_reading_a_residual_loads_it_early():
    residual = ConvProblem(n=1, h=28, w=28, c=128, k=128, r=3, s=3, pad=1,
                           epilogue=parse_epilogue("scale+bias+residual+relu"))
    wrapped = "cutlass::gemm::kernel::TunerEarlyResidual<cutlass::conv::kernel::ConvUniversal<"
    assert wrapped in candidate_source(conv(problem=residual)).replace("\n    ", "")
    assert "TunerEarlyResidual<" not in candidate_source(conv()).split("// Config:")[1]
    gemm_residual = dataclasses.replace(GEMM_PROBLEM, epilogue=parse_epilogue("bias+residual+relu"))
    gemm_wrapped = "cutlass::gemm::kernel::TunerEarlyResidual<cutlass::gemm::kernel::GemmUniversal<"
    assert gemm_wrapped in candidate_source(gemm(schedule="ws", problem=gemm_residual)).replace("\n    ", "")
    # the persistent schedules load the residual from a warp of their own
    assert "TunerEarlyResidual<" not in candidate_source(gemm(problem=gemm_residual)).split("// Config:")[1]
    # the kernel is defined once, in the preamble, for every sm90 family
    source = candidate_source(conv(problem=residual))
    assert source.count("class TunerEarlyResidualKernel : public Base") == 1


@pytest.mark.parametrize("schedule, rows", [("cooperative", 128), ("pingpong", 64)])
def test_sm90_gemm_explicit_epilogue_subtile(schedule, rows):
    source = candidate_source(gemm(tile="128x256x64" if schedule == "cooperative" else "64x256x64",
                                   schedule=schedule, epilogue_n=64))
    assert f"TileShape, ClusterShape,\n    cute::Shape<cute::Int<{rows}>, cute::Int<64>>,\n" in source
    assert "EpilogueTileAuto" not in source


def test_sm90_gemm_explicit_stages():
    source = candidate_source(gemm(stages=4))
    assert "cutlass::gemm::collective::StageCount<4>," in source
    assert "StageCountAutoCarveout" not in source


def test_sm90_gemm_f32_output_alignment():
    f32_out = ConvProblem(n=32, h=28, w=28, c=256, k=12, r=1, s=1, output_type=DataType.f32)
    source = candidate_source(gemm(problem=f32_out))
    assert_in_order(source, ["void, cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4,",
                             "cutlass::epilogue::fusion::LinearCombination<float, float, void, float>"])


def test_sm90_gemm_every_enum_value_has_a_tag():
    assert set(KERNEL_SCHEDULE_TAGS) == set(TMA_EPILOGUE_TAGS) == set(Schedule)
    assert set(SCHEDULER_TAGS) == set(Scheduler)
    assert SCHEDULER_TAGS[Scheduler.stream_k] == "cutlass::gemm::StreamKScheduler"


def test_run_time_knobs_leave_the_source_alone():
    base = gemm(scheduler="stream_k")
    source = candidate_source(base)
    for knobs in (dict(raster=1), dict(raster=2, swizzle=8), dict(split_k=4), dict(raster=2, swizzle=2, split_k=2)):
        assert candidate_source(gemm(scheduler="stream_k", **knobs)) == source, knobs
    assert f"// Config: {base.compiled.name}" in source
    assert candidate_source(gemm(scheduler="stream_k", stages=4)) != source
    assert candidate_source(gemm(scheduler="persistent")) != source


# --- kernel aliases side by side ----------------------------------------------------------------

def declared_names(text: str) -> set[str]:
    """The names a kernel alias declares at the scope it is pasted into: its namespaces and its using."""
    namespaces = set(re.findall(r"^namespace (\w+) \{", text, flags=re.M))
    outer = set(re.findall(r"^using (\w+) = cutlass::(?:conv|gemm)::device::", text, flags=re.M))
    return namespaces | outer


@pytest.mark.parametrize("config", [conv(), gemm(schedule="pingpong")], ids=["sm90_conv", "sm90_gemm"])
def test_two_aliases_paste_into_one_text(config):
    first, second = kernel_alias(config, "LayerA"), kernel_alias(config, "LayerB")
    assert declared_names(first) == {"LayerA_detail", "LayerA"}
    assert declared_names(second) == {"LayerB_detail", "LayerB"}
    assert not declared_names(first) & declared_names(second)
    both = first + "\n" + second
    assert both.count("namespace LayerA_detail {") == 1 and both.count("namespace LayerB_detail {") == 1
    assert "LayerB" not in first and "LayerA" not in second
    assert "$" not in both


def test_aliases_of_two_families_paste_into_one_text():
    conv_text, gemm_text = kernel_alias(conv(), "ConvLayer"), kernel_alias(gemm(), "GemmLayer")
    assert not declared_names(conv_text) & declared_names(gemm_text)
    assert "using ConvLayer = cutlass::conv::device::ConvUniversalAdapter<ConvLayer_detail::Kernel>;" in conv_text
    assert "using GemmLayer = cutlass::gemm::device::GemmUniversalAdapter<GemmLayer_detail::GemmKernel>;" in gemm_text


# --- fused epilogues -----------------------------------------------------------------------------------
FUSED = "cutlass::epilogue::fusion::TunerPrefetchedLinCombBiasEltAct<false,"


def test_a_bare_conv_keeps_the_sourceless_linear_combination():
    for config in (conv(), gemm()):
        source = kernel_alias(config, ALIAS)
        assert_in_order(source, ["float, float,", "void,", "cutlass::half_t,", "cutlass::epilogue::fusion::"
                                 "LinearCombination<cutlass::half_t, float, void, float>"])
        assert FUSED not in source and config.name == config.name.rstrip("_")


@pytest.mark.parametrize("epilogue, activation, source", [
    ("scale+bias+residual+relu", "ReLu", "cutlass::half_t"),
    ("bias+silu", "SiLu", "void"),
    ("scale+bias", "Identity", "void"),
    ("residual*0.5+gelu", "GELU", "cutlass::half_t"),
])
def test_a_fused_epilogue_is_the_per_column_fusion_op_with_the_residual_as_source(epilogue, activation, source):
    for make, problem in ((conv, CONV_PROBLEM), (gemm, GEMM_PROBLEM)):
        fused_problem = dataclasses.replace(problem, epilogue=parse_epilogue(epilogue))
        config = make(problem=fused_problem)
        text = kernel_alias(config, ALIAS)
        # C (the residual) and D in the builder's order, then the fusion op with its activation and source
        assert_in_order(text, ["float, float,", f"{source},", "cutlass::half_t,",
                               f"{FUSED} cutlass::epilogue::thread::{activation}, cutlass::half_t, float, float, "
                               f"{source}, float>"])
        assert config.name.endswith(parse_epilogue(epilogue).short)
        source_text = candidate_source(config)
        assert "tuner_fill_epilogue" in source_text
        # the operation's callbacks (the vectors prefetched into L2) come before the kernel that uses them
        assert_in_order(source_text, ["struct FusionCallbacks<", f"{FUSED} cutlass::epilogue::thread::{activation}"])


def test_the_no_smem_epilogue_cannot_fuse(h100):
    bias_relu = parse_epilogue("bias+relu")
    for make, problem, family in ((conv, CONV_PROBLEM, "sm90_conv"), (gemm, GEMM_PROBLEM, "sm90_gemm")):
        fused = dataclasses.replace(problem, epilogue=bias_relu)
        config = make(epilogue="nosmem", problem=fused)
        reasons = registry.get(family).static_problems(config, fused, h100)
        assert any("no-smem epilogue cannot fuse bias+relu" in r for r in reasons), reasons
        tma = dataclasses.replace(config, epilogue=type(config.epilogue).tma)
        assert not any("cannot fuse" in r for r in registry.get(family).static_problems(tma, fused, h100))


def test_families_say_which_epilogue_parts_they_fuse():
    fused = dataclasses.replace(CONV_PROBLEM, epilogue=parse_epilogue("scale+bias+residual+relu"))
    for family in ("sm80", "sm90_conv", "sm90_s2d"):
        assert "cannot fuse" not in (registry.get(family).problem_reason(fused) or "")


def test_the_cpp_sm90_families_refuse_silu_and_say_why():
    silu = dataclasses.replace(CONV_PROBLEM, epilogue=parse_epilogue("scale+bias+silu"))
    gemm_silu = dataclasses.replace(GEMM_PROBLEM, epilogue=parse_epilogue("bias+silu"))
    for family, problem in (("sm90_conv", silu), ("sm90_gemm", gemm_silu)):
        reason = registry.get(family).problem_reason(problem)
        assert reason and "does not fuse silu" in reason and "9 µs slower" in reason, reason
        gelu = dataclasses.replace(problem, epilogue=parse_epilogue("bias+gelu"))
        assert registry.get(family).problem_reason(gelu) is None
    for family in ("sm80", "sm90_dsl"):
        assert "silu" not in (registry.get(family).problem_reason(silu) or "")
