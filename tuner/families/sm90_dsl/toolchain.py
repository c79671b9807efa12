"""How the sm90_dsl family's kernels are built: a request to its own builder (build.py, or serve.py kept running),
keyed by the build spec and by the DSL's version and the builder's sources; and whether this machine has the DSL."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

from tuner.families.base import BuildRequest, SpaceError
from tuner.families.sm90_dsl.space import FAMILY, Sm90DslConfig

INSTALL_HINT = "pip install -e '.[dsl]' (nvidia-cutlass-dsl)"
# What the compiled kernel depends on besides its build spec: a change to any of them is a new kernel.
BUILDER_SOURCES = ("kernel.py", "mainloop.py", "consumers.py", "producers.py", "epilogue.py", "geometry.py", "build.py",
                   "spec.py", "entry.c.in", "serve.py", "../dsl_common/build_tools.py")


@lru_cache(maxsize=1)
def dsl_version() -> str | None:
    """The installed nvidia-cutlass-dsl's version, or None where the DSL is not importable."""
    if importlib.util.find_spec("cutlass") is None or importlib.util.find_spec("cutlass.cute") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:  # importable from a folder on sys.path (an unpacked wheel)
        import cutlass

        return str(getattr(cutlass, "__version__", "unversioned"))


@lru_cache(maxsize=1)
def builder_digest() -> str:
    digest = hashlib.sha256()
    for name in BUILDER_SOURCES:
        path = Path(__file__).parent / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    return digest.hexdigest()


def toolchain_problem() -> str | None:
    if dsl_version() is None:
        return f"the CuTe DSL is not installed: {INSTALL_HINT}"
    return None


def build_request(config: Sm90DslConfig) -> BuildRequest:
    version = dsl_version()
    if version is None:
        raise SpaceError(f"{FAMILY} kernels need the CuTe DSL: {INSTALL_HINT}")
    return BuildRequest(source=config.build_spec().to_json() + "\n", source_file="spec.json",
                        command=(sys.executable, "-m", "tuner.families.sm90_dsl.build", "spec.json", "."),
                        toolchain=f"nvidia-cutlass-dsl {version}; builder {builder_digest()}",
                        serve_command=(sys.executable, "-m", "tuner.families.sm90_dsl.serve"))
