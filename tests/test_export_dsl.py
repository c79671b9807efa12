"""sm90_dsl layers in best_configs.h: the header declares each layer's CuTe DSL kernel against its entry-point
table in dsl/libtuned_dsl.a, which `tune.py export` builds beside it through the compile cache. What needs the
DSL (building, linking) is skipped where it is not installed; rendering and the refusals are not."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_export import EVIL, document, entry, strip_literals
from tuner.cli.main import main as cli_main
from tuner.build.nvcc import cutlass_include_dirs
from tuner.pipeline.dsl_export import LIBRARY, dsl_symbol
from tuner.pipeline.export import HEADER_FILE, cpp_identifier, export_header, render_header
from tuner.families.base import BuildRequest
from tuner.core.dtypes import dtype_fields
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.measure.validate import tolerance
from tuner.store.best import read_best
from tuner.search.space import make_config

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "nvidia_h100_80gb_hbm3"
# A small 3x3 conv the DSL builds in a few seconds on the CPU (W=16 with 8-column boxes).
DSL_PROBLEM = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad=1)
DSL_PARAMS = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
              "swizzle": 1, "tile_q": 8}


def dsl_entry(problem: ConvProblem = DSL_PROBLEM, **changes) -> dict:
    config = make_config(problem, "sm90_dsl", DSL_PARAMS)
    return {"problem": problem_to_dict(problem), "family": "sm90_dsl", "params": config.search_params,
            "kernel": config.name, "runtime_us": 10.0, "date": "2026-11-24", **changes}


def mixed(**extra) -> dict:
    """One DSL layer and one sm80 layer."""
    return document(**{"dsl-layer": dsl_entry(), "cpp_layer": entry("sm80"), **extra})


def write_best(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "best.yaml").write_text(yaml.safe_dump({**doc, "layer_count": len(doc["layers"])}, sort_keys=False))
    return folder


# --- the header (no DSL needed) ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def header() -> str:
    return render_header(mixed(), dsl_version="4.8.1")


def test_a_dsl_layer_gets_a_table_a_kernel_type_and_a_runner(header):
    symbol = dsl_symbol(NAMESPACE, "dsl_layer")
    assert symbol == f"cutlass_conv_tuner_{len(NAMESPACE)}{NAMESPACE}_dsl_layer"
    assert f'extern "C" const TunerDslEntryPoints {symbol};' in header
    assert f"using dsl_layer = DslKernel<&{symbol}, cutlass::half_t, cutlass::half_t, cutlass::half_t>;" in header
    assert "using dsl_layer_runner = DslRunner<dsl_layer>;" in header
    assert "using cpp_layer_runner = Sm80Runner<cpp_layer>;" in header
    assert header.count("class DslRunner {") == 1 and header.count("struct TunerDslEntryPoints {") == 1
    assert 'constexpr char kDslLibrary[] = "dsl/libtuned_dsl.a";' in header
    assert 'constexpr char kDslVersion[] = "4.8.1";' in header
    assert "constexpr int kDslAbiVersion = 5;" in header
    assert '#include "cuda_runtime.h"' in header and "$" not in header


def test_dsl_layers_are_in_the_table_and_the_for_each_macro(header):
    assert re.findall(r"X\((\w+)_runner, (\d+)\)", header) == [("cpp_layer", "0"), ("dsl_layer", "1")]
    row = next(line for line in header.splitlines() if line.startswith('    {"dsl-layer", '))
    code, literals = strip_literals(row)
    assert literals[:2] == ["dsl-layer", "sm90_dsl"]
    # the problem (pad, stride, dilation per axis; groups) and the kernel's channels
    assert "2, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 64" in code


def test_a_header_without_dsl_layers_has_none_of_it():
    header = render_header(document(only=entry("sm80")))
    assert "Dsl" not in header and "cuda_runtime.h" not in header


E4M3_PROBLEM = ConvProblem(n=2, h=16, w=16, c=64, k=64, r=3, s=3, pad=1, **dtype_fields("e4m3"))


def e4m3_header() -> str:
    return render_header(document(**{"fp8-layer": dsl_entry(E4M3_PROBLEM), "dsl-layer": dsl_entry()}),
                         dsl_version="4.8.1")


def test_an_e4m3_layer_gets_the_scaled_runner_and_its_types():
    header = e4m3_header()
    symbol = dsl_symbol(NAMESPACE, "fp8_layer")
    assert (f"using fp8_layer = DslKernel<&{symbol}, cutlass::float_e4m3_t, cutlass::float_e4m3_t, "
            "cutlass::half_t>;") in header
    assert "using fp8_layer_runner = DslScaledRunner<fp8_layer>;" in header
    assert "using dsl_layer_runner = DslRunner<dsl_layer>;" in header
    assert header.count("struct TunerScaledEpilogue {") == 1 and header.count("class DslScaledRunner") == 1
    row = next(line for line in header.splitlines() if line.startswith('    {"fp8-layer", '))
    assert '"e4m3_e4m3_f16_f32"' in row and f"{tolerance(E4M3_PROBLEM):.3e}" in row
    assert "DslScaledRunner" not in render_header(mixed(), dsl_version="4.8.1")  # only where a layer takes scales


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_header_with_an_e4m3_layer_passes_gcc_syntax_check(tmp_path):
    from tuner.families.dsl_common.build_tools import CUDA_HOME

    if not (CUDA_HOME / "include" / "cuda_runtime.h").exists():
        pytest.skip("needs the CUDA headers")
    header = tmp_path / HEADER_FILE
    header.write_text(e4m3_header())
    include, _ = cutlass_include_dirs()
    done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", f"-I{include}",
                           f"-I{CUDA_HOME / 'include'}", str(header)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_cpp_example_compiles_against_a_header_with_an_e4m3_layer(tmp_path):
    """examples/cpp/main.cu hands an e4m3 layer's DslScaledRunner its two scales (and folds them into the
    reference's alpha) where it hands the others a TunerEpilogue: it compiles with both kinds of runner."""
    header = tmp_path / HEADER_FILE
    header.write_text(e4m3_header())
    include, util_include = cutlass_include_dirs()
    done = subprocess.run(
        ["nvcc", "-std=c++17", "-arch=sm_90a", "--expt-relaxed-constexpr", f"-I{include}", f"-I{util_include}",
         f'-DTUNED_HEADER_FILE="{header}"', f"-DTUNED_NAMESPACE={NAMESPACE}",
         f"-DTUNED_FOR_EACH=CUTLASS_CONV_TUNER_{NAMESPACE.upper()}_FOR_EACH_LAYER", "-c",
         str(REPO / "examples" / "cpp" / "main.cu"), "-o", str(tmp_path / "main.o")],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("gpu", ["nvidia-h100-80gb-hbm3", "nvidia-h200"])
def test_the_committed_headers_are_what_export_renders(gpu):
    """A best.yaml without DSL layers exports the header it always did, byte for byte."""
    folder = REPO / "results" / gpu
    document_ = read_best(folder)
    if any(raw.get("family") == "sm90_dsl" for raw in document_["layers"].values()):
        pytest.skip(f"{gpu}'s best.yaml holds sm90_dsl layers")
    assert render_header(document_) == (folder / HEADER_FILE).read_text(), \
        f"results/{gpu}/best_configs.h differs from `python tune.py export --gpu {gpu}`'s: export it again"


def _committed_dsl_headers() -> list[Path]:
    return sorted(path.parent for path in (REPO / "results").glob(f"*/{HEADER_FILE}")
                  if "kDslLibrary" in path.read_text())


@pytest.mark.parametrize("folder", _committed_dsl_headers(), ids=lambda folder: folder.name)
def test_a_committed_header_with_dsl_layers_is_what_export_renders_and_its_library_holds_its_tables(folder):
    """The header as export renders it (with the DSL version it names), and the library beside it defines
    exactly the tables it declares (nm reads it: no DSL needed)."""
    header = (folder / HEADER_FILE).read_text()
    version = re.search(r'^constexpr char kDslVersion\[\] = "([^"]*)";', header, re.M).group(1)
    assert render_header(read_best(folder), dsl_version=version) == header, \
        f"{folder / HEADER_FILE} differs from `python tune.py export --gpu {folder.name}`'s: export it again"
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) reads the library")
    if not (folder / LIBRARY).is_file():  # not tracked: `tune.py export` builds it after a clone
        pytest.skip(f"{folder.name}'s {LIBRARY} is not built (python tune.py export --gpu {folder.name})")
    declared = re.findall(r'^extern "C" const TunerDslEntryPoints (\w+);', header, re.M)
    assert declared and sorted(_defined_globals(folder / LIBRARY)) == sorted(declared)


def test_dsl_symbols_come_only_from_checked_identifiers():
    header = render_header(document(**{EVIL: dsl_entry()}), dsl_version=EVIL)
    alias = cpp_identifier(EVIL)
    symbol = dsl_symbol(NAMESPACE, alias)
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol)
    assert f'extern "C" const TunerDslEntryPoints {symbol};' in header
    assert '"; int evil' not in header
    for line in header.splitlines():
        if line.lstrip().startswith("//"):
            assert not line.endswith("\\") and "\n" not in line
            continue
        assert "int evil" not in strip_literals(line)[0], line
    for bad in ("a-b", "1a", "", "a b"):
        with pytest.raises(ValueError):
            dsl_symbol(bad, "layer")
        with pytest.raises(ValueError):
            dsl_symbol(NAMESPACE, bad)
    assert dsl_symbol("a_b", "c") != dsl_symbol("a", "b_c")


# --- what export refuses, writing nothing --------------------------------------------------------------

FAILING_BUILDER = """
import sys
print("compiling...")
print("build failed: DSL compile failed: error: this builder refuses every kernel", file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def results(tmp_path) -> Path:
    """tmp_path/results/<gpu>/best.yaml with one DSL and one sm80 layer, and a header already there."""
    folder = write_best(tmp_path / "results" / "nvidia-h100-80gb-hbm3", mixed())
    (folder / HEADER_FILE).write_text("// the header of an earlier export\n")
    return folder


def run_export(results: Path, capsys) -> tuple[int, list[str]]:
    code = cli_main(["export", "--results-dir", str(results.parent), "--cache-dir", str(results.parents[1] / "cache")])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_without_the_dsl_export_exits_2_with_one_line_and_writes_nothing(results, emitter_pieces, capsys):
    missing = "the CuTe DSL is not installed: pip install -e '.[dsl]' (nvidia-cutlass-dsl)"
    emitter_pieces("sm90_dsl", toolchain_problem=lambda: missing)
    code, lines = run_export(results, capsys)
    assert code == 2 and len(lines) == 1
    assert "'dsl-layer'" in lines[0] and "sm90_dsl" in lines[0] and "pip install -e '.[dsl]'" in lines[0]
    assert (results / HEADER_FILE).read_text() == "// the header of an earlier export\n"
    assert sorted(p.name for p in results.iterdir()) == ["best.yaml", HEADER_FILE]


def test_a_dsl_kernel_that_does_not_build_exits_2_with_one_line(results, tmp_path, emitter_pieces, capsys):
    builder = tmp_path / "failing_builder.py"
    builder.write_text(FAILING_BUILDER)
    emitter_pieces("sm90_dsl", toolchain_problem=lambda: None, build_request=lambda config: BuildRequest(
        config.build_spec().to_json(), "spec.json", (sys.executable, str(builder)), "failing 1"))
    code, lines = run_export(results, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert list((tmp_path / "cache").rglob("error.txt"))  # built through the cache given
    assert "'dsl-layer'" in lines[0] and "did not build" in lines[0] and "refuses every kernel" in lines[0]
    assert (results / HEADER_FILE).read_text() == "// the header of an earlier export\n"
    assert not (results / "dsl").exists() and not list(results.glob(".*"))


def test_a_dsl_free_export_removes_a_stale_library(tmp_path):
    folder = write_best(tmp_path / "gpu", document(only=entry("sm80")))
    (folder / "dsl").mkdir()
    (folder / LIBRARY).write_bytes(b"!<arch>\n")
    export_header(folder)
    assert (folder / HEADER_FILE).read_text() == render_header(read_best(folder))
    assert not (folder / "dsl").exists()


# --- the export itself: needs the DSL ------------------------------------------------------------------

def _dsl_installed() -> bool:
    try:
        import cutlass.cute  # noqa: F401
    except Exception:
        return False
    return all(shutil.which(tool) for tool in ("gcc", "objcopy", "ar", "nm"))


needs_dsl = pytest.mark.skipif(not _dsl_installed(),
                               reason="needs nvidia-cutlass-dsl (pip install -e '.[dsl]'), gcc and binutils")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """results/<gpu>/ of a best.yaml with one DSL layer and one sm80 layer, exported (compile cache in tmp)."""
    if not _dsl_installed():
        pytest.skip("needs nvidia-cutlass-dsl (pip install -e '.[dsl]'), gcc and binutils")
    root = tmp_path_factory.mktemp("export")
    folder = write_best(root / "results" / "nvidia-h100-80gb-hbm3", mixed())
    export_header(folder, cache_dir=root / "cache")
    return folder


def _defined_globals(archive: Path) -> list[str]:
    out = subprocess.run(["nm", "-g", "--defined-only", str(archive)], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if re.match(r"^[0-9a-f]+ ", line)]


@needs_dsl
@pytest.mark.slow
def test_export_writes_the_header_and_one_object_per_dsl_layer(exported):
    header = (exported / HEADER_FILE).read_text()
    assert header == render_header(read_best(exported))
    archive = exported / LIBRARY
    members = subprocess.run(["ar", "t", str(archive)], capture_output=True, text=True, check=True).stdout.split()
    assert members == ["dsl_layer.o"]
    # the table is the object's only global symbol: the DSL's own names (k0_*, the kernel) are local
    assert _defined_globals(archive) == [dsl_symbol(NAMESPACE, "dsl_layer")]
    assert sorted(p.name for p in exported.iterdir()) == ["best.yaml", HEADER_FILE, "dsl"]


@needs_dsl
@pytest.mark.slow
def test_export_again_gives_the_same_bytes(exported):
    before = (exported / HEADER_FILE).read_text(), (exported / LIBRARY).read_bytes()
    export_header(exported, cache_dir=exported.parents[1] / "cache")  # from the compile cache
    assert ((exported / HEADER_FILE).read_text(), (exported / LIBRARY).read_bytes()) == before


TEST_PROGRAM = r"""
#include <cstdio>
#include TUNED_HEADER
namespace tuned = cutlass_conv_tuner::nvidia_h100_80gb_hbm3;
int main() {
  const tuned::TunedLayer &layer = *tuned::find_layer("dsl-layer");
  int32_t a[tuned::kTunerProblemFields];
  tuned::problem_array(layer, a);
  tuned::TunerProblem problem(a);
  using Runner = tuned::dsl_layer_runner;
  int32_t grid[6] = {0, 0, 0, 0, 0, 0};
  Runner::grid(problem, grid);
  const int ok = int(Runner::can_implement(problem));
  problem.c = 32;
  const int other = int(Runner::can_implement(problem));
  Runner unbound;
  std::printf("%d %d %zu %d %d %d\n", ok, other, Runner::workspace_bytes(problem), grid[2] > 0,
              int(unbound.run(nullptr)), tuned::kLayerCount);
  return 0;
}
"""


def _runtime_library() -> Path:
    from tuner.families.dsl_common.build_tools import dsl_lib_dir

    return dsl_lib_dir() / "libcuda_dialect_runtime_static.a"


@needs_dsl
@pytest.mark.slow
def test_a_dsl_only_header_passes_gcc_syntax_check(exported, tmp_path):
    from tuner.families.dsl_common.build_tools import CUDA_HOME

    header = tmp_path / HEADER_FILE
    header.write_text(render_header(document(**{"dsl-layer": dsl_entry()})))
    include, _ = cutlass_include_dirs()
    done = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", f"-I{include}",
                           f"-I{CUDA_HOME / 'include'}", str(header)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.nvcc
@needs_dsl
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_header_links_with_its_library_and_answers_without_a_gpu(exported, tmp_path):
    """nvcc compiles a program against the header (a DSL layer beside a CUTLASS sm80 one), links the library, the
    DSL runtime and cudart, and the program runs on the CPU: can_implement goes through the table into the
    object's entry points (no CUDA call: no GPU needed)."""
    source = tmp_path / "program.cu"
    source.write_text(TEST_PROGRAM)
    include, util_include = cutlass_include_dirs()
    program = tmp_path / "program"
    done = subprocess.run(
        ["nvcc", "-std=c++17", "-arch=sm_90a", "--expt-relaxed-constexpr", f"-I{include}", f"-I{util_include}",
         f'-DTUNED_HEADER="{exported / HEADER_FILE}"', str(source), str(exported / LIBRARY), str(_runtime_library()),
         "-o", str(program)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    # can_implement: kSuccess (0) for the compiled problem, kErrorInvalidProblem (4) for another C; no workspace;
    # a grid; run() before initialize() is kErrorInternal (7); two layers
    assert ran.stdout.split() == ["0", "4", "0", "1", "7", "2"]
