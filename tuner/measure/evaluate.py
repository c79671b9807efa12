"""The parent side of the GPU worker: start it, send it candidates, survive its crashes and hangs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from queue import Empty, Queue

from tuner.core.device import DeviceFacts, device_from_dict, volume
from tuner.families.base import LaunchArgs
from tuner.measure.timing import Measurement, refuse_under_profiler
from tuner.measure.protocol import EvaluateRequest
from tuner.core.problem import ConvProblem
from tuner.measure.run import KernelAttributes
from tuner.build.abi import KernelBinary
from tuner.core.status import Status
from tuner.measure.worker import CONTEXT_LOST, NO_GPU, RESPONSE_PREFIX, worker_env

DEFAULT_TIMEOUT_S = 120.0
STDERR_TAIL_LINES = 5


@dataclass(frozen=True)
class Evaluation:
    status: Status
    reason: str | None = None
    error: float | None = None
    measurement: Measurement | None = None
    grid: tuple[int, int, int] | None = None
    attributes: KernelAttributes | None = None
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def grid_blocks(self) -> int | None:
        return None if self.grid is None else volume(self.grid)


def evaluation_from_response(response: dict) -> Evaluation:
    measurement = response.get("measurement")
    attributes = response.get("attributes")
    grid = response.get("grid")
    cluster = response.get("cluster")
    return Evaluation(
        status=Status(response["status"]),
        reason=response.get("reason"),
        error=response.get("error"),
        measurement=Measurement(**measurement) if measurement else None,
        grid=tuple(grid) if grid else None,
        attributes=KernelAttributes(**attributes) if attributes else None,
        cluster=tuple(cluster) if cluster else (1, 1, 1),
    )


class WorkerProcess:
    """One `python -m tuner.measure.worker` on one GPU; restarted after a crash, a hang or a CUDA fault."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, env: dict | None = None):
        self.timeout_s = timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        self.lines: Queue = Queue()
        self.stderr_tail: list[str] = []
        self.restarts = 0

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tuner.measure.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=worker_env(self.env), bufsize=1)
        self.lines = Queue()
        self.stderr_tail = []
        threading.Thread(target=self._pump_stdout, args=(self.process, self.lines), daemon=True).start()
        self.stderr_pump = threading.Thread(target=self._pump_stderr, args=(self.process,), daemon=True)
        self.stderr_pump.start()

    @staticmethod
    def _pump_stdout(process: subprocess.Popen, lines: Queue) -> None:
        for line in process.stdout:
            if line.startswith(RESPONSE_PREFIX):
                lines.put(line[len(RESPONSE_PREFIX):])
        lines.put(None)  # the worker exited

    def _pump_stderr(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-STDERR_TAIL_LINES:]

    def request(self, payload: dict) -> dict:
        """Send one request and wait for its answer; a dead or silent worker becomes an answer too."""
        if self.process is None or self.process.poll() is not None:
            if self.process is not None:
                self.restarts += 1
            self._start()
        try:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
            line = self.lines.get(timeout=self.timeout_s)
        except BrokenPipeError:
            line = None
        except Empty:
            self.kill()
            return {"status": Status.launch_failed.value,
                    "reason": f"no answer within {self.timeout_s:.0f} s (hang); worker restarted"}
        if line is None:
            self.process.wait()
            self.stderr_pump.join(timeout=5)  # its last words explain the death
            tail = " | ".join(self.stderr_tail) or "no output"
            return {"status": Status.launch_failed.value,
                    "reason": f"worker died with exit code {self.process.returncode}: {tail}"}
        response = json.loads(line)
        if response.pop(CONTEXT_LOST, False):
            self._await_exit()  # so that the next request starts a fresh worker instead of meeting a dying one
        return response

    def _await_exit(self) -> None:
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


class GpuEvaluator:
    """Evaluates compiled candidates on the GPU through a worker process."""

    def __init__(self, l2_bytes: int, worker: WorkerProcess | None = None, repeats: int = 30):
        self.l2_bytes = l2_bytes
        self.worker = worker or WorkerProcess()
        self.repeats = repeats
        self.seed = 0

    def evaluate(self, binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs,
                 seed: int | None = None) -> Evaluation:
        """Fresh random inputs for every candidate, unless a seed is given: a landscape times every
        kernel of a layer on the same inputs, which the worker then prepares only once."""
        if seed is None:
            self.seed += 1
        request = EvaluateRequest(str(binary.path), binary.index, problem, launch,
                                  self.seed if seed is None else seed, self.l2_bytes, self.repeats)
        return evaluation_from_response(self.worker.request(request.to_dict()))

    def close(self) -> None:
        self.worker.close()


# What works on a host without a GPU; README.md's "Without a GPU" shows a command of each (tests/test_without_gpu.py).
OFFLINE_FEATURES = ("diagnose, predict, export, plots, report, bench --replay-only / --summary / --compile-only --gpu NAME, "
                    "--list-layers, the --onnx / --torchvision imports, results pack / unpack")
NEEDS_GPU = f"this command needs an NVIDIA GPU and a driver; without one you can: {OFFLINE_FEATURES}"


class GpuUnavailable(RuntimeError):
    """No usable CUDA GPU (or no CuPy) in the worker process."""


class NoGpu(GpuUnavailable):
    """The host has no NVIDIA driver or no device: a usage matter, not a broken environment."""

    def __init__(self, why: str):
        super().__init__(f"{NEEDS_GPU}. Here: {why}")


def query_device_facts(worker: WorkerProcess) -> dict:
    """The GPU's facts, asked of the worker; every GPU run (tune, bench) starts here, so a profiler is refused here."""
    refuse_under_profiler()
    response = worker.request({"op": "device"})
    if response.get(NO_GPU):
        raise NoGpu(str(response.get("reason")))
    if "status" in response:
        raise GpuUnavailable(f"no usable CUDA GPU: {response.get('reason')}")
    return response


def local_device() -> DeviceFacts:
    """This host's GPU, asked of a worker that ends right after: the caller never opens a CUDA context."""
    worker = WorkerProcess(timeout_s=DEFAULT_TIMEOUT_S)
    try:
        return device_from_dict(query_device_facts(worker))
    finally:
        worker.close()
