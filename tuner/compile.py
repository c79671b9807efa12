"""nvcc for candidates: a content-addressed cache and a parallel pool sized to cores and memory."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from tuner.codegen import candidate_source
from tuner.cutlass_pkg import source_path
from tuner.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import KernelConfig

# One CUTLASS candidate takes about this much host memory in nvcc at its peak.
NVCC_PEAK_BYTES = 2 << 30
COMPILE_TIMEOUT_S = 600
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


@dataclass(frozen=True)
class CompileResult:
    config: KernelConfig
    key: str
    library: Path | None
    seconds: float
    cached: bool
    error: str | None
    ptxas: PtxasReport | None

    @property
    def ok(self) -> bool:
        return self.library is not None


def default_cache_dir() -> Path:
    root = os.environ.get("CUTLASS_TUNER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cutlass-conv-tuner")
    return Path(root) / "compile"


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


def cache_key(source: str, flags: list[str]) -> str:
    """SHA-256 of the source, the flags, nvcc's and CUTLASS's versions. The include folders enter as
    CUTLASS's version, not as paths: a cache filled on one machine serves another with the same
    toolchain wherever its wheel is installed."""
    portable = [flag for flag in flags if not flag.startswith("-I")]
    digest = hashlib.sha256()
    for part in (source, "\0".join(portable), nvcc_version(), cutlass_version()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> PtxasReport | None:
    """The conv kernel's resource line; the entry points hold no device code besides it."""
    registers = _PTXAS_REGISTERS.findall(log)
    spills = _PTXAS_SPILLS.findall(log)
    if not registers:
        return None
    stack, stores, loads = (max(int(row[i]) for row in spills) for i in range(3)) if spills else (0, 0, 0)
    return PtxasReport(max(int(r) for r in registers), stores, loads, stack)


def error_excerpt(log: str) -> str:
    errors = [line for line in log.splitlines() if "error" in line.lower()]
    return "\n".join((errors or log.splitlines())[:ERROR_EXCERPT_LINES])


class Compiler:
    def __init__(self, device: DeviceFacts, cache_dir: Path | None = None, jobs: int | None = None):
        self.device = device
        self.cache_dir = cache_dir or default_cache_dir()
        self.jobs = jobs or default_jobs()

    def flags(self, config: KernelConfig) -> list[str]:
        return nvcc_flags(registry.family_of(config).arch_flags(self.device))

    def _entry(self, key: str) -> Path:
        return self.cache_dir / key[:2] / key

    def compile(self, config: KernelConfig) -> CompileResult:
        compiled = config.compiled
        source = candidate_source(compiled)
        flags = self.flags(compiled)
        key = cache_key(source, flags)
        entry = self._entry(key)
        if (entry / "candidate.so").exists():
            return self._result(config, key, entry, seconds=0.0, cached=True)
        if (entry / "error.txt").exists():
            return CompileResult(config, key, None, 0.0, True, (entry / "error.txt").read_text(), None)
        return self._build(config, key, source, flags, entry)

    def _build(self, config: KernelConfig, key: str, source: str, flags: list[str], entry: Path) -> CompileResult:
        entry.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        (scratch / "candidate.cu").write_text(source)
        started = time.monotonic()
        command = ["nvcc", *flags, "candidate.cu", "-o", "candidate.so"]
        try:
            completed = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                       timeout=COMPILE_TIMEOUT_S)
            log, failed = completed.stdout + completed.stderr, completed.returncode != 0
            transient = completed.returncode < 0
            if transient:
                log = f"nvcc killed by signal {-completed.returncode}\n" + log
        except subprocess.TimeoutExpired:
            log, failed, transient = f"nvcc timed out after {COMPILE_TIMEOUT_S} s", True, True
        seconds = time.monotonic() - started
        if transient:  # not the source's fault: report it, cache nothing, retry next time
            shutil.rmtree(scratch, ignore_errors=True)
            return CompileResult(config, key, None, seconds, False, error_excerpt(log), None)
        (scratch / "ptxas.txt").write_text(log)
        if failed:
            (scratch / "error.txt").write_text(error_excerpt(log))
        self._publish(scratch, entry)
        if failed:
            return CompileResult(config, key, None, seconds, False, (entry / "error.txt").read_text(), None)
        return self._result(config, key, entry, seconds=seconds, cached=False)

    @staticmethod
    def _publish(scratch: Path, entry: Path) -> None:
        """Rename into place: a crash never leaves a half-written cache entry."""
        try:
            scratch.rename(entry)
        except OSError:  # another worker published the same key first
            shutil.rmtree(scratch, ignore_errors=True)

    def _result(self, config: KernelConfig, key: str, entry: Path, seconds: float, cached: bool) -> CompileResult:
        ptxas = parse_ptxas((entry / "ptxas.txt").read_text())
        return CompileResult(config, key, entry / "candidate.so", seconds, cached, None, ptxas)

    def compile_many(self, configs: Iterable[KernelConfig],
                     on_done: Callable[[CompileResult], None] | None = None) -> list[CompileResult]:
        configs = list(configs)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self.compile, config) for config in configs]
            for future in as_completed(futures):
                if on_done:
                    on_done(future.result())
        return [future.result() for future in futures]


def default_jobs() -> int:
    cores = os.cpu_count() or 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return cores
    return max(1, min(cores, available // NVCC_PEAK_BYTES))
