"""The per-GPU artefacts git does not track (the Optuna journal, the run history, logs/ and plots/ under
results/<gpu>/) packed into one .tar.gz and unpacked on another host (`tune.py results pack|unpack`,
tuner/cli/results.py).

An archive holds members named results/<gpu>/<artefact>[/...]; unpacking takes nothing else: no absolute
path, no '..', no link or device, no file outside those artefacts. Every member is checked, and every
destination too, before the first file is written; each file is written atomically (temp + rename)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tuner.store.journal import KernelReleasedLock
from tuner.store.results import HISTORY_FILE, JOURNAL_FILE, SLUG, ResultsError, gpu_dir, replacing

ARCHIVE_ROOT = "results"
ARTEFACT_FILES = (JOURNAL_FILE, HISTORY_FILE)
ARTEFACT_FOLDERS = ("logs", "plots")
ARTEFACTS = f"{', '.join(ARTEFACT_FILES)}, {'/, '.join(ARTEFACT_FOLDERS)}/"


@dataclass(frozen=True)
class PackedFile:
    """One file of an archive: where it lies on this host, and its member name results/<gpu>/<path>."""
    source: Path
    member: str


@dataclass(frozen=True)
class UnpackedFile:
    """One archive member checked for unpacking: its name, where it goes, its size and time."""
    member: str
    destination: Path
    size: int
    mtime: float


def artefact_files(folder: Path) -> list[Path]:
    """The untracked artefacts of one results/<gpu>/ folder: regular files only (links are not followed)."""
    files = [folder / name for name in ARTEFACT_FILES if (folder / name).is_file() and not (folder / name).is_symlink()]
    for name in ARTEFACT_FOLDERS:
        if (folder / name).is_symlink():
            continue
        for root, _, names in os.walk(folder / name):  # does not descend into linked folders
            files += sorted(path for path in map(Path(root).joinpath, names) if path.is_file() and not path.is_symlink())
    return files


def files_to_pack(results_dir: Path, slugs: list[str] | None) -> list[PackedFile]:
    """Every artefact of the named GPUs (default: of every GPU folder that has one), refusing a named GPU
    with nothing to pack."""
    if slugs:
        folders = [gpu_dir(results_dir, slug) for slug in slugs]
    else:
        folders = sorted(path for path in results_dir.glob("*") if path.is_dir() and SLUG.fullmatch(path.name))
    packed = []
    for folder in folders:
        files = artefact_files(folder)
        if not files and slugs:
            raise ResultsError(f"{folder} holds none of {ARTEFACTS}: nothing to pack for {folder.name}")
        packed += [PackedFile(path, f"{ARCHIVE_ROOT}/{folder.name}/{path.relative_to(folder).as_posix()}")
                   for path in files]
    if not packed:
        raise ResultsError(f"no results/<gpu>/ under {results_dir} holds any of {ARTEFACTS}: nothing to pack")
    return packed


def _owner_free(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(files: list[PackedFile], archive: Path) -> None:
    """Write the archive atomically. A journal is read under the lock its writers take, so that a study
    running meanwhile never leaves half a record in the copy."""
    with replacing(archive, binary=True) as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
        for file in files:
            with _journal_lock(file.source):
                tar.add(file.source, arcname=file.member, recursive=False, filter=_owner_free)


@contextlib.contextmanager
def _journal_lock(path: Path) -> Iterator[None]:
    if path.name != JOURNAL_FILE:
        yield
        return
    lock = KernelReleasedLock(path)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why a member may not be unpacked (None: it may). Folders: results/, results/<gpu>/ and those
    under its logs/ and plots/; files: results/<gpu>/<journal or history>, or under logs/ or plots/."""
    if not (member.isfile() or member.isdir()):
        return "is a link or a special file"
    name = member.name
    if name.startswith("/") or "\\" in name:
        return "has an absolute or non-POSIX path"
    parts = name.rstrip("/").split("/") if member.isdir() else name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' component"
    if parts[0] != ARCHIVE_ROOT or (len(parts) > 1 and not SLUG.fullmatch(parts[1])):
        return f"is outside {ARCHIVE_ROOT}/<gpu>/"
    if member.isdir():
        inside = len(parts) <= 2 or parts[2] in ARTEFACT_FOLDERS
    else:
        inside = (len(parts) == 3 and parts[2] in ARTEFACT_FILES) or (len(parts) > 3 and parts[2] in ARTEFACT_FOLDERS)
    return None if inside else f"is none of {ARCHIVE_ROOT}/<gpu>/'s {ARTEFACTS}"


def checked_members(tar: tarfile.TarFile, archive: Path, results_dir: Path,
                    replace: bool) -> list[tuple[tarfile.TarInfo, UnpackedFile]]:
    """Every file member with its destination, once the whole archive and every destination passed."""
    files, seen = [], set()
    for member in tar.getmembers():
        problem = member_problem(member)
        if problem is not None:
            raise ResultsError(f"{archive}: member {member.name!r} {problem}: refused, nothing unpacked")
        if member.isdir():
            continue
        if member.name in seen:
            raise ResultsError(f"{archive}: member {member.name!r} is in the archive twice: refused, nothing unpacked")
        seen.add(member.name)
        parts = member.name.split("/")
        destination = gpu_dir(results_dir, parts[1]).joinpath(*parts[2:])
        files.append((member, UnpackedFile(member.name, destination, member.size, float(member.mtime))))
    if not files:
        raise ResultsError(f"{archive} holds no results/<gpu>/ file: nothing to unpack")
    existing = [file.destination for _, file in files if file.destination.exists() or file.destination.is_symlink()]
    if existing and not replace:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise ResultsError(f"{existing[0]}{more} already exist: pass --replace to overwrite; nothing unpacked")
    for _, file in files:  # a link below results_dir would carry the write elsewhere
        for folder in file.destination.parents:
            if results_dir in folder.parents and (folder.is_symlink() or (folder.exists() and not folder.is_dir())):
                raise ResultsError(f"{folder} is a link or a file where {file.member} needs a folder; nothing unpacked")
    return files


def unpack(archive: Path, results_dir: Path, replace: bool) -> list[UnpackedFile]:
    with tarfile.open(archive, "r:gz") as tar:
        files = checked_members(tar, archive, results_dir, replace)
        for member, file in files:
            source = tar.extractfile(member)
            with source, replacing(file.destination, binary=True, mtime=file.mtime) as handle:
                shutil.copyfileobj(source, handle)
    return [file for _, file in files]
