"""The generic space module: space files of any family, the joint space of a study, its stored parameters and
the families a layer allows."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from conftest import H100
from tuner.families import registry
from tuner.families.base import SearchSpace, SpaceError
from tuner.core.problem import ConvProblem
from tuner.search.space import (
    FAMILY_PARAM,
    MAX_SPACE_BYTES,
    SPACES,
    JointSpace,
    config_from_params,
    default_space_file,
    joint_params,
    joint_valid_configs,
    landscape_space_file,
    layer_space,
    load_space,
    make_config,
    split_params,
    static_problems,
)

A100 = dataclasses.replace(H100, name="NVIDIA A100-SXM4-80GB", cc_major=8, cc_minor=0, sm_count=108,
                           smem_optin_per_block=166912, smem_per_sm=167936)
ONE_BY_ONE = ConvProblem(n=32, h=28, w=28, c=256, k=128, r=1, s=1)
THREE_BY_THREE = ConvProblem(n=32, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)
LAYER_TABLES = ("layers.yaml", "suite.yaml")  # the hand-written table and the generalisation suite
SPACE_FILES = sorted(p for p in SPACES.glob("*.yaml") if p.name not in LAYER_TABLES)

PARAMS = {
    "sm80": {"tile": "64x64x32", "warps": "2x2x1", "stages": 4, "swizzle": 2, "iterator": "analytic", "split_k": 2},
    "sm90_conv": {"tile": "128x64x64", "cluster": "2x1x1", "stages": 0, "epilogue": "nosmem"},
    "sm90_gemm": {"tile": "256x128x64", "cluster": "1x2x1", "schedule": "cooperative", "scheduler": "stream_k",
                  "epilogue": "tma", "stages": 4, "raster": 2, "swizzle": 4, "split_k": 2,
                  "swap_ab": True, "epilogue_n": 0},
}


@pytest.fixture(scope="module")
def spaces() -> dict[str, SearchSpace]:
    return {family: load_space(default_space_file(family)) for family in registry.names()}


def one_line_error(path) -> str:
    with pytest.raises(SpaceError) as error:
        load_space(path)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- space files --------------------------------------------------------------------------------

def test_every_family_has_its_space_and_landscape_files():
    assert {p.name for p in SPACE_FILES} == {f"{f}.yaml" for f in registry.names()} | {
        f"{f}_landscape.yaml" for f in registry.names()}
    for family in registry.names():
        assert default_space_file(family).exists() and landscape_space_file(family).exists()


@pytest.mark.parametrize("path", SPACE_FILES, ids=lambda p: p.name)
def test_load_space_returns_the_family_named_in_the_file(path):
    named = yaml.safe_load(path.read_text())["family"]
    space = load_space(path)
    assert space.family == named
    assert path.name.startswith(named)
    assert space == registry.get(named).rules.parse_space(yaml.safe_load(path.read_text()))
    assert list(space.choices) == list(registry.get(named).rules.knobs)
    assert space.size > 0


def test_a_file_without_family_is_refused(tmp_path):
    message = one_line_error(SPACES / "layers.yaml")  # a YAML mapping, but no search space
    assert "'family:' key" in message and "sm80, sm80_depthwise, sm80_dgrad, sm80_group, sm90_conv, sm90_dsl, sm90_gemm" in message
    document = yaml.safe_load(default_space_file("sm90_conv").read_text())
    del document["family"]
    path = tmp_path / "nofamily.yaml"
    path.write_text(yaml.safe_dump(document))
    assert "'family:' key" in one_line_error(path)
    for text in ("family: 90\n", "- family: sm80\n", "just text\n", ""):
        path.write_text(text)
        assert "'family:' key" in one_line_error(path), text


def test_an_unknown_family_is_refused(tmp_path):
    path = tmp_path / "sm70.yaml"
    path.write_text("family: sm70\ntile: [128x128x32]\n")
    message = one_line_error(path)
    assert "unknown kernel family 'sm70'" in message and "sm90_gemm" in message


def test_a_directory_is_refused(tmp_path):
    message = one_line_error(tmp_path)
    assert "is a directory" in message and "pass a YAML file" in message


@pytest.mark.parametrize("content, words", [
    (b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00" * 64, "cannot be read (UnicodeDecodeError)"),  # not UTF-8
    (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 64, "not valid YAML"),                         # UTF-8 with NULs
])
def test_a_binary_file_is_refused(tmp_path, content, words):
    path = tmp_path / "kernel.so"
    path.write_bytes(content)
    message = one_line_error(path)
    assert str(path) in message and words in message


def test_a_missing_file_invalid_yaml_and_a_huge_file_are_refused(tmp_path):
    assert "not found" in one_line_error(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: sm90_gemm\ntile: [128x128x64\n")
    assert "not valid YAML" in one_line_error(bad)
    huge = tmp_path / "huge.yaml"
    huge.write_text("family: sm80\n" + "#" * MAX_SPACE_BYTES)
    assert "over 1 MB" in one_line_error(huge)


def test_a_family_refuses_its_own_bad_values_through_load_space(tmp_path):
    document = yaml.safe_load(default_space_file("sm90_gemm").read_text())
    document["swizzle"] = [3]
    path = tmp_path / "bad_swizzle.yaml"
    path.write_text(yaml.safe_dump(document))
    assert "swizzle value 3" in one_line_error(path)


# --- the joint space ----------------------------------------------------------------------------

def test_joint_space(spaces):
    joint = JointSpace(tuple(spaces.values()))
    assert joint.families == ("dsl_direct", "sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group", "sm90_conv",
                              "sm90_dsl", "sm90_gemm", "sm90_s2d")
    assert joint.key == ("families=dsl_direct+sm80+sm80_depthwise+sm80_dgrad+sm80_group+sm90_conv+sm90_dsl+sm90_gemm"
                         "+sm90_s2d")
    assert joint.size == sum(s.size for s in spaces.values())
    for family, space in spaces.items():
        assert joint.space(family) is space
    assert joint.only(("sm90_gemm",)).families == ("sm90_gemm",)
    with pytest.raises(SpaceError, match="'sm70' is not in this study"):
        joint.space("sm70")


def test_joint_space_refuses_empty_and_duplicates(spaces):
    with pytest.raises(SpaceError, match="at least one"):
        JointSpace(())
    with pytest.raises(SpaceError, match="two search spaces for one family"):
        JointSpace((spaces["sm90_conv"], spaces["sm80"], spaces["sm90_conv"]))
    with pytest.raises(SpaceError, match="at least one"):
        JointSpace((spaces["sm80"],)).only(("sm90_gemm",))


@pytest.mark.parametrize("family", sorted(PARAMS))
def test_params_round_trip(family):
    config = make_config(ONE_BY_ONE, family, PARAMS[family])
    stored = joint_params(config)
    assert stored[FAMILY_PARAM] == family
    assert stored == {FAMILY_PARAM: family, **{f"{family}.{k}": v for k, v in PARAMS[family].items()}}
    assert split_params(stored) == (family, PARAMS[family])
    assert config_from_params(ONE_BY_ONE, stored) == config
    # another family's knobs in the same stored dict (as Optuna keeps them) are ignored
    others = {k: v for f in PARAMS if f != family
              for k, v in joint_params(make_config(ONE_BY_ONE, f, PARAMS[f])).items() if k != FAMILY_PARAM}
    assert config_from_params(ONE_BY_ONE, {**others, **stored}) == config


def test_knob_names_of_families_never_clash():
    names = [name for f in PARAMS for name in joint_params(make_config(ONE_BY_ONE, f, PARAMS[f]))
             if name != FAMILY_PARAM]
    assert len(names) == len(set(names))


def test_split_params_needs_a_family():
    with pytest.raises(SpaceError, match="name no family"):
        split_params({"sm80.tile": "64x64x32"})
    with pytest.raises(SpaceError, match="unknown kernel family 'sm70'"):
        config_from_params(ONE_BY_ONE, {FAMILY_PARAM: "sm70", "sm70.tile": "64x64x32"})
    with pytest.raises(SpaceError, match="'epilogue' missing"):
        config_from_params(ONE_BY_ONE, {FAMILY_PARAM: "sm90_conv", "sm90_conv.tile": "64x64x64",
                                        "sm90_conv.cluster": "1x1x1", "sm90_conv.stages": 0})


def test_contains(spaces):
    joint = JointSpace(tuple(spaces.values()))
    conv = make_config(THREE_BY_THREE, "sm90_conv", PARAMS["sm90_conv"])
    gemm = make_config(ONE_BY_ONE, "sm90_gemm", PARAMS["sm90_gemm"])
    assert joint.contains(conv) and joint.contains(gemm)
    assert joint.contains(make_config(THREE_BY_THREE, "sm80", PARAMS["sm80"]))
    outside = [
        make_config(ONE_BY_ONE, "sm90_gemm", {**PARAMS["sm90_gemm"], "split_k": 8}),
        make_config(ONE_BY_ONE, "sm90_gemm", {**PARAMS["sm90_gemm"], "tile": "192x128x64"}),
        make_config(ONE_BY_ONE, "sm90_conv", {**PARAMS["sm90_conv"], "stages": 7}),
        make_config(ONE_BY_ONE, "sm90_conv", {**PARAMS["sm90_conv"], "cluster": "4x1x1"}),
        make_config(ONE_BY_ONE, "sm80", {**PARAMS["sm80"], "split_k": 3}),
    ]
    for config in outside:
        assert not joint.contains(config), config.name
    assert not joint.only(("sm80", "sm90_conv")).contains(gemm)  # a family outside the study


# --- the families a layer allows ----------------------------------------------------------------

def test_layer_space_keeps_the_families_that_can_run_the_layer(spaces):
    everything = tuple(spaces.values())
    assert layer_space(everything, ONE_BY_ONE, H100).families == ("sm80", "sm90_conv", "sm90_dsl", "sm90_gemm")
    assert layer_space(everything, THREE_BY_THREE, H100).families == ("sm80", "sm90_conv", "sm90_dsl")
    assert layer_space(everything, ONE_BY_ONE, A100).families == ("sm80",)
    # sm90_conv's TMA store needs K % 8; sm90_dsl stores such a K element by element
    odd_k = ConvProblem(n=1, h=28, w=28, c=64, k=12, r=3, s=3, pad=1)
    assert layer_space(everything, odd_k, H100).families == ("sm80", "sm90_dsl")
    # family-name order, whatever order the spaces come in
    reversed_order = tuple(reversed(everything))
    assert layer_space(reversed_order, ONE_BY_ONE, H100).families == ("sm80", "sm90_conv", "sm90_dsl", "sm90_gemm")


def test_layer_space_says_why_no_family_can(spaces):
    sm90_only = (spaces["sm90_conv"], spaces["sm90_gemm"])
    with pytest.raises(SpaceError) as error:
        layer_space(sm90_only, ONE_BY_ONE, A100)
    message = str(error.value)
    assert "\n" not in message
    assert "no kernel family can run this layer" in message
    assert "sm90_conv: sm90_conv kernels use wgmma" in message and "sm90_gemm: sm90_gemm kernels use wgmma" in message
    assert "8.0" in message
    with pytest.raises(SpaceError) as error:
        layer_space((spaces["sm90_gemm"],), THREE_BY_THREE, H100)
    assert "sm90_gemm: sm90_gemm runs 1x1" in str(error.value)


def test_joint_valid_configs_are_statically_valid(spaces, layers):
    joint = layer_space((spaces["sm90_conv"], spaces["sm90_gemm"]), ONE_BY_ONE, H100)
    landscape = JointSpace(tuple(load_space(landscape_space_file(f)) for f in joint.families))
    valid = joint_valid_configs(landscape, ONE_BY_ONE, H100)
    assert {c.family for c in valid} == {"sm90_conv", "sm90_gemm"}
    assert all(static_problems(c, ONE_BY_ONE, H100) == [] for c in valid)
    assert all(landscape.contains(c) for c in valid)
    assert not any(c.family == "sm90_gemm" for c in joint_valid_configs(landscape, THREE_BY_THREE, H100))


def test_every_narrow_space_loads_and_has_its_docs_row():
    """search_spaces/narrow/: the spaces given with --space-file for one question each, each described
    in docs/narrow-spaces.md."""
    from pathlib import Path

    from tuner.search.space import load_space

    repo = Path(__file__).resolve().parents[1]
    documented = (repo / "docs" / "narrow-spaces.md").read_text()
    narrow = sorted((repo / "search_spaces" / "narrow").glob("*.yaml"))
    assert narrow
    for path in narrow:
        assert load_space(path).family in registry.names(), path.name
        assert f"`{path.name}`" in documented, path.name


def test_a_large_space_is_checked_in_worker_processes_with_the_same_result():
    """A large space is checked a slice of its first knob a child process (sm80's 56 K here, for a shorter test than
    sm90_gemm's 311 K that crosses PARALLEL_CHECK_CONFIGS); the valid configurations and their order are those of
    checking it here."""
    from tuner.search import space as space_module

    space = load_space(default_space_file("sm80"))
    problem = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    here = space_module.checked_configs(space, problem, H100)
    assert len(here) > 1000
    assert space_module._checked_in_parallel(space, problem, H100, workers=2) == here


def test_a_worker_that_cannot_start_leaves_the_check_to_this_process(monkeypatch):
    from tuner.search import space as space_module

    space = load_space(default_space_file("sm90_conv"))
    problem = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    here = space_module.checked_configs(space, problem, H100)
    monkeypatch.setattr(space_module, "PARALLEL_CHECK_CONFIGS", 1)
    monkeypatch.setattr(space_module.sys, "executable", "/nonexistent/python")
    space_module._valid_configs.cache_clear()
    try:
        assert tuple(space_module.valid_configs(space, problem, H100)) == here
    finally:
        space_module._valid_configs.cache_clear()
