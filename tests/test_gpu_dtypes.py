"""bf16 and TF32 on the GPU: a layer of each family (and sm90_dsl's tf32 kernels) validated against the float64 reference within its types'
tolerance, and planted wrong kernels (the wrong pixels, or the wrong element type) that must fail. Run with
`pytest -m gpu tests/test_gpu_dtypes.py` on an H100 (sm_90) with CuPy; the sm90 cases need compute capability
9.0, the sm90_dsl ones the [dsl] extra."""
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
from tuner.families.sm90_dsl.toolchain import dsl_version  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.core.dtypes import dtype_fields  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.search.space import make_config  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402

CONV = ConvProblem(n=2, h=16, w=16, c=64, k=128, r=3, s=3, pad=1)
FUSED = dataclasses.replace(CONV, epilogue=parse_epilogue("scale+bias+residual+relu"))
GEMM = ConvProblem(n=2, h=16, w=16, c=128, k=128, r=1, s=1)
STEM = ConvProblem(n=2, h=32, w=32, c=3, k=64, r=7, s=7, pad=3, stride=2)
SM80 = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1}
SM90_CONV = {"tile": "128x64x32", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}
SM90_GEMM = {"tile": "128x128x32", "cluster": "1x1x1", "schedule": "cooperative", "scheduler": "persistent",
             "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1, "split_k": 1}
SM90_DSL = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
            "swizzle": 1, "tile_q": 8, "split_k": 1}
# (family, layer, knobs): each family on a layer it runs, bare and with a fused residual epilogue
LAYERS = {
    "sm80": ("sm80", CONV, SM80),
    "sm80_split_k": ("sm80", CONV, {**SM80, "split_k": 3}),  # the output type holds the partial sums
    "sm80_fused": ("sm80", FUSED, SM80),
    "sm90_conv": ("sm90_conv", CONV, SM90_CONV),
    "sm90_conv_fused": ("sm90_conv", FUSED, SM90_CONV),
    "sm90_gemm": ("sm90_gemm", GEMM, SM90_GEMM),
    "sm90_gemm_stream_k": ("sm90_gemm", GEMM, {**SM90_GEMM, "scheduler": "stream_k", "split_k": 2}),
    "sm90_s2d": ("sm90_s2d", STEM, {**SM90_CONV, "tile": "128x64x16"}),
    "sm90_dsl": ("sm90_dsl", CONV, SM90_DSL),
    "sm90_dsl_fused": ("sm90_dsl", FUSED, SM90_DSL),
    "sm90_dsl_stem": ("sm90_dsl", STEM, {**SM90_DSL, "tile": "128x64x32", "tile_q": 0}),  # C=3: gathered
    "sm90_dsl_im2col": ("sm90_dsl", CONV, {**SM90_DSL, "tile_q": -1}),  # A by TMA im2col loads
    # the planted wrong kernel of sm90_dsl, whose extents are compiled in: built for dilation 2 (pad 2 keeps the
    # output's size), run on CONV
    "sm90_dsl_dilated": ("sm90_dsl", dataclasses.replace(CONV, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2), SM90_DSL),
}
# sm90_dsl in tf32 (f32 out, stored from the accumulator registers): stage rows of 32 elements, no residual and no
# gathered C; bare, split-K, pingpong with BN+SiLU on enough tiles that both consumer warpgroups work, stride 2, a
# GEMM whose K of 20 is no multiple of 8, and its planted wrong kernel, built for dilation 2 like the bf16 one's
SM90_DSL_TF32 = {**SM90_DSL, "tile": "128x128x32"}
TF32_DSL = {
    "sm90_dsl_tf32": ("sm90_dsl", CONV, SM90_DSL_TF32),
    "sm90_dsl_tf32_split3": ("sm90_dsl", CONV, {**SM90_DSL_TF32, "split_k": 3}),
    "sm90_dsl_tf32_pingpong_bn_silu": ("sm90_dsl", dataclasses.replace(
        CONV, n=16, h=32, w=32, epilogue=parse_epilogue("scale+bias+silu")),
        {**SM90_DSL_TF32, "tile": "64x64x32", "schedule": "pingpong", "tile_q": 16}),
    "sm90_dsl_tf32_stride2": ("sm90_dsl", dataclasses.replace(CONV, h=32, w=32, stride_h=2, stride_w=2),
                              {**SM90_DSL_TF32, "tile_q": 0}),
    "sm90_dsl_tf32_gemm_k20": ("sm90_dsl", dataclasses.replace(GEMM, k=20),
                               {**SM90_DSL_TF32, "tile": "128x32x32", "tile_q": 0}),
    # the kernel that tuned tf_r50_s5_3x3_b32 at 36.4 us and then failed to launch in the table's bench (split-K 2 in a
    # 1x2 cluster, 8-wide boxes over a 7x7 input)
    "sm90_dsl_tf32_7x7_split2_cluster": ("sm90_dsl", ConvProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad=1),
                                         {**SM90_DSL_TF32, "cluster": "1x2x1", "split_k": 2}),
    # im2col loads of 4-byte elements with stream-K, on the 7x7 stage
    "sm90_dsl_tf32_7x7_im2col_stream_k": ("sm90_dsl", ConvProblem(n=8, h=7, w=7, c=512, k=512, r=3, s=3, pad=1),
                                          {**SM90_DSL_TF32, "tile_q": -1, "split_k": 0}),
    # the default space's 16-wide tf32 tile (batch-1 late layers), split-K 4 on a 1x1 of K 2048
    "sm90_dsl_tf32_n16_split4": ("sm90_dsl", ConvProblem(n=1, h=7, w=7, c=2048, k=512, r=1, s=1),
                                 {**SM90_DSL_TF32, "tile": "64x16x32", "schedule": "single", "tile_q": 0, "split_k": 4}),
    "sm90_dsl_tf32_dilated": ("sm90_dsl", LAYERS["sm90_dsl_dilated"][1], SM90_DSL_TF32),
}
DTYPES = ("bf16", "tf32")
BUILT = [(case, dtype) for case in LAYERS for dtype in DTYPES if not (case.startswith("sm90_dsl") and dtype == "tf32")]
CASES = [(case, dtype) for case, dtype in BUILT if case != "sm90_dsl_dilated"]


def typed(problem: ConvProblem, dtype: str) -> ConvProblem:
    return dataclasses.replace(problem, **dtype_fields(dtype))


def case_config(case: str, dtype: str):
    family, problem, params = {**LAYERS, **TF32_DSL}[case]
    problem = typed(problem, dtype)
    return problem, make_config(problem, family, params)


@pytest.fixture(scope="module")
def device():
    return query_device()


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    wanted = [(case, dtype) for case, dtype in BUILT
              if registry.get(LAYERS[case][0]).device_problem(device) is None
              and (LAYERS[case][0] != "sm90_dsl" or dsl_version() is not None)]
    configs = {key: case_config(*key)[1] for key in wanted}
    return compile_cases(device, tmp_path_factory.mktemp("cache_types"), configs, jobs=4)


@pytest.mark.parametrize("case, dtype", CASES)
def test_a_layer_in_the_type_is_right_and_timed(case, dtype, compiled, device, worker):
    if (case, dtype) not in compiled:
        pytest.skip(f"{LAYERS[case][0]} does not run on {device.name} (or its toolchain is not installed)")
    problem, config = case_config(case, dtype)
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case, dtype].binary, problem,
                                                                          launch)
    assert evaluation.status is Status.ok, evaluation.reason  # also right after the timed graph replays
    # within the types' tolerance, and not suspiciously exact (a kernel that computed in f32 or f64 instead)
    assert 0 < evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


def request(result, problem: ConvProblem, kernel_view: ConvProblem) -> dict:
    launch = registry.family_of(result.config).rules.launch_args(result.config, kernel_view)
    return EvaluateRequest(str(result.binary.path), result.binary.index, problem, launch, seed=11,
                           l2_bytes=50 << 20, repeats=3, kernel_problem=kernel_view).to_dict()


@pytest.mark.parametrize("case, kernel", [("sm80", "sm80"), ("sm90_conv", "sm90_conv"),
                                          ("sm90_dsl", "sm90_dsl_dilated")])
def test_planted_wrong_bf16_kernel_fails_validation(case, kernel, compiled, worker):
    """A bf16 kernel handed dilation 2 (pad 2 keeps the output's size; sm90_dsl's is built for it): every output
    is written, from the wrong pixels. Validation must reject it, as the family's kernel of the layer passes."""
    if (kernel, "bf16") not in compiled:
        pytest.skip(f"{LAYERS[kernel][0]} does not run here")
    problem, _ = case_config(case, "bf16")
    wrong = dataclasses.replace(problem, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)
    assert (wrong.p, wrong.q) == (problem.p, problem.q)
    rejected = worker.request(request(compiled[kernel, "bf16"], problem, wrong))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 10 * tolerance(problem)
    accepted = worker.request(request(compiled[case, "bf16"], problem, problem))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


@pytest.fixture(scope="module")
def compiled_tf32_dsl(device, tmp_path_factory):
    """sm90_dsl's tf32 kernels, apart from the other cases' (whose nvcc builds `-k tf32_dsl` need not wait for)."""
    if registry.get("sm90_dsl").device_problem(device) is not None or dsl_version() is None:
        pytest.skip("sm90_dsl does not run here (sm_90a and the [dsl] extra)")
    configs = {case: case_config(case, "tf32")[1] for case in TF32_DSL}
    return compile_cases(device, tmp_path_factory.mktemp("cache_tf32_dsl"), configs, jobs=4)


@pytest.mark.parametrize("case", [case for case in TF32_DSL if not case.endswith("_dilated")])
def test_a_tf32_dsl_kernel_is_right_and_timed(case, compiled_tf32_dsl, device, worker):
    problem, config = case_config(case, "tf32")
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled_tf32_dsl[case].binary, problem,
                                                                          launch)
    assert evaluation.status is Status.ok, evaluation.reason
    assert 0 < evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


def test_planted_wrong_tf32_dsl_kernel_fails_validation(compiled_tf32_dsl, worker):
    """sm90_dsl's tf32 kernel built for dilation 2, run on the dilation-1 layer: rejected, as the right one passes."""
    problem, _ = case_config("sm90_dsl_tf32", "tf32")
    wrong = typed(TF32_DSL["sm90_dsl_tf32_dilated"][1], "tf32")
    rejected = worker.request(request(compiled_tf32_dsl["sm90_dsl_tf32_dilated"], problem, wrong))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 10 * tolerance(problem)
    accepted = worker.request(request(compiled_tf32_dsl["sm90_dsl_tf32"], problem, problem))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


@pytest.mark.parametrize("case", ["sm80", "sm90_gemm", "sm90_dsl"])
def test_a_kernel_of_the_wrong_element_type_fails_validation(case, compiled, worker):
    """The f16 layer's data run through the bf16 kernel (and the other way round): the bits of one type read as
    the other's are far off (or NaN), so a kernel built for the wrong type never validates."""
    if (case, "bf16") not in compiled:
        pytest.skip(f"{case} does not run here")
    bf16_problem, config = case_config(case, "bf16")
    f16_problem = typed(bf16_problem, "f16")
    answer = worker.request(request(compiled[case, "bf16"], f16_problem, f16_problem))
    assert answer["status"] == Status.wrong_result.value, answer
