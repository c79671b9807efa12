import dataclasses

import pytest

from tuner.core.device import DeviceFacts, device_from_dict, slugify


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA GeForce RTX 3060", "nvidia-geforce-rtx-3060"),
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
        ("  NVIDIA H200 (MIG 1g.18gb) ", "nvidia-h200-mig-1g-18gb"),
    ],
)
def test_slugify(name, slug):
    assert slugify(name) == slug


def test_h100_facts(h100):
    assert h100.slug == "nvidia-h100-80gb-hbm3"
    assert h100.cc == 90
    assert h100.arch_flag == "sm_90"
    assert h100.max_warps_per_sm == 64


@pytest.mark.parametrize("major, minor, flag", [(8, 0, "sm_80"), (8, 6, "sm_86"), (8, 9, "sm_89"), (9, 0, "sm_90")])
def test_arch_flag(h100, major, minor, flag):
    assert dataclasses.replace(h100, cc_major=major, cc_minor=minor).arch_flag == flag


def test_max_warps_per_sm_of_an_rtx3060(h100):
    assert dataclasses.replace(h100, max_threads_per_sm=1536).max_warps_per_sm == 48


def test_dict_round_trip(h100):
    values = h100.to_dict()
    assert values["smem_optin_per_block"] == 232448 and values["driver_version"] == "unknown"
    assert device_from_dict(values) == h100
    assert isinstance(device_from_dict(values), DeviceFacts)
