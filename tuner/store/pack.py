"""`tune.py results pack|unpack`: the per-GPU artefacts git does not track (the Optuna journal, the run
history, logs/ and plots/ under results/<gpu>/) moved between hosts as one .tar.gz.

An archive holds members named results/<gpu>/<artefact>[/...]; unpacking takes nothing else: no absolute
path, no '..', no link or device, no file outside those artefacts. Every member is checked, and every
destination too, before the first file is written; each file is written atomically (temp + rename)."""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import os
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rich.console import Console

from tuner.cli.choices import UsageParser
from tuner.store.journal import KernelReleasedLock
from tuner.store.results import HISTORY_FILE, JOURNAL_FILE, SLUG, ResultsError, gpu_dir, replacing

REPO = Path(__file__).resolve().parents[2]
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


def default_archive() -> Path:
    return Path(f"results-{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}.tar.gz")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="tune.py results",
        description=f"Move the per-GPU artefacts git does not track ({ARTEFACTS} under results/<gpu>/) "
                    "between hosts as one .tar.gz.")
    actions = parser.add_subparsers(title="actions", dest="action", metavar="{pack,unpack}", required=True)
    packing = actions.add_parser("pack", help="write results/<gpu>/'s untracked artefacts into one .tar.gz",
                                 description="Write the untracked artefacts of results/<gpu>/ into one .tar.gz "
                                             "(members results/<gpu>/...); a journal is read under its lock.")
    packing.add_argument("--gpu", action="append", metavar="NAME",
                         help="GPU folder under the results directory (repeatable; default: every GPU folder "
                              "holding any of them)")
    packing.add_argument("--results-dir", type=Path, default=REPO / "results", metavar="DIR",
                         help="the folder holding results/<gpu>/ (default results/ in the repository)")
    packing.add_argument("-o", "--output", type=Path, metavar="FILE",
                         help="the archive to write, replaced if it exists (default results-<UTC date>.tar.gz "
                              "in the current folder)")
    unpacking = actions.add_parser("unpack", help="put a pack's files back under results/<gpu>/",
                                   description="Put an archive written by `tune.py results pack` back under "
                                               "results/<gpu>/. Refuses members outside results/<gpu>/'s "
                                               f"artefacts ({ARTEFACTS}), absolute paths, '..' and links; "
                                               "writes nothing unless every member passes.")
    unpacking.add_argument("archive", type=Path, help="the .tar.gz written by `tune.py results pack`")
    unpacking.add_argument("--results-dir", type=Path, default=REPO / "results", metavar="DIR",
                           help="the folder to unpack results/<gpu>/ into (default results/ in the repository)")
    unpacking.add_argument("--replace", action="store_true",
                           help="overwrite files that already exist (default: refuse, and write nothing)")
    return parser


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "pack":
            archive = args.output or default_archive()
            files = files_to_pack(args.results_dir, args.gpu)
            pack(files, archive)
            gpus = sorted({file.member.split("/")[1] for file in files})
            console.print(f"wrote {archive}: {len(files)} files of {', '.join(gpus)} "
                          f"({_size(sum(file.source.stat().st_size for file in files))} before compression, "
                          f"{_size(archive.stat().st_size)} packed)")
            return 0
        files = unpack(args.archive, args.results_dir, args.replace)
        gpus = sorted({file.member.split("/")[1] for file in files})
        console.print(f"unpacked {len(files)} files ({_size(sum(file.size for file in files))}) into "
                      f"{', '.join(str(args.results_dir / gpu) for gpu in gpus)}")
        return 0
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ResultsError(f"{getattr(args, 'archive', '')}: not a readable .tar.gz ({error})") from None
    except OSError as error:
        raise ResultsError(f"{error.filename or ''}: {error.strerror or error}") from None
