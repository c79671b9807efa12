"""tuner/search/refine.py: a study's finalists tried in the other choices of their family's refined knobs (sm90_dsl's
epilogue staging), and the study that holds those knobs at their first choice (space.layer_space)."""
from conftest import H100
from tuner.families.base import SearchSpace
from tuner.core.problem import ConvProblem
from tuner.core.status import Status
from tuner.pipeline.tuning import finalist_configs
from tuner.search.refine import refined_variants
from tuner.search.space import layer_space, load_space, make_config, studied
from tuner.search.trials import TrialRecord
from conftest import REPO

EXPAND = ConvProblem(n=8, h=112, w=112, c=16, k=96, r=1, s=1)  # EfficientNet's C16 expand: memory-bound
PARAMS = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
          "swizzle": 1, "tile_q": 0, "split_k": 1, "epi_columns": 32, "epi_buffers": 2, "epi_store": "tma"}


def staging_space(columns=(32, 64), buffers=(2, 4), stores=("tma",)) -> SearchSpace:
    return SearchSpace("sm90_dsl", tuple((knob, (value,)) for knob, value in PARAMS.items()
                                         if not knob.startswith("epi_")) + (("epi_columns", columns),
                                                                            ("epi_buffers", buffers),
                                                                            ("epi_store", stores)))


def staging(config) -> tuple[int, int]:
    return config.epi_columns, config.epi_buffers


def test_a_finalist_is_tried_in_every_other_staging_the_space_offers():
    config = make_config(EXPAND, "sm90_dsl", PARAMS)
    variants = refined_variants(config, staging_space(), EXPAND, H100)
    assert [staging(v) for v in variants] == [(32, 4), (64, 2), (64, 4)]
    assert all(v.tile == config.tile and v.schedule == config.schedule for v in variants)


def test_the_direct_store_is_one_variant_whatever_the_staging():
    config = make_config(EXPAND, "sm90_dsl", PARAMS)
    variants = refined_variants(config, staging_space(stores=("tma", "direct")), EXPAND, H100)
    assert [(staging(v), v.epi_store.value) for v in variants] == [
        ((32, 2), "direct"), ((32, 4), "tma"), ((64, 2), "tma"), ((64, 4), "tma")]


def test_the_l2_hints_are_refined_with_the_staging():
    config = make_config(EXPAND, "sm90_dsl", PARAMS)
    space = SearchSpace("sm90_dsl", staging_space(buffers=(2,)).choices_items + (("l2_hints", ("none", "stream")),))
    variants = refined_variants(config, space, EXPAND, H100)
    assert [(staging(v), v.l2_hints.value) for v in variants] == [
        ((32, 2), "stream"), ((64, 2), "none"), ((64, 2), "stream")]
    assert all("_l2s_" in v.name for v in variants if v.l2_hints.value == "stream")


def test_a_staging_that_names_the_same_kernel_or_does_not_fit_is_not_a_variant():
    # tile N 96: 64 columns do not divide it, so 64 is the kernel of 32 columns, the finalist itself or its 4-buffer one
    narrow = make_config(EXPAND, "sm90_dsl", {**PARAMS, "tile": "128x96x64"})
    assert [staging(v) for v in refined_variants(narrow, staging_space(), EXPAND, H100)] == [(32, 4)]
    # pingpong 128x128 in 4 stages: 4 buffers of 64 columns a group leave no room (the static checks say so)
    full = make_config(EXPAND, "sm90_dsl", {**PARAMS, "schedule": "pingpong", "stages": 4})
    assert (64, 4) not in [staging(v) for v in refined_variants(full, staging_space(), EXPAND, H100)]


def test_a_space_of_one_staging_or_a_family_that_refines_nothing_adds_none(conv_1, sm80_space):
    config = make_config(EXPAND, "sm90_dsl", PARAMS)
    assert refined_variants(config, staging_space((32,), (2,)), EXPAND, H100) == []
    sm80 = make_config(conv_1, "sm80", {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1,
                                       "iterator": "optimized", "split_k": 1})
    assert refined_variants(sm80, sm80_space, conv_1, H100) == []


def test_the_finalists_variants_follow_each_and_are_labelled_after_it():
    best = [TrialRecord(0, make_config(EXPAND, "sm90_dsl", PARAMS), Status.ok, 10.0, {}),
            TrialRecord(1, make_config(EXPAND, "sm90_dsl", {**PARAMS, "tile": "128x96x64"}), Status.ok, 11.0, {})]
    finalists = finalist_configs(best, 2, None, None, EXPAND, H100, spaces=(staging_space(),))
    assert [label for label, _ in finalists] == ["#1", "#1.1", "#1.2", "#1.3", "#2", "#2.1"]
    assert [label for label, _ in finalist_configs(best, 2, None, None, EXPAND, H100)] == ["#1", "#2"]


def test_a_study_holds_the_refined_knobs_at_their_first_choice():
    space = load_space(REPO / "search_spaces" / "sm90_dsl.yaml")
    assert space.choices["epi_columns"] == (32, 64) and space.choices["epi_buffers"] == (2, 4)
    held = studied(space)
    assert held.choices["epi_columns"] == (32,) and held.choices["epi_buffers"] == (2,)
    assert held.choices["epi_store"] == ("tma",) == space.choices["epi_store"]
    assert held.choices["l2_hints"] == ("none",) and space.choices["l2_hints"] == ("none", "stream")
    refined = ("epi_columns", "epi_buffers", "epi_store", "l2_hints")
    assert held.size * 8 == space.size and {k: v for k, v in held.choices.items() if k not in refined} == {
        k: v for k, v in space.choices.items() if k not in refined}
    assert layer_space((space,), EXPAND, H100).space("sm90_dsl").choices["epi_buffers"] == (2,)


def test_a_refined_kernel_seeds_a_study_as_the_configuration_that_study_can_ask_for(conv_1, sm80_space):
    """Another GPU's best.yaml (sibling_seeds) or a twin's study may hold a kernel refined after its study: seeded
    as is, the study (which holds the staging) could not ask for it, and the seed was dropped."""
    space = load_space(REPO / "search_spaces" / "sm90_dsl.yaml")
    joint = layer_space((space, sm80_space), EXPAND, H100)
    refined = {**PARAMS, "epi_columns": 64, "epi_buffers": 4}
    assert not joint.contains(make_config(EXPAND, "sm90_dsl", refined))
    held = make_config(EXPAND, "sm90_dsl", joint.held("sm90_dsl", refined))
    assert joint.contains(held) and staging(held) == (32, 2) and held.tile == make_config(EXPAND, "sm90_dsl", refined).tile
    sm80 = {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1}
    assert joint.held("sm80", sm80) == sm80 and joint.held("sm90_conv", refined) == refined


def test_the_previous_best_is_refined_too_and_a_variant_already_chosen_is_not_added_twice():
    """On the H200 every retuned layer kept its previous kernel, whose staging the A/B had improved: it is refined
    as the study's top is."""
    from tuner.store.schema import BestEntry
    top = make_config(EXPAND, "sm90_dsl", PARAMS)
    kept = {**PARAMS, "tile": "256x128x64", "cluster": "2x1x1"}
    previous = BestEntry(EXPAND, "sm90_dsl", tuple(kept.items()), make_config(EXPAND, "sm90_dsl", kept).name, 10.4)
    finalists = finalist_configs([TrialRecord(0, top, Status.ok, 12.6, {})], 2, None, previous, EXPAND, H100,
                                 spaces=(staging_space(),))
    labels = [label for label, _ in finalists]
    assert labels[:4] == ["#1", "#1.1", "#1.2", "#1.3"] and labels[4] == "previous"
    assert all(label.startswith("previous.") for label in labels[5:]) and len(labels) > 5
    assert len({c.config for _, c in finalists}) == len(finalists)
    # a previous best that is a variant of the top already is not measured twice
    again = BestEntry(EXPAND, "sm90_dsl", tuple({**PARAMS, "epi_buffers": 4}.items()), "x", 10.0)
    labels = [label for label, _ in finalist_configs([TrialRecord(0, top, Status.ok, 12.6, {})], 1, None, again,
                                                     EXPAND, H100, spaces=(staging_space(),))]
    assert labels == ["#1", "#1.1", "#1.2", "#1.3"]
