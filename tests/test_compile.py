"""The compile stage, with one real nvcc build of a small CUTLASS candidate (about 10 s) and one of a
broken source (well under a second); everything else is answered from the cache or a fake nvcc."""
import dataclasses
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest

import tuner.build.compile as compile_module
from conftest import config_for
from tuner.build.compile import Compiler
from tuner.build.compile_cache import CompileResult, cache_key, default_cache_dir
from tuner.build.nvcc import (
    ERROR_EXCERPT_LINES,
    PtxasReport,
    ToolchainError,
    cutlass_include_dirs,
    default_jobs,
    error_excerpt,
    nvcc_flags,
    nvcc_version,
    parse_ptxas,
)
from conftest import H100
from tuner.build.codegen import candidate_source
from tuner.families.base import LaunchArgs
from tuner.core.problem import ConvProblem
from tuner.measure.run import KernelLibrary, LaunchError, LaunchGrid, problem_array
from tuner.build.abi import KernelBinary

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

MANGLED = ("_ZN7cutlass6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistage"
           "INS_4gemm9GemmShapeILi128ELi128ELi64EEEEEEEvNT_6ParamsE")

# ptxas -v of the reference 128x128x64 candidate for sm_90 (CUDA 13), as nvcc prints it.
PTXAS_254 = f"""\
ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '{MANGLED}' for 'sm_90'
ptxas info    : Function properties for {MANGLED}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 254 registers, used 1 barriers
ptxas info    : Compile time = 1873.221 ms
"""

# A 128x128 warp tile: the register file overflows into local memory.
PTXAS_SPILLS = f"""\
ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '{MANGLED}' for 'sm_90'
ptxas info    : Function properties for {MANGLED}
    1160 bytes stack frame, 1828 bytes spill stores, 2200 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 400 bytes cmem[0]
"""


# --- pure functions -----------------------------------------------------------------------------

def test_parse_ptxas_without_spills():
    assert parse_ptxas(PTXAS_254) == PtxasReport(registers=254, spill_store_bytes=0, spill_load_bytes=0,
                                                 stack_frame_bytes=0)


def test_parse_ptxas_with_spills():
    report = parse_ptxas(PTXAS_SPILLS)
    assert report == PtxasReport(registers=255, spill_store_bytes=1828, spill_load_bytes=2200, stack_frame_bytes=1160)
    assert report.spill_bytes == 4028


def test_parse_ptxas_without_a_resource_line():
    assert parse_ptxas("candidate.cu(3): error: identifier \"x\" is undefined\n") is None
    assert parse_ptxas("") is None


def test_error_excerpt_keeps_error_lines():
    log = "\n".join(["In file included from a.h:1,", "candidate.cu(12): error: expected a \";\"",
                     "   int x", "       ^", "1 error detected in the compilation of \"candidate.cu\"."])
    assert error_excerpt(log).splitlines() == ["candidate.cu(12): error: expected a \";\"",
                                               "1 error detected in the compilation of \"candidate.cu\"."]


def test_error_excerpt_is_bounded():
    log = "\n".join(f"candidate.cu({i}): error: number {i}" for i in range(40))
    lines = error_excerpt(log).splitlines()
    assert len(lines) == ERROR_EXCERPT_LINES
    assert lines[0].endswith("number 0")


def test_error_excerpt_without_errors_gives_the_head():
    log = "\n".join(f"line {i}" for i in range(30))
    assert error_excerpt(log).splitlines() == [f"line {i}" for i in range(ERROR_EXCERPT_LINES)]


def test_nvcc_flags():
    flags = nvcc_flags(["-arch=sm_90"])
    assert "-arch=sm_90" in flags and "--shared" in flags and "-O3" in flags
    assert flags[flags.index("-Xptxas") + 1] == "-v"
    for include in cutlass_include_dirs():
        assert f"-I{include}" in flags
        assert include.is_dir()
    assert (cutlass_include_dirs()[0] / "cutlass" / "conv" / "device" / "implicit_gemm_convolution.h").is_file()


@needs_nvcc
def test_cache_key_changes_with_source_flags_and_arch():
    flags = nvcc_flags(["-arch=sm_90"])
    key = cache_key("source", flags)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key("source", list(flags)) == key
    assert cache_key("source ", flags) != key
    assert cache_key("source", flags + ["-G"]) != key
    assert cache_key("source", nvcc_flags(["-arch=sm_80"])) != key
    assert cache_key("source", nvcc_flags(["-gencode=arch=compute_90a,code=sm_90a"])) != key


@needs_nvcc
def test_cache_key_does_not_depend_on_where_cutlass_is_installed():
    flags = nvcc_flags(["-arch=sm_90"])
    moved = [("-I/elsewhere/site-packages/" + f[2:].rsplit("/", 1)[-1]) if f.startswith("-I") else f for f in flags]
    assert moved != flags and cache_key("source", moved) == cache_key("source", flags)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CUTLASS_TUNER_CACHE", str(tmp_path / "tuner"))
    assert default_cache_dir() == tmp_path / "tuner" / "compile"
    monkeypatch.delenv("CUTLASS_TUNER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "cutlass-conv-tuner" / "compile"


def test_default_jobs():
    assert 1 <= default_jobs() <= (os.cpu_count() or 1)


def test_missing_nvcc_is_a_toolchain_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    nvcc_version.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="nvcc not found"):
            nvcc_version()
    finally:
        nvcc_version.cache_clear()


# --- real builds --------------------------------------------------------------------------------

def forbid_nvcc(monkeypatch):
    """From here on any subprocess (nvcc) fails the test: answers must come from the cache."""
    nvcc_version()  # the version is read (and cached) before subprocess is taken away

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"nvcc ran: {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)


@pytest.fixture(scope="module")
def small_config(conv_1):
    return config_for(conv_1, tile="64x64x32", warps="2x2x1", stages=3)


@pytest.fixture(scope="module")
def built(tmp_path_factory, small_config):
    """One real nvcc build of a CUTLASS candidate into a fresh cache."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    cache = tmp_path_factory.mktemp("compile-cache")
    compiler = Compiler(H100, cache, jobs=1)
    started = time.monotonic()
    result = compiler.compile(small_config)
    return compiler, result, time.monotonic() - started


@pytest.mark.nvcc
def test_real_compile(built, small_config):
    compiler, result, _ = built
    assert result.ok, result.error
    assert result.error is None and result.cached is False and result.seconds > 1
    assert result.config == small_config
    assert result.library.is_file() and result.library.read_bytes()[:4] == b"\x7fELF"
    entry = result.library.parent
    assert entry == compiler.cache_dir / result.key[:2] / result.key
    assert (entry / "candidate.cu").read_text() == candidate_source(small_config)
    assert result.key == cache_key(candidate_source(small_config), compiler.flags(small_config))
    assert "Used" in (entry / "ptxas.txt").read_text()
    assert not (entry / "error.txt").exists()
    # 64x64x32 with 4 warps: a 32x32 warp tile, a few dozen registers, no spills
    assert 32 <= result.ptxas.registers <= 255
    assert result.ptxas.spill_bytes == 0
    # nothing else in the cache: no scratch folder left behind
    assert [p.name for p in (compiler.cache_dir / result.key[:2]).iterdir()] == [result.key]


@pytest.mark.nvcc
def test_compiled_library_answers_its_host_entry_points(built, conv_1):
    """The C ABI that tuner.measure.run loads, called without a GPU: can_implement, workspace and grid are host code."""
    _, result, _ = built
    library = KernelLibrary(result.binary)
    one, four = LaunchArgs(32, split_k=1), LaunchArgs(32, split_k=4)
    assert library.can_implement(problem_array(conv_1, one)) == 0
    assert library.workspace_bytes(problem_array(conv_1, one)) == 0
    assert library.grid(problem_array(conv_1, one)) == LaunchGrid((16, 1, 1))  # 1024/64 x ceil(32/64) tiles
    assert library.grid(problem_array(conv_1, four)) == LaunchGrid((16, 1, 4))  # serial split-K slices in z
    assert library.workspace_bytes(problem_array(conv_1, four)) > 0   # the split-K semaphores
    misaligned = ConvProblem(n=1, h=32, w=32, c=36, k=32, r=3, s=3, pad=1, output_type=conv_1.output_type)
    assert library.can_implement(problem_array(misaligned, LaunchArgs(36))) != 0  # C=36 is not a multiple of 8


@pytest.mark.nvcc
def test_second_compile_comes_from_the_cache(built, small_config, monkeypatch):
    compiler, first, _ = built
    forbid_nvcc(monkeypatch)
    started = time.monotonic()
    again = Compiler(H100, compiler.cache_dir, jobs=1).compile(small_config)
    assert time.monotonic() - started < 1.0
    assert again.cached is True and again.seconds == 0.0
    assert (again.library, again.key, again.ptxas) == (first.library, first.key, first.ptxas)


@pytest.mark.nvcc
def test_split_k_variant_shares_the_kernel(built, small_config, monkeypatch):
    compiler, first, _ = built
    forbid_nvcc(monkeypatch)
    variant = dataclasses.replace(small_config, split_k=4)
    result = compiler.compile(variant)
    assert result.cached and result.library == first.library
    assert result.config == variant and result.config.split_k == 4


@pytest.mark.nvcc
def test_compile_many_from_the_cache(built, small_config, monkeypatch):
    compiler, first, _ = built
    forbid_nvcc(monkeypatch)
    configs = [small_config, dataclasses.replace(small_config, split_k=2)]
    done = []
    results = compiler.compile_many(configs, done.append)
    assert [r.config for r in results] == configs
    assert sorted(r.config.split_k for r in done) == [1, 2]
    assert all(r.cached and r.library == first.library for r in results)


@pytest.mark.nvcc
def test_broken_source_fails_and_the_failure_is_cached(tmp_path, small_config, monkeypatch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    monkeypatch.setattr(compile_module, "candidate_source", lambda config: "this is not C++ at all;\n")
    compiler = Compiler(H100, tmp_path, jobs=1)
    result = compiler.compile(small_config)
    assert not result.ok and result.library is None and result.ptxas is None
    assert result.cached is False
    assert "error" in result.error.lower()
    assert "candidate.cu" in result.error
    entry = tmp_path / result.key[:2] / result.key
    assert (entry / "error.txt").read_text() == result.error
    assert not (entry / "candidate.so").exists()

    forbid_nvcc(monkeypatch)
    again = compiler.compile(small_config)
    assert not again.ok and again.cached is True and again.error == result.error


def test_racing_builds_of_one_kernel_publish_one_entry(tmp_path, small_config, monkeypatch):
    """Two processes building one kernel at once (here two threads; a fake nvcc holds both builds until
    both have started): one cache entry wins, the other build's scratch folder is removed and both results
    point at the winner."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    nvcc_version()
    both_started = threading.Barrier(2, timeout=10)

    def fake_nvcc(command, cwd, **kwargs):
        both_started.wait()
        (Path(cwd) / "candidate.so").write_bytes(b"\x7fELF fake")
        return subprocess.CompletedProcess(command, 0, "", "ptxas info    : Used 42 registers, used 1 barriers\n")

    monkeypatch.setattr(subprocess, "run", fake_nvcc)
    compiler = Compiler(H100, tmp_path, jobs=2)
    variant = dataclasses.replace(small_config, split_k=2)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compiler.compile, [small_config, variant]))
    assert all(r.ok and not r.cached for r in results)
    assert results[0].library == results[1].library and results[0].library.is_file()
    assert results[0].ptxas.registers == 42
    entries = [p for p in tmp_path.rglob("*") if p.is_dir() and p.parent != tmp_path]
    assert [p.name for p in entries] == [results[0].key]


@pytest.mark.parametrize("failure", ["timeout", "killed", "child killed"])
def test_a_transient_nvcc_failure_is_not_cached(tmp_path, small_config, monkeypatch, failure):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    nvcc_version()

    def failing_nvcc(command, cwd, **kwargs):
        if failure == "timeout":
            raise subprocess.TimeoutExpired(command, kwargs.get("timeout"))
        if failure == "child killed":  # an interrupt reached cicc: nvcc itself exits 1
            return subprocess.CompletedProcess(command, 1, "", "nvcc error   : '\"$CICC_PATH/cicc\"' died due to signal 2")
        return subprocess.CompletedProcess(command, -9, "", "")

    def working_nvcc(command, cwd, **kwargs):
        (Path(cwd) / "candidate.so").write_bytes(b"\x7fELF fake")
        return subprocess.CompletedProcess(command, 0, "", "ptxas info    : Used 40 registers, used 1 barriers\n")

    compiler = Compiler(H100, tmp_path, jobs=1)
    monkeypatch.setattr(subprocess, "run", failing_nvcc)
    failed = compiler.compile(small_config)
    assert not failed.ok and failed.transient
    monkeypatch.setattr(subprocess, "run", working_nvcc)
    again = compiler.compile(small_config)
    assert again.ok and not again.cached


def test_compile_many_calls_on_done_once_per_config(conv_1, monkeypatch):
    configs = [config_for(conv_1, tile=t, stages=s) for t in ("64x64x32", "128x128x64") for s in (2, 3, 4)]
    threads = set()

    def fake_compile(self, config):
        threads.add(threading.get_ident())
        time.sleep(0.02 * (config.stages % 3))
        return CompileResult(config, config.name, Path(f"/cache/{config.name}.so"), 0.01, False, None, None)

    monkeypatch.setattr(Compiler, "compile", fake_compile)
    compiler = Compiler(H100, Path("/nonexistent"), jobs=3)
    done = []
    results = compiler.compile_many(configs, done.append)
    assert [r.config for r in results] == configs                        # in the order asked
    assert sorted(r.config.name for r in done) == sorted(c.name for c in configs)  # each once
    assert len(done) == len(configs)
    assert len(threads) > 1                                              # in parallel
    assert compiler.compile_many([], done.append) == []


# --- several kernels in one translation unit ------------------------------------------------------

def gemm_configs(count: int):
    from tuner.families.sm90_gemm.space import make_config as gemm_config

    problem = ConvProblem(n=32, h=28, w=28, c=256, k=128, r=1, s=1)
    tiles = ["64x128x64", "128x128x64", "128x256x64", "256x128x64", "64x256x64", "128x64x64"]
    return [gemm_config(problem, {"tile": tile, "cluster": "1x1x1", "schedule": "pingpong" if tile[:2] == "64" else
                                  "cooperative", "scheduler": "persistent", "epilogue": epilogue, "stages": 0,
                                  "raster": 0, "swizzle": 1, "split_k": 1})
            for tile in tiles for epilogue in ("tma", "nosmem")][:count]


def fake_units(monkeypatch, fail_units: bool = False) -> list:
    """nvcc stood in for by fake_unit_nvcc (skipped without nvcc, whose version the cache key holds): the list
    it records each unit's size in."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    nvcc_version()
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_unit_nvcc(calls, fail_units))
    return calls


def fake_unit_nvcc(calls: list, fail_units: bool = False):
    """A fake nvcc that 'builds' any unit, reporting ptxas registers 100 + the kernel's index for each
    kernel it finds in the source; with fail_units, a unit of several kernels fails to compile."""
    import re as _re

    def run(command, cwd, **kwargs):
        source = (Path(cwd) / "candidate.cu").read_text()
        count = int(_re.search(r"tuner_kernel_count\(\) \{ return (\d+); \}", source)[1])
        calls.append(count)
        if fail_units and count > 1:
            return subprocess.CompletedProcess(command, 1, "", "candidate.cu(9): error: something in the unit\n")
        (Path(cwd) / "candidate.so").write_bytes(b"\x7fELF fake")
        log = "".join(f"ptxas info    : Compiling entry function '_ZN7cutlass13device_kernelIN9TunedConv{i}_detail6KernelEEEvv'"
                      f" for 'sm_90a'\nptxas info    : Used {100 + i} registers, used 1 barriers\n" for i in range(count))
        return subprocess.CompletedProcess(command, 0, "", log)
    return run


def test_units_spread_grouped_families_over_the_cores(tmp_path):
    compiler = Compiler(H100, tmp_path, jobs=2)
    sizes = [len(unit) for unit in compiler.units(gemm_configs(10))]
    assert sizes == [4, 4, 2]  # ceil(10 / 2 cores) = 5, capped at 4 a unit
    assert [len(unit) for unit in Compiler(H100, tmp_path, jobs=16).units(gemm_configs(10))] == [1] * 10
    sm80 = [config_for(ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1), stages=s) for s in (2, 3, 4, 5)]
    assert [len(unit) for unit in compiler.units(sm80)] == [1, 1, 1, 1]  # symbols without the alias: never grouped


def test_a_unit_of_kernels_is_cached_per_kernel(tmp_path, monkeypatch):
    calls = fake_units(monkeypatch)
    configs = gemm_configs(3)
    compiler = Compiler(H100, tmp_path, jobs=1)
    done = []
    results = compiler.compile_many(configs, done.append)
    assert calls == [3] and len(done) == 3
    assert [r.config for r in results] == configs
    assert [r.index for r in results] == [0, 1, 2] and {r.unit_size for r in results} == {3}
    assert len({r.library for r in results}) == 1 and all(r.ok and not r.cached for r in results)
    assert [r.ptxas.registers for r in results] == [100, 101, 102]  # each kernel's own ptxas line
    forbid_nvcc(monkeypatch)
    again = Compiler(H100, tmp_path, jobs=4).compile_many(list(reversed(configs)))
    assert [(r.index, r.ptxas.registers, r.cached) for r in again] == [(2, 102, True), (1, 101, True), (0, 100, True)]
    assert Compiler(H100, tmp_path, jobs=1).compile(configs[1]).binary.index == 1


def test_a_kernel_whose_unit_is_gone_is_built_again(tmp_path, monkeypatch):
    """A cache copied in part (a kernel's member entry without its unit's library): the kernel is rebuilt and
    published in the member's place, where it used to be a crash reading the entry's missing ptxas.txt."""
    calls = fake_units(monkeypatch)
    configs = gemm_configs(2)
    first = Compiler(H100, tmp_path, jobs=1).compile_many(configs)
    shutil.rmtree(first[0].library.parent)  # the unit's entry
    again = Compiler(H100, tmp_path, jobs=1).compile(configs[1])
    assert calls == [2, 1]  # the unit of two, then the one kernel rebuilt
    assert again.ok and not again.cached and again.library.exists()
    assert Compiler(H100, tmp_path, jobs=1).compile(configs[1]).cached


def test_a_unit_that_fails_is_built_again_kernel_by_kernel(tmp_path, monkeypatch):
    calls = fake_units(monkeypatch, fail_units=True)
    results = Compiler(H100, tmp_path, jobs=1).compile_many(gemm_configs(3))
    assert calls == [3, 1, 1, 1]
    assert all(r.ok and r.index == 0 and r.unit_size == 1 for r in results)


@pytest.mark.nvcc
@needs_nvcc
def test_real_unit_of_two_kernels_answers_each(tmp_path, conv_1):
    """Two kernels in one real translation unit (sm80, quick to build): each answers through its own
    tuner_k<index>_* entry points."""
    from tuner.build.codegen import group_source

    narrow, wide = config_for(conv_1, tile="64x64x32", stages=3), config_for(conv_1, tile="128x128x64", stages=3)
    (tmp_path / "candidate.cu").write_text(group_source([narrow, wide]))
    completed = subprocess.run(["nvcc", *Compiler(H100, tmp_path).flags(narrow), "candidate.cu", "-o", "candidate.so"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    library = tmp_path / "candidate.so"
    grids = [KernelLibrary(KernelBinary(library, index)).grid(problem_array(conv_1, LaunchArgs(32)))
             for index in (0, 1)]
    assert grids == [LaunchGrid((16, 1, 1)), LaunchGrid((8, 1, 1))]
    with pytest.raises(LaunchError, match="holds 2 kernel"):
        KernelLibrary(KernelBinary(library, 2))


# --- the queue the study's pipeline compiles through ---------------------------------------------

class HeldBuilds:
    """Stands in for Compiler.build_unit: records each unit and holds its build until the test
    releases it; a kernel once built is then answered by the stand-in for Compiler.cached. (Bound
    methods set on the class are called without the compiler.)"""

    def __init__(self, fail: Exception | None = None):
        self.units: list[list] = []
        self.gates: dict = {}
        self.cache: dict = {}
        self.fail = fail
        self.lock = threading.Lock()

    def gate(self, kernel) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(kernel, threading.Event())

    def release(self, *kernels) -> None:
        for kernel in kernels:
            self.gate(kernel.compiled).set()

    def build_unit(self, unit):
        with self.lock:
            self.units.append(list(unit))
        assert all(self.gate(kernel).wait(10) for kernel in unit)
        if self.fail is not None:
            raise self.fail
        results = [CompileResult(kernel, kernel.name, Path(f"/cache/{kernel.name}.so"), 1.0, False, None, None,
                                 index=index, unit_size=len(unit)) for index, kernel in enumerate(unit)]
        self.cache.update((r.config, dataclasses.replace(r, cached=True, seconds=0.0)) for r in results)
        return results

    def cached(self, config):
        return self.cache.get(config.compiled)


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def held(monkeypatch):
    builds = HeldBuilds()
    monkeypatch.setattr(Compiler, "build_unit", builds.build_unit)
    monkeypatch.setattr(Compiler, "cached", builds.cached)
    return builds


def test_a_queue_cuts_a_submission_into_units_and_answers_each_unit_as_it_finishes(tmp_path, held):
    configs = gemm_configs(5)
    with closing(Compiler(H100, tmp_path, jobs=2).open_queue()) as queue:
        futures = queue.submit(configs[:4])
        wait_until(lambda: len(held.units) == 2)
        assert held.units == [configs[:2], configs[2:4]]  # 4 kernels on 2 cores: units of 2, as compile_many cuts them
        held.release(*configs[2:4])
        assert [f.result(10).index for f in futures[2:]] == [0, 1]
        assert not any(f.done() for f in futures[:2])  # the other unit still compiles
        single = queue.submit(configs[4:])        # a later place filled: a unit of its own
        held.release(configs[4])
        assert single[0].result(10).config == configs[4] and single[0].result().unit_size == 1
        held.release(*configs[:2])
        assert [f.result(10).config for f in futures] == configs[:4]
    assert held.units == [configs[:2], configs[2:4], configs[4:]]


def test_a_queue_builds_a_shared_kernel_once_while_in_flight(tmp_path, held, conv_1):
    kernel = config_for(conv_1, tile="64x64x32", stages=3)
    variants = [dataclasses.replace(kernel, split_k=k) for k in (1, 2, 4)]
    with closing(Compiler(H100, tmp_path, jobs=2).open_queue()) as queue:
        first = queue.submit(variants[:2])
        wait_until(lambda: len(held.units) == 1)
        second = queue.submit(variants[2:])       # joins the build in flight
        held.release(kernel)
        results = [f.result(10) for f in first + second]
        assert [r.config for r in results] == variants and len({r.library for r in results}) == 1
        assert not any(r.cached for r in results)
        again = queue.submit(variants[1:2])[0].result(10)  # built: from the cache, not built again
        assert again.cached and again.config == variants[1]
    assert held.units == [[kernel]]


def test_closing_a_queue_drops_the_units_not_started(tmp_path, held):
    configs = gemm_configs(2)
    queue = Compiler(H100, tmp_path, jobs=1).open_queue()
    running, waiting = queue.submit(configs[:1]), queue.submit(configs[1:])
    wait_until(lambda: len(held.units) == 1)
    closer = threading.Thread(target=queue.close)
    closer.start()
    wait_until(waiting[0].cancelled)             # at once, while the running one still compiles...
    assert closer.is_alive() and not running[0].done()
    held.release(configs[0])
    closer.join(10)                             # ...which close waits for
    assert not closer.is_alive() and running[0].result().ok
    assert held.units == [configs[:1]]


def test_a_build_that_raises_reaches_its_configurations(tmp_path, monkeypatch, conv_1):
    builds = HeldBuilds(fail=ToolchainError("nvcc not found on PATH"))
    monkeypatch.setattr(Compiler, "build_unit", builds.build_unit)
    monkeypatch.setattr(Compiler, "cached", builds.cached)
    kernel = config_for(conv_1, tile="64x64x32", stages=3)
    builds.release(kernel)
    with closing(Compiler(H100, tmp_path, jobs=1).open_queue()) as queue:
        futures = queue.submit([kernel, dataclasses.replace(kernel, split_k=2)])
        for future in futures:
            with pytest.raises(ToolchainError):
                future.result(10)
        with pytest.raises(ToolchainError):
            Compiler(H100, tmp_path, jobs=1).compile_many([kernel])
