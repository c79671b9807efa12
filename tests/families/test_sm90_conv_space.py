"""The sm90_conv family's space: parsing its YAML file, the static rules at their boundaries (the shared-memory
numbers were measured by compiling the configurations), the layers it refuses and the padded problem."""
import dataclasses

import pytest
import yaml

from conftest import REPO
from tuner.families.base import SearchSpace, Shape3, SpaceError
from tuner.families.sm90_conv.space import (
    AUTO_STAGES,
    MAX_TILE_MN,
    SMEM_CAPACITY,
    EpilogueSchedule,
    Sm90ConvConfig,
    k_steps,
    kernel_problem,
    launch_args,
    layer_problem,
    make_config,
    parse_space,
    static_problems,
)
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.search.space import all_configs, load_space, valid_configs

SPACE_FILE = REPO / "search_spaces" / "sm90_conv.yaml"
LANDSCAPE_FILE = REPO / "search_spaces" / "sm90_conv_landscape.yaml"


def problem(**fields) -> ConvProblem:
    base = dict(n=1, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)  # f16 output
    return ConvProblem(**{**base, **fields})


def params(tile="128x128x64", cluster="1x1x1", stages=0, epilogue="tma") -> dict:
    return {"tile": tile, "cluster": cluster, "stages": stages, "epilogue": epilogue}


def config(prob: ConvProblem | None = None, **overrides) -> Sm90ConvConfig:
    return make_config(prob or problem(), params(**overrides))


def reasons_of(cfg: Sm90ConvConfig, device, prob: ConvProblem | None = None) -> list[str]:
    return static_problems(cfg, prob or problem(), device)


def only_problem(cfg: Sm90ConvConfig, device, prob: ConvProblem | None = None) -> str:
    reasons = reasons_of(cfg, device, prob)
    assert len(reasons) == 1, reasons
    return reasons[0]


def space_document(**changes) -> dict:
    document = yaml.safe_load(SPACE_FILE.read_text())
    for key, value in changes.items():
        if value is None:
            del document[key]
        else:
            document[key] = value
    return document


# --- the search-space file ----------------------------------------------------------------------

def test_repository_space():
    space = load_space(SPACE_FILE)
    assert space.family == "sm90_conv"
    assert space == parse_space(yaml.safe_load(SPACE_FILE.read_text()))
    choices = space.choices
    assert list(choices) == ["tile", "cluster", "stages", "epilogue"]
    assert "128x128x64" in choices["tile"] and "64x64x16" in choices["tile"]
    assert all(Shape3.parse(t).text == t for t in choices["tile"] + choices["cluster"])
    assert choices["cluster"] == ("1x1x1", "2x1x1", "1x2x1", "2x2x1")
    assert choices["stages"] == (0, 3, 4, 5, 6)
    assert choices["epilogue"] == ("tma", "nosmem")
    expected = 1
    for values in choices.values():
        expected *= len(values)
    assert space.size == expected == sum(1 for _ in all_configs(space, problem()))


def test_landscape_is_a_slice_of_the_space():
    space, landscape = load_space(SPACE_FILE), load_space(LANDSCAPE_FILE)
    assert landscape.family == "sm90_conv"
    for knob, values in landscape.choices.items():
        assert set(values) <= set(space.choices[knob]), knob


def test_parse_space_deduplicates_and_sorts():
    space = parse_space(space_document(stages=[5, 0, 5], tile=["64x64x64", "64X64X64", "128x64x64"],
                                       epilogue=["nosmem", "nosmem"]))
    assert space.choices["stages"] == (0, 5)
    assert space.choices["tile"] == ("64x64x64", "128x64x64")
    assert space.choices["epilogue"] == ("nosmem",)


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(swizzle=[1]), ["unknown swizzle"]),
        (dict(stages=None), ["missing stages"]),
        (dict(cluster=None, extra=1), ["missing cluster", "unknown extra"]),
        (dict(family="sm90_gemm"), ["'sm90_gemm'", "'sm90_conv'"]),
        (dict(tile=["128x128"]), ["'128x128'", "128x128x64"]),
        (dict(tile=["128x128x0"]), ["'128x128x0'"]),
        (dict(tile=["128x128x64; system()"]), ["128x128x64; system()"]),
        (dict(cluster=["2x1"]), ["'2x1'"]),
        (dict(stages=[1]), ["stages value 1", "0 for auto"]),
        (dict(stages=[33]), ["stages value 33"]),
        (dict(stages=[-1]), ["stages value -1"]),
        (dict(stages=[True]), ["stages value True"]),
        (dict(stages=["4"]), ["stages value '4'"]),
        (dict(stages=[3.5]), ["stages value 3.5"]),
        (dict(epilogue=["auto"]), ["epilogue value 'auto'", "tma", "nosmem"]),
        (dict(epilogue=[]), ["'epilogue' must be a non-empty list"]),
        (dict(tile=[]), ["'tile' must be a non-empty list"]),
        (dict(stages=4), ["'stages' must be a non-empty list"]),
        (dict(cluster="1x1x1"), ["'cluster' must be a non-empty list"]),
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
        parse_space(["family", "sm90_conv"])


# --- the static rules, each on a configuration built to break it ---------------------------------

def test_reference_tile_is_valid(h100):
    assert reasons_of(config(), h100) == []
    assert reasons_of(config(tile="64x256x64", cluster="2x2x1", epilogue="nosmem"), h100) == []


@pytest.mark.parametrize("tile", ["32x64x64", "96x64x64", "320x32x64"])
def test_tile_m_must_be_a_multiple_of_64(h100, tile):
    reason = only_problem(config(tile=tile), h100)
    assert f"tile M={Shape3.parse(tile).m}" in reason and "64" in reason


@pytest.mark.parametrize("tile", ["64x24x64", "64x40x64", "64x272x64", "64x512x64"])
def test_tile_n_must_be_a_multiple_of_16_up_to_256(h100, tile):
    reason = only_problem(config(tile=tile), h100)
    assert f"tile N={Shape3.parse(tile).n}" in reason and "up to 256" in reason


@pytest.mark.parametrize("tile", ["64x64x8", "64x64x24", "64x64x256"])
def test_tile_k_must_be_a_multiple_of_16_up_to_128(h100, tile):
    reason = only_problem(config(tile=tile), h100)
    assert f"tile K={Shape3.parse(tile).k}" in reason and "multiple of 16" in reason


def test_tile_n_boundaries_pass(h100):
    for tile in ("64x16x64", "64x48x64", "64x256x32"):
        assert reasons_of(config(tile=tile), h100) == [], tile


@pytest.mark.parametrize("tile", ["128x256x64", "256x128x64", "192x128x32"])
def test_more_than_128x128_accumulators_spill(h100, tile):
    m, n = Shape3.parse(tile).m, Shape3.parse(tile).n
    assert m * n > MAX_TILE_MN
    reason = only_problem(config(tile=tile), h100)
    assert f"tile {m}x{n}" in reason and f"{m * n // 128} accumulator registers" in reason and "spill" in reason


def test_128x128_and_64x256_accumulators_fit(h100):
    assert MAX_TILE_MN == 128 * 128
    for tile in ("128x128x32", "64x256x32", "256x64x64"):
        assert reasons_of(config(tile=tile), h100) == [], tile


@pytest.mark.parametrize("cluster", ["3x1x1", "1x3x1", "4x4x1", "1x1x2", "8x2x1", "16x1x1"])
def test_cluster_shape(h100, cluster):
    reason = only_problem(config(tile="64x64x64", cluster=cluster), h100)
    assert f"cluster {cluster}" in reason and "powers of two" in reason


def test_largest_portable_clusters_pass(h100):
    for cluster in ("8x1x1", "1x8x1", "4x2x1", "2x4x1"):
        assert reasons_of(config(tile="128x128x64", cluster=cluster), h100) == [], cluster


def test_filter_multicast_must_split_tile_n_evenly(h100):
    # cluster M=4 multicasts the filters: tile N=16 splits into rows of 4
    reason = only_problem(config(tile="64x16x64", cluster="4x1x1"), h100)
    assert "filters multicast over cluster M=4" in reason and "tile N=16" in reason
    assert reasons_of(config(tile="64x32x64", cluster="4x1x1"), h100) == []  # rows of 8


def test_activation_multicast_must_split_tile_m_evenly(h100):
    # a tile M that is no wgmma size (72) is also one the activation multicast over N=2 splits unevenly (36 rows)
    reasons = reasons_of(config(tile="72x64x64", cluster="1x2x1"), h100)
    assert len(reasons) == 2
    assert "tile M=72" in reasons[0]
    assert "activations multicast over cluster N=2" in reasons[1] and "tile M=72" in reasons[1]


def test_explicit_stages_that_do_not_fit(h100):
    # measured by compiling: 128x128x64 f16, TMA epilogue
    eight, seven = config(stages=8), config(stages=7)
    assert (eight.stage_count, eight.smem_bytes) == (8, 262656)
    assert (seven.stage_count, seven.smem_bytes) == (7, 229888)
    assert seven.smem_bytes <= SMEM_CAPACITY < eight.smem_bytes
    assert reasons_of(seven, h100) == []
    reason = only_problem(eight, h100)
    assert "8 stages need 262656 bytes" in reason and str(SMEM_CAPACITY) in reason


def test_a_residual_kernel_keeps_the_epilogue_beside_the_stages(h100):
    """The early-residual kernel (templates/early_residual.h) stores the epilogue's tensors beside the
    mainloop's, not in a union with them: the explicit stage counts that fit only in the union do not."""
    from tuner.core.epilogue import parse_epilogue

    residual = problem(epilogue=parse_epilogue("scale+bias+residual+relu"))
    seven = config(residual, stages=7)
    assert seven.smem_bytes > config(stages=7).smem_bytes and seven.smem_bytes > SMEM_CAPACITY
    assert "7 stages need" in only_problem(seven, h100, residual)
    auto = config(residual, stages=AUTO_STAGES)  # the carveout leaves the epilogue its room already
    assert auto.smem_bytes <= SMEM_CAPACITY and reasons_of(auto, h100, residual) == []
    no_residual = problem(epilogue=parse_epilogue("scale+bias+relu"))
    assert config(no_residual, stages=7).smem_bytes <= SMEM_CAPACITY  # a union still


def test_a_smaller_opt_in_limit_refuses_what_fits_the_capacity(h100):
    device = dataclasses.replace(h100, smem_optin_per_block=200000)
    assert reasons_of(config(stages=6), device) == []          # 197120 bytes
    assert "229888 bytes" in only_problem(config(stages=7), device)


@pytest.mark.parametrize(
    "tile, epilogue, stages, smem",
    [
        ("128x128x64", "tma", 6, 197120),
        ("64x64x64", "tma", 13, None),
        ("128x64x64", "nosmem", 9, None),
        ("128x128x32", "tma", 13, None),
    ],
)
def test_auto_stage_counts(h100, tile, epilogue, stages, smem):
    """What StageCountAutoCarveout gives, measured by compiling."""
    cfg = config(tile=tile, epilogue=epilogue, stages=AUTO_STAGES)
    assert cfg.stages == AUTO_STAGES
    assert cfg.stage_count == stages
    if smem is not None:
        assert cfg.smem_bytes == smem
    assert cfg.smem_bytes <= SMEM_CAPACITY
    assert reasons_of(cfg, h100) == []


def test_nosmem_epilogue_leaves_more_room_than_tma():
    tma, nosmem = config(tile="128x64x64", epilogue="tma"), config(tile="128x64x64", epilogue="nosmem")
    assert nosmem.epilogue_smem()[0] < tma.epilogue_smem()[0]
    assert nosmem.stage_count >= tma.stage_count


def test_too_few_stages_fit(h100):
    cfg = config(stages=1)  # what no space file can hold, from stored parameters
    assert "at least 2" in only_problem(cfg, h100)


def test_a_type_mix_config_is_refused(h100):
    mixed = problem(input_type=DataType.bf16, filter_type=DataType.bf16)  # bf16 in, f16 out
    reasons = reasons_of(config(mixed), h100, mixed)
    assert reasons and all("write bf16 or f32" in r for r in reasons)


# --- layers no configuration can run ------------------------------------------------------------

def test_resnet_layers_are_runnable(layers):
    for name in ("r50_s2_3x3_b1", "r50_stem_b32", "r50_s3_1x1_256to128_b32", "r50_s4_3x3_s2_b32", "conv_1"):
        assert layer_problem(layers[name].problem) is None, name


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(k=12), ["K=12", "multiple of 8", "f16", "pad K to 16"]),
        (dict(k=33), ["K=33", "pad K to 40"]),
        (dict(k=6, output_type=DataType.f32), ["K=6", "multiple of 4", "f32", "pad K to 8"]),
        (dict(h=300, w=300, r=1, s=1, pad=129), ["pad=129", "128"]),
        (dict(h=64, w=64, r=1, s=1, pad=0, stride=9), ["stride=9", "1 to 8"]),
        (dict(h=300, w=300, r=3, s=3, pad=0, dilation=128), ["(R-1)*dilation=256", "254"]),
        (dict(h=300, w=300, r=1, s=3, pad=0, dilation=128), ["(S-1)*dilation=256", "254"]),
        (dict(h=300, w=300, r=3, s=3, pad=0, dilation=65), ["(R-1)*dilation-pad=130", "upper corner"]),
        (dict(input_type=DataType.bf16, filter_type=DataType.bf16), ["write bf16 or f32", "bf16_bf16_f16_f32"]),
        (dict(input_type=DataType.f32, filter_type=DataType.f32, output_type=DataType.f32), ["f16/bf16/tf32 inputs"]),
        (dict(output_type=DataType.bf16), ["write f16 or f32"]),
    ],
)
def test_layer_problem_refuses(fields, words):
    reason = layer_problem(problem(**fields))
    assert reason is not None
    assert "\n" not in reason
    for word in words:
        assert word in reason, (word, reason)


def test_layer_problem_boundaries():
    assert layer_problem(problem(k=8)) is None
    assert layer_problem(problem(k=12, output_type=DataType.f32)) is None   # 4 f32 outputs make 16 bytes
    assert layer_problem(problem(h=300, w=300, r=1, s=1, pad=128)) is None
    assert layer_problem(problem(h=64, w=64, r=1, s=1, pad=0, stride=8)) is None
    assert layer_problem(problem(h=300, w=300, r=3, s=3, pad=127, dilation=127)) is None  # 254, 127 above the pad


def test_a_refused_layer_is_a_static_problem_of_every_config(h100):
    odd_k = problem(k=12)
    assert any("pad K to 16" in r for r in reasons_of(config(odd_k), h100, odd_k))


# --- the padded problem, launch arguments, K-steps ----------------------------------------------

def test_kernel_problem_pads_c_to_8(layers):
    stem = layers["r50_stem_b1"].problem
    padded = kernel_problem(stem)
    assert padded == dataclasses.replace(stem, c=8)
    assert (padded.p, padded.q) == (stem.p, stem.q)
    assert kernel_problem(problem(c=9)).c == 16
    for c in (8, 64, 128):
        assert kernel_problem(problem(c=c)) is not None and kernel_problem(problem(c=c)) == problem(c=c)
    assert kernel_problem(problem(c=64)).c == 64


def test_launch_args_take_the_padded_c(layers):
    stem = layers["r50_stem_b1"].problem
    args = launch_args(config(stem, tile="64x64x64"), stem)
    assert (args.kernel_channels, args.split_k, args.raster, args.swizzle) == (8, 1, 0, 1)
    assert launch_args(config(), problem()).kernel_channels == 128


def test_k_steps_walk_c_per_filter_tap(layers):
    assert k_steps(config(tile="128x128x64"), problem(c=128)) == 9 * 2
    assert k_steps(config(tile="128x128x32"), problem(c=96)) == 9 * 3
    stem = layers["r50_stem_b1"].problem
    assert k_steps(config(stem, tile="64x64x16"), stem) == 49  # C=3 -> 8: one 16-wide slice a tap


# --- configurations -----------------------------------------------------------------------------

def test_config_names_are_unique_and_round_trip():
    space = load_space(SPACE_FILE)
    prob = problem()
    configs = list(all_configs(space, prob))
    names = [c.name for c in configs]
    assert len(names) == len(set(names)) == space.size
    for cfg in configs:
        assert make_config(prob, cfg.search_params) == cfg
        assert set(cfg.search_params) == set(space.choices)


def test_config_name_and_params():
    cfg = config(tile="64x128x32", cluster="2x1x1", stages=4, epilogue="nosmem")
    assert cfg.name == "sm90c_64x128x32_c2x1x1_s4_nosmem_a8_f16_f16_f16_f32"
    assert config().name == "sm90c_128x128x64_c1x1x1_sauto_tma_a8_f16_f16_f16_f32"
    assert cfg.search_params == params(tile="64x128x32", cluster="2x1x1", stages=4, epilogue="nosmem")
    assert cfg.family == "sm90_conv" and cfg.dtype_key == problem().dtype_key
    f32_out = problem(k=12, output_type=DataType.f32)
    assert config(f32_out).alignment_c == 4


def test_make_config_from_stored_params():
    cfg = make_config(problem(), {"tile": "64x64x64", "cluster": "1x2x1", "stages": "5", "epilogue": "tma"})
    assert (cfg.tile, cfg.cluster, cfg.stages, cfg.epilogue) == (Shape3(64, 64, 64), Shape3(1, 2, 1), 5, EpilogueSchedule.tma)


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(stages=3.9), ["stages=3.9"]),
        (dict(stages=True), ["stages=True"]),
        (dict(epilogue="auto"), ["epilogue='auto'"]),
        (dict(tile="128x128"), ["tile='128x128'"]),
    ],
)
def test_make_config_refuses_malformed_params(changes, words):
    with pytest.raises(SpaceError) as error:
        make_config(problem(), {**params(), **changes})
    for word in words:
        assert word in str(error.value)
    with pytest.raises(SpaceError, match="'cluster' missing"):
        make_config(problem(), {k: v for k, v in params().items() if k != "cluster"})


def test_compiled_is_the_config_itself():
    for cfg in (config(), config(tile="64x64x16", cluster="2x2x1", stages=3, epilogue="nosmem")):
        assert cfg.compiled == cfg
        assert cfg.compiled.name == cfg.name


def test_valid_configs_of_the_space(h100, layers):
    space = load_space(SPACE_FILE)
    prob = layers["r50_s3_3x3_b32"].problem
    valid = valid_configs(space, prob, h100)
    assert 0 < len(valid) < space.size
    assert all(c.tile.m * c.tile.n <= MAX_TILE_MN for c in valid)
    assert all(static_problems(c, prob, h100) == [] for c in valid)
    # a layer no configuration can run has none
    assert valid_configs(space, problem(k=12), h100) == []


def test_a_tiny_space(h100):
    space = SearchSpace("sm90_conv", (("tile", ("128x128x64", "128x256x64")), ("cluster", ("1x1x1", "3x1x1")),
                                      ("stages", (0, 8)), ("epilogue", ("tma",))))
    assert space.size == 8
    assert [c.name for c in valid_configs(space, problem(), h100)] == [
        "sm90c_128x128x64_c1x1x1_sauto_tma_a8_f16_f16_f16_f32"]
