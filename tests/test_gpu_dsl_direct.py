"""The dsl_direct family on the GPU: depthwise (3x3 at stride 1 and 2, dilated, 5x5 with a fused SiLU, ConvNeXt's 7x7
with a bias, bf16) and groups of 8 channels (RegNet's, strided and fused, on CUDA cores and through the mma mapping
on tensor cores) validate against the float64 reference and are timed; planted wrong kernels (built for dilation 2,
run on the dilation-1 layer, in either mapping) and planted wrong epilogues fail. Run with
`pytest -m gpu tests/test_gpu_dsl_direct.py` on a Hopper GPU where the DSL is installed."""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu

from conftest import compile_cases, evaluate_request, gpu_cupy  # noqa: E402

gpu_cupy()

from tuner.core.device import query_device  # noqa: E402
from tuner.core.dtypes import dtype_fields  # noqa: E402
from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.families.dsl_common.toolchain import dsl_version  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402
from tuner.search.space import make_config  # noqa: E402

if dsl_version() is None:
    pytest.skip("the CuTe DSL is not installed (pip install -e '.[dsl]')", allow_module_level=True)

BF16 = dtype_fields("bf16")


def fused(problem: ConvProblem, text: str) -> ConvProblem:
    return dataclasses.replace(problem, epilogue=parse_epilogue(text))


DW3 = ConvProblem(n=2, h=30, w=30, c=64, k=64, r=3, s=3, pad=1, groups=64)   # 30 columns: partial tiles
DW3_DILATED = dataclasses.replace(DW3, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)   # the same 30x30 output
DW3_S2 = ConvProblem(n=2, h=56, w=56, c=96, k=96, r=3, s=3, pad=1, stride=2, groups=96)
DW5 = ConvProblem(n=2, h=14, w=14, c=240, k=240, r=5, s=5, pad=2, groups=240)
DW7 = ConvProblem(n=2, h=28, w=28, c=192, k=192, r=7, s=7, pad=3, groups=192)
REGNET = ConvProblem(n=2, h=28, w=28, c=104, k=104, r=3, s=3, pad=1, groups=13)
REGNET_S2 = ConvProblem(n=2, h=56, w=56, c=48, k=48, r=3, s=3, pad=1, stride=2, groups=6)
REGNET_DILATED = dataclasses.replace(REGNET, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)   # the same 28x28 output

# case -> (the problem its kernel is built for, its parameters)
CASES = {
    "dw3": (DW3, {"tile": "8x8", "channels": 32, "columns": 2}),
    "dw3_one_column_a_thread": (DW3, {"tile": "4x8", "channels": 64, "columns": 1}),
    "dw3_dilated": (DW3_DILATED, {"tile": "8x8", "channels": 32, "columns": 2}),          # planted on DW3
    "dw3_s2_bn_relu_bf16": (fused(dataclasses.replace(DW3_S2, **BF16), "scale+bias+relu"),
                            {"tile": "8x16", "channels": 32, "columns": 4}),
    "dw5_bn_silu": (fused(DW5, "scale+bias+silu"), {"tile": "8x8", "channels": 48, "columns": 2}),
    "dw7_bias": (fused(DW7, "bias"), {"tile": "8x16", "channels": 32, "columns": 4}),
    "dw7_gelu": (fused(DW7, "gelu"), {"tile": "4x8", "channels": 64, "columns": 4}),
    "regnet": (REGNET, {"tile": "8x8", "channels": 8, "columns": 2}),
    "regnet_bn_silu": (fused(REGNET, "scale+bias+silu"), {"tile": "8x16", "channels": 8, "columns": 4}),
    "regnet_s2_bn_relu_bf16": (fused(dataclasses.replace(REGNET_S2, **BF16), "scale+bias+relu"),
                               {"tile": "8x8", "channels": 16, "columns": 1}),
    # the mma mapping: all 13 groups a CTA over partial 8x8 tiles; one group a CTA with SiLU; strided bf16
    "regnet_mma": (REGNET, {"tile": "8x8", "channels": 104, "columns": 2, "mapping": "mma"}),
    "regnet_mma_bn_silu": (fused(REGNET, "scale+bias+silu"), {"tile": "4x8", "channels": 8, "columns": 1,
                                                              "mapping": "mma"}),
    "regnet_s2_mma_bn_relu_bf16": (fused(dataclasses.replace(REGNET_S2, **BF16), "scale+bias+relu"),
                                   {"tile": "4x8", "channels": 48, "columns": 2, "mapping": "mma"}),
    "regnet_mma_dilated": (REGNET_DILATED, {"tile": "8x8", "channels": 104, "columns": 2, "mapping": "mma"}),
}
PLANTED = ("dw3_dilated", "regnet_mma_dilated")


def case_config(case: str):
    problem, params = CASES[case]
    return problem, make_config(problem, "dsl_direct", params)


@pytest.fixture(scope="module")
def device():
    found = query_device()
    if (why := registry.get("dsl_direct").device_problem(found)):
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    configs = {case: case_config(case)[1] for case in CASES}
    return compile_cases(device, tmp_path_factory.mktemp("cache_direct"), configs)


@pytest.mark.parametrize("case", [case for case in CASES if case not in PLANTED])
def test_a_direct_kernel_is_right_and_timed(case, compiled, device, worker):
    problem, config = case_config(case)
    assert registry.family_of(config).rules.static_problems(config, problem, device) == []
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case].binary, problem, launch)
    assert evaluation.status is Status.ok, evaluation.reason
    assert evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


@pytest.mark.parametrize("planted, right, layer", [("dw3_dilated", "dw3", DW3),
                                                   ("regnet_mma_dilated", "regnet_mma", REGNET)])
def test_planted_wrong_kernel_fails_validation(planted, right, layer, compiled, worker):
    """A kernel built for dilation 2 writes every output of the dilation-1 layer, from the wrong pixels."""
    wrong = CASES[planted][0]
    assert (wrong.p, wrong.q) == (layer.p, layer.q)
    rejected = worker.request(evaluate_request(compiled[planted], layer, kernel_view=wrong))
    assert rejected["status"] == Status.wrong_result.value, rejected
    accepted = worker.request(evaluate_request(compiled[right], layer))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


@pytest.mark.parametrize("kernel_case, layer_epilogue", [
    ("regnet_bn_silu", "scale+bias"),              # a SiLU the layer does not have
    ("dw3_s2_bn_relu_bf16", "scale+bias"),         # a ReLU the layer does not have
    ("dw5_bn_silu", "scale+bias+gelu"),            # SiLU where the layer has GELU
    ("regnet_mma_bn_silu", "scale+bias"),          # the mma mapping's epilogue: a SiLU the layer does not have
])
def test_a_wrong_epilogue_fails_validation(kernel_case, layer_epilogue, compiled, worker):
    layer = fused(CASES[kernel_case][0], layer_epilogue)
    answer = worker.request(evaluate_request(compiled[kernel_case], layer))
    assert answer["status"] == Status.wrong_result.value, (layer_epilogue, answer)
    assert answer["error"] > 2 * tolerance(layer)
