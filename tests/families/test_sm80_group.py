"""The sm80_group family: grouped convolutions on CUTLASS 2.x's DefaultConv2dGroupFprop. Its space file, static
checks (group mode against K/groups and tile N, the iterators each mode has, a group's channels against the
accesses), the C++ it emits bare and fused, its cost terms, and (nvcc-marked) one real build whose host entry
points take the grouped problem and refuse others."""
import dataclasses
import shutil

import pytest

from conftest import H100, REPO, squeeze
from tuner.build.codegen import candidate_source
from tuner.build.compile import Compiler
from tuner.core.epilogue import parse_epilogue
from tuner.families import registry
from tuner.families.base import LaunchArgs, SpaceError
from tuner.families.sm80_group import space
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.measure.run import KernelLibrary, problem_array
from tuner.search.space import load_space, valid_configs

FAMILY = registry.get("sm80_group")
# RegNetY-400MF's grouped 3x3: 8 channels a group
REGNET = ConvProblem(n=8, h=28, w=28, c=104, k=104, r=3, s=3, pad=1, groups=13)
# ResNeXt-50 32x4d's: 4 channels a group at 128 channels, 8 at 256
RESNEXT = ConvProblem(n=8, h=56, w=56, c=128, k=128, r=3, s=3, pad=1, groups=32)
WIDE_GROUPS = ConvProblem(n=8, h=14, w=14, c=256, k=256, r=3, s=3, pad=1, groups=2)  # 128 channels a group
PARAMS = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "analytic",
          "group_mode": "multiple"}


def config(problem: ConvProblem, **overrides):
    return FAMILY.make_config(problem, {**PARAMS, **overrides})


def test_the_space_file_parses_and_keeps_to_the_grouped_iterators():
    space_ = load_space(REPO / "search_spaces" / "sm80_group.yaml")
    assert space_.family == "sm80_group"
    assert space_.choices["iterator"] == ("analytic", "optimized")
    assert space_.choices["group_mode"] == ("single", "multiple")
    with pytest.raises(SpaceError, match="few_channels has no grouped kernel"):
        space.parse_space({"family": "sm80_group", "threadblock": ["64x64x32"], "warp_count": ["2x2x1"],
                           "stages": [3], "swizzle": [1], "iterator": ["few_channels"], "group_mode": ["single"]})


def test_only_grouped_problems_with_four_bytes_a_group_run():
    assert FAMILY.runs_groups
    assert FAMILY.problem_reason(REGNET) is None and FAMILY.problem_reason(RESNEXT) is None
    assert "groups > 1" in FAMILY.problem_reason(dataclasses.replace(REGNET, groups=1))
    depthwise = ConvProblem(n=8, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, groups=64)
    assert "sm80_depthwise runs it" in FAMILY.problem_reason(depthwise)
    odd = ConvProblem(n=8, h=28, w=28, c=48, k=48, r=3, s=3, pad=1, groups=16)
    assert "3 channels a group" in FAMILY.problem_reason(odd)


def test_the_group_mode_must_fit_k_per_group():
    single = config(WIDE_GROUPS, group_mode="single", iterator="optimized")   # 128 a group, tile N 64
    assert FAMILY.static_problems(single, WIDE_GROUPS, H100) == []
    wrong = config(REGNET, group_mode="single")                              # 8 a group < tile N 64
    assert any("K/groups (8) to be a multiple of tile N 64" in r for r in FAMILY.static_problems(wrong, REGNET, H100))
    several = config(REGNET, tile="64x32x32", warps="2x1x1")                 # 32 = 4 groups of 8
    assert FAMILY.static_problems(several, REGNET, H100) == []
    assert any("multiple of K/groups (128)" in r for r in FAMILY.static_problems(config(WIDE_GROUPS), WIDE_GROUPS, H100))


def test_the_optimized_iterator_takes_one_group_a_cta():
    reasons = FAMILY.static_problems(config(REGNET, iterator="optimized", tile="64x32x32", warps="2x1x1"), REGNET, H100)
    assert any("group mode single" in reason for reason in reasons)


def test_accesses_follow_a_groups_channels_not_c():
    assert config(REGNET).alignment_ab == 8      # 8 channels a group
    assert config(RESNEXT).alignment_ab == 4     # 4 a group, though C=128
    tf32 = dataclasses.replace(RESNEXT, input_type=DataType.tf32, filter_type=DataType.tf32,
                               output_type=DataType.f32)
    assert config(tf32).alignment_ab == 4 and config(tf32).alignment_c == 4


def test_split_k_is_no_knob_and_the_name_says_the_mode():
    cfg = config(REGNET, tile="64x32x32", warps="2x1x1")
    assert cfg.split_k == 1 and "split_k" not in cfg.search_params
    assert cfg.search_params["group_mode"] == "multiple"
    assert cfg.name == "64x32x32_w2x1x1_s3_sw1_analytic_multiple_a8x8_f16_f16_f16_f32"
    assert FAMILY.launch_args(cfg, REGNET) == LaunchArgs(104)


def test_the_space_has_valid_configurations_for_regnet_and_resnext():
    space_ = load_space(REPO / "search_spaces" / "sm80_group.yaml")
    for problem in (REGNET, RESNEXT, WIDE_GROUPS):
        configs = valid_configs(space_, problem, H100)
        assert configs, problem
        assert all(FAMILY.static_problems(c, problem, H100) == [] for c in configs[:20])


def test_the_bare_kernel_is_default_conv2d_group_fprop():
    text = squeeze(candidate_source(config(REGNET, tile="64x32x32", warps="2x1x1")))
    assert "cutlass::conv::kernel::DefaultConv2dGroupFprop<" in text
    assert ("cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>,3,cutlass::arch::OpMultiplyAdd,"
            "cutlass::conv::GroupMode::kMultipleGroup,cutlass::conv::IteratorAlgorithm::kAnalytic,"
            "cutlass::conv::StrideSupport::kStrided,8,8>::Kernel") in text
    assert "usingRunner0=Sm80Runner<TunedConv0>;" in text
    assert '#include"cutlass/conv/kernel/default_conv2d_group_fprop.h"' in text
    assert "sm80_fusion" not in text  # no visitor headers in a bare unit


def test_a_fused_kernel_is_the_visitor_tree_on_the_grouped_main_loop():
    fused = dataclasses.replace(REGNET, epilogue=parse_epilogue("scale+bias+relu"))
    text = squeeze(candidate_source(config(fused, tile="64x32x32", warps="2x1x1")))
    assert "sm80_group_fusion::DefaultConv2dGroupFpropWithVisitor<" in text
    assert "sm80_fusion::WithVisitor<Base,Fusion,ThreadblockSwizzle,ElementC,GroupMode>" in text
    assert "cutlass::conv::GroupMode::kMultipleGroup" in text and "cutlass::epilogue::thread::ReLu" in text
    # sm80's visitor kernel before the grouped one, the runner last
    assert text.index("structImplicitGemmConvolutionWithVisitor") < text.index("structDefaultConv2dGroupFpropWithVisitor") \
        < text.index("classSm80Runner")


def test_cost_terms_count_each_group_of_a_cta():
    cfg = config(REGNET, tile="64x32x32", warps="2x1x1")          # 4 groups of 8 a CTA, 8 channels in a tile K of 32
    terms = FAMILY.cost_terms(cfg, REGNET, H100)
    assert terms.block_k_steps == 3 * 3 * 1 * 4
    shape = FAMILY.launch_shape(cfg, REGNET, H100)
    assert not shape.can_split_k and shape.work_tiles == -(-8 * 28 * 28 // 64) * -(-104 // 32)


# One real nvcc build (about 15 s on 2 cores).
@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    result = Compiler(H100, tmp_path_factory.mktemp("cache")).compile(config(REGNET, tile="64x32x32", warps="2x1x1"))
    assert result.ok, result.error
    return KernelLibrary(result.binary)


@pytest.mark.nvcc
def test_the_built_kernel_takes_its_grouped_problem_and_refuses_others(library):
    ok, invalid = 0, 4  # cutlass::Status kSuccess, kErrorInvalidProblem
    assert library.can_implement(problem_array(REGNET, LaunchArgs(104))) == ok
    # 4 channels a group: the kernel's 8-element accesses (REGNET's 8 a group) would straddle two groups
    assert library.can_implement(problem_array(RESNEXT, LaunchArgs(128))) == invalid
    assert library.can_implement(problem_array(WIDE_GROUPS, LaunchArgs(256))) == invalid  # 128 a group > tile N
    assert library.can_implement(problem_array(REGNET, LaunchArgs(104, split_k=2))) == invalid
