"""What the CuTe DSL families' toolchains share: whether this machine has the DSL, its version, the install hint, and
the digest of the sources a family's kernels are built from (a change to any is a new kernel)."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

from tuner.families.base import BuildRequest, SpaceError

INSTALL_HINT = "pip install -e '.[dsl]' (nvidia-cutlass-dsl)"


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


def sources_digest(folder: Path, names: tuple[str, ...]) -> str:
    """The sha256 of the named files under folder (a missing one counts as empty)."""
    digest = hashlib.sha256()
    for name in names:
        path = folder / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    return digest.hexdigest()


def toolchain_problem() -> str | None:
    if dsl_version() is None:
        return f"the CuTe DSL is not installed: {INSTALL_HINT}"
    return None


def builder_request(family: str, spec_json: str, package: str, digest: str) -> BuildRequest:
    """The compile cache's request for one kernel of a DSL family: its spec, built by `python -m <package>.build`
    (or the package's long-lived serve.py), keyed by the DSL's version and the builder's sources."""
    version = dsl_version()
    if version is None:
        raise SpaceError(f"{family} kernels need the CuTe DSL: {INSTALL_HINT}")
    return BuildRequest(source=spec_json + "\n", source_file="spec.json",
                        command=(sys.executable, "-m", f"{package}.build", "spec.json", "."),
                        toolchain=f"nvidia-cutlass-dsl {version}; builder {digest}",
                        serve_command=(sys.executable, "-m", f"{package}.serve"))
