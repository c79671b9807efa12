import dataclasses
import itertools

import pytest
import yaml

from conftest import SPACE_FILE, config_for, params
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.families.base import SearchSpace, Shape3, SpaceError
from tuner.families.sm80.space import (
    REFERENCE_PARAMS,
    Sm80Config as KernelConfig,
    make_config,
    parse_space,
    reference_config,
)
from tuner.families.sm80_common.space import (
    MAX_ACCUMULATORS_PER_THREAD,
    MAX_THREADS_PER_BLOCK,
    IteratorAlgorithm,
    derive_alignments,
    k_iterations,
    kernel_problem,
    static_problems,
)
from tuner.search.space import all_configs, load_space, valid_configs


def problem(**fields) -> ConvProblem:
    base = dict(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, output_type=DataType.f32)
    return ConvProblem(**{**base, **fields})


def with_choices(space: SearchSpace, **choices) -> SearchSpace:
    return SearchSpace(space.family, tuple((name, choices.get(name, values)) for name, values in space.choices_items))


def only_problem(config: KernelConfig, prob: ConvProblem, device) -> str:
    reasons = static_problems(config, prob, device)
    assert len(reasons) == 1, reasons
    return reasons[0]


# --- the search-space file ----------------------------------------------------------------------

def test_repository_space(sm80_space):
    space = sm80_space
    assert space.family == "sm80"
    choices = space.choices
    assert "128x128x64" in choices["tile"] and "64x64x32" in choices["tile"]
    assert all(Shape3.parse(t) for t in choices["tile"] + choices["warps"])
    assert "2x2x1" in choices["warps"]
    assert 3 in choices["stages"] and all(isinstance(s, int) for s in choices["stages"])
    assert choices["swizzle"] == (1, 2, 4, 8)
    assert set(choices["iterator"]) == {i.value for i in IteratorAlgorithm}
    assert 1 in choices["split_k"]
    assert list(choices) == ["tile", "warps", "stages", "swizzle", "iterator", "split_k"]
    assert "128x128x64" in choices["tile"] and "optimized" in choices["iterator"]
    expected = 1
    for values in choices.values():
        expected *= len(values)
    assert space.size == expected == sum(1 for _ in all_configs(space, problem()))


def test_every_reference_param_is_a_choice(sm80_space):
    for name, value in REFERENCE_PARAMS.items():
        assert value in sm80_space.choices[name], name


def space_document(**changes) -> dict:
    document = yaml.safe_load(SPACE_FILE.read_text())
    for key, value in changes.items():
        if value is None:
            del document[key]
        else:
            document[key] = value
    return document


def test_parse_space_deduplicates_and_sorts():
    space = parse_space(space_document(stages=[4, 2, 4], threadblock=["64x64x32", "64X64X32", "32x32x32"],
                                       iterator=["analytic", "analytic"]))
    assert space.choices["stages"] == (2, 4)
    assert space.choices["tile"] == ("64x64x32", "32x32x32")
    assert space.choices["iterator"] == ("analytic",)


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(bias=[1]), ["unknown bias"]),
        (dict(stages=None), ["missing stages"]),
        (dict(stages=None, extra=1), ["missing stages", "unknown extra"]),
        (dict(family="sm90"), ["'sm90'"]),
        (dict(threadblock=["128x128"]), ["'128x128'", "128x128x64"]),
        (dict(threadblock=["128x128x64x1"]), ["'128x128x64x1'"]),
        (dict(threadblock=["128x128x0"]), ["'128x128x0'"]),
        (dict(threadblock=["axbxc"]), ["'axbxc'"]),
        (dict(threadblock=["128x128x-64"]), ["'128x128x-64'"]),
        (dict(threadblock=["128x128x64; system()"]), ["128x128x64; system()"]),
        (dict(warp_count=["2x2"]), ["'2x2'"]),
        (dict(swizzle=[1, 3]), ["swizzle value 3"]),
        (dict(swizzle=[16]), ["swizzle value 16"]),
        (dict(stages=[1]), ["stages value 1"]),
        (dict(stages=[17]), ["stages value 17"]),
        (dict(stages=[True]), ["stages value True"]),
        (dict(stages=["3"]), ["stages value '3'"]),
        (dict(split_k=[0]), ["split_k value 0"]),
        (dict(split_k=[65]), ["split_k value 65"]),
        (dict(iterator=["precomputed"]), ["iterator value 'precomputed'", "optimized"]),
        (dict(iterator=[]), ["'iterator' must be a non-empty list"]),
        (dict(stages=[]), ["'stages' must be a non-empty list"]),
        (dict(threadblock=[]), ["'threadblock' must be a non-empty list"]),
        (dict(split_k=4), ["'split_k' must be a non-empty list"]),
    ],
)
def test_parse_space_refuses(changes, words):
    with pytest.raises(SpaceError) as error:
        parse_space(space_document(**changes))
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_parse_space_refuses_non_mapping():
    with pytest.raises(SpaceError, match="mapping"):
        parse_space(["family", "sm80"])


def test_load_space_file_errors(tmp_path):
    with pytest.raises(SpaceError, match="not found"):
        load_space(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: sm80\nstages: [2, 3\n")
    with pytest.raises(SpaceError, match="not valid YAML"):
        load_space(bad)


def test_shape_with_superscript_digit_is_a_space_error():
    with pytest.raises(SpaceError):
        Shape3.parse("128x128x6²")


def test_shape3():
    shape = Shape3.parse("128X64x32")
    assert (shape.m, shape.n, shape.k, shape.text, shape.volume) == (128, 64, 32, "128x64x32", 128 * 64 * 32)


# --- alignment and the padded problem -----------------------------------------------------------

@pytest.mark.parametrize(
    "fields, alignments",
    [
        (dict(c=32, k=32, output_type=DataType.f32), (8, 4)),    # conv_1
        (dict(c=32, k=32, output_type=DataType.f16), (8, 8)),
        (dict(c=3, k=64, output_type=DataType.f16), (4, 8)),     # stem: C=3 padded to 4
        (dict(c=12, k=12, output_type=DataType.f16), (4, 4)),
        (dict(c=6, k=6, output_type=DataType.f16), (2, 2)),
        (dict(c=5, k=6, output_type=DataType.f32), (2, 2)),      # C=5 padded to 6
        (dict(c=32, k=33, output_type=DataType.f16), (8, 1)),    # odd K: scalar output
        (dict(c=32, k=33, output_type=DataType.f32), (8, 1)),
        (dict(c=32, k=2, output_type=DataType.f32), (8, 2)),
    ],
)
def test_derive_alignments(fields, alignments):
    assert derive_alignments(problem(**fields)) == alignments


def test_kernel_problem_pads_odd_c_only():
    stem = problem(h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)
    padded = kernel_problem(stem)
    assert padded == dataclasses.replace(stem, c=4)
    assert (padded.p, padded.q) == (stem.p, stem.q)
    assert kernel_problem(problem(c=5)).c == 6
    for c in (2, 4, 6, 32):
        assert kernel_problem(problem(c=c)) == problem(c=c)


# --- static rules, each at its boundary ---------------------------------------------------------

def test_reference_config_is_valid_for_conv_1_on_h100(conv_1, h100):
    config = reference_config(conv_1)
    assert config == config_for(conv_1)
    assert (config.tile, config.warps, config.warp_tile) == (Shape3(128, 128, 64), Shape3(2, 2, 1), Shape3(64, 64, 64))
    assert (config.stages, config.swizzle, config.iterator, config.split_k) == (3, 1, IteratorAlgorithm.optimized, 1)
    assert (config.alignment_ab, config.alignment_c) == (8, 4)
    assert config.threads == 128 and config.warp_count == 4
    assert config.instruction == Shape3(16, 8, 16)
    assert config.mainloop_smem_bytes == 98304  # the 98 KB of the reference ncu log
    assert static_problems(config, conv_1, h100) == []


def test_shared_memory_exactly_at_the_limit_passes(conv_1, h100):
    # 128x128x64 f16: 32 KB a stage; an opt-in limit of exactly 3 stages
    device = dataclasses.replace(h100, smem_optin_per_block=3 * 32768)
    assert static_problems(config_for(conv_1, stages=3), conv_1, device) == []
    assert "shared memory" in only_problem(config_for(conv_1, stages=4), conv_1, device)


def test_shared_memory_on_h100(conv_1, h100):
    assert static_problems(config_for(conv_1, stages=7), conv_1, h100) == []      # 224 KB of 227 KB
    reason = only_problem(config_for(conv_1, stages=8), conv_1, h100)              # 256 KB
    assert "256 KB" in reason and "227 KB" in reason


@pytest.mark.parametrize("types, tile, refused", [
    ((DataType.f16, DataType.f16, DataType.f32), "128x128x64", False),   # 128 bytes a row: one line
    ((DataType.tf32, DataType.tf32, DataType.f32), "128x128x32", False),
    ((DataType.tf32, DataType.tf32, DataType.f32), "128x128x64", True),  # 256 bytes: nvcc's static assertion
    ((DataType.tf32, DataType.tf32, DataType.f32), "32x64x64", True),
])
def test_a_threadblock_k_row_fits_one_shared_memory_line(h100, types, tile, refused):
    """nvcc fails a TF32 kernel with K 64 ('kCrosswise should be no large than one shared memory cache line',
    tensor_op_multiplicand_sm75.h:92): six of the TF32 table's prior picks did, at a minute of nvcc each."""
    prob = problem(input_type=types[0], filter_type=types[1], output_type=types[2])
    reasons = static_problems(config_for(prob, tile=tile, warps="2x2x1", stages=3), prob, h100)
    assert any("shared-memory line" in r for r in reasons) == refused, reasons


def test_warp_count_must_divide_the_tile(conv_1, h100):
    reasons = static_problems(config_for(conv_1, warps="3x1x1"), conv_1, h100)
    assert any("does not divide by warp count 3x1x1" in r for r in reasons)
    assert "sliced-K" in only_problem(config_for(conv_1, warps="2x2x2"), conv_1, h100)


def test_warp_tile_must_be_a_multiple_of_the_instruction(conv_1, h100):
    assert static_problems(config_for(conv_1, tile="64x64x32", warps="1x4x1"), conv_1, h100) == []  # warp N = 16
    assert "64x8x32" in only_problem(config_for(conv_1, tile="64x64x32", warps="1x8x1"), conv_1, h100)  # N = 8
    assert "8x32x32" in only_problem(config_for(conv_1, tile="32x32x32", warps="4x1x1"), conv_1, h100)  # M = 8


def test_accumulators_per_thread(conv_1, h100):
    assert MAX_ACCUMULATORS_PER_THREAD == 128
    assert static_problems(config_for(conv_1, tile="64x64x32", warps="1x1x1"), conv_1, h100) == []  # 64*64/32 = 128
    for tile in ("128x64x32", "64x128x32"):                                                          # 256
        assert "256 accumulator registers" in only_problem(config_for(conv_1, tile=tile, warps="1x1x1"), conv_1, h100)


def test_threads_per_block(conv_1, h100):
    assert MAX_THREADS_PER_BLOCK == 1024
    assert static_problems(config_for(conv_1, tile="256x256x64", warps="8x4x1"), conv_1, h100) == []  # 1024
    assert "2048 threads" in only_problem(config_for(conv_1, tile="256x256x64", warps="8x8x1"), conv_1, h100)


def test_thread_map(conv_1, h100):
    # 32x32 A tile in 8-element vectors: 128 vectors, exactly one per thread of 4 warps
    assert static_problems(config_for(conv_1, tile="32x32x32", warps="2x2x1"), conv_1, h100) == []
    # 8 warps: fewer vectors than threads
    assert "A tile 32x32" in only_problem(config_for(conv_1, tile="32x64x32", warps="2x4x1"), conv_1, h100)
    # 3 warps: 256 vectors of B do not split evenly over 96 threads
    assert "B tile 64x32" in only_problem(config_for(conv_1, tile="96x64x32", warps="3x1x1"), conv_1, h100)


def test_thread_map_uses_the_alignment(h100):
    # C=4: 4-element vectors, so a 32x32 tile holds 256 vectors and 8 warps fit
    small_c = problem(c=4)
    assert derive_alignments(small_c)[0] == 4
    config = config_for(small_c, tile="32x64x32", warps="2x4x1")
    assert static_problems(config, small_c, h100) == []


@pytest.mark.parametrize("c, few, fixed", [
    (3, True, True),      # padded to 4, alignment 4
    (4, True, True),
    (6, True, False),     # alignment 2 != C
    (7, True, True),      # padded to 8: still small
    (8, True, True),
    (9, False, False),    # padded to 10
    (16, False, False),
    (32, False, False),
])
def test_small_channel_iterators(h100, c, few, fixed):
    prob = problem(c=c, k=64, output_type=DataType.f16)
    for iterator, allowed in (("few_channels", few), ("fixed_channels", fixed)):
        config = config_for(prob, tile="64x64x32", warps="2x2x1", iterator=iterator)
        reasons = static_problems(config, prob, h100)
        assert (reasons == []) is allowed, (iterator, reasons)
    for iterator in ("optimized", "analytic"):
        assert static_problems(config_for(prob, tile="64x64x32", iterator=iterator), prob, h100) == []


def test_small_channel_reasons(h100, conv_1):
    assert "C <= 8" in only_problem(config_for(conv_1, iterator="few_channels"), conv_1, h100)
    six = problem(c=6, k=64, output_type=DataType.f16)
    assert "fixed_channels needs C equal to the access width 2" in only_problem(
        config_for(six, tile="64x64x32", iterator="fixed_channels"), six, h100)


def test_optimized_iterator_filter_limit(h100):
    big = problem(h=40, w=40, r=32, s=32, pad=0, c=8, k=8)
    huge = problem(h=40, w=40, r=33, s=3, pad=0, c=8, k=8)
    config = dict(tile="64x64x32", warps="2x2x1")
    assert static_problems(config_for(big, **config), big, h100) == []
    assert "32x32" in only_problem(config_for(huge, **config), huge, h100)
    assert static_problems(config_for(huge, iterator="analytic", **config), huge, h100) == []


def test_k_iterations(conv_1):
    assert k_iterations(config_for(conv_1), conv_1) == 9                         # 3*3*ceil(32/64)
    assert k_iterations(config_for(conv_1, tile="64x64x32"), conv_1) == 9        # 3*3*ceil(32/32)
    wide = problem(c=96)
    assert k_iterations(config_for(wide, tile="64x64x32"), wide) == 27           # 3*3*3
    assert k_iterations(config_for(wide, tile="64x64x64"), wide) == 18           # 3*3*2
    stem = problem(h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2, output_type=DataType.f16)
    for iterator in ("few_channels", "fixed_channels"):                           # ceil(7*7*4 / tileK)
        assert k_iterations(config_for(stem, tile="64x64x64", iterator=iterator), stem) == 4   # 196/64
        assert k_iterations(config_for(stem, tile="64x64x32", iterator=iterator), stem) == 7   # 196/32
    assert k_iterations(config_for(stem, tile="64x64x32"), stem) == 49            # optimized: 49 taps * 1


def test_split_k_at_the_k_iterations(conv_1, h100):
    assert static_problems(config_for(conv_1, split_k=9), conv_1, h100) == []
    assert "split-K 10 exceeds the 9 K-iterations" in only_problem(config_for(conv_1, split_k=10), conv_1, h100)
    one_by_one = problem(c=64, k=64, r=1, s=1, pad=0, output_type=DataType.f16)
    assert static_problems(config_for(one_by_one, split_k=1), one_by_one, h100) == []
    assert "split-K 2 exceeds the 1 K-iterations" in only_problem(config_for(one_by_one, split_k=2), one_by_one, h100)


def test_inputs_must_be_one_tensor_op_type(h100):
    mixed = problem(filter_type=DataType.bf16)
    assert "f16/bf16/tf32 inputs and filters of one type" in only_problem(config_for(mixed), mixed, h100)
    bf16 = problem(input_type=DataType.bf16, filter_type=DataType.bf16)
    assert static_problems(config_for(bf16), bf16, h100) == []


def test_f32_inputs_are_refused_not_crashed(h100):
    f32_in = problem(input_type=DataType.f32, filter_type=DataType.f32)
    assert "f16/bf16/tf32 inputs" in only_problem(config_for(f32_in, tile="64x64x32"), f32_in, h100)


# --- configurations -----------------------------------------------------------------------------

def test_compiled_drops_split_k_only(conv_1):
    config = config_for(conv_1, tile="64x64x32", stages=4, swizzle=2, iterator="analytic", split_k=4)
    compiled = config.compiled
    assert compiled.split_k == 1
    assert dataclasses.replace(compiled, split_k=4) == config
    for field in dataclasses.fields(KernelConfig):
        if field.name != "split_k":
            assert getattr(compiled, field.name) == getattr(config, field.name), field.name
    assert config_for(conv_1, split_k=2).compiled == config_for(conv_1, split_k=8).compiled
    assert config_for(conv_1, stages=4).compiled != config_for(conv_1, stages=3).compiled


def test_make_config_from_stored_params(conv_1):
    config = make_config(conv_1, {"tile": "64x64x32", "warps": "2x2x1", "stages": "4", "swizzle": "2",
                                  "iterator": "analytic", "split_k": "2"})
    assert (config.stages, config.swizzle, config.split_k) == (4, 2, 2)
    assert make_config(conv_1, config.search_params) == config
    assert config.search_params == params(tile="64x64x32", stages=4, swizzle=2, iterator="analytic", split_k=2)
    assert config.dtype_key == conv_1.dtype_key


def test_config_name(conv_1):
    assert reference_config(conv_1).name == "128x128x64_w2x2x1_s3_sw1_optimized_sk1_a8x4_f16_f16_f32_f32"


def test_valid_configs_for_conv_1(sm80_space, conv_1, h100):
    valid = valid_configs(sm80_space, conv_1, h100)
    assert reference_config(conv_1) in valid
    assert 0 < len(valid) < sm80_space.size
    names = [c.name for c in valid]
    assert len(set(names)) == len(names)
    assert all(c.iterator in (IteratorAlgorithm.optimized, IteratorAlgorithm.analytic) for c in valid)  # C = 32
    # split-K is a run-time argument: several valid configs share one compiled kernel
    assert len({c.compiled for c in valid}) < len(valid)


def test_valid_configs_of_the_stem_use_small_channel_iterators(sm80_space, layers, h100):
    stem = layers["r50_stem_b1"].problem
    space = with_choices(sm80_space, tile=("64x64x32", "128x128x64"))
    iterators = {c.iterator for c in valid_configs(space, stem, h100)}
    assert iterators == set(IteratorAlgorithm)


def test_a_tiny_space(conv_1, h100):
    space = SearchSpace("sm80", (("tile", ("64x64x32",)), ("warps", ("2x2x1", "1x8x1")), ("stages", (3,)),
                                 ("swizzle", (1,)), ("iterator", ("optimized", "few_channels")), ("split_k", (1, 16))))
    assert space.size == 8
    assert [c.name for c in valid_configs(space, conv_1, h100)] == [
        "64x64x32_w2x2x1_s3_sw1_optimized_sk1_a8x4_f16_f16_f32_f32"]
    assert len(list(itertools.islice(all_configs(space, conv_1), 100))) == 8


def test_epilogue_rule_rejects_16_wide_warp_tiles_with_8_element_output(layers, h100):
    problem = layers["r50_s4_3x3_b32"].problem  # f16 output, K=256: 8-element accesses
    narrow = config_for(problem, tile="64x32x32", warps="1x2x1")  # warp tile 64x16
    assert any("epilogue" in reason for reason in static_problems(narrow, problem, h100))


def test_epilogue_rule_keeps_16_wide_warp_tiles_with_f32_output(conv_1, h100):
    narrow = config_for(conv_1, tile="64x32x32", warps="1x2x1")  # f32 output: 4-element accesses
    assert not static_problems(narrow, conv_1, h100)


def test_128_wide_warp_tiles_with_f16_output_are_rejected(layers, h100):
    problem = layers["r50_s4_3x3_b32"].problem
    wide = config_for(problem, tile="64x128x32", warps="2x1x1")  # warp tile 32x128
    assert any("wrong results" in reason for reason in static_problems(wide, problem, h100))


def test_a_warp_tile_of_one_instruction_step_in_k_is_refused(conv_1, h100):
    """Tile K 16 with one warp in K: one mma.sync step of K 16, which CUTLASS's pipelined mainloop
    refuses at compile time (mma_base.h: at least two warp-level GEMMs, an even number)."""
    from tuner.search.space import static_problems

    one_step = config_for(conv_1, tile="128x64x16", warps="2x2x1")
    assert any("needs an even number, at least two" in r for r in static_problems(one_step, conv_1, h100))
    two_steps = config_for(conv_1, tile="128x64x32", warps="2x2x1")
    assert not any("instruction step" in r for r in static_problems(two_steps, conv_1, h100))
