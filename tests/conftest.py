"""Shared fixtures of the CPU test suite: the repository's own tables and an H100's facts."""
from __future__ import annotations

import dataclasses
import io
import os
import re
import signal
import subprocess
import sys
from contextlib import chdir, redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # plain `pytest` from anywhere, not only `python -m pytest` at the root
    sys.path.insert(0, str(REPO))

from tuner.core.device import DeviceFacts  # noqa: E402
from tuner.core.layers import load_layers  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.families.base import SearchSpace  # noqa: E402
from tuner.families.sm80.space import make_config  # noqa: E402
from tuner.search.space import load_space  # noqa: E402

LAYERS_FILE = REPO / "search_spaces" / "layers.yaml"
SPACE_FILE = REPO / "search_spaces" / "sm80.yaml"
# Real Nsight Compute logs, kept in the repository so that a clone anywhere has them.
FIXTURES = Path(__file__).resolve().parent / "data" / "ncu"
RTX3060_CUTLASS = FIXTURES / "rtx3060_cutlass_conv_1_128x128x64.txt"
H100_CUTLASS = FIXTURES / "h100_cutlass_conv_1_128x128x64.txt"
RTX3060_NAIVE = FIXTURES / "rtx3060_naive_conv2d_training.txt"
# RTX3060_CUTLASS's first launch in the layout of the GUI's Details page copied as text
# (tools/make_gui_copy_fixture.py): the same figures, another form.
RTX3060_GUI_COPY = FIXTURES / "rtx3060_cutlass_conv_1_gui_copy.txt"
# One cuDNN conv (PyTorch, N32 56x56 C64 K64 3x3, f16) on the H100 in three of ncu's forms
# (tools/capture_ncu_forms.sh): details text, details CSV, raw CSV.
H100_CUDNN_FORMS = {form: FIXTURES / f"h100_cudnn_conv_{form}" for form in ("details.txt", "details.csv", "raw.csv")}
H100_CSV = Path(__file__).resolve().parent / "data" / "ncu" / "synthetic_h100_cutlass_conv_1_128x128x64.csv"

H100 = DeviceFacts(
    name="NVIDIA H100 80GB HBM3",
    cc_major=9,
    cc_minor=0,
    sm_count=132,
    smem_optin_per_block=232448,
    smem_per_sm=233472,
    registers_per_sm=65536,
    l2_bytes=52428800,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
)


@pytest.fixture(scope="module")
def worker():
    """The GPU tests' evaluation worker, one process a test module (a hang in one module's test ends only it)."""
    from tuner.measure.evaluate import WorkerProcess

    process = WorkerProcess(timeout_s=120)
    yield process
    process.close()


@pytest.fixture
def h100() -> DeviceFacts:
    return H100


@pytest.fixture(scope="session")
def layers() -> dict:
    return load_layers(LAYERS_FILE)


@pytest.fixture(scope="session")
def conv_1(layers) -> ConvProblem:
    return layers["conv_1"].problem


@pytest.fixture
def emitter_pieces(monkeypatch):
    """Replaces pieces of a registered family's emitter for one test: emitter_pieces("sm90_dsl", build_request=f)."""
    def replace_pieces(name: str, **pieces) -> None:
        family = registry.get(name)
        emitter = dataclasses.replace(family.emitter, **pieces)
        monkeypatch.setitem(registry.families(), name, dataclasses.replace(family, emitter=emitter))
    return replace_pieces


@pytest.fixture(scope="session")
def sm80_space() -> SearchSpace:
    return load_space(SPACE_FILE)


def params(tile="128x128x64", warps="2x2x1", stages=3, swizzle=1, iterator="optimized", split_k=1) -> dict:
    """Sampled parameters in the form the study stores them; defaults are the reference config."""
    return {"tile": tile, "warps": warps, "stages": stages, "swizzle": swizzle, "iterator": iterator,
            "split_k": split_k}


def config_for(problem: ConvProblem, **overrides):
    return make_config(problem, params(**overrides))


def write_best(folder: Path, layer: str, entry: dict, header: dict) -> Path:
    """Put a layer's entry and the header, each as best.yaml holds it, into folder/best.yaml through their
    records, as the tuner writes them."""
    from tuner.store.best import update_best
    from tuner.store.schema import BestEntry, BestHeader

    return update_best(folder, layer, BestEntry.parse(layer, entry), BestHeader.parse(header))


def squeeze(text: str) -> str:
    """C++ text without whitespace, to compare generated code with expectations."""
    return re.sub(r"\s+", "", text)


def one_line(error: pytest.ExceptionInfo) -> str:
    """The message of a raised error, checked to be one line."""
    message = str(error.value)
    assert message and "\n" not in message, f"not a one-line message: {message!r}"
    return message


def assert_in_order(text: str, pieces: list[str]) -> None:
    """Each piece occurs in `text` (whitespace ignored), each after the one before."""
    text, at = squeeze(text), 0
    for piece in pieces:
        found = text.find(squeeze(piece), at)
        assert found >= 0, f"{piece!r} not found after position {at}"
        at = found + len(squeeze(piece))


def tune_in_process(*args: str, env: dict[str, str | None] | None = None,
                    clean_env: bool = False) -> subprocess.CompletedProcess:
    """tune.py's main run in this process at the repository's root, with `env` over os.environ (None removes a
    variable), or `env` alone with clean_env: its exit status, stdout and stderr, as subprocess.run gives a
    process's. No interpreter starts and nothing is imported again; what a command caches (a layer's valid
    configurations) serves the commands after it."""
    from tuner.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    with mock.patch.dict(os.environ, clear=clean_env), chdir(REPO), redirect_stdout(out), redirect_stderr(err):
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's --help and usage errors
            code = 0 if exit.code is None else exit.code
        finally:
            for signum, handler in handlers.items():  # main takes SIGTERM and Ctrl-C for its run
                signal.signal(signum, handler)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


# An imported model's element type (as torch and numpy name it), --dtype, and the types and name tag its layers
# get: the same for every frontend (tuner/importers/frontend.py MODEL_DTYPES).
MODEL_DTYPE_CASES = [
    ("float32", None, "f16_f16_f16_f32", ""),              # an f32 model is tuned in f16, as before
    ("float16", None, "f16_f16_f16_f32", ""),
    ("bfloat16", None, "bf16_bf16_bf16_f32", "_bf16"),     # the model's own type
    ("float32", "tf32", "tf32_tf32_f32_f32", "_tf32"),     # --dtype tf32 keeps an f32 model's f32
    ("float32", "e4m3", "e4m3_e4m3_f16_f32", "_e4m3"),     # --dtype e4m3: fp8 operands, f16 out (sm90_dsl)
    ("bfloat16", "f16", "f16_f16_f16_f32", ""),            # --dtype over the model's
]


def gpu_cupy():
    """CuPy, where it and a CUDA GPU are there; otherwise the calling test module is skipped."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    if count == 0:
        pytest.skip("no CUDA GPU", allow_module_level=True)
    return cupy


def compile_cases(device, folder: Path, configs: dict, jobs: int | None = None) -> dict:
    """A GPU test's kernels, compiled once through the compile cache: case -> CompileResult (every one built)."""
    from tuner.build.compile import Compiler

    compiler = Compiler(device, folder, jobs=jobs)  # None: the compiler's default
    results = {r.config: r for r in compiler.compile_many(list(configs.values()))}
    assert all(r.ok for r in results.values()), [r.error for r in results.values() if not r.ok]
    return {case: results[config] for case, config in configs.items()}


def evaluate_request(result, problem: ConvProblem, kernel_view: ConvProblem | None = None) -> dict:
    """The worker's request to validate and time a compiled kernel on `problem` (built for `kernel_view`, where a
    planted kernel was built for another problem)."""
    from tuner.families import registry
    from tuner.measure.protocol import EvaluateRequest

    config = result.config
    launch = registry.family_of(config).rules.launch_args(config, problem)
    return EvaluateRequest(str(result.binary.path), result.binary.index, problem, launch, seed=7, l2_bytes=50 << 20,
                           repeats=5, kernel_problem=kernel_view).to_dict()
