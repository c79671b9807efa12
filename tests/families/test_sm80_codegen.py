import re

import pytest

from conftest import squeeze, config_for
from tuner.build.codegen import candidate_source, kernel_alias
from tuner.families.base import ELEMENT_TAGS
from tuner.families.sm80_common.codegen import ITERATOR_TAGS, SWIZZLE_TAGS
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.families.sm80.space import reference_config
from tuner.families.sm80_common.space import SWIZZLES, IteratorAlgorithm

ENTRY_POINTS = ("tuner_abi_version", "tuner_kernel_count", "tuner_k0_can_implement", "tuner_k0_workspace_bytes",
                "tuner_k0_grid", "tuner_k0_kernel_attributes", "tuner_k0_create", "tuner_k0_launch",
                "tuner_k0_destroy")



@pytest.fixture(scope="module")
def reference_source(conv_1) -> str:
    return candidate_source(reference_config(conv_1))


def test_reference_source_pieces(reference_source):
    source = reference_source
    for piece in ("GemmShape<128, 128, 64>", "GemmShape<64, 64, 64>", "GemmShape<16, 8, 16>", "cutlass::half_t",
                  "GemmIdentityThreadblockSwizzle<1>", "IteratorAlgorithm::kOptimized", "cutlass::arch::Sm80",
                  "cutlass::arch::OpClassTensorOp", "StrideSupport::kStrided",
                  "Config: 128x128x64_w2x2x1_s3_sw1_optimized_sk1_a8x4_f16_f16_f32_f32"):
        assert piece in source, piece
    assert "${" not in source and "$" not in source


def test_reference_kernel_type_in_template_order(reference_source):
    """Every template argument of DefaultConv2dFprop, in order: element types, shapes, epilogue (float output,
    4-wide), swizzle, 3 stages, the iterator and the A/B alignment of 8."""
    expected = squeeze("""
      cutlass::conv::kernel::DefaultConv2dFprop<
        cutlass::half_t, cutlass::layout::TensorNHWC,
        cutlass::half_t, cutlass::layout::TensorNHWC,
        float, cutlass::layout::TensorNHWC,
        float,
        cutlass::arch::OpClassTensorOp,
        cutlass::arch::Sm80,
        cutlass::gemm::GemmShape<128, 128, 64>,
        cutlass::gemm::GemmShape<64, 64, 64>,
        cutlass::gemm::GemmShape<16, 8, 16>,
        cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
        cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>,
        3,
        cutlass::arch::OpMultiplyAdd,
        cutlass::conv::IteratorAlgorithm::kOptimized,
        cutlass::conv::StrideSupport::kStrided,
        8,
        8
      >::Kernel""")
    assert expected in squeeze(reference_source)


def test_entry_points_are_extern_c(reference_source):
    extern_block = reference_source[reference_source.index('extern "C" {'):]
    for name in ENTRY_POINTS:
        assert re.search(rf"\b{name}\(", extern_block), name
    assert "int32_t tuner_abi_version() { return 5; }" in extern_block
    assert "int32_t tuner_kernel_count() { return 1; }" in extern_block
    assert "using Runner0 = Sm80Runner<TunedConv0>;" in reference_source
    assert "using TunedConv0 = cutlass::conv::device::ImplicitGemmConvolution<" in reference_source
    assert "class Sm80Runner" in reference_source and "struct TunerProblem" in reference_source


def test_source_follows_the_config(conv_1):
    f16_out = ConvProblem(n=1, h=16, w=16, c=64, k=64, r=3, s=3, pad=1)
    config = config_for(f16_out, tile="64x128x32", warps="2x2x1", stages=5, swizzle=8, iterator="analytic")
    text = squeeze(candidate_source(config))
    assert "GemmShape<64,128,32>,cutlass::gemm::GemmShape<32,64,32>" in text
    assert "LinearCombination<cutlass::half_t,8,float,float>" in text
    assert "GemmIdentityThreadblockSwizzle<8>,5,cutlass::arch::OpMultiplyAdd,cutlass::conv::IteratorAlgorithm::kAnalytic" in text


def test_small_channel_and_bf16_sources():
    stem = ConvProblem(n=1, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2,
                       input_type=DataType.bf16, filter_type=DataType.bf16, output_type=DataType.bf16)
    fixed = squeeze(candidate_source(config_for(stem, tile="64x64x32", iterator="fixed_channels")))
    assert "DefaultConv2dFprop<cutlass::bfloat16_t,cutlass::layout::TensorNHWC,cutlass::bfloat16_t" in fixed
    assert "IteratorAlgorithm::kFixedChannels,cutlass::conv::StrideSupport::kStrided,4,4>" in fixed  # C=3 -> 4
    few = candidate_source(config_for(stem, tile="64x64x32", iterator="few_channels"))
    assert "IteratorAlgorithm::kFewChannels" in few


def test_split_k_is_not_compiled(conv_1):
    assert candidate_source(config_for(conv_1, split_k=4)) == candidate_source(config_for(conv_1))
    assert candidate_source(config_for(conv_1, stages=4)) != candidate_source(config_for(conv_1))


def test_kernel_alias(conv_1):
    text = kernel_alias(reference_config(conv_1), "MyConv")
    assert text.count("using MyConv = cutlass::conv::device::ImplicitGemmConvolution<") == 1
    assert text.rstrip().endswith(">::Kernel>;")


def test_every_enum_value_has_a_tag():
    assert set(ELEMENT_TAGS) == set(DataType)
    assert set(ITERATOR_TAGS) == set(IteratorAlgorithm)
    assert set(SWIZZLE_TAGS) == set(SWIZZLES)
    assert ELEMENT_TAGS == {DataType.f16: "cutlass::half_t", DataType.bf16: "cutlass::bfloat16_t",
                            DataType.f32: "float", DataType.tf32: "cutlass::tfloat32_t",
                            DataType.e4m3: "cutlass::float_e4m3_t"}
    assert ITERATOR_TAGS[IteratorAlgorithm.optimized] == "cutlass::conv::IteratorAlgorithm::kOptimized"
    assert ITERATOR_TAGS[IteratorAlgorithm.analytic] == "cutlass::conv::IteratorAlgorithm::kAnalytic"
    assert ITERATOR_TAGS[IteratorAlgorithm.few_channels] == "cutlass::conv::IteratorAlgorithm::kFewChannels"
    assert ITERATOR_TAGS[IteratorAlgorithm.fixed_channels] == "cutlass::conv::IteratorAlgorithm::kFixedChannels"
    for width, tag in SWIZZLE_TAGS.items():
        assert tag == f"cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{width}>"
