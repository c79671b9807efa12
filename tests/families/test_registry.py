"""The registry finds the kernel families by looking, and says which of them a GPU and a layer allow."""
import dataclasses

import pytest

from conftest import H100
from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import SpaceError
from tuner.families.family import Family
from tuner.core.problem import ConvProblem

A100 = DeviceFacts(
    name="NVIDIA A100-SXM4-80GB",
    cc_major=8,
    cc_minor=0,
    sm_count=108,
    smem_optin_per_block=166912,
    smem_per_sm=167936,
    registers_per_sm=65536,
    l2_bytes=41943040,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
)
ONE_BY_ONE = ConvProblem(n=32, h=28, w=28, c=256, k=128, r=1, s=1)
THREE_BY_THREE = ConvProblem(n=32, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)


def test_names():
    assert registry.names() == ("dsl_direct", "sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group", "sm90_conv", "sm90_dsl", "sm90_gemm", "sm90_s2d")
    assert tuple(registry.families()) == registry.names()


def test_get_returns_each_family():
    for name in registry.names():
        family = registry.get(name)
        assert isinstance(family, Family)
        assert family.name == name
        assert family.folder.name == name
        assert family.rules.knobs and family.summary


def test_get_unknown_family():
    with pytest.raises(SpaceError) as error:
        registry.get("nope")
    message = str(error.value)
    assert "'nope'" in message and "sm80, sm80_depthwise, sm80_dgrad, sm80_group, sm90_conv, sm90_dsl, sm90_gemm" in message and "\n" not in message


def test_eligible_on_h100():
    assert tuple(registry.eligible(H100)) == ("dsl_direct", "sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group",
                                              "sm90_conv", "sm90_dsl", "sm90_gemm", "sm90_s2d")


def test_eligible_on_a100():
    assert tuple(registry.eligible(A100)) == ("sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group")


def test_eligible_on_other_gpus():
    ada = dataclasses.replace(H100, cc_major=8, cc_minor=9)
    blackwell = dataclasses.replace(H100, cc_major=10, cc_minor=0)
    turing = dataclasses.replace(H100, cc_major=7, cc_minor=5)
    assert tuple(registry.eligible(ada)) == ("sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group")
    assert tuple(registry.eligible(blackwell)) == ("sm80", "sm80_depthwise", "sm80_dgrad", "sm80_group")  # sm_90a: 9.0 only
    assert tuple(registry.eligible(turing)) == ()


def test_why_not_for_a_3x3_layer():
    assert registry.why_not(registry.get("sm80"), THREE_BY_THREE, H100) is None
    assert registry.why_not(registry.get("sm90_conv"), THREE_BY_THREE, H100) is None
    reason = registry.why_not(registry.get("sm90_gemm"), THREE_BY_THREE, H100)
    assert reason is not None and "sm90_gemm" in reason and "1x1" in reason and "3x3" in reason


def test_why_not_for_a_1x1_layer():
    for name in ("sm80", "sm90_conv", "sm90_gemm"):
        assert registry.why_not(registry.get(name), ONE_BY_ONE, H100) is None, name
    assert "stride 1 has nothing to fold" in registry.why_not(registry.get("sm90_s2d"), ONE_BY_ONE, H100)


def test_why_not_for_the_stem():
    stem = ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)
    assert [name for name in registry.names() if registry.why_not(registry.get(name), stem, H100) is None] == [
        "sm80", "sm90_conv", "sm90_dsl", "sm90_s2d"]


def test_why_not_names_the_device_first():
    for name in ("sm90_conv", "sm90_gemm", "sm90_s2d"):
        reason = registry.why_not(registry.get(name), THREE_BY_THREE, A100)
        assert reason is not None and "9.0" in reason and "8.0" in reason and name in reason, name
    assert registry.why_not(registry.get("sm80"), ONE_BY_ONE, A100) is None


PARAMS = {
    "sm80": {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1},
    "sm80_dgrad": {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized",
                   "stride_support": "strided", "split_k": 1},
    "sm90_conv": {"tile": "128x128x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm90_dsl": {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
                 "swizzle": 1, "tile_q": 16},
    "sm90_gemm": {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "scheduler": "persistent",
                  "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1, "split_k": 1},
    "sm90_s2d": {"tile": "128x128x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm80_group": {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "analytic",
                   "group_mode": "multiple"},
    "sm80_depthwise": {"output_tile": "8x8", "channels": 64, "warps": 4, "stages": 3, "split": 1},
    "dsl_direct": {"tile": "8x8", "channels": 8, "columns": 1},
}


def test_family_of_a_config():
    assert set(PARAMS) == set(registry.names())
    for name, params in PARAMS.items():
        config = registry.get(name).rules.make_config(ONE_BY_ONE, params)
        assert config.family == name
        assert registry.family_of(config) is registry.get(name)


# Per-axis problems each family runs (None) or refuses with a reason naming why (the words it holds).
INCEPTION_1X7 = ConvProblem(n=32, h=17, w=17, c=128, k=128, r=1, s=7, pad_h=0, pad_w=3)
INCEPTION_7X1 = ConvProblem(n=32, h=17, w=17, c=128, k=128, r=7, s=1, pad_h=3, pad_w=0)
STRIDED_ROWS = ConvProblem(n=8, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, stride_h=2, stride_w=1)
WIDE_STRIDE = ConvProblem(n=8, h=64, w=64, c=64, k=64, r=3, s=3, pad=1, stride_h=1, stride_w=9)
GROUPED = ConvProblem(n=8, h=28, w=28, c=128, k=128, r=3, s=3, pad=1, groups=32)
DEPTHWISE = ConvProblem(n=8, h=28, w=28, c=128, k=128, r=3, s=3, pad=1, groups=128)


# The grouped families' reasons for an ungrouped problem.
UNGROUPED = {"sm80_group": "groups > 1", "sm80_depthwise": "depthwise convolutions only",
             "dsl_direct": "depthwise convolutions and groups of 8 channels",
             "sm80_dgrad": "transposed convolutions (ConvTranspose2d) only"}


@pytest.mark.parametrize("problem, expected", [
    (INCEPTION_1X7, {**UNGROUPED, "sm80": None, "sm90_conv": None, "sm90_dsl": None, "sm90_gemm": "1x7, stride 1, pad 0x3",
                     "sm90_s2d": "stride 1 has nothing to fold"}),
    (INCEPTION_7X1, {**UNGROUPED, "sm80": None, "sm90_conv": None, "sm90_dsl": None, "sm90_gemm": "7x1, stride 1, pad 3x0",
                     "sm90_s2d": "stride 1 has nothing to fold"}),
    (STRIDED_ROWS, {**UNGROUPED, "sm80": None, "sm90_conv": None, "sm90_dsl": None, "sm90_gemm": "stride 2x1",
                    "sm90_s2d": "strides 2x1 (height x width)"}),
    (WIDE_STRIDE, {**UNGROUPED, "sm80": None, "sm90_conv": "stride_w=9: the TMA im2col traversal stride is 1 to 8",
                   "sm90_dsl": "stride 1x9", "sm90_gemm": "stride 1x9", "sm90_s2d": "strides 1x9"}),
])
def test_each_family_runs_or_refuses_a_per_axis_problem(problem, expected):
    reasons = registry.problem_reasons(problem)
    assert set(reasons) == set(expected)
    for name, words in expected.items():
        if words is None:
            assert reasons[name] is None, (name, reasons[name])
        else:
            assert reasons[name] is not None and words in reasons[name], (name, reasons[name])


@pytest.mark.parametrize("problem", [INCEPTION_1X7, INCEPTION_7X1, STRIDED_ROWS], ids=lambda p: p.key)
@pytest.mark.parametrize("name", ["sm80", "sm90_conv", "sm90_dsl"])
def test_the_families_that_run_a_per_axis_problem_have_valid_kernels_for_it(problem, name):
    from conftest import REPO
    from tuner.search.space import all_configs, load_space

    family = registry.get(name)
    configs = all_configs(load_space(REPO / "search_spaces" / f"{name}.yaml"), problem)
    assert any(not family.rules.static_problems(config, problem, H100) for config in configs)  # stops at the first


GROUPED_FAMILIES = {"sm80_group", "sm80_depthwise", "dsl_direct"}


@pytest.mark.parametrize("problem, kind, runs", [(GROUPED, "a grouped one, groups=32", {"sm80_group"}),
                                                 (DEPTHWISE, "a depthwise one, groups=128",
                                                  {"sm80_depthwise", "dsl_direct"})])
def test_only_the_grouped_families_run_grouped_convolutions(problem, kind, runs):
    reasons = registry.problem_reasons(problem)
    for name, reason in reasons.items():
        if registry.get(name).runs_transposed:  # refuses every convolution (fprop)
            assert reason == f"{name} runs transposed convolutions (ConvTranspose2d) only"
        elif name in GROUPED_FAMILIES:
            assert registry.get(name).runs_groups
            assert (reason is None) == (name in runs), (name, reason)
        else:
            assert reason == f"{name} runs ungrouped convolutions only (groups=1); this is {kind}"
            assert registry.why_not(registry.get(name), problem, H100) is not None


def test_no_family_imports_another_familys_modules():
    """What families share lives in tuner/families/ itself (base.py, family.py) and in the *_common packages."""
    import ast

    from conftest import REPO

    found = []
    for name in registry.names():
        for path in (REPO / "tuner" / "families" / name).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                modules = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                           else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
                others = {m.split(".")[2] for m in modules if m.startswith("tuner.families.") and m.count(".") >= 2}
                found += [(str(path.relative_to(REPO)), other) for other in others - {name} if other in registry.names()]
    assert not found, found
