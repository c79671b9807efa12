"""The parent side of the GPU worker, against a fake worker that crashes, hangs and loses its context
on request."""
import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tuner.measure.evaluate as evaluate_module
from tuner.core.device import missing_gpu
from tuner.measure.evaluate import (
    Evaluation,
    GpuEvaluator,
    GpuUnavailable,
    NoGpu,
    WorkerProcess,
    evaluation_from_response,
    query_device_facts,
)
from tuner.families.base import LaunchArgs
from tuner.measure.timing import Measurement, ProfilerAttached
from tuner.measure.protocol import EvaluateRequest
from tuner.measure.run import KernelAttributes
from tuner.build.abi import KernelBinary
from tuner.core.status import Status
from tuner.measure.worker import CONTEXT_LOST, NO_GPU, RESPONSE_PREFIX

HAS_CUPY = importlib.util.find_spec("cupy") is not None

FAKE_WORKER = textwrap.dedent(f"""\
    import json, os, sys, time

    PREFIX = {RESPONSE_PREFIX!r}
    CONTEXT_LOST = {CONTEXT_LOST!r}

    def answer(response):
        sys.stdout.write(PREFIX + json.dumps(response) + "\\n")
        sys.stdout.flush()

    print("a line without the prefix is not an answer", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op == "crash":
            sys.stderr.write("fake worker: an illegal memory access was encountered\\n")
            sys.stderr.flush()
            os._exit(7)
        if op == "hang":
            time.sleep(600)
        if op == "lose_context":
            # as tuner.measure.worker does after a CUDA fault: answer with the context-lost flag, then exit 3;
            # the exit takes a while (CUDA teardown), long enough for a careless parent to send more.
            answer({{"status": "launch_failed", "reason": "CUDA error: illegal address", "pid": os.getpid(),
                     CONTEXT_LOST: True}})
            time.sleep(0.5)
            sys.exit(3)
        answer({{"status": "ok", "echo": request, "pid": os.getpid()}})
""")


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    """A WorkerProcess whose `python -m tuner.measure.worker` is the fake script; the real _start and pumps run."""
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    real_popen = subprocess.Popen
    commands = []

    def popen(command, *args, **kwargs):
        commands.append(command)
        assert command[1:] == ["-m", "tuner.measure.worker"]
        return real_popen([command[0], str(script)], *args, **kwargs)

    monkeypatch.setattr(evaluate_module.subprocess, "Popen", popen)
    workers = []

    def make(timeout_s: float = 10.0, cls=WorkerProcess) -> WorkerProcess:
        workers.append(cls(timeout_s=timeout_s))
        return workers[-1]

    make.commands = commands
    yield make
    for worker in workers:
        worker.kill()


def test_requests_are_answered_by_one_process(fake_worker):
    worker = fake_worker()
    first = worker.request({"op": "echo", "n": 1})
    second = worker.request({"op": "echo", "n": 2})
    assert first["status"] == "ok" and first["echo"] == {"op": "echo", "n": 1}
    assert second["echo"]["n"] == 2 and second["pid"] == first["pid"]
    assert worker.restarts == 0 and len(fake_worker.commands) == 1
    assert fake_worker.commands[0][0] == sys.executable


def test_worker_survives_a_crash(fake_worker):
    worker = fake_worker()
    before = worker.request({"op": "echo"})
    crashed = worker.request({"op": "crash"})
    assert crashed["status"] == Status.launch_failed.value
    assert "died" in crashed["reason"] and "exit code 7" in crashed["reason"]
    after = worker.request({"op": "echo", "n": 3})
    assert after["status"] == "ok" and after["echo"]["n"] == 3
    assert after["pid"] != before["pid"]
    assert worker.restarts == 1


def test_worker_survives_a_hang(fake_worker):
    worker = fake_worker(timeout_s=0.5)
    before = worker.request({"op": "echo"})
    hung_process = worker.process
    started = time.monotonic()
    hung = worker.request({"op": "hang"})
    assert 0.4 < time.monotonic() - started < 5
    assert hung["status"] == Status.launch_failed.value
    assert "hang" in hung["reason"] and "no answer within" in hung["reason"]
    assert hung_process.poll() is not None  # killed, not left sleeping
    after = worker.request({"op": "echo", "n": 4})
    assert after["status"] == "ok" and after["echo"]["n"] == 4 and after["pid"] != before["pid"]
    assert worker.restarts == 1


def test_crash_then_hang_then_answer(fake_worker):
    worker = fake_worker(timeout_s=0.5)
    assert "died" in worker.request({"op": "crash"})["reason"]
    assert "hang" in worker.request({"op": "hang"})["reason"]
    assert worker.request({"op": "echo"})["status"] == "ok"
    assert worker.restarts == 2


def test_close_ends_the_worker(fake_worker):
    worker = fake_worker()
    worker.request({"op": "echo"})
    process = worker.process
    worker.close()
    assert process.returncode == 0  # stdin closed: the loop ends


class SlowStderrWorker(WorkerProcess):
    """The stderr pump thread scheduled late, as happens under load (without waiting for it, about 3 % of
    crash reasons lost the worker's last words even unloaded)."""

    def _pump_stderr(self, process):
        time.sleep(0.3)
        super()._pump_stderr(process)


def test_crash_reason_carries_the_workers_stderr(fake_worker):
    worker = fake_worker(cls=SlowStderrWorker)
    crashed = worker.request({"op": "crash"})
    assert "illegal memory access" in crashed["reason"]


def test_the_request_after_a_lost_context_is_answered(fake_worker):
    """After a CUDA fault the worker answers and exits; the next candidate must meet a fresh worker, not be
    recorded as 'worker died' because it was sent to the dying one."""
    worker = fake_worker()
    lost = worker.request({"op": "lose_context"})
    assert lost["status"] == Status.launch_failed.value and "CUDA error" in lost["reason"]
    assert CONTEXT_LOST not in lost
    after = worker.request({"op": "echo", "n": 5})
    assert after["status"] == "ok", after
    assert after["echo"]["n"] == 5 and after["pid"] != lost["pid"]
    assert worker.restarts == 1


# --- typed answers ------------------------------------------------------------------------------

FULL_RESPONSE = {
    "status": "ok",
    "error": 1.2e-7,
    "measurement": {"median_us": 4.2, "p10_us": 4.1, "p90_us": 4.5, "repeats": 30, "launches_per_replay": 732,
                    "copies": 732},
    "grid": [16, 1, 1],
    "attributes": {"registers_per_thread": 93, "static_smem_bytes": 0, "dynamic_smem_bytes": 24576,
                   "local_bytes_per_thread": 0, "threads_per_block": 128, "max_active_blocks_per_sm": 9},
}


def test_evaluation_from_a_full_response():
    evaluation = evaluation_from_response(FULL_RESPONSE)
    assert evaluation == Evaluation(
        status=Status.ok, reason=None, error=1.2e-7,
        measurement=Measurement(4.2, 4.1, 4.5, 30, 732, 732), grid=(16, 1, 1),
        attributes=KernelAttributes(93, 0, 24576, 0, 128, 9))
    assert evaluation.status is Status.ok
    assert isinstance(evaluation.grid, tuple) and evaluation.grid_blocks == 16
    assert evaluation.measurement.spread == pytest.approx(0.4 / 4.2)


def test_evaluation_from_a_failure():
    evaluation = evaluation_from_response({"status": "wrong_result", "error": 0.7, "reason": "relative L2 error",
                                           "grid": [8, 2, 3]})
    assert evaluation.status is Status.wrong_result and evaluation.error == 0.7
    assert evaluation.measurement is None and evaluation.attributes is None
    assert evaluation.grid_blocks == 48
    bare = evaluation_from_response({"status": "launch_failed", "reason": "worker died"})
    assert (bare.grid, bare.grid_blocks, bare.error) == (None, None, None)


def test_evaluation_from_an_unknown_status():
    with pytest.raises(ValueError):
        evaluation_from_response({"status": "fine"})


class RecordingWorker:
    def __init__(self, response):
        self.response = response
        self.requests = []
        self.closed = False

    def request(self, payload):
        self.requests.append(payload)
        return self.response

    def close(self):
        self.closed = True


def test_gpu_evaluator_request(conv_1):
    worker = RecordingWorker(FULL_RESPONSE)
    evaluator = GpuEvaluator(l2_bytes=52428800, worker=worker, repeats=7)
    first = evaluator.evaluate(KernelBinary(Path("/cache/ab/abc/candidate.so"), 1), conv_1, LaunchArgs(32, split_k=2))
    evaluator.evaluate(KernelBinary(Path("/cache/ab/abc/candidate.so")), conv_1, LaunchArgs(32))
    assert first.measurement.median_us == 4.2
    request = worker.requests[0]
    assert request["op"] == "evaluate" and request["library"] == "/cache/ab/abc/candidate.so"
    assert request["kernel_index"] == 1 and worker.requests[1]["kernel_index"] == 0
    assert request["problem"]["c"] == 32 and request["problem"]["output_type"] == "f32"
    assert (request["launch"]["split_k"], request["l2_bytes"], request["repeats"]) == (2, 52428800, 7)
    assert EvaluateRequest.from_dict(request).launch == LaunchArgs(32, split_k=2)
    assert worker.requests[1]["seed"] != request["seed"]  # fresh inputs for every candidate
    evaluator.close()
    assert worker.closed


def test_query_device_facts():
    facts = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132}
    assert query_device_facts(RecordingWorker(facts)) == facts
    with pytest.raises(GpuUnavailable, match="CuPy is not installed") as raised:
        query_device_facts(RecordingWorker({"status": "infra_error", "reason": "CuPy is not installed"}))
    assert not isinstance(raised.value, NoGpu)


def test_query_device_facts_refuses_a_profiler_before_the_worker_is_asked(monkeypatch):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nsight-compute/target/linux-desktop-glibc_2_11_3-x64/libcuda-injection.so")
    worker = RecordingWorker({"name": "NVIDIA H100 80GB HBM3", "sm_count": 132})
    with pytest.raises(ProfilerAttached, match="CUDA_INJECTION64_PATH is set"):
        query_device_facts(worker)
    assert worker.requests == []
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "")
    assert query_device_facts(worker)["sm_count"] == 132


def test_a_host_without_a_gpu_gets_the_one_message_with_the_offline_commands():
    answer = {"status": "infra_error", "reason": "no NVIDIA driver: libcuda.so.1 not found", NO_GPU: True}
    with pytest.raises(NoGpu) as raised:
        query_device_facts(RecordingWorker(answer))
    message = str(raised.value)
    assert message.startswith("this command needs an NVIDIA GPU and a driver; without one you can: diagnose, ")
    assert message.endswith("Here: no NVIDIA driver: libcuda.so.1 not found") and "\n" not in message


@pytest.mark.skipif(HAS_CUPY, reason="checks the real worker on a machine without CuPy")
def test_real_worker_without_cupy_says_so():
    """A host without a GPU hears that first; a GPU host without CuPy, that CuPy is missing."""
    worker = WorkerProcess(timeout_s=60)
    try:
        with pytest.raises(GpuUnavailable) as raised:
            query_device_facts(worker)
    finally:
        worker.kill()
    if missing_gpu() is None:
        assert "CuPy" in str(raised.value) and not isinstance(raised.value, NoGpu)
    else:
        assert isinstance(raised.value, NoGpu) and missing_gpu() in str(raised.value)
