"""The content-addressed compile cache: a kernel's key (SHA-256 of its source, flags and toolchain), the
folder the entries live in, and the entries themselves, each a build's library or error."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tuner.build.abi import KernelBinary
from tuner.build.codegen import kernel_symbol_marker
from tuner.build.nvcc import COMPILE_TIMEOUT_S, PtxasReport, cutlass_version, nvcc_version, parse_ptxas
from tuner.families.base import BuildRequest, KernelConfig

MEMBER_FILE = "member.json"


@dataclass(frozen=True)
class CompileResult:
    config: KernelConfig
    key: str
    library: Path | None
    seconds: float
    cached: bool
    error: str | None
    ptxas: PtxasReport | None
    index: int = 0        # the kernel's index in the library (several compiled in one unit)
    unit_size: int = 1    # kernels compiled in the same nvcc run
    transient: bool = False  # failed for a reason not the source's (killed, timed out): try again later

    @property
    def ok(self) -> bool:
        return self.library is not None

    @property
    def binary(self) -> KernelBinary:
        if self.library is None:
            raise ValueError(f"{self.config.name} did not compile")
        return KernelBinary(self.library, self.index)


def default_cache_dir() -> Path:
    root = os.environ.get("CUTLASS_TUNER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cutlass-conv-tuner")
    return Path(root) / "compile"


def cache_key(source: str, flags: list[str]) -> str:
    """SHA-256 of the source, the flags, nvcc's and CUTLASS's versions. The include folders enter as
    CUTLASS's version, not as paths: a cache filled on one machine serves another with the same
    toolchain wherever its wheel is installed."""
    portable = [flag for flag in flags if not flag.startswith("-I")]
    digest = hashlib.sha256()
    for part in (source, "\0".join(portable), nvcc_version(), cutlass_version()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def builder_cache_key(request: BuildRequest) -> str:
    """SHA-256 of a family builder's source and its toolchain's version (no nvcc involved)."""
    digest = hashlib.sha256()
    for part in ("builder", request.source, request.toolchain):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def remove_stale_scratch(folder: Path, older_than_s: float = COMPILE_TIMEOUT_S + 60) -> list[Path]:
    """Remove the scratch folders (.<key>-*) of builds killed before they could publish or clean up (a
    SIGKILLed nvcc's stayed forever): those older than the build timeout and locked by no build (a build
    holds its folder's lock until it publishes; the kernel drops a killed one's)."""
    removed = []
    cutoff = time.time() - older_than_s
    for scratch in folder.glob(".*-*"):
        try:
            if scratch.is_dir() and scratch.stat().st_mtime < cutoff and not _locked(scratch):
                shutil.rmtree(scratch, ignore_errors=True)
                removed.append(scratch)
        except OSError:  # another worker removed it first
            continue
    return removed


_swept: set[tuple[int, Path]] = set()
_sweeping = threading.Lock()


def sweep_cache_once(root: Path) -> list[Path]:
    """remove_stale_scratch over every folder of the cache at `root`, the first time this process asks: a
    killed build's scratch folder may sit in any of them, not only where a later build lands."""
    with _sweeping:
        if (os.getpid(), root) in _swept:
            return []
        _swept.add((os.getpid(), root))
    try:
        folders = [folder for folder in root.iterdir() if folder.is_dir()]
    except OSError:  # no cache yet
        return []
    return [scratch for folder in folders for scratch in remove_stale_scratch(folder)]


def _lock(folder: Path) -> int:
    """A descriptor of `folder` holding its exclusive lock (flock on the folder itself: nothing is written into
    the entry); closing it, or the holder's death, releases the lock."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return descriptor


def _locked(folder: Path) -> bool:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # and with it the lock just taken
    return False


class CompileCache:
    """The entries under `folder`, one a key (folder/ab/abcd...), each written in a scratch folder beside it
    and renamed into place: candidate.so and ptxas.txt (built), error.txt (the source does not compile), or
    MEMBER_FILE (one kernel of a unit, whose own entry holds the library)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.held: dict[Path, int] = {}  # scratch folder -> the descriptor holding its lock

    def entry(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def scratch(self, key: str) -> Path:
        """A new scratch folder beside the key's entry, locked until it is published or discarded; the first of
        this process sweeps the stale ones of killed builds from the whole cache."""
        entry = self.entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        sweep_cache_once(self.folder)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        self.held[scratch] = _lock(scratch)
        return scratch

    def discard(self, scratch: Path) -> None:
        """Remove a scratch folder whose build is not to be cached, and release its lock."""
        shutil.rmtree(scratch, ignore_errors=True)
        self._release(scratch)

    def _release(self, scratch: Path) -> None:
        descriptor = self.held.pop(scratch, None)
        if descriptor is not None:
            os.close(descriptor)

    def lookup(self, config: KernelConfig, key: str) -> CompileResult | None:
        """The entry's answer for a configuration, compiled alone or in a unit with others; None: not built."""
        entry = self.entry(key)
        if (entry / "candidate.so").exists():
            return self.result(config, key, seconds=0.0, cached=True)
        if (entry / "error.txt").exists():
            return CompileResult(config, key, None, 0.0, True, (entry / "error.txt").read_text(), None)
        if (entry / MEMBER_FILE).exists():
            member = json.loads((entry / MEMBER_FILE).read_text())
            if (self.entry(member["unit"]) / "candidate.so").exists():
                return self.member_result(config, key, member["unit"], member["index"], member["size"], 0.0, True)
            # its unit is gone (a cache copied in part, or pruned): drop the entry so that a rebuild can publish
            shutil.rmtree(entry, ignore_errors=True)
        return None

    def result(self, config: KernelConfig, key: str, seconds: float, cached: bool) -> CompileResult:
        entry = self.entry(key)
        ptxas = parse_ptxas((entry / "ptxas.txt").read_text())
        return CompileResult(config, key, entry / "candidate.so", seconds, cached, None, ptxas)

    def member_result(self, config: KernelConfig, key: str, unit_key: str, index: int, size: int, seconds: float,
                      cached: bool) -> CompileResult:
        """The configuration's kernel as the index-th of the `size` in the library of `unit_key`'s entry."""
        unit = self.entry(unit_key)
        ptxas = parse_ptxas((unit / "ptxas.txt").read_text(), kernel_symbol_marker(index))
        return CompileResult(config, key, unit / "candidate.so", seconds, cached, None, ptxas, index=index,
                             unit_size=size)

    def publish(self, scratch: Path, key: str) -> None:
        """Rename into place: a crash never leaves a half-written cache entry."""
        try:
            scratch.rename(self.entry(key))
        except OSError:  # another worker published the same key first
            shutil.rmtree(scratch, ignore_errors=True)
        self._release(scratch)

    def publish_member(self, key: str, unit_key: str, index: int, size: int) -> None:
        """The key's entry as the index-th of the `size` kernels built in `unit_key`'s entry."""
        member = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.entry(unit_key).parent))
        (member / MEMBER_FILE).write_text(json.dumps({"unit": unit_key, "index": index, "size": size}))
        self.entry(key).parent.mkdir(parents=True, exist_ok=True)
        self.publish(member, key)
