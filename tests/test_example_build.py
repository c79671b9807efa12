"""The C++ example (examples/cpp) configures and builds against an exported header: CPU only, no GPU.
The example is copied next to a freshly exported results/<gpu>/best_configs.h in tmp_path, so that its
default header path (../../results/<TUNED_GPU>/best_configs.h) is the one exercised. To keep CI's time
in bounds the header holds a few of the H100's layers, the first of each kernel family in best.yaml
(the whole header is built and run on a GPU host as examples/cpp/README.md says)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.pipeline.export import HEADER_FILE, render_header
from tuner.store.best import read_best

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "cpp"
GPU = "nvidia-h100-80gb-hbm3"
RESULTS = REPO / "results" / GPU

needs_toolchain = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("nvcc") is None, reason="needs cmake and nvcc on PATH")


def dsl_installed() -> bool:
    try:
        import cutlass.cute  # noqa: F401
    except Exception:
        return False
    return True


def one_layer_per_family(document: dict, with_dsl: bool = True) -> dict:
    """The first layer of each family, and the first with an epilogue (its operands in the example);
    sm90_dsl's only `with_dsl` (exporting it builds its kernel with the DSL)."""
    chosen = {}
    for name, entry in sorted(document["layers"].items()):
        if entry.get("family") == "sm90_dsl" and not with_dsl:
            continue
        chosen.setdefault(entry.get("family", "sm80"), (name, entry))
        if (entry.get("problem") or {}).get("epilogue"):
            chosen.setdefault("fused", (name, entry))
    return {**document, "layers": dict(chosen.values())}


def test_the_built_header_holds_one_layer_of_each_family_and_one_fused():
    document = read_best(RESULTS)
    chosen = one_layer_per_family(document)["layers"]
    families = {entry["family"] for entry in chosen.values()}
    assert families == {entry["family"] for entry in document["layers"].values()}
    assert any(entry["problem"].get("epilogue") for entry in chosen.values())
    assert len(chosen) <= len(families) + 1 < len(document["layers"])


def _tree(tmp_path: Path) -> Path:
    """tmp_path/examples/cpp (a copy of the example) and tmp_path/results/<gpu>/best_configs.h, exported (with
    dsl/libtuned_dsl.a where a chosen layer is sm90_dsl's, the DSL installed)."""
    from test_export_dsl import write_best
    from tuner.pipeline.export import export_header

    shutil.copytree(EXAMPLE, tmp_path / "examples" / "cpp", ignore=shutil.ignore_patterns("build*"))
    folder = write_best(tmp_path / "results" / GPU, one_layer_per_family(read_best(RESULTS), dsl_installed()))
    export_header(folder, cache_dir=tmp_path / "cache")
    return tmp_path / "examples" / "cpp"


def _cmake(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUDAARCHS"}  # the example's default arch: 90a
    return subprocess.run(["cmake", *args], capture_output=True, text=True, timeout=timeout, env=env)


def _configure(source: Path, build: Path, *options: str) -> subprocess.CompletedProcess:
    # CUTLASS_DIR is left unset: CMake asks this interpreter's nvidia-cutlass wheel for it.
    return _cmake("-S", str(source), "-B", str(build), f"-DPython3_EXECUTABLE={sys.executable}", *options,
                  timeout=300)


@pytest.mark.nvcc  # CMake checks its CUDA compiler with nvcc; a build compiles the header: minutes on 2 cores
@needs_toolchain
def test_example_configures_and_builds(tmp_path):
    source = _tree(tmp_path)
    build = tmp_path / "build"
    configured = _configure(source, build)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    assert "namespace nvidia_h100_80gb_hbm3" in configured.stdout
    if dsl_installed():  # the H100's DSL layers come with dsl/libtuned_dsl.a, linked with the DSL's runtime
        assert "CuTe DSL layers:" in configured.stdout and "libcuda_dialect_runtime_static.a" in configured.stdout
    cache = (build / "CMakeCache.txt").read_text()
    assert "CMAKE_CUDA_ARCHITECTURES:STRING=90a" in cache

    built = _cmake("--build", str(build), "-j", str(os.cpu_count() or 2), timeout=900)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    executable = build / "tuned_convs"
    assert executable.is_file() and os.access(executable, os.X_OK)


@pytest.mark.nvcc  # CMake checks its CUDA compiler with nvcc; a build compiles the header: minutes on 2 cores
@needs_toolchain
def test_missing_header_is_a_clear_configure_error(tmp_path):
    source = _tree(tmp_path)
    configured = _configure(source, tmp_path / "build", "-DTUNED_GPU=no-such-gpu")
    assert configured.returncode != 0
    assert "Tuned header not found" in configured.stderr
    assert "python tune.py export" in configured.stderr


@pytest.mark.nvcc  # CMake checks its CUDA compiler with nvcc; a build compiles the header: minutes on 2 cores
@needs_toolchain
def test_a_dsl_header_without_its_library_is_a_clear_configure_error(tmp_path):
    from test_export_dsl import mixed

    shutil.copytree(EXAMPLE, tmp_path / "examples" / "cpp", ignore=shutil.ignore_patterns("build*"))
    header = tmp_path / "results" / GPU / HEADER_FILE
    header.parent.mkdir(parents=True)
    header.write_text(render_header(mixed(), dsl_version="4.8.1"))  # rendered, not exported: no library
    configured = _configure(tmp_path / "examples" / "cpp", tmp_path / "build")
    assert configured.returncode != 0
    assert "dsl/libtuned_dsl.a: not found" in configured.stderr.replace("\n  ", " ")
    assert "python tune.py export" in configured.stderr
