"""fp8 on the GPU: sm90_dsl's e4m3 kernels (e4m3 input and filter with per-tensor scales, f16 output) validate
against the float64 reference within the e4m3 tolerance, a 3x3 and a 1x1 layer, bare and fused, with scales other
than 1; planted wrong ones fail (the scales dropped, the wrong filter taps); and an e4m3 layer's baselines:
cuBLASLt's fp8 GEMM through torch._scaled_mm on a 1x1 layer, cuDNN's f16 conv in place of the fp8 one PyTorch does
not reach. Run with `pytest -m gpu tests/test_gpu_fp8.py` on an H100 (sm_90) with CuPy, the [dsl] extra and
PyTorch."""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu

from conftest import compile_cases, gpu_cupy  # noqa: E402

cupy = gpu_cupy()

from tuner.core.device import query_device  # noqa: E402
from tuner.core.dtypes import dtype_fields  # noqa: E402
from tuner.core.elements import OperandScales  # noqa: E402
from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.core.layers import Layer  # noqa: E402
from tuner.core.problem import ConvProblem, problem_to_dict  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.families.sm90_dsl.toolchain import dsl_version  # noqa: E402
from tuner.measure.baseline import CUDNN_FP8_ABSENT  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402
from tuner.search.space import make_config  # noqa: E402

E4M3 = dtype_fields("e4m3")
CONV = ConvProblem(n=2, h=16, w=16, c=64, k=128, r=3, s=3, pad=1, **E4M3)
GEMM = ConvProblem(n=2, h=16, w=16, c=128, k=128, r=1, s=1, **E4M3)
PADDED = ConvProblem(n=2, h=16, w=16, c=24, k=64, r=3, s=3, pad=1, **E4M3)  # C zero-padded to 32
STRIDED = ConvProblem(n=2, h=32, w=32, c=64, k=64, r=3, s=3, pad=1, stride=2, **E4M3)
BASE = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
        "swizzle": 1, "tile_q": 8, "split_k": 1}
CASES = {
    "conv_3x3": (CONV, BASE),
    "conv_3x3_bn_residual_relu": (dataclasses.replace(CONV, epilogue=parse_epilogue("scale+bias+residual+relu")),
                                  BASE),
    "conv_3x3_pingpong_k128_cluster": (CONV, {**BASE, "tile": "128x128x128", "schedule": "pingpong",
                                              "cluster": "2x1x1"}),
    "conv_3x3_k32_split3": (CONV, {**BASE, "tile": "128x64x32", "split_k": 3}),
    "conv_3x3_padded_c24": (PADDED, {**BASE, "tile": "128x64x64"}),
    "conv_3x3_stride2": (STRIDED, {**BASE, "tile": "64x64x64", "schedule": "single"}),
    "gemm_1x1": (GEMM, BASE),
    "gemm_1x1_bias_silu": (dataclasses.replace(GEMM, epilogue=parse_epilogue("bias+silu")), BASE),
    # the planted wrong kernel, whose extents are compiled in: built for dilation 2 (pad 2 keeps the output's
    # size), run on CONV
    "conv_dilated": (dataclasses.replace(CONV, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2), BASE),
}
RIGHT = [case for case in CASES if case != "conv_dilated"]


def case_config(case: str):
    problem, params = CASES[case]
    return problem, make_config(problem, "sm90_dsl", params)


@pytest.fixture(scope="module")
def device():
    found = query_device()
    if registry.get("sm90_dsl").device_problem(found) is not None:
        pytest.skip("the sm90_dsl family needs compute capability 9.0")
    if dsl_version() is None:
        pytest.skip("the CuTe DSL is not installed (pip install -e '.[dsl]')")
    return found


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    configs = {case: case_config(case)[1] for case in CASES}
    return compile_cases(device, tmp_path_factory.mktemp("cache_fp8"), configs)


def request(result, problem: ConvProblem, kernel_view: ConvProblem | None = None) -> dict:
    launch = registry.family_of(result.config).rules.launch_args(result.config, kernel_view or problem)
    return EvaluateRequest(str(result.binary.path), result.binary.index, problem, launch, seed=13,
                           l2_bytes=50 << 20, repeats=3, kernel_problem=kernel_view).to_dict()


@pytest.mark.parametrize("case", RIGHT)
def test_an_e4m3_kernel_is_right_and_timed(case, compiled, device, worker):
    """Validated on the worker's random e4m3 operands and per-tensor scales (each uniform(0.5, 2)), also right
    after the timed graph replays."""
    problem, config = case_config(case)
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case].binary, problem, launch)
    assert evaluation.status is Status.ok, evaluation.reason
    assert 0 < evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


@pytest.mark.parametrize("case", ["conv_3x3", "gemm_1x1"])
def test_the_kernel_reads_both_scales_at_every_launch_and_one_without_them_fails(case, compiled, device):
    """One bound kernel, its scales rewritten on the device between launches: with (0.75, 2.5) it validates
    against the reference of those scales; the same kernel with both scales 1 (a kernel that drops them) or the
    filter's 1 (one that drops that one) is off by their product and fails."""
    from tuner.measure.run import KernelLibrary, problem_array
    from tuner.measure.worker import BoundKernel, Workbench

    problem, config = case_config(case)
    assert not problem.epilogue.fused  # the reference is linear in alpha: rescaled below
    launch = registry.family_of(config).rules.launch_args(config, problem)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        bench = Workbench.prepare(problem, launch.kernel_channels, 7, device.l2_bytes, stream, timed=False)
        scales = bench.sets[0].operand_scales
        drawn = OperandScales(*(float(v) for v in scales.get()))
        chosen = OperandScales(0.75, 2.5)
        bench.reference = bench.reference * (chosen.alpha / drawn.alpha)
        library = KernelLibrary(compiled[case].binary)
        bound = BoundKernel(library, problem_array(problem, launch), bench.sets[:1], stream.ptr, problem.epilogue)
        try:
            for values, right in ((chosen.values, True), ((1.0, 1.0), False), ((0.75, 1.0), False),
                                  (chosen.values, True)):
                scales[...] = cupy.asarray(values, dtype=cupy.float32)
                bench.poison(0)
                bound.launch(0, stream.ptr)
                stream.synchronize()
                validation = bench.check(0)
                assert validation.passed is right, (values, validation.error, validation.reason)
                if not right:
                    assert validation.error > 10 * tolerance(problem)
        finally:
            bound.close()


def test_an_e4m3_kernel_of_the_wrong_filter_taps_fails(compiled, worker):
    """The kernel built for dilation 2 (pad 2 keeps the output's size) run on the dilation-1 layer: every output
    written, from the wrong pixels. Validation rejects it, as the layer's own kernel passes."""
    problem, _ = case_config("conv_3x3")
    wrong = CASES["conv_dilated"][0]
    assert (wrong.p, wrong.q) == (problem.p, problem.q)
    rejected = worker.request(request(compiled["conv_dilated"], problem, wrong))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 10 * tolerance(problem)
    accepted = worker.request(request(compiled["conv_3x3"], problem, problem))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


def test_an_f16_layer_through_an_e4m3_kernel_fails(compiled, worker):
    """The f16 layer (two bytes an element, and no scales to hand over) through the e4m3 kernel of its shape: the
    kernel refuses to start without its scales, or computes garbage; never validated."""
    problem, _ = case_config("gemm_1x1")
    f16 = dataclasses.replace(problem, **dtype_fields("f16"))
    answer = worker.request(request(compiled["gemm_1x1"], f16, f16))
    assert answer["status"] in (Status.wrong_result.value, Status.launch_failed.value), answer


def test_an_e4m3_1x1_layers_bench_row_times_the_fp8_gemm_and_the_f16_cudnn_conv(device, worker):
    """The one run's baselines of an e4m3 1x1 layer: cuBLASLt's fp8 GEMM through torch._scaled_mm, and cuDNN's f16
    conv, said to be f16's; a 3x3 layer gets no GEMM, and a GEMM whose C is not a multiple of 16 says why not."""
    pytest.importorskip("torch")
    from tuner.pipeline.one_run import time_baselines

    events = []
    times = time_baselines(worker, Layer("gemm_e4m3", GEMM), device, events.append)
    assert times.cublas_us and times.cublas_us > 0 and times.cudnn_us and times.cudnn_us > 0, events
    answer = worker.request({"op": "cublas", "problem": problem_to_dict(GEMM), "l2_bytes": device.l2_bytes})
    assert answer["cublas_op"] == "torch._scaled_mm e4m3 -> f16" and answer["cublas_us"] > 0
    answer = worker.request({"op": "cudnn", "problem": problem_to_dict(CONV), "l2_bytes": device.l2_bytes})
    assert answer["cudnn_us"] > 0 and answer["timed_dtype"] == "f16" and answer["note"] == CUDNN_FP8_ABSENT
    odd = dataclasses.replace(GEMM, c=24)
    answer = worker.request({"op": "cublas", "problem": problem_to_dict(odd), "l2_bytes": device.l2_bytes})
    assert "cublas_us" not in answer and "multiples of 16" in answer["reason"]
