"""Grouped and depthwise convolutions on the GPU: sm80_group's grouped kernels (RegNet's 8 channels a group, several
groups a CTA; ResNeXt-like wide groups, one group a CTA; fused and bf16) and sm80_depthwise's direct kernels (3x3
at stride 1 and 2, EfficientNet's 5x5 with its fused scale, bias and SiLU, ConvNeXt's 7x7 with a bias) validate
against the float64 reference and are timed; planted wrong kernels must fail validation: a grouped kernel handed
the wrong groups, a depthwise kernel built for another dilation, and one built without the layer's activation.
Run with `pytest -m gpu tests/test_gpu_grouped.py` on a machine with an NVIDIA GPU (sm_80 or later) and CuPy."""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu

from conftest import compile_cases, gpu_cupy  # noqa: E402

gpu_cupy()

from tuner.core.device import query_device  # noqa: E402
from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.core.dtypes import dtype_fields  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.search.space import make_config  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402

BF16 = dtype_fields("bf16")
REGNET = ConvProblem(n=8, h=28, w=28, c=104, k=104, r=3, s=3, pad=1, groups=13)        # 8 channels a group
REGNET_STRIDED = ConvProblem(n=2, h=56, w=56, c=48, k=48, r=3, s=3, pad=1, stride=2, groups=6)
WIDE = ConvProblem(n=4, h=14, w=14, c=256, k=256, r=3, s=3, pad=1, groups=2)           # 128 a group
EIGHT_A_GROUP = ConvProblem(n=4, h=14, w=14, c=128, k=128, r=3, s=3, pad=1, groups=16)
FOUR_A_GROUP = dataclasses.replace(EIGHT_A_GROUP, groups=32)
DW3 = ConvProblem(n=4, h=28, w=28, c=144, k=144, r=3, s=3, pad=1, groups=144)
DW3_S2 = ConvProblem(n=4, h=28, w=28, c=96, k=96, r=3, s=3, pad=1, stride=2, groups=96, **BF16)
DW5_FUSED = ConvProblem(n=2, h=14, w=14, c=240, k=240, r=5, s=5, pad=2, groups=240,
                        epilogue=parse_epilogue("scale+bias+silu"))
DW7 = ConvProblem(n=2, h=14, w=14, c=384, k=384, r=7, s=7, pad=3, groups=384, epilogue=parse_epilogue("bias"),
                  **BF16)
# MobileNetV2's first depthwise layer (at batch 2): the H200 tune's winner there, 8x8 pixels of 16 channels, was
# wrong on a later launch while the epilogue had no barrier before the next tile's loads; split 1 gives each CTA
# 392 tiles in a row
DW3_MANY_TILES = ConvProblem(n=2, h=112, w=112, c=32, k=32, r=3, s=3, pad=1, groups=32)
DW3_DILATED = dataclasses.replace(DW3, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)                                # same 28x28 output

MULTIPLE = {"tile": "64x32x32", "warps": "2x1x1", "stages": 3, "swizzle": 1, "iterator": "analytic",
            "group_mode": "multiple"}
SINGLE = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized",
          "group_mode": "single"}
DIRECT = {"output_tile": "8x8", "channels": 64, "warps": 4, "stages": 3, "split": 4}
DIRECT_SMALL = {"output_tile": "4x4", "channels": 32, "warps": 4, "stages": 4, "split": 2}
DIRECT_ONE_CTA_A_SLICE = {"output_tile": "8x8", "channels": 16, "warps": 4, "stages": 2, "split": 1}

# case -> (family, the problem its kernel is built for, its parameters)
CASES = {
    "regnet": ("sm80_group", REGNET, MULTIPLE),
    "regnet_fused_bf16": ("sm80_group", dataclasses.replace(REGNET, epilogue=parse_epilogue("scale+bias+relu"), **BF16),
                          MULTIPLE),
    "regnet_strided": ("sm80_group", REGNET_STRIDED, MULTIPLE),
    "wide_groups": ("sm80_group", WIDE, SINGLE),
    "four_a_group": ("sm80_group", FOUR_A_GROUP, MULTIPLE),   # run on EIGHT_A_GROUP too (its accesses divide 8)
    "dw3": ("sm80_depthwise", DW3, DIRECT),
    "dw3_s2_bf16": ("sm80_depthwise", DW3_S2, DIRECT_SMALL),
    "dw3_many_tiles_a_cta": ("sm80_depthwise", DW3_MANY_TILES, DIRECT_ONE_CTA_A_SLICE),
    "dw5_fused": ("sm80_depthwise", DW5_FUSED, DIRECT),
    "dw7_bias_bf16": ("sm80_depthwise", DW7, DIRECT_SMALL),
    "dw3_built_dilated": ("sm80_depthwise", DW3_DILATED, DIRECT),                # planted
    "dw5_built_without_silu": ("sm80_depthwise", dataclasses.replace(DW5_FUSED, epilogue=parse_epilogue("scale+bias")),
                               DIRECT),                                        # planted
}
PLANTED = ("dw3_built_dilated", "dw5_built_without_silu")


def config_of(case: str):
    family, problem, params = CASES[case]
    return make_config(problem, family, params)


@pytest.fixture(scope="module")
def device():
    device = query_device()
    if (why := registry.get("sm80_group").device_problem(device)):
        pytest.skip(why)
    return device


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    return compile_cases(device, tmp_path_factory.mktemp("cache_grouped"), {case: config_of(case) for case in CASES})


def evaluate(compiled, case: str, problem: ConvProblem, device, worker):
    config = config_of(case)
    launch = registry.family_of(config).rules.launch_args(config, problem)
    return GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case].binary, problem, launch)


@pytest.mark.parametrize("case", [case for case in CASES if case not in PLANTED])
def test_a_grouped_or_depthwise_layer_validates_and_is_timed(case, compiled, device, worker):
    _, problem, _ = CASES[case]
    config = config_of(case)
    assert registry.family_of(config).rules.static_problems(config, problem, device) == []
    evaluation = evaluate(compiled, case, problem, device, worker)
    assert evaluation.status is Status.ok, evaluation.reason
    assert evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


def request(binary, problem: ConvProblem, kernel_problem: ConvProblem | None, launch) -> dict:
    return EvaluateRequest(str(binary.path), binary.index, problem, launch, seed=7, l2_bytes=50 << 20, repeats=3,
                           kernel_problem=kernel_problem).to_dict()


def test_a_grouped_kernel_handed_the_wrong_groups_fails(compiled, device, worker):
    """A kernel of 4-element accesses runs 8 channels a group right; told the same tensors hold 4 a group (twice
    the groups, each output channel reading half its channels, half of them another group's), it must fail."""
    config = config_of("four_a_group")
    launch = registry.family_of(config).rules.launch_args(config, EIGHT_A_GROUP)
    binary = compiled["four_a_group"].binary
    accepted = worker.request(request(binary, EIGHT_A_GROUP, None, launch))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")
    rejected = worker.request(request(binary, EIGHT_A_GROUP, FOUR_A_GROUP, launch))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 100 * tolerance(EIGHT_A_GROUP)


def test_a_depthwise_kernel_built_for_another_dilation_fails(compiled, device, worker):
    """Built for dilation 2 (pad 2: the same output size), it is run on dilation 1's inputs, handed the problem it
    was built for: every output reads the wrong pixels."""
    config = config_of("dw3_built_dilated")
    launch = registry.family_of(config).rules.launch_args(config, DW3)
    rejected = worker.request(request(compiled["dw3_built_dilated"].binary, DW3, DW3_DILATED, launch))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 100 * tolerance(DW3)


def test_a_depthwise_kernel_without_the_layers_activation_fails(compiled, device, worker):
    """Built for scale+bias, handed the scale+bias+silu layer's operands (which it takes): no SiLU is applied."""
    evaluation = evaluate(compiled, "dw5_built_without_silu", DW5_FUSED, device, worker)
    assert evaluation.status is Status.wrong_result, evaluation.reason
