"""Nsight Compute on the finalists, in a process of its own and never while timing: the counters
confirm (or contradict) what the static diagnosis says."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tuner.analysis.diagnose import LaunchFacts, occupancy
from tuner.families.base import LaunchArgs
from tuner.measure.protocol import EvaluateRequest
from tuner.analysis.ncu import LaunchStats, NcuReportError
from tuner.analysis.ncu_csv import parse_csv_report
from tuner.core.problem import ConvProblem
from tuner.build.abi import KernelBinary
from tuner.measure.worker import worker_env

NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy")
NCU_TIMEOUT_S = 300
# The kernels every family launches: CUTLASS 2.x convs (cutlass::Kernel<ImplicitGemmConvolution<...>>),
# 3.x GEMMs and convs (cutlass::device_kernel<...>, whose named kernel struct hides GemmUniversal) and the
# CuTe DSL's (kernel_cutlass_kernel_tunerfamiliessm90_dslkernelConvKernel_...: without it ncu profiled nothing
# of an sm90_dsl layer on the H100).
KERNEL_FILTER = "regex:ImplicitGemmConvolution|device_kernel|sm90_dslkernelConvKernel"


class ProfilerUnavailable(RuntimeError):
    """ncu is missing, or may not read the counters here."""


@dataclass(frozen=True)
class Agreement:
    """One fact as the static diagnosis and ncu each state it."""

    fact: str
    static: float
    ncu: float | None

    @property
    def agrees(self) -> bool:
        return self.ncu is not None and abs(self.static - self.ncu) <= 0.01 * max(1.0, abs(self.static))


def ncu_command(ncu: str, report: Path, request: dict) -> list[str]:
    return [ncu, "--csv", "--page", "details", *(f"--section={s}" for s in NCU_SECTIONS),
            "--clock-control", "none", "--kernel-name-base", "demangled", "-k", KERNEL_FILTER,
            "--launch-count", "1", "--log-file", str(report),
            sys.executable, "-m", "tuner.measure.worker", "--once", json.dumps(request)]


def profile_candidate(binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs) -> LaunchStats:
    """One launch of the candidate under ncu; its launch statistics, occupancy and speed of light."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise ProfilerUnavailable("ncu not found on PATH: install Nsight Compute for confirmed numbers")
    request = EvaluateRequest(str(binary.path), binary.index, problem, launch, seed=1, validate_only=True).to_dict()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "ncu.csv"
        completed = subprocess.run(ncu_command(ncu, report, request), capture_output=True, text=True,
                                   env=worker_env(dict(os.environ)), timeout=NCU_TIMEOUT_S)
        text = report.read_text() if report.exists() else ""
    if "ERR_NVGPUCTRPERM" in text + completed.stdout + completed.stderr:
        raise ProfilerUnavailable("ncu may not read the GPU counters here (ERR_NVGPUCTRPERM)")
    try:
        launches = parse_csv_report(text)
    except NcuReportError as error:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProfilerUnavailable(f"ncu gave no report ({error}; {tail[0]})") from None
    return LaunchStats.from_launch(launches[0])


def agreement(static: LaunchFacts, measured: LaunchStats) -> list[Agreement]:
    occ = occupancy(static)
    return [
        Agreement("grid blocks", static.grid_blocks, measured.grid_blocks),
        Agreement("registers/thread", static.registers_per_thread, measured.registers_per_thread),
        Agreement("smem/block (KB)", static.smem_per_block_bytes / 1000,
                  None if measured.dynamic_smem_per_block_bytes is None else
                  (measured.dynamic_smem_per_block_bytes + (measured.static_smem_per_block_bytes or 0)) / 1000),
        Agreement("theoretical occupancy %", occ.theoretical_pct, measured.theoretical_occupancy_pct),
    ] + ([Agreement("cluster size", static.cluster_size, measured.cluster_size)]
         if static.cluster_size > 1 or (measured.cluster_size or 0) > 1 else [])
