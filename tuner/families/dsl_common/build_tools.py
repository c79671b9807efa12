"""What the CuTe DSL families' builders share: the DSL's runtime libraries, a cubin's resource records, the link of
the exported kernel with the tuner's C entry points into candidate.so, and the one-line reasons a failed build gives.
A family's build.py compiles its own kernel and renders its own entry.c; the rest is here."""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.core.device import DeviceFacts, block_limits
from tuner.families.sm90_common.space import SMEM_CAPACITY

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


# sm_90's per-SM limits (compute capability 9.0). The DSL families build for sm_90a alone, and the kernel they
# export gives the CUDA occupancy API no handle, so the builder works out from these how many CTAs an SM holds.
SM90 = DeviceFacts(name="sm_90", cc_major=9, cc_minor=0, sm_count=0, smem_optin_per_block=SMEM_CAPACITY,
                   smem_per_sm=233472, registers_per_sm=65536, l2_bytes=0, max_threads_per_sm=2048,
                   max_blocks_per_sm=32)


def sm90_blocks_per_sm(registers_per_thread: int, smem_bytes: int, threads: int) -> int:
    """The CTAs of a kernel that one sm_90 SM holds at once, by its registers, shared memory and warps."""
    return max(0, min(block_limits(registers_per_thread, smem_bytes, -(-threads // 32), SM90).values()))


class BuildError(RuntimeError):
    """A kernel that cannot be built, with the reason in one line."""


def dsl_lib_dir() -> Path:
    import nvidia_cutlass_dsl
    root = Path(nvidia_cutlass_dsl.__path__[0])
    for flavour in ("cu13", "cu12"):
        if (root / flavour / "lib" / "libcuda_dialect_runtime_static.a").exists():
            return root / flavour / "lib"
    raise BuildError(f"no DSL runtime library under {root}")


def cudart_shared() -> Path:
    for candidate in (CUDA_HOME / "lib64" / "libcudart.so", CUDA_HOME / "lib" / "libcudart.so"):
        if candidate.exists():
            return candidate
    raise BuildError(f"libcudart.so not found under {CUDA_HOME} (set CUDA_HOME)")


def preload_runtime(lib_dir: Path) -> None:
    """4.8.1's export resolves the host code's CUDA symbols in-process: load them globally first."""
    ctypes.CDLL(str(cudart_shared()), mode=ctypes.RTLD_GLOBAL)
    runtime = lib_dir / "libcute_dsl_runtime.so"
    if runtime.exists():
        ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)


def cubin_resources(cubin: bytes) -> dict:
    """Registers, static shared memory and stack of the (single) kernel, read from the cubin's ELF sections:
    .nv.info's EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE / MIN_STACK_SIZE (0x11, 0x12) records, and the
    size of .nv.shared.<kernel> (cuobjdump -res-usage reads the same records; it is not on every host)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise BuildError("the cubin is not a 64-bit ELF")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, kind, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        sections.append((name, offset, size, info))
    strtab_offset = sections[shstrndx][1]

    def name_of(index: int) -> str:
        end = cubin.index(b"\0", strtab_offset + index)
        return cubin[strtab_offset + index:end].decode()

    out = {"registers": 0, "static_smem": 0, "stack": 0, "kernel": ""}
    for name, offset, size, info in sections:
        section = name_of(name)
        if section.startswith(".text."):
            out["kernel"] = section[len(".text."):]
        elif section.startswith(".nv.shared.") and not section.startswith(".nv.shared.reserved"):
            out["static_smem"] += size
        elif section.startswith(".nv.info"):
            pos = offset
            while pos + 4 <= offset + size:
                fmt, attr, length = cubin[pos], cubin[pos + 1], struct.unpack_from("<H", cubin, pos + 2)[0]
                if fmt != 0x04:  # EIFMT_NVAL/BVAL/HVAL: no payload beyond these 4 bytes
                    pos += 4
                    continue
                if length == 8:  # (symbol index, value)
                    value = struct.unpack_from("<I", cubin, pos + 8)[0]
                    if attr == 0x2F:  # EIATTR_REGCOUNT
                        out["registers"] = max(out["registers"], value)
                    elif attr in (0x11, 0x12):  # EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE
                        out["stack"] = max(out["stack"], value)
                pos += 4 + length
    return out


def link_candidate(out_dir: Path, lib_dir: Path) -> None:
    """candidate.so from out_dir's entry.c and kernel.o (the DSL's export), the DSL's static runtime and static
    cudart."""
    cc = os.environ.get("CC", "gcc")
    command = [cc, "-shared", "-fPIC", "-O2", "-o", str(out_dir / "candidate.so"), "-I", str(out_dir),
               "-I", str(CUDA_HOME / "include"), str(out_dir / "entry.c"), str(out_dir / "kernel.o"),
               str(lib_dir / "libcuda_dialect_runtime_static.a"), str(CUDA_HOME / "lib64" / "libcudart_static.a"),
               "-ldl", "-lrt", "-lpthread"]
    # -lcuda: the driver's library at load time; here, CUDA's stub, or a stand-in with its soname so that
    # candidate.so records DT_NEEDED libcuda.so.1 (this machine may have neither driver nor stub)
    with tempfile.TemporaryDirectory(prefix="dsl_link_") as scratch:
        stub = _find_libcuda_stub() or _make_libcuda_standin(Path(scratch), cc)
        command += [f"-L{stub.parent}", "-lcuda"]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise BuildError(f"linking candidate.so failed: {first_line(result.stderr)}")


def _find_libcuda_stub() -> Path | None:
    for candidate in (CUDA_HOME / "lib64" / "stubs" / "libcuda.so", CUDA_HOME / "lib" / "stubs" / "libcuda.so",
                      CUDA_HOME / "targets" / "x86_64-linux" / "lib" / "stubs" / "libcuda.so"):
        if candidate.exists():
            return candidate
    return None


def _make_libcuda_standin(scratch: Path, cc: str) -> Path:
    (scratch / "empty.c").write_text("")
    target = scratch / "libcuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(target), str(scratch / "empty.c")],
                   check=True, capture_output=True)
    return target


def dsl_version_text() -> str:
    try:
        from importlib.metadata import version
        return version("nvidia-cutlass-dsl")
    except Exception:
        return "unknown"


def first_line(error) -> str:
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # the DSL prefixes its messages with ANSI colours and a banner; keep the most specific line
    for line in lines:
        if "error:" in line and "internal DSL problem" not in line:
            return strip_ansi(line)[:300]
    return strip_ansi(lines[0])[:300] if lines else type(error).__name__


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def compile_and_export(launcher, args, out_dir: Path, prefix: str) -> tuple[dict, float, float]:
    """cute.compile of the launcher for sm_90a, keeping the cubin to read its resources, then export_to_c of
    kernel.h and kernel.o into out_dir. Returns the cubin's resources and the moments compiled and exported."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dsl_cubin_") as dump:
        try:
            compiled = cute.compile(launcher, *args, cuda.CUstream(0),
                                    options=f"--gpu-arch sm_90a --keep-cubin --dump-dir {dump}")
        except Exception as error:  # the DSL raises its own error types; keep the first line
            raise BuildError(f"DSL compile failed: {first_line(error)}") from None
        compiled_at = time.perf_counter()
        cubins = sorted(Path(dump).rglob("*.cubin"))
        if not cubins:
            raise BuildError("the DSL kept no cubin")
        resources = cubin_resources(cubins[0].read_bytes())
    try:
        compiled.export_to_c(file_path=str(out_dir), file_name="kernel", function_prefix=prefix)
    except Exception as error:
        raise BuildError(f"export_to_c failed: {first_line(error)}") from None
    return resources, compiled_at, time.perf_counter()


def ptxas_report(resources: dict) -> str:
    """ptxas.txt: the cubin's resource records as ptxas's own lines, which tuner/build/nvcc.py parses."""
    return (f"ptxas info    : Compiling entry function '{resources['kernel']}' for 'sm_90a'\n"
            f"ptxas info    : Function properties for {resources['kernel']}\n"
            f"    {resources['stack']} bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
            f"ptxas info    : Used {resources['registers']} registers, used 1 barriers, "
            f"{resources['static_smem']} bytes smem\n")


def answer_build(build, spec_text: str, out_dir: Path) -> tuple[int, str]:
    """build(spec_text, out_dir), as a process answers it: 0 and the seconds spent, or 1 and one line saying why
    (the command line and the long-lived builder both answer so)."""
    try:
        info = build(spec_text, out_dir)
    except BuildError as error:
        return 1, f"build failed: {error}"
    except Exception as error:  # a DSL failure outside compile: still one line
        return 1, f"build failed: {type(error).__name__}: {first_line(error)}"
    return 0, json.dumps(info["seconds"])


def build_main(argv: list[str] | None, prog: str, description: str, run_build) -> int:
    """`python -m <family>.build SPEC.json OUT_DIR`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("spec", type=Path, help="the build spec, a JSON file")
    parser.add_argument("out_dir", type=Path,
                        help="directory for kernel.h/.o, entry.c, candidate.so, ptxas.txt, build.json")
    args = parser.parse_args(argv)
    try:
        text = args.spec.read_text()
    except OSError as error:
        print(f"cannot read {args.spec}: {error.strerror}", file=sys.stderr)
        return 1
    rc, log = run_build(text, args.out_dir)
    print(log, file=sys.stderr if rc else sys.stdout)
    return rc


def stage_seconds(started: float, imported: float, compiled: float, exported: float, linked: float) -> dict:
    """build.json's seconds: the DSL's import, its compile, export_to_c, the link, and all of it."""
    return {"import": round(imported - started, 3), "compile": round(compiled - imported, 3),
            "export": round(exported - compiled, 3), "link": round(linked - exported, 3),
            "total": round(linked - started, 3)}
