"""The cost model ranks candidates sensibly without compiling anything."""
from __future__ import annotations

from tuner.costmodel import Ceilings, blocks_per_sm, predicted_us, prior_picks, ranked_by_model
from tuner.space import make_config


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


def test_prior_picks_are_valid_distinct_and_varied(conv_1, sm80_space, h100):
    picks = prior_picks(sm80_space, conv_1, h100, 8)
    assert len(picks) == len(set(picks)) == 8
    assert max(sum(1 for p in picks if p.tile == tile) for tile in {p.tile for p in picks}) <= 2
    ranked = ranked_by_model(sm80_space, conv_1, h100)
    assert picks[0] == ranked[0]
