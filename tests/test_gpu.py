"""The GPU path, end to end: run with `pytest -m gpu` on a machine with an NVIDIA GPU and CuPy."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
try:
    GPU_COUNT = cupy.cuda.runtime.getDeviceCount()
except cupy.cuda.runtime.CUDARuntimeError:
    GPU_COUNT = 0
if GPU_COUNT == 0:
    pytest.skip("no CUDA GPU", allow_module_level=True)

from tuner.build.compile import Compiler  # noqa: E402
from tuner.core.device import query_device  # noqa: E402
from tuner.analysis.diagnose import kernel_facts  # noqa: E402
from tuner.measure.evaluate import GpuEvaluator, WorkerProcess  # noqa: E402
from tuner.families.base import LaunchArgs  # noqa: E402
from tuner.families.sm80.space import make_config, reference_config  # noqa: E402
from tuner.measure.protocol import EvaluateRequest  # noqa: E402
from tuner.build.abi import ABI_VERSION, KernelBinary  # noqa: E402
from tuner.core.dtypes import DataType  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.analysis.profile import ProfilerUnavailable, agreement, profile_candidate  # noqa: E402
from tuner.core.status import Status  # noqa: E402
from tuner.measure.validate import tolerance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONV_1 = ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, output_type=DataType.f32)
SMALL_PARAMS = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1}


@pytest.fixture(scope="module")
def device():
    return query_device()


@pytest.fixture(scope="module")
def compiled(device, tmp_path_factory):
    compiler = Compiler(device, tmp_path_factory.mktemp("cache"))
    configs = [reference_config(CONV_1), make_config(CONV_1, SMALL_PARAMS)]
    results = {r.config: r for r in compiler.compile_many(configs)}
    assert all(r.ok for r in results.values()), [r.error for r in results.values()]
    return results


def evaluate_request(binary: KernelBinary | Path, kernel_view: ConvProblem | None = None,
                     problem: ConvProblem = CONV_1, launch: LaunchArgs | None = None) -> dict:
    binary = binary if isinstance(binary, KernelBinary) else KernelBinary(binary)
    return EvaluateRequest(str(binary.path), binary.index, problem, launch or LaunchArgs(problem.c), seed=7,
                           l2_bytes=50 << 20, repeats=5, kernel_problem=kernel_view).to_dict()


def test_reference_config_is_right_and_timed(compiled, device, worker):
    reference = compiled[reference_config(CONV_1)]
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=10).evaluate(reference.binary, CONV_1, LaunchArgs(32))
    assert evaluation.status is Status.ok, evaluation.reason
    assert evaluation.error < tolerance(CONV_1)
    assert evaluation.grid == (8, 1, 1)  # 1024 output pixels / 128-row tiles, 32 channels in one 128 tile
    assert evaluation.attributes.registers_per_thread == reference.ptxas.registers
    assert 0.5 < evaluation.measurement.median_us < 1000
    assert evaluation.measurement.copies * CONV_1.bytes_moved >= 3 * device.l2_bytes  # inputs rotate past L2


def test_planted_wrong_kernel_fails_validation(compiled, worker):
    """The kernel is handed dilation 2 (pad 2 keeps the 32x32 output): every output is written, with
    the wrong pixels. Validation must reject it; the same kernel on the true problem passes."""
    library = compiled[make_config(CONV_1, SMALL_PARAMS)].binary
    wrong = dataclasses.replace(CONV_1, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)
    assert (wrong.p, wrong.q) == (CONV_1.p, CONV_1.q)
    rejected = worker.request(evaluate_request(library, wrong))
    assert rejected["status"] == Status.wrong_result.value
    assert rejected["error"] > 100 * tolerance(CONV_1)
    accepted = worker.request(evaluate_request(library))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


def test_planted_wrong_stride_leaves_outputs_unwritten(compiled, worker):
    library = compiled[make_config(CONV_1, SMALL_PARAMS)].binary
    rejected = worker.request(evaluate_request(library, dataclasses.replace(CONV_1, stride_h=2, stride_w=2)))
    assert rejected["status"] == Status.wrong_result.value
    assert "NaN" in rejected["reason"]


def build_faulty(device, folder: Path, misbehaviour: int) -> Path:
    library = folder / f"faulty_{misbehaviour}.so"
    subprocess.run(["nvcc", f"-arch={device.arch_flag}", "--shared", "-Xcompiler", "-fPIC",
                    f"-DMISBEHAVIOUR={misbehaviour}", f"-DTUNER_ABI={ABI_VERSION}", str(REPO / "tests" / "data" / "faulty_candidate.cu"),
                    "-o", str(library)], check=True)
    return library


def test_worker_survives_an_illegal_address(compiled, device, worker, tmp_path):
    faulting = build_faulty(device, tmp_path, 1)
    restarts = worker.restarts
    faulted = worker.request(evaluate_request(faulting))
    assert faulted["status"] == Status.launch_failed.value
    assert "illegal" in faulted["reason"].lower() or "died" in faulted["reason"]
    after = worker.request(evaluate_request(compiled[make_config(CONV_1, SMALL_PARAMS)].binary))
    assert after["status"] == Status.ok.value, after.get("reason")
    assert worker.restarts == restarts + 1


def test_worker_survives_a_hang(compiled, device, tmp_path):
    hanging = build_faulty(device, tmp_path, 2)
    worker = WorkerProcess(timeout_s=20)
    try:
        hung = worker.request(evaluate_request(hanging))
        assert hung["status"] == Status.launch_failed.value and "hang" in hung["reason"]
        after = worker.request(evaluate_request(compiled[make_config(CONV_1, SMALL_PARAMS)].binary))
        assert after["status"] == Status.ok.value, after.get("reason")
    finally:
        worker.close()


def test_static_diagnosis_agrees_with_ncu(compiled, device, worker):
    reference = compiled[reference_config(CONV_1)]
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=3).evaluate(reference.binary, CONV_1, LaunchArgs(32))
    facts = kernel_facts(reference.config, CONV_1, device, evaluation.grid_blocks, evaluation.attributes,
                         reference.ptxas.spill_bytes)
    try:
        stats = profile_candidate(reference.binary, CONV_1, LaunchArgs(32))
    except ProfilerUnavailable as error:
        pytest.skip(str(error))
    rows = agreement(facts, stats)
    assert all(row.agrees for row in rows), rows
    assert stats.grid_blocks == 8 and stats.registers_per_thread == reference.ptxas.registers


def test_short_conv_1_study_writes_best_yaml(tmp_path):
    command = [sys.executable, "tune.py", "--layer", "conv_1", "--trials", "6", "--results-dir", str(tmp_path),
               "--top", "2", "--confirm-rounds", "1", "--ncu-top", "1"]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=580)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    [best] = tmp_path.glob("*/best.yaml")
    entry = yaml.safe_load(best.read_text())["layers"]["conv_1"]
    assert entry["runtime_us"] > 0 and entry["rel_l2_error"] < tolerance(CONV_1)
    assert entry["reference"]["runtime_us"] > 0
    assert "occupancy" in entry and isinstance(entry["waste"], list)
    assert "re-measured side by side" in completed.stdout


# --- the Hopper families: each validates, times, and rejects a planted wrong kernel -------------------

CONV_3X3 = ConvProblem(n=2, h=16, w=16, c=64, k=128, r=3, s=3, pad=1)
GEMM_1X1 = ConvProblem(n=2, h=16, w=16, c=128, k=128, r=1, s=1)
GEMM_1X1_WIDE = ConvProblem(n=2, h=12, w=12, c=64, k=256, r=1, s=1)  # 288 pixels, 256 channels: no square
STEM = ConvProblem(n=2, h=32, w=32, c=3, k=64, r=7, s=7, pad=3, stride=2)
ODD_STRIDED = ConvProblem(n=3, h=17, w=15, c=4, k=32, r=3, s=3, pad=1, stride=2)
SM90_CASES = {
    "sm90_conv": ("sm90_conv", CONV_3X3, {"tile": "64x128x64", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}),
    "sm90_conv_cluster": ("sm90_conv", CONV_3X3, {"tile": "128x128x64", "cluster": "2x1x1", "stages": 0, "epilogue": "nosmem"}),
    "sm90_gemm": ("sm90_gemm", GEMM_1X1, {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative",
                             "scheduler": "persistent", "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1,
                             "split_k": 1}),
    "sm90_gemm_stream_k": ("sm90_gemm", GEMM_1X1, {"tile": "128x128x64", "cluster": "2x1x1", "schedule": "cooperative",
                                      "scheduler": "stream_k", "epilogue": "tma", "stages": 0, "raster": 0,
                                      "swizzle": 1, "split_k": 2}),
    "sm90_gemm_pingpong": ("sm90_gemm", GEMM_1X1, {"tile": "64x128x64", "cluster": "1x2x1", "schedule": "pingpong",
                                      "scheduler": "persistent", "epilogue": "nosmem", "stages": 0, "raster": 2,
                                      "swizzle": 2, "split_k": 1}),
    # the transposed product: A the filter, B the activations, D column-major (the same NHWC buffers)
    "sm90_gemm_swapped": ("sm90_gemm", GEMM_1X1_WIDE, {"tile": "128x64x64", "cluster": "2x1x1",
                                                       "schedule": "cooperative", "scheduler": "persistent",
                                                       "epilogue": "tma", "stages": 0, "raster": 0, "swizzle": 1,
                                                       "split_k": 1, "swap_ab": True}),
    # an explicit epilogue subtile (128x128, two per tile) in place of CUTLASS's 128x32
    "sm90_gemm_wide_subtile": ("sm90_gemm", GEMM_1X1_WIDE, {"tile": "128x256x64", "cluster": "1x1x1",
                                                            "schedule": "cooperative", "scheduler": "persistent",
                                                            "epilogue": "tma", "stages": 0, "raster": 0,
                                                            "swizzle": 1, "split_k": 1, "epilogue_n": 128}),
    "sm90_s2d": ("sm90_s2d", STEM, {"tile": "128x64x16", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}),
    "sm90_s2d_odd": ("sm90_s2d", ODD_STRIDED, {"tile": "64x32x16", "cluster": "2x1x1", "stages": 6,
                                               "epilogue": "nosmem"}),
}


def sm90_config(case: str):
    from tuner.search.space import make_config as family_config

    family, problem, params = SM90_CASES[case]
    return problem, family_config(problem, family, params)


@pytest.fixture(scope="module")
def compiled_sm90(device, tmp_path_factory):
    if device.cc != 90:
        pytest.skip("the sm90 families need compute capability 9.0")
    # Two jobs: the five sm90_gemm kernels compile as a unit of three and a unit of two (ABI 3's
    # several kernels per library are exercised on the GPU too).
    compiler = Compiler(device, tmp_path_factory.mktemp("cache90"), jobs=2)
    configs = {case: sm90_config(case)[1] for case in SM90_CASES}
    results = {r.config: r for r in compiler.compile_many(list(configs.values()))}
    assert all(r.ok for r in results.values()), [r.error for r in results.values()]
    assert max(r.unit_size for r in results.values()) == 3 and {r.index for r in results.values()} == {0, 1, 2}
    return {case: results[config] for case, config in configs.items()}


@pytest.mark.parametrize("case", list(SM90_CASES))
def test_sm90_kernel_is_right_and_timed(case, compiled_sm90, device, worker):
    from tuner.families import registry

    problem, config = sm90_config(case)
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(compiled_sm90[case].binary, problem,
                                                                          launch)
    assert evaluation.status is Status.ok, evaluation.reason  # also right after the timed graph replays
    assert evaluation.error < tolerance(problem)
    assert evaluation.cluster == (config.cluster.m, config.cluster.n, 1)
    assert evaluation.attributes.dynamic_smem_bytes > 0 and evaluation.measurement.median_us > 0


@pytest.mark.parametrize("case", ["sm90_conv", "sm90_gemm", "sm90_gemm_stream_k", "sm90_gemm_swapped",
                                  "sm90_gemm_wide_subtile", "sm90_s2d"])
def test_sm90_planted_wrong_kernel_fails_validation(case, compiled_sm90, worker):
    """sm90_conv is handed dilation 2 (every output written, wrong pixels); sm90_gemm and sm90_s2d half
    the batch (half the outputs never written). All must be rejected; on the true problem they pass."""
    from tuner.families import registry

    problem, config = sm90_config(case)
    launch = registry.family_of(config).rules.launch_args(config, problem)
    if config.family == "sm90_conv":
        wrong = dataclasses.replace(problem, dilation_h=2, dilation_w=2, pad_h=2, pad_w=2)
        assert (wrong.p, wrong.q) == (problem.p, problem.q)
    else:
        wrong = dataclasses.replace(problem, n=1)
    library = compiled_sm90[case].binary
    rejected = worker.request(evaluate_request(library, wrong, problem, launch))
    assert rejected["status"] == Status.wrong_result.value, rejected
    accepted = worker.request(evaluate_request(library, None, problem, launch))
    assert accepted["status"] == Status.ok.value, accepted.get("reason")


def test_sm90_static_facts_agree_with_ncu(compiled_sm90, device, worker):
    from tuner.families import registry

    problem, config = sm90_config("sm90_gemm")
    result = compiled_sm90["sm90_gemm"]
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=3).evaluate(result.binary, problem, launch)
    facts = kernel_facts(config, problem, device, evaluation.grid_blocks, evaluation.attributes,
                         result.ptxas.spill_bytes)
    try:
        stats = profile_candidate(result.binary, problem, launch)
    except ProfilerUnavailable as error:
        pytest.skip(str(error))
    rows = agreement(facts, stats)
    assert all(row.agrees for row in rows), rows


# --- fused epilogues (sm90 families) ---------------------------------------------------------------------
def with_epilogue(problem: ConvProblem, text: str) -> ConvProblem:
    from tuner.core.epilogue import parse_epilogue

    return dataclasses.replace(problem, epilogue=parse_epilogue(text))


FUSED_CASES = {
    "conv_bn_residual_relu": ("sm90_conv", with_epilogue(CONV_3X3, "scale+bias+residual+relu"),
                              SM90_CASES["sm90_conv"][2]),
    "conv_bn_residual": ("sm90_conv", with_epilogue(CONV_3X3, "scale+bias+residual"), SM90_CASES["sm90_conv"][2]),
    "gemm_bias_silu": ("sm90_gemm", with_epilogue(GEMM_1X1, "bias+silu"), SM90_CASES["sm90_gemm"][2]),
    "gemm_stream_k_half_residual_gelu": ("sm90_gemm", with_epilogue(GEMM_1X1, "scale+bias+residual*0.5+gelu"),
                                         SM90_CASES["sm90_gemm_stream_k"][2]),
    # ws (non-persistent) with a residual: the kernel that loads it under the MMAs (early_residual.h), in a
    # cluster, so that multicast peers and the producer's tail are exercised too
    "gemm_ws_bn_residual_relu": ("sm90_gemm", with_epilogue(GEMM_1X1, "scale+bias+residual+relu"),
                                 {**SM90_CASES["sm90_gemm"][2], "tile": "64x128x64", "cluster": "1x2x1",
                                  "schedule": "ws"}),
    "gemm_swapped_bn_residual_relu": ("sm90_gemm", with_epilogue(GEMM_1X1_WIDE, "scale+bias+residual+relu"),
                                      SM90_CASES["sm90_gemm_swapped"][2]),
    # vectors loaded into registers at kernel start (prefetch_fusion.h): a tile N (128) past the last channel
    # (40), and two elements a thread (tile N 256) with the second tile ragged (384 channels)
    "conv_ragged_n_bn_relu": ("sm90_conv", with_epilogue(ConvProblem(n=1, h=16, w=16, c=32, k=40, r=3, s=3, pad=1),
                                                         "scale+bias+relu"), SM90_CASES["sm90_conv"][2]),
    "gemm_ws_wide_bn_relu": ("sm90_gemm", with_epilogue(ConvProblem(n=2, h=8, w=8, c=64, k=384, r=1, s=1),
                                                        "scale+bias+relu"),
                             {**SM90_CASES["sm90_gemm"][2], "tile": "64x256x64", "schedule": "ws"}),
    "s2d_bn_relu": ("sm90_s2d", with_epilogue(STEM, "scale+bias+relu"), SM90_CASES["sm90_s2d"][2]),
    # pingpong with 64x64 epilogue subtiles (four per tile) reading the residual and the vectors
    "gemm_pingpong_subtile_bn_residual_relu": ("sm90_gemm", with_epilogue(GEMM_1X1_WIDE, "scale+bias+residual+relu"),
                                               {**SM90_CASES["sm90_gemm"][2], "tile": "64x256x64",
                                                "schedule": "pingpong", "epilogue_n": 64}),
    "sm80_bn_residual_relu": ("sm80", with_epilogue(CONV_3X3, "scale+bias+residual+relu"), SMALL_PARAMS),
    "sm80_bn_residual": ("sm80", with_epilogue(CONV_3X3, "scale+bias+residual"), SMALL_PARAMS),
    "sm80_stem_bias_silu": ("sm80", with_epilogue(STEM, "bias+silu"),
                            {**SMALL_PARAMS, "tile": "128x64x32", "warps": "2x2x1", "iterator": "fixed_channels"}),
}


@pytest.fixture(scope="module")
def compiled_fused(device, tmp_path_factory):
    from tuner.search.space import make_config as family_config

    cases = {case: spec for case, spec in FUSED_CASES.items() if device.cc == 90 or spec[0] == "sm80"}
    configs = {case: family_config(problem, family, params) for case, (family, problem, params) in cases.items()}
    compiler = Compiler(device, tmp_path_factory.mktemp("cache_fused"))
    results = {r.config: r for r in compiler.compile_many(list(configs.values()))}
    assert all(r.ok for r in results.values()), [r.error for r in results.values()]
    return {case: (FUSED_CASES[case][1], config, results[config]) for case, config in configs.items()}


@pytest.mark.parametrize("case", list(FUSED_CASES))
def test_fused_epilogue_is_right_and_timed(case, compiled_fused, device, worker):
    from tuner.families import registry

    problem, config, result = compiled_fused[case]
    launch = registry.family_of(config).rules.launch_args(config, problem)
    evaluation = GpuEvaluator(device.l2_bytes, worker, repeats=5).evaluate(result.binary, problem, launch)
    assert evaluation.status is Status.ok, evaluation.reason  # against the float64 conv + epilogue
    assert evaluation.error < tolerance(problem)


@pytest.mark.parametrize("kernel_case, layer_epilogue, passes", [
    ("conv_bn_residual", "scale+bias+residual+relu", False),          # ReLU dropped
    ("gemm_bias_silu", "bias+gelu", False),                           # SiLU where the layer has GELU
    ("conv_bn_residual_relu", "scale+bias+residual*0.5+relu", True),  # control: beta is a run-time operand
    ("gemm_swapped_bn_residual_relu", "scale+bias+residual", False),  # a ReLU the layer does not have
    ("gemm_ws_bn_residual_relu", "scale+bias+residual*0.5+relu", True),  # control: early residual, beta
    ("gemm_ws_bn_residual_relu", "scale+bias+residual+silu", False),  # ReLU where the layer has SiLU
    ("gemm_swapped_bn_residual_relu", "scale+bias+residual*2+relu", True),  # control, swapped: beta at run time
    ("gemm_pingpong_subtile_bn_residual_relu", "scale+bias+residual", False),  # explicit subtile: ReLU extra
    ("gemm_pingpong_subtile_bn_residual_relu", "scale+bias+residual*0.5+relu", True),  # its control
    ("sm80_bn_residual", "scale+bias+residual+relu", False),          # sm80: ReLU dropped
    ("sm80_bn_residual_relu", "scale+bias+residual*0.5+relu", True),  # sm80 control
])
def test_a_wrong_epilogue_fails_validation(kernel_case, layer_epilogue, passes, compiled_fused, worker):
    """A kernel whose epilogue differs from the layer's must fail against the float64 reference."""
    from tuner.families import registry

    kernel_problem, config, result = compiled_fused[kernel_case]
    layer = with_epilogue(kernel_problem, layer_epilogue)
    launch = registry.family_of(config).rules.launch_args(config, layer)
    answer = worker.request(evaluate_request(result.binary, None, layer, launch))
    if passes:
        assert answer["status"] == Status.ok.value, answer
    else:
        assert answer["status"] == Status.wrong_result.value, (layer_epilogue, answer)
        assert answer["error"] > 10 * tolerance(layer)


def test_a_kernel_refuses_a_residual_it_was_not_built_to_read(compiled_fused, worker):
    from tuner.families import registry

    _, config, result = compiled_fused["gemm_bias_silu"]
    layer = with_epilogue(GEMM_1X1, "bias+residual+silu")
    answer = worker.request(evaluate_request(result.binary, None, layer, registry.family_of(config).rules.launch_args(config, layer)))
    assert answer["status"] == Status.launch_failed.value and "cutlass::Status" in answer["reason"], answer


def test_diagnose_reads_a_real_ncu_rep(compiled_sm90, tmp_path):
    """An .ncu-rep recorded here, read through Nsight Compute's own ncu_report by `tune.py diagnose`."""
    import shutil

    from tuner.families import registry
    from tuner.analysis.ncu_file import ncu_report_folder
    from tuner.measure.worker import worker_env

    ncu = shutil.which("ncu")
    if ncu is None or ncu_report_folder() is None:
        pytest.skip("ncu or its Python report interface is not installed here")
    problem, config = sm90_config("sm90_gemm")
    binary = compiled_sm90["sm90_gemm"].binary
    launch = registry.family_of(config).rules.launch_args(config, problem)
    request = EvaluateRequest(str(binary.path), binary.index, problem, launch, seed=1, validate_only=True).to_dict()
    report = tmp_path / "gemm.ncu-rep"
    recorded = subprocess.run([ncu, "--section", "SpeedOfLight", "--section", "LaunchStats", "--section", "Occupancy",
                               "--clock-control", "none", "-k", "regex:device_kernel", "--launch-count", "1", "-f",
                               "-o", str(report.with_suffix("")), sys.executable, "-m", "tuner.measure.worker", "--once",
                               __import__("json").dumps(request)],
                              capture_output=True, text=True, env=worker_env(dict(__import__("os").environ)), timeout=300)
    if "ERR_NVGPUCTRPERM" in recorded.stdout + recorded.stderr:
        pytest.skip("ncu may not read the GPU counters here")
    assert report.is_file(), recorded.stdout[-2000:] + recorded.stderr[-2000:]
    diagnosed = subprocess.run([sys.executable, str(REPO / "tune.py"), "diagnose", str(report)],
                               capture_output=True, text=True, timeout=120)
    assert diagnosed.returncode == 0, diagnosed.stdout[-2000:] + diagnosed.stderr[-2000:]
    assert "132 SMs" in diagnosed.stdout or "NVIDIA H" in diagnosed.stdout, diagnosed.stdout[-2000:]
    assert "device_kernel" in diagnosed.stdout, diagnosed.stdout[-2000:]
