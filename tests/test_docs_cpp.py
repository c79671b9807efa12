"""The C++ the documentation shows compiles against headers `tune.py export` writes, and the committed
headers are what export writes today. CPU only: nvcc compiles, nothing runs.

The snippets name the H100's and the H200's tables. To keep the compile short (an sm90_conv kernel takes
nvcc about 40 s here, an sm80 one 10), each table holds conv_1 only, as the H200 tuned it: an sm80
kernel; the runners of all families have one interface, which tests/test_example_build.py builds."""
from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from test_cli import REPO, tune
from test_export_dsl import write_best
from tuner.build.nvcc import cutlass_include_dirs
from tuner.pipeline.export import HEADER_FILE
from tuner.store.best import read_best

DOCUMENTS = (REPO / "README.md", REPO / "examples" / "cpp" / "README.md")
H100, H200 = "nvidia-h100-80gb-hbm3", "nvidia-h200"
# As examples/cpp/CMakeLists.txt builds: C++17, CUTLASS's constexpr use, the H100's arch.
NVCC_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a")
CPP_BLOCK = re.compile(r"^( *)```cpp\n(.*?)^\1```", re.MULTILINE | re.DOTALL)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def cpp_snippets(document: Path) -> list[str]:
    return [textwrap.dedent(block) for _, block in CPP_BLOCK.findall(document.read_text())]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """results/<gpu>/best_configs.h of both GPUs, exported by tune.py from one-layer best.yaml files."""
    root = tmp_path_factory.mktemp("docs") / "results"
    h200 = read_best(REPO / "results" / H200)
    conv_1 = {"conv_1": h200["layers"]["conv_1"]}
    write_best(root / H200, {**h200, "layers": conv_1})
    write_best(root / H100, {**read_best(REPO / "results" / H100), "layers": conv_1})
    exported = tune("export", "--results-dir", str(root), tmp_path=root.parent)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    return root


def nvcc_compile(source: str, folder: Path, name: str, results: Path) -> subprocess.CompletedProcess:
    path = folder / f"{name}.cu"
    path.write_text(source)
    includes = [f"-I{results / H100}", f"-I{results}", *(f"-I{d}" for d in cutlass_include_dirs())]
    return subprocess.run(["nvcc", *NVCC_FLAGS, *includes, "-c", str(path), "-o", str(path.with_suffix(".o"))],
                          capture_output=True, text=True, timeout=600)


def test_the_documents_show_the_snippets_that_are_compiled():
    snippets = [snippet for document in DOCUMENTS for snippet in cpp_snippets(document)]
    assert len(snippets) >= 2
    assert any("op.initialize(problem, x, w, y, epilogue, workspace, stream)" in s for s in snippets)
    assert any("h200::matches_device(cc, sms, props.name)" in s for s in snippets)


@pytest.mark.nvcc
@needs_nvcc
def test_every_cpp_snippet_of_the_docs_compiles_against_an_exported_header(results, tmp_path):
    snippets = {f"{document.parent.name}_{index}": snippet
                for document in DOCUMENTS for index, snippet in enumerate(cpp_snippets(document))}
    # Both tables in one translation unit: the device name tells them apart where the numbers do not.
    snippets["matches_device"] = textwrap.dedent(f"""\
        #include "{H100}/{HEADER_FILE}"
        #include "{H200}/{HEADER_FILE}"
        namespace h100 = cutlass_conv_tuner::nvidia_h100_80gb_hbm3;
        namespace h200 = cutlass_conv_tuner::nvidia_h200;
        static_assert(h100::matches_device(90, 132, "NVIDIA H100 80GB HBM3"));
        static_assert(!h100::matches_device(90, 132, "NVIDIA H200"));
        static_assert(h200::matches_device(90, 132, "NVIDIA H200"));
        static_assert(!h200::matches_device(90, 132, "NVIDIA H100 80GB HBM3"));
        static_assert(!h200::matches_device(90, 132, "NVIDIA H200 NVL") && !h200::matches_device(90, 132, nullptr));
        static_assert(!h100::matches_device(90, 114, "NVIDIA H100 80GB HBM3"));
        """)
    with ThreadPoolExecutor(2) as pool:
        compiled = dict(zip(snippets, pool.map(lambda item: nvcc_compile(item[1], tmp_path, item[0], results),
                                               snippets.items())))
    failed = {name: result.stderr[-3000:] for name, result in compiled.items() if result.returncode != 0}
    assert not failed, failed


@pytest.mark.parametrize("gpu", sorted(path.parent.name for path in (REPO / "results").glob(f"*/{HEADER_FILE}")))
def test_the_committed_header_is_what_export_writes_now(gpu, tmp_path):
    """A header left behind by a change of the template or the codegen fails here; `python tune.py export`
    mends it. sm90_dsl layers' library is not compared (export builds it after a clone)."""
    from tuner.pipeline.export import render_header

    committed = (REPO / "results" / gpu / HEADER_FILE).read_text()
    dsl_version = re.search(r'constexpr char kDslVersion\[\] = "([^"]*)";', committed)
    fresh = render_header(read_best(REPO / "results" / gpu), dsl_version=dsl_version and dsl_version.group(1))
    assert committed == fresh, f"results/{gpu}/{HEADER_FILE} is stale: run `python tune.py export --gpu {gpu}`"
