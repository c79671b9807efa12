"""`tune.py diagnose` (tuner/cli/diagnose.py): the waste table, the verdict lines, the JSON document, and a
bad report, GPU or shape as one error line."""
import re
import subprocess
import time

import pytest
from rich.console import Console

from tuner.analysis.explain import diagnose_report
from tuner.cli.diagnose import render_diagnosis

from conftest import FIXTURES, H100_CUTLASS, RTX3060_CUTLASS, RTX3060_NAIVE, tune_in_process  # noqa: E402

NAIVE_SHAPE = "8,32,32,32,32,3,3,1"


def test_render_diagnosis_shows_each_group_with_its_flags():
    console = Console(record=True, width=300)
    render_diagnosis(diagnose_report(RTX3060_CUTLASS, sms=28), console)
    text = console.export_text()
    for expected in (
        "ImplicitGemmConvolution 128x128x64, 3 stages",
        "21",
        "36.32",
        "8 blocks",
        "128 threads",
        "254",
        "98.3 KB",
        "8.33 % (1 block/SM, shared memory)",
        "small_grid: 8 blocks on 28 SMs: 20 SMs idle (0.29 waves)",
        "occupancy_limit:",
    ):
        assert expected in text


def test_render_diagnosis_of_unflagged_kernels():
    console = Console(record=True, width=300)
    render_diagnosis(diagnose_report(RTX3060_NAIVE, sms=None), console)
    text = console.export_text()
    assert "2x2x256" in text and "16x16x1" in text and "none" in text


@pytest.mark.parametrize("edit, expect", [
    ((r"(# SMs\s+SM\s+)\d+", r"\g<1>0"), "sm_count_unknown"),        # was a ZeroDivisionError
    ((r"(Registers Per Thread\s+register/thread\s+)\d+", r"\g<1>nan"), "lacks registers_per_thread"),  # round(nan)
    ((r"(Grid Size\s+)\d+$", r"\g<1>999999999999999999999"), "grid"),
    ((r"(Block Size\s+)\d+$", r"\g<1>-5"), "128x1x1"),  # the launch line's block stands in
])
def test_odd_numbers_in_a_report_are_unknown_not_tracebacks(tmp_path, edit, expect):
    text = (FIXTURES / "h100_cutlass_conv_1_128x128x64.txt").read_text()
    edited, count = re.subn(edit[0], edit[1], text, flags=re.MULTILINE)
    assert count
    report = tmp_path / "report.txt"
    report.write_text(edited)
    result = tune_in_process("diagnose", str(report), env={"COLUMNS": "250"})
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 2), result.stderr
    if result.returncode == 2:
        assert len(result.stderr.splitlines()) == 1 and expect in result.stderr
    else:
        assert expect in " ".join(result.stdout.split()) or expect in result.stdout


def run_diagnose(*args: str) -> subprocess.CompletedProcess:
    return tune_in_process("diagnose", *args, env={"COLUMNS": "200"})


def test_diagnose_command_prints_the_limiter_estimate_and_tune_command():
    result = run_diagnose(str(RTX3060_NAIVE), "--shape", NAIVE_SHAPE)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "GPU: NVIDIA GeForce RTX 3060 (rtx3060)" in out
    assert "Most of the time (84%): conv2d_backward_kernel" in out
    assert "direct convolution on CUDA cores, not using tensor cores" in out
    assert "tune it: python tune.py --shape 8,32,32,32,32,3,3,1,1,1" in out
    assert "a tuned implicit-GEMM kernel (f16 tensor cores, f32 accumulate) on rtx3060: ~" in out
    assert "not a measurement" in out
    assert "ncu: uncoalesced global accesses: 27 % of sectors are excess (ncu est. speedup 13.3 %)" in out


def test_diagnose_without_a_shape_asks_for_it():
    result = run_diagnose(str(RTX3060_NAIVE))
    assert result.returncode == 0, result.stderr
    assert "give --shape N,H,W,C,K,R,S" in result.stdout and "tune it:" not in result.stdout


def test_diagnose_gpu_flag_on_the_command_line():
    result = run_diagnose(str(H100_CUTLASS), "--gpu", "h100-sxm", "--shape", "1,32,32,32,32,3,3,1")
    assert result.returncode == 0, result.stderr
    assert "GPU: NVIDIA H100 80GB HBM3 (h100-sxm)" in result.stdout and "from --gpu" in result.stdout
    assert "tune it: python tune.py --shape 1,32,32,32,32,3,3,1,1,1" in result.stdout


def test_diagnose_json_is_the_same_verdict_as_one_document():
    result = run_diagnose(str(RTX3060_NAIVE), "--shape", NAIVE_SHAPE, "--json")
    assert result.returncode == 0, result.stderr
    import json

    document = json.loads(result.stdout)  # stdout holds the document and nothing else
    text = run_diagnose(str(RTX3060_NAIVE), "--shape", NAIVE_SHAPE).stdout
    assert document["gpu"]["slug"] == "rtx3060" and "28 SMs" in document["gpu_from"]
    assert document["report"] == str(RTX3060_NAIVE) and document["problem"]["k"] == 32
    first = document["kernels"][0]
    assert first["name"].startswith("conv2d_backward_kernel") and round(first["time_share"] * 100) == 84
    assert f"Most of the time (84%): {first['name']}: {first['limiter']}" in text
    assert first["tensor_cores"] is False and first["convolution"] is True
    assert first["tuned_estimate"]["tune_command"] == "python tune.py --shape 8,32,32,32,32,3,3,1,1,1"
    assert "uncoalesced global accesses: 27 % of sectors are excess (ncu est. speedup 13.3 %)" in first["ncu_warnings"]
    shares = [kernel["time_share"] for kernel in document["kernels"]]
    assert shares == sorted(shares, reverse=True) and len(shares) == text.count("  limiter: ")
    for kernel in document["kernels"]:
        assert kernel["occupancy"]["theoretical_pct"] > 0 and isinstance(kernel["waste"], list)


def test_diagnose_json_without_a_gpu_says_why():
    result = run_diagnose(str(H100_CUTLASS), "--sms", "132", "--json")
    assert result.returncode == 0, result.stderr
    import json

    document = json.loads(result.stdout)
    assert document["problem"] is None and all(k["tuned_estimate"] is None for k in document["kernels"])
    assert document["gpu"] is None and "--gpu NAME picks one" in document["gpu_from"]  # 132 SMs: H100 or H200


def _fixture_cut_short(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_bytes(RTX3060_NAIVE.read_bytes()[:1500])  # the first launch, before its Launch Statistics
    return path


def _sparse_100mb(tmp_path):
    path = tmp_path / "huge.txt"
    subprocess.run(["truncate", "-s", "100M", str(path)], check=True)
    return path


def _binary(tmp_path):
    path = tmp_path / "profile.bin"
    path.write_bytes(b"NVPROF\0" + bytes(range(256)) * 64)
    return path


def _damaged_ncu_rep(tmp_path):
    """Read through ncu_report, which is absent here (or, where present, cannot read it)."""
    path = tmp_path / "profile.ncu-rep"
    path.write_bytes(b"NVPROF\0" + bytes(range(256)) * 64)
    return path


def _empty(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize("make, says", [
    (_empty, "the report is empty"),
    (_binary, "the report is binary"),
    (_damaged_ncu_rep, "ncu_report"),
    (_fixture_cut_short, "conv2d_forward_kernel"),
    (_sparse_100mb, "is 104.9 MB, more than the 64 MiB this reads"),
    (lambda tmp_path: tmp_path, "is not a file"),
])
def test_bad_reports_are_one_line_exit_2(tmp_path, make, says):
    path = make(tmp_path)
    started = time.monotonic()
    result = run_diagnose(str(path))
    assert time.monotonic() - started < 10
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr


def test_unknown_gpu_is_one_line_listing_the_known_ones():
    result = run_diagnose(str(H100_CUTLASS), "--gpu", "h1000")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        ("error: --gpu: unknown GPU 'h1000'; known: rtx3060, rtx4090, a10, a100-40gb, a100-80gb, l4, l40s, "
         "h100-sxm, h100-pcie, h200")]


def test_bad_shape_is_one_line():
    result = run_diagnose(str(H100_CUTLASS), "--shape", "1,2,3")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "--shape" in result.stderr


def test_a_gui_copy_is_diagnosed_without_flags_from_its_device_name():
    from conftest import RTX3060_GUI_COPY

    result = run_diagnose(str(RTX3060_GUI_COPY))
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stderr
    assert "NVIDIA GeForce RTX 3060 (rtx3060)" in out and "from the report's device name" in out
    assert "small grid: 8 blocks on 28 SMs" in out and "latency-bound" in out


def test_a_raw_csv_report_is_diagnosed_with_its_device_and_its_small_grid():
    from conftest import H100_CUDNN_FORMS

    result = run_diagnose(str(H100_CUDNN_FORMS["raw.csv"]))
    out = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stderr
    assert "NVIDIA H100 80GB HBM3" in out and "small grid: 120 blocks on 132 SMs" in out
    assert "tensor cores: yes" in out
