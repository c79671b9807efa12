import importlib.util
import io
import json

import pytest

from tuner.core import device

from tuner.measure import worker
from tuner.core.dtypes import DataType
from tuner.core.status import Status
from tuner.core.problem import ConvProblem, problem_from_dict, problem_to_dict
from tuner.measure.worker import CONTEXT_LOST, EXIT_CONTEXT_LOST, NO_GPU, RESPONSE_PREFIX

HAS_CUPY = importlib.util.find_spec("cupy") is not None

PROBLEMS = [
    ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, output_type=DataType.f32),
    ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2),
    ConvProblem(n=2, h=9, w=7, c=6, k=10, r=3, s=1, pad=2, stride=3, dilation=2, input_type=DataType.bf16,
                filter_type=DataType.bf16, output_type=DataType.bf16),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.dtype_key)
def test_problem_round_trip_through_json(problem):
    values = problem_to_dict(problem)
    assert json.loads(json.dumps(values)) == values  # only plain JSON values go to the worker
    assert problem_from_dict(json.loads(json.dumps(values))) == problem


def test_problem_to_dict_values(layers):
    assert problem_to_dict(layers["conv_1"].problem) == {
        "n": 1, "h": 32, "w": 32, "c": 32, "k": 32, "r": 3, "s": 3, "pad": 1, "stride": 1, "dilation": 1,
        "input_type": "f16", "filter_type": "f16", "output_type": "f32", "accumulator_type": "f32"}


def test_problem_from_dict_types_the_values():
    values = problem_to_dict(PROBLEMS[0])
    problem = problem_from_dict({**values, "n": "4", "output_type": "f16"})
    assert problem.n == 4 and problem.output_type is DataType.f16


@pytest.mark.skipif(HAS_CUPY, reason="checks the answer of a worker without CuPy")
def test_handle_without_cupy_is_an_infra_error(monkeypatch):
    monkeypatch.setattr("tuner.core.device.missing_gpu", lambda: None)  # a GPU host that lacks only CuPy
    response, context_ok = worker.handle({"op": "device"})
    assert response["status"] == Status.infra_error.value and "CuPy" in response["reason"]
    assert NO_GPU not in response
    assert context_ok is False


def test_a_host_without_a_gpu_is_said_before_a_missing_cupy(monkeypatch):
    monkeypatch.setattr("tuner.core.device.missing_gpu", lambda: "no NVIDIA driver: libcuda.so.1 not found")
    response, context_ok = worker.handle({"op": "device"})
    assert response[NO_GPU] is True and response["reason"] == "no NVIDIA driver: libcuda.so.1 not found"
    assert response["status"] == Status.infra_error.value and context_ok is False


def test_missing_gpu_names_a_missing_driver(monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr("ctypes.CDLL", no_library)
    assert "libcuda.so.1 not found" in device.missing_gpu()


def test_missing_gpu_names_a_driver_without_devices(monkeypatch):
    class Driver:
        def cuInit(self, flags):
            return device.CUDA_ERROR_NO_DEVICE

    monkeypatch.setattr("ctypes.CDLL", lambda name: Driver())
    assert device.missing_gpu() == device.NO_DEVICE


@pytest.mark.skipif(HAS_CUPY, reason="checks the answer of a worker without CuPy")
def test_main_answers_with_the_prefix_and_exits_when_the_context_is_gone(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO('\n{"op": "device"}\n{"op": "device"}\n'))
    assert worker.main() == EXIT_CONTEXT_LOST
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(RESPONSE_PREFIX)
    response = json.loads(lines[0][len(RESPONSE_PREFIX):])
    assert response["status"] == "infra_error"
    assert response[CONTEXT_LOST] is True  # tells the parent to wait for this exit before the next request
