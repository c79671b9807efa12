"""The queue the study compiles through: configurations submitted, a future each, built in the background on
as many threads as the compiler has jobs, a kernel shared by several configurations built once."""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Callable, Iterable, Protocol

from tuner.build.compile_cache import CompileResult
from tuner.families.base import KernelConfig


class UnitCompiler(Protocol):
    """What a CompileQueue asks of its compiler (tuner/build/compile.py's Compiler)."""

    jobs: int

    def cached(self, config: KernelConfig) -> CompileResult | None: ...

    def units(self, configs: list[KernelConfig]) -> list[list[KernelConfig]]: ...

    def build_unit(self, configs: list[KernelConfig]) -> list[CompileResult]: ...


class CompileQueue:
    """Compiles submitted configurations on `compiler.jobs` threads that live until close(), each
    submission returning at once with one future per configuration. A kernel is built once however
    many configurations share it (run-time knobs), in one submission or across submissions while its
    build is in flight; a submission's uncached kernels are cut into units as `Compiler.units` cuts them."""

    def __init__(self, compiler: UnitCompiler):
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
        results = self.compiler.build_unit(unit)
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
