"""The cost model ranks candidates sensibly without compiling anything."""
from __future__ import annotations

import math

import pytest
import yaml

from conftest import H100
from tuner.search.costmodel import (Ceilings, joint_prior_picks, picks_per_family, predicted_us, prior_candidates,
                             prior_picks, ranked_by_model)
from tuner.families import registry
from tuner.families.sm80.space import make_config
from tuner.families.sm80_common.costmodel import PRIOR_STAGES, PRIOR_SWIZZLE, blocks_per_sm
from tuner.families.sm80_common.space import IteratorAlgorithm
from tuner.search.space import (JointSpace, default_space_file, landscape_space_file, load_space, static_problems,
                         valid_configs)


def params(tile: str, warps: str = "2x2x1", stages: int = 3, split_k: int = 1) -> dict:
    return {"tile": tile, "warps": warps, "stages": stages, "swizzle": 1, "iterator": "optimized", "split_k": split_k}


def test_more_work_takes_longer(conv_1, h100, layers):
    config = make_config(conv_1, params("64x64x32"))
    big = layers["r50_s4_3x3_b32"].problem
    assert predicted_us(make_config(big, params("64x64x32")), big, h100) > predicted_us(config, conv_1, h100)


def test_padding_a_tiny_layer_onto_a_huge_tile_costs(conv_1, h100):
    small = predicted_us(make_config(conv_1, params("32x32x32")), conv_1, h100)
    huge = predicted_us(make_config(conv_1, params("128x128x64")), conv_1, h100)
    assert huge > small


def test_each_serial_split_k_slice_costs(conv_1, h100):
    one = predicted_us(make_config(conv_1, params("64x64x32", split_k=1)), conv_1, h100)
    four = predicted_us(make_config(conv_1, params("64x64x32", split_k=4)), conv_1, h100)
    assert four > one


def test_occupancy_from_shared_memory(conv_1, h100):
    reference = make_config(conv_1, params("128x128x64", stages=3))  # 96 KB: 2 per SM by shared memory
    assert blocks_per_sm(reference, h100) == 2


def test_faster_ceilings_predict_faster(layers, h100):
    problem = layers["r50_s4_3x3_b32"].problem
    config = make_config(problem, params("128x128x64"))
    assert predicted_us(config, problem, h100, Ceilings(1400, 6000)) < predicted_us(config, problem, h100)


@pytest.mark.slow
def test_prior_picks_are_valid_distinct_and_varied(conv_1, sm80_space, h100):
    picks = prior_picks(sm80_space, conv_1, h100, 8)
    assert len(picks) == len(set(picks)) == 8
    assert max(sum(1 for p in picks if p.tile == tile) for tile in {p.tile for p in picks}) <= 2
    assert picks[0] == prior_candidates(sm80_space, conv_1, h100)[0]


def test_prior_candidates_rank_only_the_fitted_configurations_in_the_whole_rankings_order(conv_1, sm80_space, h100):
    family = registry.get(sm80_space.family)
    ranked = ranked_by_model(sm80_space, conv_1, h100)
    orders = {config: family.model.prior_order(config, conv_1) for config in ranked}
    fitted = [config for config in ranked if orders[config] is not None]
    assert 0 < len(fitted) < len(ranked)
    assert prior_candidates(sm80_space, conv_1, h100) == sorted(fitted, key=lambda c: orders[c])


@pytest.mark.slow
def test_prior_keeps_the_knobs_the_model_cannot_see_at_the_fitted_values(conv_1, sm80_space, h100):
    picks = prior_picks(sm80_space, conv_1, h100, 8)
    assert all(p.stages in PRIOR_STAGES and p.swizzle == PRIOR_SWIZZLE for p in picks)
    assert all(p.iterator is IteratorAlgorithm.optimized for p in picks)
    # ...while the ranking over the whole space has other stage counts and swizzles tied with them
    ranked = ranked_by_model(sm80_space, conv_1, h100)
    assert {c.swizzle for c in ranked[:40]} != {PRIOR_SWIZZLE}


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_prior_for_few_channels_takes_the_channel_iterator(layers, sm80_space, h100):
    stem = layers["r50_stem_b1"].problem
    assert {p.iterator for p in prior_picks(sm80_space, stem, h100, 8)} == {IteratorAlgorithm.fixed_channels}


def test_single_warp_blocks_leave_tensor_cores_idle(layers, h100):
    problem = layers["r50_s5_3x3_b1"].problem  # fewer blocks than SMs: one block per SM
    one_warp = make_config(problem, params("64x64x64", warps="1x1x1"))
    four_warps = make_config(problem, params("64x64x64", warps="2x2x1"))
    assert predicted_us(one_warp, problem, h100) > predicted_us(four_warps, problem, h100)


def test_joint_prior_gives_every_family_its_share(conv_1, sm80_space, h100):
    assert picks_per_family(8, 1) == 8 and picks_per_family(8, 2) == 4 and picks_per_family(8, 3) == 3
    assert picks_per_family(0, 3) == 0
    joint = JointSpace((sm80_space,))
    assert joint_prior_picks(joint, conv_1, h100, 8) == prior_picks(sm80_space, conv_1, h100, 8)


# --- the sm90 families ----------------------------------------------------------------------------

ALL_FAMILIES = ("sm80", "sm90_conv", "sm90_gemm")


@pytest.fixture(scope="module")
def joint_space() -> JointSpace:
    return JointSpace(tuple(load_space(default_space_file(family)) for family in ALL_FAMILIES))


def assert_picks_are_sound(picks, problem, device) -> None:
    assert len(picks) == len(set(picks))
    for pick in picks:
        assert static_problems(pick, problem, device) == [], pick.name
    for family in {p.family for p in picks}:
        tiles = [p.tile for p in picks if p.family == family]
        assert max(tiles.count(tile) for tile in tiles) <= 2, family


# The joint prior over three families' whole spaces: about 12 s on 2 cores, so its tests are marked slow.
@pytest.fixture(scope="module")
def one_by_one_picks(layers, joint_space):
    problem = layers["r50_s3_1x1_256to128_b32"].problem
    return problem, joint_prior_picks(joint_space, problem, H100, 8)


@pytest.mark.slow
def test_joint_prior_picks_for_a_1x1_layer_take_every_family(one_by_one_picks, h100):
    problem, picks = one_by_one_picks
    each = picks_per_family(8, 3)
    assert each == 3
    assert [p.family for p in picks] == [f for f in ALL_FAMILIES for _ in range(each)]
    assert_picks_are_sound(picks, problem, h100)


@pytest.mark.slow
def test_joint_prior_picks_for_a_3x3_layer_have_no_gemm(layers, joint_space, h100):
    problem = layers["r50_s3_3x3_b32"].problem
    picks = joint_prior_picks(joint_space, problem, h100, 8)
    assert {p.family for p in picks} == {"sm80", "sm90_conv"}
    assert_picks_are_sound(picks, problem, h100)


@pytest.mark.slow
def test_sm90_prior_picks_keep_unmodelled_knobs_at_the_generator_values(one_by_one_picks):
    _, picks = one_by_one_picks
    for pick in picks:
        if pick.family == "sm90_gemm":
            assert (pick.stages, pick.raster, pick.swizzle, pick.epilogue.value) == (0, 0, 1, "tma"), pick.name
        if pick.family == "sm90_conv":
            assert pick.stages == 0, pick.name


@pytest.mark.parametrize("family", ["sm90_conv", "sm90_gemm"])
def test_predicted_us_is_finite_and_positive_on_the_sm90_landscapes(layers, h100, family):
    landscape = load_space(landscape_space_file(family))
    checked = 0
    for name in ("conv_1", "r50_stem_b1", "r50_s3_1x1_256to128_b32", "r50_s5_1x1_2048to512_b1", "r50_s4_3x3_s2_b32",
                 "r50_s2_1x1_64to64_b32"):
        problem = layers[name].problem
        for config in valid_configs(landscape, problem, h100):
            us = predicted_us(config, problem, h100)
            assert math.isfinite(us) and us > 0, (name, config.name, us)
            assert registry.family_of(config).model.cost_terms(config, problem, h100).blocks_per_sm >= 1
            checked += 1
    assert checked >= landscape.size  # every configuration on at least one layer's worth


@pytest.mark.slow
def test_sm90_gemm_prior_keeps_the_auto_epilogue_subtile(layers, h100):
    """A space offering explicit subtiles (the cost model cannot see them) still gets CUTLASS's auto one."""
    document = yaml.safe_load(default_space_file("sm90_gemm").read_text())
    space = registry.get("sm90_gemm").rules.parse_space({**document, "epilogue_n": [0, 64, 128]})
    problem = layers["r50_s5_1x1_512to2048_b32"].problem
    picks = prior_picks(space, problem, h100, 8)
    assert len(picks) == 8 and {p.epilogue_n for p in picks} == {0}
