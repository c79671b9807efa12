"""Per-axis problems on the GPU: Inception's 1x7 and 7x1, a stride on the rows only and per-axis pads on the
space-to-depth stem validate against the float64 reference on every family that takes them, and a kernel
handed (or built for) the problem with its axes swapped is rejected. Run with `pytest -m gpu` on a machine with
an NVIDIA GPU and CuPy (the sm90 families on a Hopper GPU, sm90_dsl where the DSL is installed)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
try:
    GPU_COUNT = cupy.cuda.runtime.getDeviceCount()
except cupy.cuda.runtime.CUDARuntimeError:
    GPU_COUNT = 0
if GPU_COUNT == 0:
    pytest.skip("no CUDA GPU", allow_module_level=True)

from conftest import compile_cases  # noqa: E402
from tuner.core.device import query_device  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.families.sm90_dsl.toolchain import dsl_version  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.search.space import make_config  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402

WIDE = ConvProblem(n=4, h=17, w=17, c=64, k=64, r=1, s=7, pad_h=0, pad_w=3)    # Inception's 1x7
TALL = ConvProblem(n=4, h=17, w=17, c=64, k=64, r=7, s=1, pad_h=3, pad_w=0)    # and its 7x1
ROWS_STRIDED = ConvProblem(n=2, h=32, w=32, c=64, k=64, r=3, s=3, pad=1, stride_h=2, stride_w=1)
# Every axis differs, and swapping them keeps the 16x16 output: a kernel that mixes the axes up writes every
# output, with the wrong pixels.
MIXED = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad_h=1, pad_w=2, dilation_h=1, dilation_w=2)
SWAPPED = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad_h=2, pad_w=1, dilation_h=2, dilation_w=1)
STEM = ConvProblem(n=2, h=32, w=32, c=3, k=64, r=7, s=7, pad_h=3, pad_w=2, stride=2)  # 16x15 out: s2d's fold
# C=3: sm90_dsl's gathering producer computes each pixel's window from the per-axis values itself
GATHERED = ConvProblem(n=2, h=64, w=64, c=3, k=32, r=7, s=3, pad_h=3, pad_w=1, stride_h=2, stride_w=1)

SM80 = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1}
SM90_CONV = {"tile": "64x64x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}
SM90_DSL = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
            "swizzle": 1, "tile_q": 0}
SM90_S2D = {"tile": "128x64x16", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}
PARAMS = {"sm80": SM80, "sm90_conv": SM90_CONV, "sm90_dsl": SM90_DSL, "sm90_s2d": SM90_S2D}


def params_of(family: str, problem: ConvProblem) -> dict:
    """A gathering DSL kernel (C < 8) keeps the whole filter: its tile N holds all of K."""
    return {**PARAMS[family], "tile": "128x32x64"} if family == "sm90_dsl" and problem.c < 8 else PARAMS[family]
CASES = {f"{family}_{name}": (family, problem)
         for family in ("sm80", "sm90_conv", "sm90_dsl")
         for name, problem in (("1x7", WIDE), ("7x1", TALL), ("rows_strided", ROWS_STRIDED), ("mixed", MIXED))}
CASES["sm90_s2d_stem_per_axis_pads"] = ("sm90_s2d", STEM)
CASES["sm90_dsl_gathered_stem"] = ("sm90_dsl", GATHERED)
CASES["sm90_dsl_built_swapped"] = ("sm90_dsl", SWAPPED)  # the planted wrong kernel of the DSL


def config_of(case: str):
    family, problem = CASES[case]
    return problem, make_config(problem, family, params_of(family, problem))


@pytest.fixture(scope="module")
def device():
    return query_device()


def runnable(case: str, device) -> str | None:
    """Why this GPU or machine cannot run the case's family, or None."""
    family = registry.get(CASES[case][0])
    if family.name == "sm90_dsl" and dsl_version() is None:
        return "the CuTe DSL is not installed (pip install -e '.[dsl]')"
    return family.device_problem(device)


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    configs = {case: config_of(case)[1] for case in CASES if runnable(case, device) is None}
    return compile_cases(device, tmp_path_factory.mktemp("cache_per_axis"), configs)


@pytest.mark.parametrize("case", [case for case in CASES if case != "sm90_dsl_built_swapped"])
def test_a_per_axis_layer_validates_and_is_timed(case, compiled, device, worker):
    if (why := runnable(case, device)):
        pytest.skip(why)
    problem, config = config_of(case)
    assert registry.family_of(config).rules.static_problems(config, problem, device) == []
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled[case].binary, problem, launch)
    assert evaluation.status is Status.ok, evaluation.reason
    assert evaluation.error < tolerance(problem)
    assert evaluation.measurement.median_us > 0


def request(binary, problem: ConvProblem, kernel_problem: ConvProblem | None, launch) -> dict:
    return EvaluateRequest(str(binary.path), binary.index, problem, launch, seed=7, l2_bytes=50 << 20, repeats=3,
                           kernel_problem=kernel_problem).to_dict()


@pytest.mark.parametrize("family", ["sm80", "sm90_conv", "sm90_dsl"])
def test_a_kernel_with_the_axes_swapped_fails_validation(family, compiled, device, worker):
    """sm80 and sm90_conv read the problem at run time: their MIXED kernel is handed SWAPPED. sm90_dsl compiles
    its problem in: a kernel built for SWAPPED is run on MIXED's inputs. Either computes every output from the
    wrong pixels and must be rejected; the right kernel on the right problem passes."""
    case = f"{family}_mixed"
    if (why := runnable(case, device)):
        pytest.skip(why)
    assert (SWAPPED.p, SWAPPED.q) == (MIXED.p, MIXED.q) == (16, 16)
    _, config = config_of(case)
    launch = registry.family_of(config).rules.launch_args(config, MIXED)
    wrong_binary = compiled["sm90_dsl_built_swapped" if family == "sm90_dsl" else case].binary
    rejected = worker.request(request(wrong_binary, MIXED, SWAPPED, launch))
    assert rejected["status"] == Status.wrong_result.value, rejected
    assert rejected["error"] > 100 * tolerance(MIXED)
    accepted = worker.request(request(compiled[case].binary, MIXED, None, launch))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")
