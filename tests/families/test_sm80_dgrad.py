"""The sm80_dgrad family: transposed convolutions as CUTLASS 2.x's dgrad. Its space and static checks, the
families that take or refuse a transposed problem, its C++, and (nvcc-marked) one real build whose host entry
points are called without a GPU."""
import dataclasses
import shutil

import pytest

from conftest import H100, REPO, squeeze
from tuner.build.codegen import candidate_source
from tuner.families import registry
from tuner.families.base import SpaceError
from tuner.families.sm80_dgrad.space import StrideSupport, derive_alignments, k_iterations, make_config, parse_space
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.measure.run import KernelLibrary, LaunchGrid, problem_array
from tuner.search.space import all_configs, load_space, valid_configs

FAMILY = registry.get("sm80_dgrad")
SPACE = load_space(REPO / "search_spaces" / "sm80_dgrad.yaml")
# A UNet decoder's 2x2 stride-2 upsampling, DCGAN's 4x4 stride-2 pad-1, a 3x3 one with output padding, stride 1
UNET_UP = ConvProblem(n=1, h=32, w=32, c=256, k=128, r=2, s=2, stride=2, transposed=True)
DCGAN_UP = ConvProblem(n=32, h=16, w=16, c=128, k=64, r=4, s=4, pad=1, stride=2, transposed=True)
PADDED_UP = ConvProblem(n=8, h=16, w=16, c=64, k=32, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True)
STRIDE_ONE = ConvProblem(n=8, h=16, w=16, c=64, k=32, r=3, s=3, pad=1, transposed=True)


def params(**changes) -> dict:
    return {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized",
            "stride_support": "strided", "split_k": 1, **changes}


def test_only_the_dgrad_family_runs_a_transposed_problem():
    reasons = registry.problem_reasons(UNET_UP)
    assert reasons["sm80_dgrad"] is None
    for name, reason in reasons.items():
        if name != "sm80_dgrad":
            assert reason.startswith(f"{name} runs convolutions (fprop) only; this is a transposed one"), reason
    assert registry.why_not(FAMILY, UNET_UP, H100) is None


def test_the_dgrad_family_refuses_a_conv():
    conv = dataclasses.replace(UNET_UP, transposed=False)
    assert FAMILY.problem_reason(conv) == "sm80_dgrad runs transposed convolutions (ConvTranspose2d) only"


@pytest.mark.parametrize("problem, words", [
    (dataclasses.replace(UNET_UP, k=3), "K (the output's channels)=3 is not a multiple of 2"),
    (dataclasses.replace(UNET_UP, c=5), "C (the input's channels)=5 is not a multiple of 2"),
    (dataclasses.replace(PADDED_UP, dilation_h=2, dilation_w=2), "CUTLASS's strided dgrad runs undilated"),
    (dataclasses.replace(UNET_UP, epilogue=UNET_UP.epilogue.__class__(bias=True)), "cannot fuse bias"),
    (dataclasses.replace(UNET_UP, input_type=DataType.f32, filter_type=DataType.f32, output_type=DataType.f32),
     "sm80_dgrad kernels take"),
])
def test_the_dgrad_family_refuses_what_it_cannot_run(problem, words):
    reason = FAMILY.problem_reason(problem)
    assert reason is not None and words in reason, reason


@pytest.mark.parametrize("problem", [UNET_UP, DCGAN_UP, PADDED_UP, STRIDE_ONE,
                                     dataclasses.replace(STRIDE_ONE, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)], ids=lambda p: p.key)
@pytest.mark.slow
def test_each_transposed_layer_has_valid_kernels(problem):
    valid = valid_configs(SPACE, problem, H100)
    assert valid
    supports = {config.stride_support for config in valid}
    if problem.strides == (1, 1) and problem.dilations == (1, 1):
        assert supports == {StrideSupport.strided, StrideSupport.unity}
    elif problem.strides == (1, 1):
        assert supports == {StrideSupport.unity}  # dilated: the strided kernel refuses it
    else:
        assert supports == {StrideSupport.strided}


def test_static_checks_name_what_is_wrong():
    def reasons(problem, **changes):
        return " / ".join(FAMILY.rules.static_problems(make_config(problem, params(**changes)), problem, H100))

    assert "unity-stride dgrad runs stride 1 only" in reasons(UNET_UP, stride_support="unity")
    assert "cannot split K at stride > 1" in reasons(UNET_UP, split_k=2)
    assert reasons(STRIDE_ONE, split_k=2) == ""  # the strided kernel at stride 1 splits K
    assert "StridedDgradIdentityThreadblockSwizzle" in reasons(UNET_UP, swizzle=2)
    assert reasons(STRIDE_ONE, swizzle=8, stride_support="unity") == ""
    assert "few_channels iterator" in reasons(UNET_UP, iterator="few_channels")
    assert "runs transposed convolutions only" in reasons(dataclasses.replace(UNET_UP, transposed=False))


def test_the_strided_kernel_walks_only_the_taps_of_its_phase():
    strided, unity = make_config(DCGAN_UP, params()), make_config(STRIDE_ONE, params(stride_support="unity"))
    assert k_iterations(strided, DCGAN_UP) == 2 * 2 * 4     # 4x4 taps at stride 2: 2x2 a phase, C=128 in 32s
    assert k_iterations(unity, STRIDE_ONE) == 3 * 3 * 2      # every tap, C=64 in 32s
    assert FAMILY.model.launch_shape(strided, DCGAN_UP, H100).filter_taps == 4


def test_alignments_follow_both_channel_counts():
    assert derive_alignments(UNET_UP) == (8, 8)
    assert derive_alignments(dataclasses.replace(UNET_UP, c=36)) == (4, 8)    # x is read along C
    assert derive_alignments(dataclasses.replace(UNET_UP, k=20)) == (4, 4)    # w and y along K
    config = make_config(dataclasses.replace(UNET_UP, k=20), params())
    assert (config.alignment_ab, config.alignment_c) == (4, 4)


def test_space_file_parses_and_refuses_small_channel_iterators():
    assert list(SPACE.choices) == list(FAMILY.rules.knobs)
    document = {"family": "sm80_dgrad", "threadblock": ["64x64x32"], "warp_count": ["2x2x1"], "stages": [3],
                "swizzle": [1], "iterator": ["few_channels"], "stride_support": ["strided"], "split_k": [1]}
    with pytest.raises(SpaceError, match="no small-channel dgrad"):
        parse_space(document)
    with pytest.raises(SpaceError, match="stride_support value 'phased'"):
        parse_space({**document, "iterator": ["optimized"], "stride_support": ["phased"]})


def test_config_names_and_params_round_trip():
    config = make_config(UNET_UP, params(stride_support="unity", swizzle=4))
    assert config.family == "sm80_dgrad" and config.name.startswith("dgrad_unity_64x64x32_w2x2x1_s3_sw4")
    assert make_config(UNET_UP, config.search_params) == config
    assert FAMILY.describe(config).startswith("dgrad unity 64x64x32")
    assert config in set(all_configs(SPACE, UNET_UP))


@pytest.mark.slow
def test_the_cost_model_prefers_the_strided_kernel_where_it_must():
    from tuner.search.costmodel import prior_candidates

    assert {c.stride_support for c in prior_candidates(SPACE, UNET_UP, H100)[:5]} == {StrideSupport.strided}
    assert prior_candidates(SPACE, STRIDE_ONE, H100)[0].stride_support is StrideSupport.unity


def test_source_is_a_dgrad_kernel_with_its_runner():
    strided = squeeze(candidate_source(make_config(UNET_UP, params(swizzle=4))))
    assert "cutlass::conv::kernel::DefaultConv2dDgrad<" in strided
    assert "cutlass::conv::threadblock::StridedDgradIdentityThreadblockSwizzle<4>" in strided
    assert "cutlass::conv::StrideSupport::kStrided" in strided and "IteratorAlgorithm::kOptimized" in strided
    assert "usingRunner0=Sm80DgradRunner<TunedConv0>;" in strided
    assert "classSm80Runner" in strided  # whose attributes() it calls
    unity = squeeze(candidate_source(make_config(STRIDE_ONE, params(stride_support="unity", swizzle=2,
                                                                     iterator="analytic"))))
    assert "cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<2>" in unity
    assert "cutlass::conv::StrideSupport::kUnity" in unity and "IteratorAlgorithm::kAnalytic" in unity
    assert "$" not in unity


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from tuner.build.compile import Compiler

    config = make_config(DCGAN_UP, params())
    result = Compiler(H100, tmp_path_factory.mktemp("cache"), jobs=1).compile(config)
    assert result.ok, result.error
    return config, KernelLibrary(result.binary)


@pytest.mark.nvcc
def test_a_dgrad_kernel_builds_and_answers_its_host_entry_points(built):
    config, library = built
    args = problem_array(DCGAN_UP, FAMILY.rules.launch_args(config, DCGAN_UP))
    assert library.can_implement(args) == 0 and library.workspace_bytes(args) == 0
    # M = N*P*Q = 32*32*32 rows over the 4 stride phases, in 64-row tiles; N = K = 64 in one 64-wide tile
    assert library.grid(args) == LaunchGrid((32 * 32 * 32 // 64, 1, 1))
    conv = ConvProblem(n=32, h=16, w=16, c=128, k=64, r=4, s=4, pad=1, stride=2)  # the same numbers as fprop
    assert library.can_implement(problem_array(conv, FAMILY.rules.launch_args(config, conv))) != 0
    dilated = dataclasses.replace(STRIDE_ONE, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)
    assert library.can_implement(problem_array(dilated, FAMILY.rules.launch_args(config, dilated))) != 0


@pytest.mark.nvcc
def test_an_exported_header_with_a_transposed_layer_compiles_and_says_its_extents(tmp_path):
    """best_configs.h of one sm80_dgrad layer (a best.yaml written here, its time made up: it is no result)
    compiles with the runner bound and the row's output extents checked at compile time."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    import subprocess

    from tuner.build.nvcc import cutlass_include_dirs
    from tuner.pipeline.export import render_header
    from tuner.core.problem import problem_to_dict

    config = make_config(PADDED_UP, params())
    layer = {"problem": problem_to_dict(PADDED_UP), "family": "sm80_dgrad", "params": config.search_params,
             "kernel": config.name, "runtime_us": 1.0, "date": "2025-06-01"}
    header = render_header({"device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3",
                                       "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 52428800},
                            "toolchain": {"nvcc": "13.0", "cutlass": "4.2.0.0", "driver": "13.0"},
                            "layers": {"up": layer}})
    (tmp_path / "best_configs.h").write_text(header)
    source = tmp_path / "use.cu"
    source.write_text(
        '#include "best_configs.h"\n'
        "namespace tuned = cutlass_conv_tuner::nvidia_h100_80gb_hbm3;\n"
        "static_assert(tuned::kLayers[0].transposed && tuned::kLayers[0].output_padding_h == 1);\n"
        f"static_assert(tuned::output_p(tuned::kLayers[0]) == {PADDED_UP.p});\n"
        f"static_assert(tuned::output_q(tuned::kLayers[0]) == {PADDED_UP.q});\n"
        "int check(const int32_t *a) {\n"
        "  int32_t grid[6];\n"
        "  tuned::up_runner::grid(tuned::TunerProblem(a), grid);\n"
        "  return int(tuned::up_runner::can_implement(tuned::TunerProblem(a))) + grid[0];\n"
        "}\n")
    result = subprocess.run(["nvcc", "-std=c++17", "--expt-relaxed-constexpr", "-arch=sm_80",
                             *(f"-I{d}" for d in cutlass_include_dirs()), f"-I{tmp_path}", "-c", str(source),
                             "-o", str(tmp_path / "use.o")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
