"""nvcc for candidates: each kernel built once into the content-addressed cache (tuner/build/compile_cache.py),
kernels of one family several to a translation unit, in parallel up to what the cores and memory take."""
from __future__ import annotations

import math
import time
from concurrent.futures import as_completed
from contextlib import closing
from pathlib import Path
from typing import Callable, Iterable

from tuner.build.builder_pool import BuilderPool
from tuner.build.codegen import candidate_source, group_source
from tuner.build.compile_cache import CompileCache, CompileResult, builder_cache_key, cache_key, default_cache_dir
from tuner.build.compile_queue import CompileQueue
from tuner.build.nvcc import COMPILE_TIMEOUT_S, default_jobs, error_excerpt, nvcc_flags, run_build
from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import BuildRequest, KernelConfig

# Kernels of one family compiled in one translation unit parse the CUTLASS headers once: on a 2-core
# host four sm90_conv kernels took 73 s together against 184 s apart (docs/compile.md).
# Only families whose kernel symbols name their alias are grouped (ptxas's report is per symbol).
MAX_KERNELS_PER_UNIT = 4


class Compiler:
    def __init__(self, device: DeviceFacts, cache_dir: Path | None = None, jobs: int | None = None,
                 kernels_per_unit: int = MAX_KERNELS_PER_UNIT):
        self.device = device
        self.cache_dir = cache_dir or default_cache_dir()
        self.cache = CompileCache(self.cache_dir)
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
            if request is None or not request.serve_command or self.cache.lookup(kernel, key) is not None:
                continue
            needed[request.serve_command] = needed.get(request.serve_command, 0) + 1
            if needed[request.serve_command] >= self.jobs:
                break
        for command, count in needed.items():
            self.builders.prestart(command, min(count, self.jobs))

    def flags(self, config: KernelConfig) -> list[str]:
        return nvcc_flags(registry.family_of(config).emitter.arch_flags(self.device))

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
        return self.cache.lookup(config, self._key(config)[0])

    def compile(self, config: KernelConfig) -> CompileResult:
        found = self.cached(config)
        if found is not None:
            return found
        key, source, flags, request = self._key(config)
        return self._build(config, key, source, flags, request)

    def _nvcc(self, source: str, flags: list[str], key: str,
              request: BuildRequest | None = None) -> tuple[Path | None, str, bool, float]:
        """One nvcc run (or the family's own builder, for a `request`) in a scratch folder next to the
        key's entry: (scratch folder or None when the failure was not the source's, the log, whether it
        failed, seconds)."""
        scratch = self.cache.scratch(key)
        try:
            source_file = request.source_file if request else "candidate.cu"
            (scratch / source_file).write_text(source)
            started = time.monotonic()
            command = list(request.command) if request else ["nvcc", *flags, "candidate.cu", "-o", "candidate.so"]
            if request and request.serve_command:
                log, failed, transient = self.builders.build(request, scratch, COMPILE_TIMEOUT_S)
            else:
                log, failed, transient = run_build(command, scratch)
            return self._settle_build(scratch, log, failed, transient, time.monotonic() - started, request)
        except BaseException:
            self.cache.discard(scratch)
            raise

    def _settle_build(self, scratch: Path, log: str, failed: bool, transient: bool, seconds: float,
                      request: BuildRequest | None) -> tuple[Path | None, str, bool, float]:
        if transient:  # not the source's fault: cache nothing, retry next time
            self.cache.discard(scratch)
            return None, log, True, seconds
        # A family's builder writes its kernel's resource line to ptxas.txt itself; nvcc's is in its log.
        (scratch / ("build.log" if request and (scratch / "ptxas.txt").exists() else "ptxas.txt")).write_text(log)
        if failed:
            (scratch / "error.txt").write_text(error_excerpt(log))
        return scratch, log, failed, seconds

    def _build(self, config: KernelConfig, key: str, source: str, flags: list[str],
               request: BuildRequest | None = None) -> CompileResult:
        scratch, log, failed, seconds = self._nvcc(source, flags, key, request)
        if scratch is None:
            return CompileResult(config, key, None, seconds, False, error_excerpt(log), None, transient=True)
        self.cache.publish(scratch, key)
        if failed:
            error = (self.cache.entry(key) / "error.txt").read_text()
            return CompileResult(config, key, None, seconds, False, error, None)
        return self.cache.result(config, key, seconds=seconds, cached=False)

    def build_unit(self, configs: list[KernelConfig]) -> list[CompileResult]:
        """Several kernels of one family in one nvcc run, each then cached under its own key as a member
        of the unit. A unit that fails to compile is built again kernel by kernel, so that one bad
        configuration is cached as bad alone."""
        if len(configs) == 1:
            return [self.compile(configs[0])]
        flags = self.flags(configs[0])
        source = group_source([c.compiled for c in configs])
        unit_key = cache_key(source, flags)
        scratch, log, failed, seconds = self._nvcc(source, flags, unit_key)
        if scratch is None:
            return [CompileResult(c, self._key(c)[0], None, seconds, False, error_excerpt(log), None, transient=True)
                    for c in configs]
        if failed:
            self.cache.discard(scratch)
            return [self.compile(config) for config in configs]
        self.cache.publish(scratch, unit_key)
        results = []
        for index, config in enumerate(configs):
            key = self._key(config)[0]
            self.cache.publish_member(key, unit_key, index, len(configs))
            results.append(self.cache.member_result(config, key, unit_key, index, len(configs), seconds, False))
        return results

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
