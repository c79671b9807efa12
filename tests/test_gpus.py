"""The GPU table: lookups by name, alias and ncu's device string, and the facts it gives the tuner."""
import dataclasses

import pytest

from tuner.core import gpus
from tuner.core.gpus import GPUS, UnknownGpu, by_sm_count, device_facts, find_in_text, lookup

from conftest import H100  # noqa: E402


@pytest.mark.parametrize("name, slug", [
    ("rtx3060", "rtx3060"),
    ("RTX 3060", "rtx3060"),
    ("NVIDIA GeForce RTX 3060", "rtx3060"),       # the device name ncu and the driver print
    ("rtx4090", "rtx4090"),
    ("a10", "a10"),
    ("A100", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("l4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("h100", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("H100-PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"),
])
def test_lookup_by_slug_alias_and_device_name(name, slug):
    assert lookup(name).slug == slug


@pytest.mark.parametrize("name", ["rtx3070", "", "h1000", "NVIDIA GeForce RTX 3060 Ti"])
def test_unknown_gpu_names_every_known_one(name):
    with pytest.raises(UnknownGpu) as error:
        lookup(name)
    message = str(error.value)
    assert "\n" not in message and "unknown GPU" in message
    assert all(gpu.slug in message for gpu in GPUS)


def test_slugs_and_names_are_unique():
    names = [gpus._key(name) for gpu in GPUS for name in gpu.names]
    assert len(names) == len(set(names))
    assert {gpu.slug for gpu in GPUS} >= {"rtx3060", "rtx4090", "a10", "a100-40gb", "a100-80gb", "l4", "l40s",
                                          "h100-pcie", "h100-sxm", "h200"}


def test_figures_are_plausible():
    for gpu in GPUS:
        assert gpu.f16_tensor_tflops > gpu.fp32_tflops > 0, gpu.slug
        assert gpu.arch.smem_optin_per_block_bytes < gpu.arch.smem_per_sm_bytes
        assert gpu.arch.max_warps_per_sm in (48, 64) and gpu.dram_gbps > 100


def test_device_names_in_report_text():
    assert find_in_text("  Device Name   NVIDIA GeForce RTX 3060\n").slug == "rtx3060"
    assert find_in_text('"0","NVIDIA H100 80GB HBM3","9.0"').slug == "h100-sxm"
    assert find_in_text("NVIDIA GeForce RTX 3060 Ti") is None  # another part (38 SMs)
    assert find_in_text("NVIDIA GeForce RTX 3060 Laptop GPU") is None
    assert find_in_text("no device here") is None
    assert find_in_text("NVIDIA L4\nNVIDIA H200\n") is None  # two GPUs: neither


def test_sm_count_identifies_only_when_unambiguous():
    assert [gpu.slug for gpu in by_sm_count(28)] == ["rtx3060"]
    assert [gpu.slug for gpu in by_sm_count(28, "8.6")] == ["rtx3060"]
    assert by_sm_count(28, "9.0") == ()
    assert {gpu.slug for gpu in by_sm_count(132)} == {"h100-sxm", "h200"}
    assert by_sm_count(29) == ()


def test_device_facts_of_the_h100_match_the_driver():
    assert device_facts(lookup("h100-sxm")) == H100  # conftest's facts, as CuPy read them on the H100


def test_device_facts_of_the_rtx3060_follow_the_sm86_occupancy_table():
    facts = device_facts(lookup("rtx3060"))
    assert (facts.cc, facts.sm_count, facts.max_warps_per_sm, facts.max_blocks_per_sm) == (86, 28, 48, 16)
    assert (facts.smem_per_sm, facts.smem_optin_per_block) == (100 * 1024, 99 * 1024)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lookup("rtx3060").sm_count = 30


def test_achievable_rates_are_the_cost_models_share_of_peak():
    h100 = lookup("h100-sxm")
    assert gpus.achievable_tflops(h100) == pytest.approx(593.4)  # ~ tuner/search/costmodel.py's 600 default
    assert gpus.achievable_gbps(h100) == pytest.approx(3015)     # ~ its 3000
