"""The registry finds the kernel families by looking, and says which of them a GPU and a layer allow."""
import dataclasses

import pytest

from conftest import H100
from tuner.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import Family, SpaceError
from tuner.problem import ConvProblem

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
    assert registry.names() == ("sm80", "sm90_conv", "sm90_dsl", "sm90_gemm", "sm90_s2d")
    assert tuple(registry.families()) == registry.names()


def test_get_returns_each_family():
    for name in registry.names():
        family = registry.get(name)
        assert isinstance(family, Family)
        assert family.name == name
        assert family.folder.name == name
        assert family.knobs and family.summary


def test_get_unknown_family():
    with pytest.raises(SpaceError) as error:
        registry.get("nope")
    message = str(error.value)
    assert "'nope'" in message and "sm80, sm90_conv, sm90_dsl, sm90_gemm" in message and "\n" not in message


def test_eligible_on_h100():
    assert tuple(registry.eligible(H100)) == ("sm80", "sm90_conv", "sm90_dsl", "sm90_gemm", "sm90_s2d")


def test_eligible_on_a100():
    assert tuple(registry.eligible(A100)) == ("sm80",)


def test_eligible_on_other_gpus():
    ada = dataclasses.replace(H100, cc_major=8, cc_minor=9)
    blackwell = dataclasses.replace(H100, cc_major=10, cc_minor=0)
    turing = dataclasses.replace(H100, cc_major=7, cc_minor=5)
    assert tuple(registry.eligible(ada)) == ("sm80",)
    assert tuple(registry.eligible(blackwell)) == ("sm80",)   # sm_90a code runs on 9.0 only
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
    "sm90_conv": {"tile": "128x128x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm90_dsl": {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
                 "swizzle": 1, "tile_q": 16},
    "sm90_gemm": {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "scheduler": "persistent",
                  "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1, "split_k": 1},
    "sm90_s2d": {"tile": "128x128x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
}


def test_family_of_a_config():
    assert set(PARAMS) == set(registry.names())
    for name, params in PARAMS.items():
        config = registry.get(name).make_config(ONE_BY_ONE, params)
        assert config.family == name
        assert registry.family_of(config) is registry.get(name)
