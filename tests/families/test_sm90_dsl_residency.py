"""The clusters a 132-SM Hopper is sure to hold at once (tuner/families/sm90_dsl/residency.py), and the cost model's
second wave for a grid of more."""
import itertools

from conftest import H100
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.sm90_dsl.residency import GPCS, MAX_TPCS_PER_GPC, TPCS, resident_clusters
from tuner.families.sm90_dsl.space import make_config

LATE_GEMM_B1 = ConvProblem(n=1, h=7, w=7, c=2048, k=512, r=1, s=1)  # 49 pixels, 32 k tiles
FAMILY = registry.get("sm90_dsl")


def test_the_fewest_clusters_over_every_spread_of_the_tpcs():
    assert [resident_clusters(size) for size in (1, 2, 4, 8)] == [132, 66, 29, 13]
    # the brute force over every spread of 66 TPCs in 8 GPCs of at most 9 (sorted: the order of GPCs is irrelevant)
    spreads = [s for s in itertools.combinations_with_replacement(range(MAX_TPCS_PER_GPC + 1), GPCS) if sum(s) == TPCS]
    for size in range(2, 9):
        assert resident_clusters(size) == min(sum(2 * t // size for t in s) for s in spreads), size
    # one chip the H200's measurements fit (fewer than 32 clusters of 4 and 16 of 8): four GPCs of 9 TPCs, two of 8,
    # two of 7
    assert sum(2 * t // 4 for t in (9, 9, 9, 9, 8, 8, 7, 7)) == 30 > resident_clusters(4)


def test_a_grid_of_more_clusters_than_fit_costs_the_model_a_second_wave(monkeypatch):
    from tuner.search.costmodel import predicted_us

    def params(tile, splits):
        return {"tile": tile, "cluster": "1x1x1", "schedule": "single", "stages": 0, "raster": "m", "swizzle": 1,
                "tile_q": 0, "split_k": splits, "split_reduce": "cluster"}
    many = make_config(LATE_GEMM_B1, params("64x16x64", 4))  # 32 tiles: 32 clusters of 4
    few = make_config(LATE_GEMM_B1, params("64x32x64", 4))   # 16
    for config, clusters in ((many, 32), (few, 16)):
        terms = FAMILY.model.cost_terms(config, LATE_GEMM_B1, H100)
        assert terms.cluster_size == 4 and terms.clusters_at_once == 29
        assert config.work_tiles * config.split_k // terms.cluster_size == clusters
    two_waves = predicted_us(many, LATE_GEMM_B1, H100)
    monkeypatch.setattr("tuner.families.sm90_dsl.costmodel.resident_clusters", lambda size: 132 // size)
    assert predicted_us(many, LATE_GEMM_B1, H100) < two_waves  # were all 32 to fit: one wave
