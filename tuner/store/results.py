"""results/<gpu>/: its folder and the names of its files, atomic writes (temp file + rename) under a lock,
so that a crash never leaves half a table."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Iterator


from tuner.core import gpus
from tuner.core.device import slugify
from tuner.core.yamlfile import YamlFileError, parse_yaml, read_text

BEST_FILE = "best.yaml"
HISTORY_FILE = "history.jsonl"
JOURNAL_FILE = "optuna.journal"
# best.yaml of 102 layers is 170 KB; a file far larger is not one the tool wrote (a 50 MB one took 145 s
# to export into a 101 MB header).
MAX_BEST_BYTES = 8 << 20


class ResultsError(RuntimeError):
    """results/ holds something that cannot be read back."""


# What DeviceFacts.slug makes of a GPU's name: no separators, nothing that climbs out of results/.
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


def layer_file_stem(layer: str) -> str:
    """A file name for a layer's plots and landscapes that stays in its folder: letters, digits, '.', '_', '-' only, no
    leading dot, at most 100 characters; a name that had to change gets 8 hex digits of itself, so two
    layers never share a file (layers named '../../etc/passwd' wrote outside results/)."""
    if "\0" in layer:
        raise ResultsError("a layer name holds a NUL character; rename it in best.yaml")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", layer).lstrip(".")[:100]
    if stem != layer or not stem:
        stem = f"{stem}_{hashlib.sha256(layer.encode()).hexdigest()[:8]}"
    return stem


def check_results_dir(root: Path) -> None:
    """One line for a --results-dir the tool cannot write into: a file, a path under a file, read-only."""
    for folder in (root, *root.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ResultsError(f"--results-dir {root}: {folder} is a file, not a folder")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise ResultsError(f"--results-dir {root}: {folder} is not writable")
            return


def gpu_dir(results_root: Path, slug: str) -> Path:
    if not SLUG.fullmatch(slug) or ".." in slug:
        raise ResultsError(f"GPU {slug!r} is not a results folder name (lowercase letters, digits, '.', '_', '-', "
                           f"as results/ names them: {', '.join(gpu_slugs(results_root)) or 'none yet'})")
    return results_root / slug


def results_slug(results_root: Path, name: str, holding: str = BEST_FILE) -> str:
    """--gpu NAME as results/ names the GPU: a folder's own name where it holds `holding`, else a GPU of the
    table's (h100 -> nvidia-h100-80gb-hbm3, the slug of its device name); else NAME as given."""
    if SLUG.fullmatch(name) and (results_root / name / holding).is_file():
        return name
    try:
        return slugify(gpus.lookup(name).name)
    except gpus.UnknownGpu:
        return name


def recorded_gpu_dir(results_root: Path, slug: str, holding: str = BEST_FILE) -> Path:
    """results/<slug>/ for a command that only reads it: it must exist and hold `holding`; nothing is created."""
    folder = gpu_dir(results_root, slug)
    if not (folder / holding).is_file():
        known = gpu_slugs(results_root, holding)
        raise ResultsError(f"no {folder / holding}: GPUs with one are {', '.join(known) or 'none (tune a layer first)'}"
                           "; pass --gpu with one of them")
    return folder


def gpu_slugs(results_root: Path, holding: str = BEST_FILE) -> list[str]:
    """The GPU folders under results/ that hold the named file."""
    return sorted(path.parent.name for path in results_root.glob(f"*/{holding}"))


def drop_cut_last_line(path: Path) -> None:
    """Cut a last line that lacks its newline (a writer killed mid-append) off an append-only file, so that
    the next append starts a line of its own instead of gluing onto the remnant and damaging both."""
    if not path.is_file():
        return
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        keep = size
        while keep > 0:  # back to the newline before the remnant, a block at a time
            start = max(0, keep - 65536)
            handle.seek(start)
            block = handle.read(keep - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            keep = start
        handle.truncate(keep)


def atomic_write(path: Path, text: str) -> None:
    with replacing(path) as handle:
        handle.write(text)


@contextlib.contextmanager
def replacing(path: Path, binary: bool = False, mtime: float | None = None) -> Iterator[IO]:
    """A file to write in place of `path`: a temp file beside it, renamed onto it once the block ends
    (with `mtime` if given), and removed instead if the block fails; `path` is never half written. Only a file
    is replaced: the rename would put it in place of a device (as root, --write-layers /dev/full) or a folder."""
    if path.exists() and not path.is_file():
        raise OSError(errno.EEXIST, "it exists and is not a file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; the table is for everyone
        with os.fdopen(descriptor, "wb" if binary else "w") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if mtime is not None:
            os.utime(temporary, (mtime, mtime))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Serialise read-modify-write of the table among processes of one host."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_results_yaml(path: Path, max_bytes: int) -> object:
    """A results file the tool wrote, read as user files are: duplicate keys, aliases, binary content
    and oversized files refused in one line."""
    return parse_results_yaml(results_text(path, max_bytes), path)


def results_text(path: Path, max_bytes: int) -> str:
    """A results file's text, refused as read_results_yaml refuses a file it cannot read."""
    with _refused_as_results_error():
        return read_text(path, "results file", max_bytes)


def parse_results_yaml(text: str, path: Path) -> object:
    """The document of a results file's text (results_text), refused as read_results_yaml refuses it."""
    with _refused_as_results_error():
        return parse_yaml(text, path, "results file")


@contextlib.contextmanager
def _refused_as_results_error() -> Iterator[None]:
    """A results file the YAML reader refuses: the same line, and how to mend a file the tool wrote."""
    try:
        yield
    except YamlFileError as error:
        raise ResultsError(f"{error}; restore it from version control") from None
