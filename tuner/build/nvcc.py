"""The toolchain: nvcc's and CUTLASS's versions and flags, one build command run to its end, what ptxas -v
reports of a kernel, and how many builds the host's cores and memory take at once."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tuner.core.cutlass_pkg import source_path

# One CUTLASS candidate takes about this much host memory in nvcc at its peak.
NVCC_PEAK_BYTES = 2 << 30
COMPILE_TIMEOUT_S = 900
ERROR_EXCERPT_LINES = 12


class ToolchainError(RuntimeError):
    """nvcc or the CUTLASS headers are missing: nothing can be compiled."""


@dataclass(frozen=True)
class PtxasReport:
    registers: int | None
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def cutlass_include_dirs() -> tuple[Path, Path]:
    return source_path / "include", source_path / "tools" / "util" / "include"


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise ToolchainError("nvcc not found on PATH; install the CUDA toolkit or add its bin/ to PATH")
    output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release [\d.]+, V([\d.]+)", output)
    return match.group(1) if match else output.strip().splitlines()[-1]


def cutlass_version() -> str:
    from importlib.metadata import version

    return version("nvidia-cutlass")


def nvcc_flags(arch_flags: list[str]) -> list[str]:
    """Everything but the source and output: the family's arch flags (e.g. -arch=sm_90, or
    -gencode=arch=compute_90a,code=sm_90a for wgmma) after the common ones."""
    include, util_include = cutlass_include_dirs()
    return ["-O3", "-std=c++17", *arch_flags, "--shared", "-Xcompiler", "-fPIC", "-DNDEBUG",
            "-Xptxas", "-v", f"-I{include}", f"-I{util_include}"]


_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def kernel_blocks(log: str, marker: str) -> str:
    """The part of a ptxas -v log about entry functions whose name holds `marker`."""
    blocks = re.split(r"(?=ptxas info\s*: Compiling entry function)", log)
    return "".join(block for block in blocks if marker in block.split("\n", 1)[0])


def parse_ptxas(log: str, marker: str | None = None) -> PtxasReport | None:
    """The conv kernel's resource line (of the kernel whose symbol holds `marker`, in a unit of
    several); the entry points hold no device code besides the kernels."""
    if marker is not None:
        log = kernel_blocks(log, marker)
    registers = _PTXAS_REGISTERS.findall(log)
    spills = _PTXAS_SPILLS.findall(log)
    if not registers:
        return None
    stack, stores, loads = (max(int(row[i]) for row in spills) for i in range(3)) if spills else (0, 0, 0)
    return PtxasReport(max(int(r) for r in registers), stores, loads, stack)


def error_excerpt(log: str) -> str:
    errors = [line for line in log.splitlines() if "error" in line.lower()]
    return "\n".join((errors or log.splitlines())[:ERROR_EXCERPT_LINES])


def run_build(command: list[str], folder: Path) -> tuple[str, bool, bool]:
    """(log, failed, transient) of one build command (nvcc, or a family's builder) run in `folder`; transient:
    it failed for a reason not the source's (killed, timed out), so nothing of it may be cached."""
    try:
        completed = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        log, failed = completed.stdout + completed.stderr, completed.returncode != 0
        # An interrupt reaches nvcc's own children too: cicc then "died due to signal 2" and nvcc
        # exits 1, which must not be cached as the source's fault.
        transient = completed.returncode < 0 or "died due to signal" in log
        if completed.returncode < 0:
            log = f"nvcc killed by signal {-completed.returncode}\n" + log
    except subprocess.TimeoutExpired:
        log, failed, transient = f"nvcc timed out after {COMPILE_TIMEOUT_S} s", True, True
    return log, failed, transient


def default_jobs() -> int:
    cores = os.cpu_count() or 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return cores
    return max(1, min(cores, available // NVCC_PEAK_BYTES))
