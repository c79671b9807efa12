"""The sm80_depthwise family: depthwise convolutions on CUTLASS 2.x's direct convolution with a per-channel
epilogue. Its space file, static checks (the filter, stride and dilation compiled in, CUTLASS's warp shapes, the
CTAs a channel slice), the C++ it emits, its cost terms and memory-bound verdict, and (nvcc-marked) real builds
whose host entry points refuse a problem of another filter, stride or dilation than they were built for."""
import dataclasses
import re
import shutil

import pytest

from conftest import H100, REPO, squeeze
from tuner.build.codegen import candidate_source
from tuner.build.compile import Compiler
from tuner.search.costmodel import bound
from tuner.analysis.diagnose import diagnose, kernel_facts
from tuner.core.epilogue import parse_epilogue
from tuner.families import registry
from tuner.families.base import LaunchArgs, SpaceError
from tuner.families.sm80_depthwise import space
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.measure.run import EpilogueOperands, KernelAttributes, KernelLibrary, LaunchError, problem_array
from tuner.search.space import load_space, valid_configs

FAMILY = registry.get("sm80_depthwise")
BF16 = dict(input_type=DataType.bf16, filter_type=DataType.bf16, output_type=DataType.bf16)
DW3 = ConvProblem(n=8, h=56, w=56, c=144, k=144, r=3, s=3, pad=1, groups=144)                 # MobileNetV2
DW3_S2 = ConvProblem(n=8, h=56, w=56, c=144, k=144, r=3, s=3, pad=1, stride=2, groups=144)
DW7 = ConvProblem(n=1, h=14, w=14, c=384, k=384, r=7, s=7, pad=3, groups=384,                  # ConvNeXt-T
                  epilogue=parse_epilogue("bias"), **BF16)
PARAMS = {"output_tile": "8x8", "channels": 64, "warps": 4, "stages": 3, "split": 16}


def config(problem: ConvProblem, **overrides):
    return FAMILY.rules.make_config(problem, {**PARAMS, **overrides})


def test_the_space_file_parses():
    space_ = load_space(REPO / "search_spaces" / "sm80_depthwise.yaml")
    assert space_.family == "sm80_depthwise"
    assert "8x8" in space_.choices["output_tile"] and 64 in space_.choices["channels"]
    with pytest.raises(SpaceError, match="output tile '8' must look like 8x8"):
        space.parse_space({"family": "sm80_depthwise", "output_tile": ["8"], "channels": [64], "warps": [4],
                           "stages": [3], "split": [1]})


def test_only_depthwise_f16_bf16_layers_of_whole_vectors_run():
    assert FAMILY.runs_groups
    assert FAMILY.problem_reason(DW3) is None and FAMILY.problem_reason(DW7) is None
    grouped = ConvProblem(n=8, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, groups=8)
    assert "depthwise convolutions only" in FAMILY.problem_reason(grouped)
    multiplier = ConvProblem(n=8, h=28, w=28, c=64, k=128, r=3, s=3, pad=1, groups=64)
    assert "depthwise convolutions only" in FAMILY.problem_reason(multiplier)
    odd = ConvProblem(n=8, h=28, w=28, c=36, k=36, r=3, s=3, pad=1, groups=36)
    assert "C=36 is not a multiple of 8" in FAMILY.problem_reason(odd)
    tf32 = dataclasses.replace(DW3, input_type=DataType.tf32, filter_type=DataType.tf32, output_type=DataType.f32)
    assert "f16 or bf16" in FAMILY.problem_reason(tf32)


def test_the_epilogue_fuses_per_channel_parts_but_no_residual():
    for parts in ("scale+bias+relu", "scale+bias+silu", "bias", "scale+bias+gelu"):
        assert FAMILY.problem_reason(dataclasses.replace(DW3, epilogue=parse_epilogue(parts))) is None, parts
    residual = FAMILY.problem_reason(dataclasses.replace(DW3, epilogue=parse_epilogue("scale+bias+residual")))
    assert "cannot fuse residual" in residual


def test_the_filter_stride_and_dilation_are_the_layers():
    built = config(DW3)
    assert (built.filter, built.stride, built.dilation) == ((3, 3), (1, 1), (1, 1))
    assert FAMILY.rules.static_problems(built, DW3, H100) == []
    reasons = FAMILY.rules.static_problems(built, DW3_S2, H100)
    assert any("built for a 3x3 filter, stride (1, 1)" in reason for reason in reasons)
    assert built.name == "8x8_c64_w4_s3_x16_f3x3_u1x1_d1x1_f16_f16_f16_f32"
    assert config(DW7).name.endswith("_f7x7_u1x1_d1x1_bf16_bf16_bf16_f32_eb")


def test_warp_shapes_are_cutlass_s():
    # 64 channels: all 32 threads along them; 16 pixels a warp is SimtWarpShape<16, 1>, a 4x4 patch
    assert FAMILY.rules.static_problems(config(DW3, warps=4), DW3, H100) == []
    # 64 pixels a warp has no SimtWarpShape
    reasons = FAMILY.rules.static_problems(config(DW3, warps=1), DW3, H100)
    assert any("64 pixels a warp over 1 thread(s)" in reason for reason in reasons)
    # 10x10 over 4 warps: 25 pixels, the 5x5 patch
    assert FAMILY.rules.static_problems(config(DW3, output_tile="10x10"), DW3, H100) == []
    reasons = FAMILY.rules.static_problems(config(DW3, output_tile="10x10", channels=16), DW3, H100)
    assert any("25 pixels a warp over 4 thread(s)" in reason for reason in reasons)


def test_the_epilogues_shared_loads_stay_inside_the_kernels_shared_memory():
    # 8x4 pixels x 16 channels are 64 vectors; 8 warps' 256 threads read 8 KB of accumulators from the last of 2
    # stages of 4 KB: an illegal address on every layer of an H200 tune
    mb1 = ConvProblem(n=8, h=112, w=112, c=32, k=32, r=3, s=3, pad=1, groups=32)
    faulting = config(mb1, output_tile="8x4", channels=16, warps=8, stages=2, split=4)
    assert (space.activation_load_bytes(faulting), space.epilogue_read_bytes(faulting)) == (4096, 8192)
    reasons = FAMILY.rules.static_problems(faulting, mb1, H100)
    assert any("threads read 8192 bytes from the last stage on, past the kernel's shared memory" in reason
               for reason in reasons), reasons
    # 4x4 x 32 channels over 4 warps reads past its tile too, but inside the allocation: it ran exactly
    assert FAMILY.rules.static_problems(
        config(mb1, output_tile="4x4", channels=32, warps=4, stages=4, split=4), mb1, H100) == []
    # the iterator's loads of the window, as the compiled kernels report kActivationSize
    assert space.activation_load_bytes(config(DW3)) == 14336
    assert space.activation_load_bytes(config(mb1, channels=16, warps=4)) == 4096
    assert space.activation_load_bytes(config(mb1, output_tile="16x8", channels=32, warps=8)) == 12288
    assert space.activation_load_bytes(config(mb1, output_tile="4x4", channels=32, warps=1)) == 2560


def test_the_epilogue_waits_for_every_warp_before_the_next_tile_overwrites_its_stage():
    text = (REPO / "tuner" / "families" / "sm80_depthwise" / "templates" / "direct_conv_fused.h").read_text()
    body = text[text.index("shared_load_iterator_.load(aligned_accumulators);"):]
    assert body.index("__syncthreads();") < body.index("destination_iterator.store(output);")


def test_a_thread_of_too_many_values_spills():
    # 8x8 pixels, 64 channels, 4 warps: a thread's 4x4 patch of 2 channels reads a 10x10 window of a 7x7 filter
    too_many = config(DW7)
    assert too_many.thread_values == 2 * (16 + 100 + 49)
    assert any("over 256, ptxas spills" in reason for reason in FAMILY.rules.static_problems(too_many, DW7, H100))
    assert FAMILY.rules.static_problems(config(DW7, output_tile="4x4", channels=32), DW7, H100) == []
    assert config(DW3).thread_values == 2 * (16 + 36 + 9)


def test_the_split_cannot_exceed_a_slices_output_tiles():
    small = ConvProblem(n=1, h=7, w=7, c=64, k=64, r=3, s=3, pad=1, groups=64)  # one 8x8 tile
    assert FAMILY.rules.static_problems(config(small, split=1), small, H100) == []
    reasons = FAMILY.rules.static_problems(config(small, split=4), small, H100)
    assert any("4 CTAs a channel slice exceed its 1 output tiles" in reason for reason in reasons)
    assert FAMILY.rules.launch_args(config(DW3), DW3) == LaunchArgs(144, split_k=16)
    assert config(DW3).compiled.split == 1


def test_the_space_has_configurations_for_3x3_5x5_and_7x7():
    space_ = load_space(REPO / "search_spaces" / "sm80_depthwise.yaml")
    dw5 = ConvProblem(n=32, h=14, w=14, c=480, k=480, r=5, s=5, pad=2, groups=480)   # EfficientNet-B0
    for problem in (DW3, DW3_S2, dw5, DW7):
        assert valid_configs(space_, problem, H100), problem


def test_the_kernel_is_the_direct_convolution_with_the_channel_epilogue():
    text = squeeze(candidate_source(config(DW7, warps=2)))
    assert "cutlass::conv::device::DirectConvolution<typenamesm80_depthwise::DefaultDirectFprop<" in text
    assert ("cutlass::bfloat16_t,float,cutlass::gemm::GemmShape<64,64,49>,cutlass::conv::TensorNHWCShape<1,8,8,64>,"
            "cutlass::MatrixShape<7,7>,cutlass::gemm::GemmShape<32,64,49>,") in text
    assert "sm80_depthwise::ChannelAffine<cutlass::bfloat16_t,8,float,false,true,cutlass::epilogue::thread::Identity>" \
        in text
    assert "cutlass::MatrixShape<1,1>,cutlass::MatrixShape<1,1>>::Kernel>;" in text
    assert "usingRunner0=Sm80DepthwiseRunner<TunedConv0>;" in text
    assert "IteratorAlgorithm::kFixedStrideDilation" in text


def test_the_cost_model_and_the_diagnosis_say_memory_bound():
    cfg = config(DW3)
    verdict = bound(cfg, DW3, H100)
    assert verdict.kind == "memory-bound" and verdict.bytes_moved == DW3.bytes_moved
    assert re.match(r"memory-bound: 14\.45 MB at the 3000 GB/s copy ceiling take 4\.82 µs", verdict.text)
    attributes = KernelAttributes(128, 0, 40000, 0, 128, 2)
    facts = kernel_facts(cfg, DW3, H100, 3 * 16, attributes, 0)
    flags = {flag.code: flag for flag in diagnose(facts)}
    assert "memory_bound" in flags and "14.45 MB" in flags["memory_bound"].message
    assert "tile_padding" not in flags and "split_k_opportunity" not in flags
    # a tensor-core layer gets no such note
    sm80 = registry.get("sm80")
    dense = ConvProblem(n=32, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)
    dense_config = sm80.rules.make_config(dense, sm80.rules.reference_params)
    assert "memory_bound" not in {f.code for f in diagnose(kernel_facts(dense_config, dense, H100, 400, attributes, 0))}


# Two real nvcc builds (about 25 s on 2 cores).
@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    fused = dataclasses.replace(DW3, epilogue=parse_epilogue("scale+bias+silu"))
    configs = {"3x3": config(DW3), "7x7": config(DW7, output_tile="4x4", channels=32), "fused": config(fused)}
    results = Compiler(H100, tmp_path_factory.mktemp("cache"), jobs=2).compile_many(list(configs.values()))
    by_config = {r.config: r for r in results}
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return {key: (by_config[c].binary, by_config[c].ptxas) for key, c in configs.items()}


OK, NOT_SUPPORTED = 0, 5  # cutlass::Status kSuccess, kErrorNotSupported


@pytest.mark.nvcc
def test_the_builds_do_not_spill(libraries):
    for key, (_, ptxas) in libraries.items():
        assert ptxas.spill_bytes == 0, (key, ptxas)


@pytest.mark.nvcc
def test_a_kernel_refuses_another_filter_stride_dilation_or_grouping(libraries):
    library = KernelLibrary(libraries["3x3"][0])
    assert library.can_implement(problem_array(DW3, LaunchArgs(144, split_k=16))) == OK
    assert library.workspace_bytes(problem_array(DW3, LaunchArgs(144))) == 144 * 3 * 3 * 2  # the reordered filter
    for other in (DW3_S2, dataclasses.replace(DW3, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2),
                  ConvProblem(n=8, h=56, w=56, c=144, k=144, r=5, s=5, pad=2, groups=144),
                  ConvProblem(n=8, h=56, w=56, c=144, k=144, r=3, s=3, pad=1, groups=72)):
        assert library.can_implement(problem_array(other, LaunchArgs(144))) == NOT_SUPPORTED, other
    assert KernelLibrary(libraries["7x7"][0]).can_implement(problem_array(DW7, LaunchArgs(384))) == OK
    assert KernelLibrary(libraries["7x7"][0]).can_implement(problem_array(DW3, LaunchArgs(144))) == NOT_SUPPORTED


@pytest.mark.nvcc
def test_a_kernel_takes_exactly_the_epilogue_operands_it_was_built_with(libraries):
    def status(library, operands) -> int:
        try:
            handle = library.create(problem_array(DW3, LaunchArgs(144)), 0x10000, 0x20000, 0x30000, 0x70000, 0,
                                    operands)
        except LaunchError as error:
            return int(re.search(r"Status (\d+)", str(error)).group(1))
        library.destroy(handle)
        return OK

    bare, fused = KernelLibrary(libraries["3x3"][0]), KernelLibrary(libraries["fused"][0])
    assert status(bare, EpilogueOperands(0x50000, None, None, 0.0)) == NOT_SUPPORTED
    assert status(fused, EpilogueOperands(0x50000, 0x60000, None, 0.0)) == OK
    assert status(fused, EpilogueOperands(0x50000, 0x60000, 0x40000, 1.0)) == NOT_SUPPORTED  # no residual
