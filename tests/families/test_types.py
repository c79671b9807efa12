"""Data types across the families: which input, filter, output and accumulator types each family takes
(tuner/families/base.py types_problem) and refuses with a reason, the C++ element types it emits, and
(nvcc) that the emitted kernels of each C++ family build for bf16 and TF32 and answer their host entry points."""
import dataclasses
import shutil

import pytest

from conftest import H100
from tuner.build.codegen import candidate_source
from tuner.build.compile import Compiler
from tuner.core.epilogue import parse_epilogue
from tuner.families import registry
from tuner.families.sm90_dsl.geometry import geometry
from tuner.core.dtypes import DataType, dtype_fields
from tuner.core.problem import ConvProblem
from tuner.measure.run import KernelLibrary, problem_array
from tuner.search.space import make_config

CONV = ConvProblem(n=2, h=28, w=28, c=64, k=128, r=3, s=3, pad=1)
GEMM = ConvProblem(n=2, h=28, w=28, c=64, k=128, r=1, s=1)
STEM = ConvProblem(n=2, h=56, w=56, c=3, k=64, r=7, s=7, pad=3, stride=2)
C_FAMILIES = ("sm80", "sm90_conv", "sm90_gemm", "sm90_s2d")
LAYER_OF = {"sm80": CONV, "sm90_conv": CONV, "sm90_gemm": GEMM, "sm90_s2d": STEM, "sm90_dsl": CONV}
PARAMS = {
    "sm80": {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1},
    "sm90_conv": {"tile": "128x64x32", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm90_s2d": {"tile": "128x64x32", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm90_gemm": {"tile": "128x64x32", "cluster": "1x1x1", "schedule": "cooperative", "scheduler": "persistent",
                  "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1, "split_k": 1},
}


def typed(problem: ConvProblem, dtype: str, **types) -> ConvProblem:
    return dataclasses.replace(problem, **{**dtype_fields(dtype), **types})


@pytest.mark.parametrize("family", C_FAMILIES)
@pytest.mark.parametrize("dtype, key", [("f16", "f16_f16_f16_f32"), ("bf16", "bf16_bf16_bf16_f32"),
                                        ("tf32", "tf32_tf32_f32_f32")])
def test_the_c_families_take_f16_bf16_and_tf32(family, dtype, key):
    problem = typed(LAYER_OF[family], dtype)
    assert registry.get(family).problem_reason(problem) is None
    config = make_config(problem, family, PARAMS[family])
    assert config.dtype_key == problem.dtype_key == key
    assert registry.get(family).rules.static_problems(config, problem, H100) == []


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_dsl_family_takes_16_bit_types(dtype):
    assert registry.get("sm90_dsl").problem_reason(typed(CONV, dtype)) is None
    config = make_config(typed(CONV, dtype), "sm90_dsl", {"tile": "128x128x64", "cluster": "1x1x1",
                                                         "schedule": "cooperative", "stages": 0, "raster": "m",
                                                         "swizzle": 1, "tile_q": 0, "split_k": 1})
    assert config.build_spec().element == dtype


def test_the_dsl_family_takes_tf32_with_f32_output_in_128_byte_stages():
    family = registry.get("sm90_dsl")
    problem = typed(CONV, "tf32")
    assert family.problem_reason(problem) is None
    config = make_config(problem, "sm90_dsl", {**DSL_PARAMS, "tile": "128x128x32"})
    spec = config.build_spec()
    assert (spec.element, spec.output_element, spec.stages_by_element) == ("tf32", "f32", True)
    assert family.rules.static_problems(config, problem, H100) == []
    # C is padded to 8 as the builder requires (4 would fill a 16-byte row), so a C=12 layer builds as C=16
    narrow = dataclasses.replace(problem, c=12)
    assert registry.get("sm90_dsl").rules.kernel_problem(narrow).c == 16
    geometry(make_config(narrow, "sm90_dsl", {**DSL_PARAMS, "tile": "128x128x32"}).build_spec())
    # tile N of 16 past a multiple of 32 aborts the DSL's compiler in tf32 (measured for 48 to 240)
    odd = make_config(problem, "sm90_dsl", {**DSL_PARAMS, "tile": "128x48x32"})
    assert any("aborts the DSL" in reason for reason in family.rules.static_problems(odd, problem, H100))
    # ... but 16 itself builds: the batch-1 late layers' tile
    narrow_n = make_config(problem, "sm90_dsl", {**DSL_PARAMS, "tile": "64x16x32", "schedule": "single"})
    assert family.rules.static_problems(narrow_n, problem, H100) == []
    # four bytes an element: tile K 64 is a 256-byte row, past the 128-byte swizzle
    wide = make_config(problem, "sm90_dsl", DSL_PARAMS)
    assert any("must be 32 in tf32" in reason for reason in family.rules.static_problems(wide, problem, H100))
    # its two staged output subtiles hold f32: twice f16's bytes
    f16 = make_config(typed(CONV, "f16"), "sm90_dsl", DSL_PARAMS)
    assert config.epilogue_bytes() - f16.epilogue_bytes() == 2 * 128 * 32 * (4 - 2)


def test_the_dsl_family_refuses_a_tf32_residual_or_stem_and_a_mismatched_output_with_the_reason():
    family = registry.get("sm90_dsl")
    residual = dataclasses.replace(typed(CONV, "tf32"), epilogue=parse_epilogue("residual"))
    assert "load no residual" in family.problem_reason(residual)
    stem = dataclasses.replace(typed(CONV, "tf32"), c=3)
    assert "gathers C=3" in family.problem_reason(stem)
    assert "f32 from tf32" in family.problem_reason(typed(CONV, "bf16", output_type=DataType.f32))
    assert not family.supersedes(typed(CONV, "tf32"))  # the C++ families stay in a tf32 study


DSL_PARAMS = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
              "swizzle": 1, "tile_q": 0, "split_k": 1}


@pytest.mark.parametrize("layer", [CONV, GEMM], ids=["conv_3x3", "gemm_1x1"])
def test_the_dsl_family_takes_e4m3_and_writes_f16(layer):
    problem = typed(layer, "e4m3")
    family = registry.get("sm90_dsl")
    assert family.problem_reason(problem) is None
    config = make_config(problem, "sm90_dsl", DSL_PARAMS)
    assert config.dtype_key == "e4m3_e4m3_f16_f32" and config.build_spec().element == "e4m3"
    assert family.rules.static_problems(config, problem, H100) == []
    # a byte an element: a stage holds half the bytes of f16's, and more of them fit
    f16 = make_config(layer, "sm90_dsl", DSL_PARAMS)
    assert 2 * config.stage_bytes == f16.stage_bytes and config.auto_stage_count > f16.auto_stage_count


def test_e4m3_channels_are_padded_to_16_and_never_gathered():
    family = registry.get("sm90_dsl")
    for c, padded in ((3, 16), (24, 32), (64, 64)):
        problem = typed(dataclasses.replace(CONV, c=c), "e4m3")
        assert family.rules.kernel_problem(problem).c == padded
        assert not make_config(problem, "sm90_dsl", DSL_PARAMS).shape.gathers


def test_e4m3_tile_k_is_a_multiple_of_fp8_wgmmas_32():
    family = registry.get("sm90_dsl")
    problem = typed(CONV, "e4m3")
    wide = make_config(problem, "sm90_dsl", {**DSL_PARAMS, "tile": "128x128x128"})
    assert family.rules.static_problems(wide, problem, H100) == []
    f16_wide = make_config(CONV, "sm90_dsl", {**DSL_PARAMS, "tile": "128x128x128"})
    assert any("tile K=128" in r for r in family.rules.static_problems(f16_wide, CONV, H100))


@pytest.mark.parametrize("family", C_FAMILIES)
def test_the_c_families_refuse_e4m3_with_the_reason(family):
    reason = registry.get(family).problem_reason(typed(LAYER_OF[family], "e4m3"))
    assert reason and "e4m3 needs sm90_dsl" in reason


def test_the_grouped_families_refuse_e4m3_with_the_reason():
    for family, groups in (("sm80_depthwise", 64), ("sm80_group", 4)):
        grouped = typed(ConvProblem(n=2, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, groups=groups), "e4m3")
        assert "e4m3 needs sm90_dsl" in registry.get(family).problem_reason(grouped), family


def test_an_e4m3_kernel_is_modelled_at_twice_the_f16_tensor_rate():
    from tuner.families.sm90_dsl.costmodel import cost_terms

    e4m3 = make_config(typed(CONV, "e4m3"), "sm90_dsl", DSL_PARAMS)
    f16 = make_config(CONV, "sm90_dsl", DSL_PARAMS)
    # tile K 64 is a 64-byte row in e4m3, as tile K 32 is in f16: that penalty, then twice the rate
    f16_k32 = make_config(CONV, "sm90_dsl", {**DSL_PARAMS, "tile": "128x128x32"})
    assert cost_terms(e4m3, typed(CONV, "e4m3"), H100).efficiency == pytest.approx(
        2 * cost_terms(f16_k32, CONV, H100).efficiency)
    assert cost_terms(e4m3, typed(CONV, "e4m3"), H100).efficiency > cost_terms(f16, CONV, H100).efficiency


def test_tf32_writes_f32_only():
    for family in C_FAMILIES:
        reason = registry.get(family).problem_reason(typed(LAYER_OF[family], "tf32", output_type=DataType.f16))
        assert reason and "write f32" in reason, family


def test_sm80_runs_tf32_on_its_16x8x8_instruction():
    config = make_config(typed(CONV, "tf32"), "sm80", PARAMS["sm80"])
    assert config.instruction.text == "16x8x8" and config.alignment_ab == 4
    assert config.mainloop_smem_bytes == 2 * make_config(CONV, "sm80", PARAMS["sm80"]).mainloop_smem_bytes


@pytest.mark.parametrize("family", C_FAMILIES)
def test_bf16_inputs_may_write_f32(family):
    problem = typed(LAYER_OF[family], "bf16", output_type=DataType.f32)
    assert registry.get(family).problem_reason(problem) is None


@pytest.mark.parametrize("family", C_FAMILIES + ("sm90_dsl",))
@pytest.mark.parametrize("types, words", [
    ({"filter_type": DataType.f16}, "inputs and filters of one type"),
    ({"output_type": DataType.f16}, "write bf16 or f32"),
    ({"accumulator_type": DataType.bf16}, "accumulate bf16 in f32"),
    ({"input_type": DataType.f32, "filter_type": DataType.f32}, "inputs and filters of one type"),
])
def test_other_type_mixes_are_refused_with_the_reason(family, types, words):
    problem = typed(LAYER_OF[family], "bf16", **types)
    reason = registry.get(family).problem_reason(problem)
    assert reason is not None and words in reason and problem.dtype_key in reason


@pytest.mark.parametrize("family", C_FAMILIES)
@pytest.mark.parametrize("dtype, element", [("bf16", "cutlass::bfloat16_t"), ("tf32", "cutlass::tfloat32_t")])
def test_kernels_name_their_cutlass_element(family, dtype, element):
    config = make_config(typed(LAYER_OF[family], dtype), family, PARAMS[family])
    source = candidate_source(config)
    assert element in source and "cutlass::half_t" not in source.split("class ", 1)[1]


FUSED = parse_epilogue("scale+bias+residual+relu")


def build(dtype: str, folder) -> dict:
    """The four C++ families' kernels of `dtype`, and a fused residual one of sm80 and of sm90_conv, by nvcc."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    configs = [make_config(typed(LAYER_OF[family], dtype), family, PARAMS[family]) for family in C_FAMILIES]
    fused = typed(dataclasses.replace(CONV, epilogue=FUSED), dtype)
    configs += [make_config(fused, family, PARAMS[family]) for family in ("sm80", "sm90_conv")]
    results = Compiler(H100, folder, jobs=2).compile_many(configs)
    return {(r.config.family, r.config.fusion.key): r for r in results}


def assert_built_and_taken(dtype: str, built: dict) -> None:
    assert len(built) == len(C_FAMILIES) + 2
    for (family, fusion), result in built.items():
        assert result.ok, f"{family} {fusion}: {result.error}"
        assert result.ptxas.spill_bytes == 0, (family, fusion, result.ptxas)
        problem = typed(dataclasses.replace(LAYER_OF[family], epilogue=result.config.fusion), dtype)
        launch = registry.get(family).rules.launch_args(result.config, problem)
        library = KernelLibrary(result.binary)
        assert library.can_implement(problem_array(problem, launch)) == 0, (family, fusion)


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
def test_kernels_of_each_c_family_build_and_take_their_problems(dtype, tmp_path):
    assert_built_and_taken(dtype, build(dtype, tmp_path))
