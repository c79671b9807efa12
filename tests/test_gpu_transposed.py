"""Transposed convolutions (ConvTranspose2d's forward) on the GPU through sm80_dgrad: a UNet decoder's 2x2
stride-2 upsampling, DCGAN's 4x4 stride-2 pad-1 one, a 3x3 stride-2 one with output padding, stride 1 on both
the unity and the strided kernel (dilated, split-K), bf16 and f32 output, and a per-axis one, each validated
against the float64 reference (a scatter, tuner/measure/validate.py) and timed; a kernel handed the problem with its
axes swapped (every output written, from the wrong pixels) must fail. Run with `pytest -m gpu` on a machine
with an NVIDIA GPU (compute capability 8.0 or newer) and CuPy."""
from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import compile_cases, gpu_cupy

pytestmark = pytest.mark.gpu
gpu_cupy()  # skips the module without CuPy or a GPU

from tuner.core.device import query_device  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.core.dtypes import DataType, dtype_fields  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.search.space import make_config  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402

UNET_UP = ConvProblem(n=2, h=16, w=16, c=128, k=64, r=2, s=2, stride=2, transposed=True)
DCGAN_UP = ConvProblem(n=4, h=8, w=8, c=128, k=64, r=4, s=4, pad=1, stride=2, transposed=True)
PADDED_UP = ConvProblem(n=2, h=15, w=15, c=64, k=32, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True)
STRIDE_ONE = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad=1, transposed=True)
DILATED = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad=2, dilation=2, transposed=True)
# Every axis differs and swapping them keeps the 48x48 output: -2*pad + output_padding is 0 on both axes.
MIXED = ConvProblem(n=2, h=16, w=16, c=64, k=32, r=3, s=3, pad_h=1, pad_w=0, stride_h=3, stride_w=3, dilation_h=1,
                    dilation_w=1, output_padding_h=2, output_padding_w=0, transposed=True)
SWAPPED = ConvProblem(n=2, h=16, w=16, c=64, k=32, r=3, s=3, pad_h=0, pad_w=1, stride_h=3, stride_w=3, dilation_h=1,
                      dilation_w=1, output_padding_h=0, output_padding_w=2, transposed=True)

STRIDED = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized",
           "stride_support": "strided", "split_k": 1}
UNITY = {**STRIDED, "stride_support": "unity"}
CASES = {
    "unet_2x2_s2": (UNET_UP, STRIDED),
    "unet_2x2_s2_analytic_swizzle4": (UNET_UP, {**STRIDED, "iterator": "analytic", "swizzle": 4}),
    "dcgan_4x4_s2_p1": (DCGAN_UP, {**STRIDED, "tile": "128x64x32"}),
    "3x3_s2_p1_output_padding_1": (PADDED_UP, STRIDED),
    "3x3_s1_unity": (STRIDE_ONE, UNITY),
    "3x3_s1_unity_split_k_2": (STRIDE_ONE, {**UNITY, "split_k": 2}),
    "3x3_s1_strided": (STRIDE_ONE, STRIDED),
    "3x3_s1_dilated_unity": (DILATED, UNITY),
    "dcgan_bf16": (replace(DCGAN_UP, **dtype_fields("bf16")), STRIDED),
    "dcgan_f32_out": (replace(DCGAN_UP, output_type=DataType.f32), STRIDED),
    "per_axis_s3": (MIXED, STRIDED),
}


def config_of(case: str):
    problem, params = CASES[case]
    return problem, make_config(problem, "sm80_dgrad", params)


@pytest.fixture(scope="module")
def device():
    found = query_device()
    if (why := registry.get("sm80_dgrad").device_problem(found)):
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    configs = {case: config_of(case)[1] for case in CASES}
    return compile_cases(device, tmp_path_factory.mktemp("cache_transposed"), configs)


@pytest.mark.parametrize("case", list(CASES))
def test_a_transposed_layer_validates_and_is_timed(case, compiled, device, worker):
    problem, config = config_of(case)
    family = registry.family_of(config)
    assert family.problem_reason(problem) is None and family.rules.static_problems(config, problem, device) == []
    launch = family.rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case].binary, problem, launch)
    assert evaluation.status is Status.ok, evaluation.reason
    assert evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


def request(binary, problem: ConvProblem, kernel_problem: ConvProblem | None, launch) -> dict:
    return EvaluateRequest(str(binary.path), binary.index, problem, launch, seed=7, l2_bytes=50 << 20, repeats=3,
                           kernel_problem=kernel_problem).to_dict()


def test_a_kernel_handed_the_axes_swapped_fails_validation(compiled, worker):
    """The per-axis kernel is handed SWAPPED's problem array on MIXED's buffers: it writes every output (the
    extents agree) from the wrong taps and must be rejected; handed MIXED's it passes."""
    assert (SWAPPED.p, SWAPPED.q) == (MIXED.p, MIXED.q) == (48, 48)
    _, config = config_of("per_axis_s3")
    launch = registry.family_of(config).rules.launch_args(config, MIXED)
    binary = compiled["per_axis_s3"].binary
    rejected = worker.request(request(binary, MIXED, SWAPPED, launch))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 100 * tolerance(MIXED)
    accepted = worker.request(request(binary, MIXED, None, launch))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


def test_a_kernel_handed_the_conv_whose_dgrad_it_is_is_refused(compiled, worker):
    """The same numbers as an fprop problem (not transposed): the runner refuses the array (its P, Q do not map
    back onto H, W), so a dgrad kernel never runs a conv by mistake."""
    conv = ConvProblem(n=2, h=16, w=16, c=128, k=64, r=2, s=2, stride=2)
    _, config = config_of("unet_2x2_s2")
    launch = registry.family_of(config).rules.launch_args(config, UNET_UP)
    answer = worker.request(request(compiled["unet_2x2_s2"].binary, UNET_UP, conv, launch))
    assert answer["status"] == Status.invalid.value, answer
