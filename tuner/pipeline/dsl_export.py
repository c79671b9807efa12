"""The CuTe DSL layers of best_configs.h (sm90_dsl's and dsl_direct's): each layer's kernel as an object in
results/<gpu>/dsl/libtuned_dsl.a, and the few lines the header declares for it.

A DSL kernel is not a C++ template the header could hold: `tune.py export` builds the layer's kernel again
through the compile cache (tuner.build.compile.Compiler, so a kernel the study built is not built twice), takes the
cache entry's kernel.o (the DSL's export_to_c: host code plus the sm_90a cubin) and entry.c (the tuner's C entry
points around it), and links them into one relocatable object per layer whose only global symbol is a table of
those entry points, named after the GPU's namespace and the layer's alias (dsl_symbol). Every other symbol is made
local, so that layers whose kernels the DSL exported under the same names link side by side. The header declares
the table `extern "C"` and binds it to DslRunner (tuner/templates/dsl_runner.h.in), a runner with the CUTLASS
runners' interface. No text from best.yaml reaches the C source or the header: the symbol is built from
identifiers that tuner.pipeline.export has already checked."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tuner.build.codegen import TEMPLATES
from tuner.build.abi import ABI_VERSION
from tuner.core.device import DeviceFacts
from tuner.core.dtypes import DataType
from tuner.families import registry
from tuner.families.base import ELEMENT_TAGS, KernelConfig, read_template
from tuner.store.results import ResultsError, replacing

LIBRARY = "dsl/libtuned_dsl.a"  # relative to the header, as the header's kDslLibrary says
INCLUDES = ("cuda_runtime.h", "cutlass/numeric_types.h")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOOL_TIMEOUT_S = 300


@dataclass(frozen=True)
class ObjectLayer:
    """A best.yaml layer whose kernel reaches the header as an object: its name, C++ alias and kernel."""

    name: str
    alias: str
    config: KernelConfig


def is_object_family(config: KernelConfig) -> bool:
    """Whether the header takes this kernel as a built object rather than as C++ (a CuTe DSL family's)."""
    return not registry.family_of(config).emitter.emits_cpp


def dsl_symbol(namespace: str, alias: str) -> str:
    """The C name of a layer's entry-point table: cutlass_conv_tuner_<length of namespace><namespace>_<alias>.
    The length keeps two GPUs' tables apart in one binary however their names split (a_b + c, a + b_c)."""
    for part in (namespace, alias):
        if not _IDENTIFIER.fullmatch(part):
            raise ValueError(f"not a C identifier: {part!r}")
    return f"cutlass_conv_tuner_{len(namespace)}{namespace}_{alias}"


def takes_scales(config: KernelConfig) -> bool:
    """Whether the layer's kernel takes its operands' per-tensor scales (e4m3), and so DslScaledRunner."""
    return config.input_type is DataType.e4m3


def runner_source(dsl_version: str, scaled: bool = False) -> str:
    """DslRunner and what it needs, emitted once in a header with DSL layers; and DslScaledRunner where one of
    them takes scales."""
    from tuner.pipeline.export import cpp_string

    source = read_template(TEMPLATES / "dsl_runner.h.in").substitute(
        library=LIBRARY, library_literal=cpp_string(LIBRARY), abi_version=ABI_VERSION,
        dsl_version=re.sub(r"[^A-Za-z0-9 ._+-]", "?", dsl_version), dsl_version_literal=cpp_string(dsl_version))
    return source + ("\n" + (TEMPLATES / "dsl_scaled_runner.h.in").read_text() if scaled else "")


def kernel_declaration(config: KernelConfig, alias: str, symbol: str) -> str:
    """A layer's table, its kernel type and its runner."""
    types = ", ".join(ELEMENT_TAGS[t] for t in (config.input_type, config.filter_type, config.output_type))
    runner = "DslScaledRunner" if takes_scales(config) else "DslRunner"
    return (f"// Config: {config.name} (CuTe DSL; object {alias}.o in {LIBRARY})\n"
            f'extern "C" const TunerDslEntryPoints {symbol};\n'
            f"using {alias} = DslKernel<&{symbol}, {types}>;\n"
            f"using {alias}_runner = {runner}<{alias}>;\n")


def installed_dsl_version() -> str:
    from tuner.families.dsl_common.toolchain import dsl_version

    return dsl_version() or "not installed"


# --- building the library --------------------------------------------------------------------------------

def _device(document: dict) -> DeviceFacts:
    """Enough of best.yaml's device for the compiler (a family's own builder does not read it)."""
    device = document.get("device") or {}
    major, _, minor = str(device.get("compute_capability", "9.0")).partition(".")
    return DeviceFacts(name=str(device.get("name", "")), cc_major=int(major or 9), cc_minor=int(minor or 0),
                       sm_count=int(device.get("sm_count") or 0), smem_optin_per_block=0, smem_per_sm=0,
                       registers_per_sm=0, l2_bytes=0, max_threads_per_sm=0, max_blocks_per_sm=0)


def _one_line(text: str) -> str:
    """The most telling line of a build log: the builder's last 'failed' line, else its last line."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    failed = [line for line in lines if "failed" in line or "error" in line.lower()]
    return ((failed or lines or ["no reason given"])[-1])[:300]


def _tools() -> tuple[str, str, str]:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    objcopy, ar = shutil.which("objcopy"), shutil.which("ar")
    if not (cc and objcopy and ar):
        missing = [name for name, path in (("a C compiler ($CC or gcc)", cc), ("objcopy", objcopy), ("ar", ar))
                   if not path]
        raise ResultsError(f"exporting DSL layers needs {', '.join(missing)} (binutils) on PATH")
    return cc, objcopy, ar


def _cuda_include() -> Path:
    from tuner.families.dsl_common.build_tools import CUDA_HOME

    include = CUDA_HOME / "include"
    if not (include / "cuda_runtime.h").exists():
        raise ResultsError(f"exporting DSL layers needs the CUDA headers: {include / 'cuda_runtime.h'} "
                           "not found (set CUDA_HOME)")
    return include


def _run(command: list[str], layer: str, what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ResultsError(f"best.yaml layer {layer!r}: {what} failed: {_one_line(str(error))}") from None
    if done.returncode:
        raise ResultsError(f"best.yaml layer {layer!r}: {what} failed: {_one_line(done.stderr or done.stdout)}")


def check_toolchain(layers: list[ObjectLayer]) -> None:
    """One line naming the first object layer when this machine cannot build its kernel (the DSL not installed)."""
    for layer in layers:
        family = registry.family_of(layer.config)
        problem = family.emitter.toolchain_problem()
        if problem:
            more = f" (and {len(layers) - 1} more)" if len(layers) > 1 else ""
            raise ResultsError(f"best.yaml layer {layer.name!r}{more} holds a {family.name} kernel, which export "
                               f"builds again into {LIBRARY}: {problem}")


def build_library(layers: list[ObjectLayer], namespace: str, document: dict, cache_dir: Path | None,
                  scratch: Path) -> Path:
    """scratch/libtuned_dsl.a with one object per layer (<alias>.o); ResultsError naming the layer whose kernel
    or object cannot be built."""
    from tuner.build.compile import Compiler

    check_toolchain(layers)
    cc, objcopy, ar = _tools()
    include = _cuda_include()
    compiler = Compiler(_device(document), cache_dir)
    try:
        results = compiler.compile_many([layer.config for layer in layers])
    except Exception as error:  # a builder that cannot even start: still one line, with the first layer
        raise ResultsError(f"best.yaml layer {layers[0].name!r}: building its {layers[0].config.family} kernel "
                           f"failed: {_one_line(str(error)) or type(error).__name__}") from None
    finally:
        compiler.close()
    objects = []
    for layer, result in zip(layers, results):
        if not result.ok:
            raise ResultsError(f"best.yaml layer {layer.name!r}: its {layer.config.family} kernel {layer.config.name} "
                               f"did not build: {_one_line(result.error or '')}")
        entry = result.library.parent
        missing = [name for name in ("kernel.o", "kernel.h", "entry.c") if not (entry / name).is_file()]
        if missing:
            raise ResultsError(f"best.yaml layer {layer.name!r}: the compile cache entry {entry} lacks "
                               f"{', '.join(missing)}: remove that folder and export again")
        symbol = dsl_symbol(namespace, layer.alias)
        work = scratch / layer.alias
        work.mkdir()
        (work / "layer.c").write_text(read_template(TEMPLATES / "dsl_entry.c.in").substitute(
            symbol=symbol, abi_version=ABI_VERSION))
        _run([cc, "-c", "-fPIC", "-O2", "-I", str(entry), "-I", str(include), str(work / "layer.c"),
              "-o", str(work / "layer.o")], layer.name, "compiling its entry points")
        _run([cc, "-r", "-nostdlib", "-o", str(work / "merged.o"), str(work / "layer.o"), str(entry / "kernel.o")],
             layer.name, "linking its object")
        target = scratch / f"{layer.alias}.o"
        _run([objcopy, f"--keep-global-symbol={symbol}", str(work / "merged.o"), str(target)], layer.name,
             "localising its object's symbols")
        objects.append(target)
    archive = scratch / "libtuned_dsl.a"
    _run([ar, "rcsD", str(archive), *map(str, objects)], layers[0].name, "archiving the DSL objects")
    return archive


def install_library(archive: Path | None, folder: Path) -> None:
    """Put the built library in place (atomically), or remove a library no DSL layer needs any more."""
    target = folder / LIBRARY
    if archive is None:
        if target.exists():
            target.unlink()
            if not any(target.parent.iterdir()):
                target.parent.rmdir()
        return
    with replacing(target, binary=True) as handle:
        handle.write(archive.read_bytes())


def scratch_folder(folder: Path) -> tempfile.TemporaryDirectory:
    folder.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=".dsl-export-", dir=folder)
