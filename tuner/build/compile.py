"""nvcc for candidates: a content-addressed cache and a parallel pool sized to cores and memory."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import closing
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Iterable

from tuner.build.codegen import candidate_source, group_source, kernel_symbol_marker
from tuner.core.cutlass_pkg import source_path
from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import BuildRequest, KernelConfig
from tuner.build.abi import KernelBinary

# One CUTLASS candidate takes about this much host memory in nvcc at its peak.
NVCC_PEAK_BYTES = 2 << 30
COMPILE_TIMEOUT_S = 900
ERROR_EXCERPT_LINES = 12
# Kernels of one family compiled in one translation unit parse the CUTLASS headers once: on a 2-core
# host four sm90_conv kernels took 73 s together against 184 s apart (docs/compile.md).
# Only families whose kernel symbols name their alias are grouped (ptxas's report is per symbol).
MAX_KERNELS_PER_UNIT = 4
MEMBER_FILE = "member.json"


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
    index: int = 0        # the kernel's index in the library (several compiled in one unit)
    unit_size: int = 1    # kernels compiled in the same nvcc run
    transient: bool = False  # failed for a reason not the source's (killed, timed out): try again later

    @property
    def ok(self) -> bool:
        return self.library is not None

    @property
    def binary(self) -> KernelBinary:
        if self.library is None:
            raise ValueError(f"{self.config.name} did not compile")
        return KernelBinary(self.library, self.index)


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


def builder_cache_key(request: BuildRequest) -> str:
    """SHA-256 of a family builder's source and its toolchain's version (no nvcc involved)."""
    digest = hashlib.sha256()
    for part in ("builder", request.source, request.toolchain):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


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


def remove_stale_scratch(folder: Path, older_than_s: float = COMPILE_TIMEOUT_S + 60) -> list[Path]:
    """Remove the scratch folders (.<key>-*) of builds killed before they could publish or clean up (a
    SIGKILLed nvcc's stayed forever): none older than the build timeout can still be in use."""
    removed = []
    cutoff = time.time() - older_than_s
    for scratch in folder.glob(".*-*"):
        try:
            if scratch.is_dir() and scratch.stat().st_mtime < cutoff:
                shutil.rmtree(scratch, ignore_errors=True)
                removed.append(scratch)
        except OSError:  # another worker removed it first
            continue
    return removed


class Compiler:
    def __init__(self, device: DeviceFacts, cache_dir: Path | None = None, jobs: int | None = None,
                 kernels_per_unit: int = MAX_KERNELS_PER_UNIT):
        self.device = device
        self.cache_dir = cache_dir or default_cache_dir()
        self.jobs = jobs or default_jobs()
        self.kernels_per_unit = kernels_per_unit
        self.builders = BuilderPool()

    def close(self) -> None:
        """Ends the long-lived builders (they also end with this process)."""
        self.builders.close()

    def prestart(self, configs: Iterable[KernelConfig]) -> None:
        """Start the long-lived builders that `configs`' uncached kernels will need, one per job at most."""
        needed: dict[tuple[str, ...], int] = {}
        for kernel in dict.fromkeys(config.compiled for config in configs):
            key, _, _, request = self._key(kernel)
            if request is None or not request.serve_command or self._cached_at(kernel, key) is not None:
                continue
            needed[request.serve_command] = needed.get(request.serve_command, 0) + 1
            if needed[request.serve_command] >= self.jobs:
                break
        for command, count in needed.items():
            self.builders.prestart(command, min(count, self.jobs))

    def flags(self, config: KernelConfig) -> list[str]:
        return nvcc_flags(registry.family_of(config).emitter.arch_flags(self.device))

    def _entry(self, key: str) -> Path:
        return self.cache_dir / key[:2] / key

    def _key(self, config: KernelConfig) -> tuple[str, str, list[str], BuildRequest | None]:
        """The cache key, the source, nvcc's flags and the family's own build request (None: nvcc)."""
        request = registry.family_of(config).emitter.build_request(config.compiled)
        if request is not None:
            return builder_cache_key(request), request.source, [], request
        source = candidate_source(config.compiled)
        flags = self.flags(config.compiled)
        return cache_key(source, flags), source, flags, None

    def cached(self, config: KernelConfig) -> CompileResult | None:
        """The cache's answer for a configuration, compiled alone or in a unit with others; None: not built."""
        return self._cached_at(config, self._key(config)[0])

    def _cached_at(self, config: KernelConfig, key: str) -> CompileResult | None:
        entry = self._entry(key)
        if (entry / "candidate.so").exists():
            return self._result(config, key, entry, seconds=0.0, cached=True)
        if (entry / "error.txt").exists():
            return CompileResult(config, key, None, 0.0, True, (entry / "error.txt").read_text(), None)
        if (entry / MEMBER_FILE).exists():
            member = json.loads((entry / MEMBER_FILE).read_text())
            unit = self._entry(member["unit"])
            if (unit / "candidate.so").exists():
                ptxas = parse_ptxas((unit / "ptxas.txt").read_text(), kernel_symbol_marker(member["index"]))
                return CompileResult(config, key, unit / "candidate.so", 0.0, True, None, ptxas,
                                     index=member["index"], unit_size=member["size"])
        return None

    def compile(self, config: KernelConfig) -> CompileResult:
        found = self.cached(config)
        if found is not None:
            return found
        key, source, flags, request = self._key(config)
        return self._build(config, key, source, flags, self._entry(key), request)

    def _nvcc(self, source: str, flags: list[str], key: str, entry: Path,
              request: BuildRequest | None = None) -> tuple[Path | None, str, bool, float]:
        """One nvcc run (or the family's own builder, for a `request`) in a scratch folder next to the
        entry: (scratch folder or None when the failure was not the source's, the log, whether it failed,
        seconds)."""
        entry.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_scratch(entry.parent)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        source_file = request.source_file if request else "candidate.cu"
        (scratch / source_file).write_text(source)
        started = time.monotonic()
        command = list(request.command) if request else ["nvcc", *flags, "candidate.cu", "-o", "candidate.so"]
        if request and request.serve_command:
            log, failed, transient = self.builders.build(request, scratch, COMPILE_TIMEOUT_S)
            return self._settle_build(scratch, log, failed, transient, time.monotonic() - started, request)
        try:
            completed = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                       timeout=COMPILE_TIMEOUT_S)
            log, failed = completed.stdout + completed.stderr, completed.returncode != 0
            # An interrupt reaches nvcc's own children too: cicc then "died due to signal 2" and nvcc
            # exits 1, which must not be cached as the source's fault.
            transient = completed.returncode < 0 or "died due to signal" in log
            if completed.returncode < 0:
                log = f"nvcc killed by signal {-completed.returncode}\n" + log
        except subprocess.TimeoutExpired:
            log, failed, transient = f"nvcc timed out after {COMPILE_TIMEOUT_S} s", True, True
        return self._settle_build(scratch, log, failed, transient, time.monotonic() - started, request)

    @staticmethod
    def _settle_build(scratch: Path, log: str, failed: bool, transient: bool, seconds: float,
                      request: BuildRequest | None) -> tuple[Path | None, str, bool, float]:
        if transient:  # not the source's fault: cache nothing, retry next time
            shutil.rmtree(scratch, ignore_errors=True)
            return None, log, True, seconds
        # A family's builder writes its kernel's resource line to ptxas.txt itself; nvcc's is in its log.
        (scratch / ("build.log" if request and (scratch / "ptxas.txt").exists() else "ptxas.txt")).write_text(log)
        if failed:
            (scratch / "error.txt").write_text(error_excerpt(log))
        return scratch, log, failed, seconds

    def _build(self, config: KernelConfig, key: str, source: str, flags: list[str], entry: Path,
               request: BuildRequest | None = None) -> CompileResult:
        scratch, log, failed, seconds = self._nvcc(source, flags, key, entry, request)
        if scratch is None:
            return CompileResult(config, key, None, seconds, False, error_excerpt(log), None, transient=True)
        self._publish(scratch, entry)
        if failed:
            return CompileResult(config, key, None, seconds, False, (entry / "error.txt").read_text(), None)
        return self._result(config, key, entry, seconds=seconds, cached=False)

    def _build_unit(self, configs: list[KernelConfig]) -> list[CompileResult]:
        """Several kernels of one family in one nvcc run, each then cached under its own key as a member
        of the unit. A unit that fails to compile is built again kernel by kernel, so that one bad
        configuration is cached as bad alone."""
        if len(configs) == 1:
            return [self.compile(configs[0])]
        flags = self.flags(configs[0])
        source = group_source([c.compiled for c in configs])
        unit_key = cache_key(source, flags)
        unit = self._entry(unit_key)
        scratch, log, failed, seconds = self._nvcc(source, flags, unit_key, unit)
        if scratch is None:
            return [CompileResult(c, self._key(c)[0], None, seconds, False, error_excerpt(log), None, transient=True)
                    for c in configs]
        if failed:
            shutil.rmtree(scratch, ignore_errors=True)
            return [self.compile(config) for config in configs]
        self._publish(scratch, unit)
        results = []
        for index, config in enumerate(configs):
            key = self._key(config)[0]
            member = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=unit.parent))
            (member / MEMBER_FILE).write_text(json.dumps({"unit": unit_key, "index": index, "size": len(configs)}))
            self._entry(key).parent.mkdir(parents=True, exist_ok=True)
            self._publish(member, self._entry(key))
            ptxas = parse_ptxas((unit / "ptxas.txt").read_text(), kernel_symbol_marker(index))
            results.append(CompileResult(config, key, unit / "candidate.so", seconds, False, None, ptxas,
                                         index=index, unit_size=len(configs)))
        return results

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

    def units(self, configs: list[KernelConfig]) -> list[list[KernelConfig]]:
        """Uncached kernels cut into compile units: each family's kernels spread over the cores, up to
        `kernels_per_unit` per unit where the family's symbols let ptxas's report be told apart."""
        by_family: dict[str, list[KernelConfig]] = {}
        for config in configs:
            by_family.setdefault(config.family, []).append(config)
        units = []
        for family, members in by_family.items():
            groupable = registry.get(family).emitter.groupable
            size = min(self.kernels_per_unit, math.ceil(len(members) / self.jobs)) if groupable else 1
            units += [members[i:i + size] for i in range(0, len(members), max(1, size))]
        return units

    def open_queue(self) -> CompileQueue:
        """A queue that compiles in the background on `jobs` threads until it is closed."""
        return CompileQueue(self)

    def compile_many(self, configs: Iterable[KernelConfig],
                     on_done: Callable[[CompileResult], None] | None = None) -> list[CompileResult]:
        """Every configuration's library; a kernel shared by several (run-time knobs) is built once."""
        with closing(self.open_queue()) as queue:
            futures = queue.submit(configs)
            if on_done:
                for future in as_completed(futures):
                    on_done(future.result())
            return [future.result() for future in futures]


class BuilderPool:
    """Long-lived builders (BuildRequest.serve_command), started as builds need them and kept for the next
    one: each imports its toolchain once. One JSON line a job each way: {"folder", "source_file"} in,
    {"rc", "log"} out. A builder that dies or overruns the timeout is killed, and its job is a transient
    failure (built again later, not cached)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, ...], list[subprocess.Popen]] = {}

    def prestart(self, command: tuple[str, ...], count: int) -> None:
        """Start builders until `count` of `command` are idle, without waiting for them: their toolchain
        imports while the study is set up, instead of in front of the first builds."""
        with self.lock:
            idle = self.idle.setdefault(command, [])
            missing = count - len(idle)
        started = [self._start(command) for _ in range(max(0, missing))]
        with self.lock:
            self.idle[command].extend(started)

    @staticmethod
    def _start(command: tuple[str, ...]) -> subprocess.Popen:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)

    def build(self, request: BuildRequest, folder: Path, timeout_s: float) -> tuple[str, bool, bool]:
        """(log, failed, transient) of building `request` in `folder`."""
        command = request.serve_command
        with self.lock:
            process = self.idle.get(command, []).pop() if self.idle.get(command) else None
        if process is None:
            process = self._start(command)
        try:
            process.stdin.write(json.dumps({"folder": str(folder), "source_file": request.source_file}) + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], timeout_s)
            line = process.stdout.readline() if ready else ""
            answer = json.loads(line) if line else None
        except (OSError, ValueError):
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("log"), str):
            process.kill()
            process.wait()
            return f"the builder gave no answer in {timeout_s:.0f} s (or died): killed", True, True
        with self.lock:
            self.idle.setdefault(command, []).append(process)
        return answer["log"], answer.get("rc") != 0, False

    def close(self) -> None:
        with self.lock:
            processes = [p for group in self.idle.values() for p in group]
            self.idle.clear()
        for process in processes:
            process.stdin.close()  # a builder ends at the end of its input
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


class CompileQueue:
    """Compiles submitted configurations on `compiler.jobs` threads that live until close(), each
    submission returning at once with one future per configuration. A kernel is built once however
    many configurations share it (run-time knobs), in one submission or across submissions while its
    build is in flight; a submission's uncached kernels are cut into units as `Compiler.units` cuts them."""

    def __init__(self, compiler: Compiler):
        self.compiler = compiler
        self.pool = ThreadPoolExecutor(max_workers=compiler.jobs, thread_name_prefix="nvcc")
        self.lock = threading.Lock()
        self.building: dict[KernelConfig, Future[CompileResult]] = {}  # kernel -> its build, in flight

    def submit(self, configs: Iterable[KernelConfig]) -> list[Future[CompileResult]]:
        configs = list(configs)
        builds: dict[KernelConfig, Future[CompileResult]] = {}
        missing = []
        for kernel in dict.fromkeys(config.compiled for config in configs):
            with self.lock:
                in_flight = self.building.get(kernel)
            if in_flight is not None:
                builds[kernel] = in_flight
                continue
            builds[kernel] = Future()
            found = self.compiler.cached(kernel)
            if found is None:
                missing.append(kernel)
            else:
                builds[kernel].set_result(found)
        with self.lock:
            self.building.update((kernel, builds[kernel]) for kernel in missing)
        for unit in self.compiler.units(missing):
            self.pool.submit(self._build, unit).add_done_callback(partial(self._settle_unbuilt, unit))
        return [_for_config(builds[config.compiled], config) for config in configs]

    def _build(self, unit: list[KernelConfig]) -> None:
        results = self.compiler._build_unit(unit)
        builds = dict(zip(unit, self._finished(unit)))
        for result in results:
            builds[result.config.compiled].set_result(result)

    def _settle_unbuilt(self, unit: list[KernelConfig], job: Future[None]) -> None:
        """A unit dropped before it started (the queue closed) or whose build raised: its kernels'
        futures say so, and nobody waits on them for ever."""
        if job.cancelled():
            for build in self._finished(unit):
                build.cancel()
        elif (error := job.exception()) is not None:
            for build in self._finished(unit):
                build.set_exception(error)

    def _finished(self, unit: list[KernelConfig]) -> list[Future[CompileResult]]:
        """The unit's builds, no longer in flight: a later submission of one of its kernels asks the
        cache again (a transient failure is built again, as compile_many would)."""
        with self.lock:
            return [self.building.pop(kernel) for kernel in unit]

    def close(self) -> None:
        """Drops the units not started (their futures cancelled at once) and waits for those nvcc is
        running (an interrupt reaches nvcc too, which then ends at once): no compile outlives the run
        to compete for the cores with the next one."""
        self.pool.shutdown(wait=True, cancel_futures=True)


class CompletedQueue:
    """A CompileQueue for a compiler that answers at once (the replay's, tests'): every future is done
    when submit returns."""

    def __init__(self, compile_many: Callable[[list[KernelConfig]], list[CompileResult]]):
        self.compile_many = compile_many

    def submit(self, configs: Iterable[KernelConfig]) -> list[Future[CompileResult]]:
        return [_done(result) for result in self.compile_many(list(configs))]

    def close(self) -> None:
        pass


def _done(result: CompileResult) -> Future[CompileResult]:
    future: Future[CompileResult] = Future()
    future.set_result(result)
    return future


def _for_config(build: Future[CompileResult], config: KernelConfig) -> Future[CompileResult]:
    """The kernel's build as the result of one configuration compiled into it."""
    answer: Future[CompileResult] = Future()

    def copy(done: Future[CompileResult]) -> None:
        if done.cancelled():
            answer.cancel()
        elif (error := done.exception()) is not None:
            answer.set_exception(error)
        else:
            answer.set_result(replace(done.result(), config=config))

    build.add_done_callback(copy)
    return answer


def default_jobs() -> int:
    cores = os.cpu_count() or 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return cores
    return max(1, min(cores, available // NVCC_PEAK_BYTES))
