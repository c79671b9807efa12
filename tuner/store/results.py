"""results/<gpu>/: best.yaml (one entry per layer), run history, the default study storage.
Every write is atomic (temp file + rename) under a lock, so a crash never leaves half a table."""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import yaml
from optuna.storages.journal import JournalFileBackend

from tuner.core import gpus
from tuner.core.device import slugify
from tuner.core.problem import ConvProblem, ProblemError, canonical_problem, layer_name_problem, problem_from_dict
from tuner.core.yamlfile import YamlFileError, brief, read_yaml

BEST_FILE = "best.yaml"
HISTORY_FILE = "history.jsonl"
JOURNAL_FILE = "optuna.journal"
BENCH_FILE = "bench.yaml"
# best.yaml of 102 layers is 170 KB; a file far larger is not one the tool wrote (a 50 MB one took 145 s
# to export into a 101 MB header).
MAX_BEST_BYTES = 8 << 20


class ResultsError(RuntimeError):
    """results/ holds something that cannot be read back."""


# What DeviceFacts.slug makes of a GPU's name: no separators, nothing that climbs out of results/.
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


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


class KernelReleasedLock:  # what JournalFileBackend calls of its lock: acquire(), release()
    """The journal's lock as an fcntl lock, which the kernel drops when its holder dies: Optuna's default
    symlink lock stayed behind after a SIGKILL in 2-3 of 8 kills and stalled the next run 30 s. A
    thread lock first, since flock does not order the threads of one process that share this object."""

    def __init__(self, journal: Path):
        self.path = f"{journal}.flock"
        self.threads = threading.Lock()
        self.handle = None

    def acquire(self) -> bool:
        self.threads.acquire()
        try:
            self.handle = open(self.path, "a")
            fcntl.flock(self.handle, fcntl.LOCK_EX)
        except BaseException:
            if self.handle is not None:
                self.handle.close()
                self.handle = None
            self.threads.release()
            raise
        return True

    def release(self) -> None:
        try:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
        finally:
            self.handle = None
            self.threads.release()


def journal_backend(path: Path) -> JournalFileBackend:
    return JournalFileBackend(str(path), lock_obj=KernelReleasedLock(path))


def default_storage(results_root: Path, slug: str):
    """A journal file: several worker processes of one host may share it (SQLite may not). A damaged
    line is refused with its number (Optuna would stop with a JSON traceback)."""
    folder = gpu_dir(results_root, slug)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / JOURNAL_FILE
    lock = KernelReleasedLock(path)
    lock.acquire()  # every writer appends under this lock: a cut line seen while holding it is a crash's
    try:
        drop_cut_last_line(path)
    finally:
        lock.release()
    storage, damaged = _open_journal(path)
    if damaged:
        raise ResultsError(f"{path} line {damaged} is not a journal record (a crash mid-write, or an edit): move "
                           f"the file aside, or keep its first {damaged - 1} lines (head -n {damaged - 1})")
    return storage


def _open_journal(path: Path):
    """(Optuna's storage over the journal, None), or (None, the first damaged line's number). Optuna replays
    the whole file when it opens it and stops at a line that is not JSON; only then is the file scanned
    again, for the line's number (a scan of every open cost 0.85 s on a 23 MB journal)."""
    from optuna.storages import JournalStorage

    try:
        storage = JournalStorage(journal_backend(path))
    except Exception as error:  # noqa: BLE001 - a record of a known operation but not its fields: a KeyError, ...
        damaged = first_damaged_line(path)
        if damaged is None:
            raise ResultsError(f"{path} cannot be replayed ({type(error).__name__}: {brief(str(error), 200)}): a "
                               "record was edited or damaged; move the file aside") from None
        return None, damaged
    # Optuna skips a bad last line (it could still be being written) but the next append ends it with a newline,
    # after which no replay passes it: a last line that is whole and no record is damage now.
    if not _last_line_sound(path):
        return None, first_damaged_line(path)
    return storage, None


def _last_line_sound(path: Path) -> bool:
    """Whether the journal's last line is a record, or still being written (no newline yet)."""
    if not path.is_file():
        return True
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - 65536))
        lines = handle.read().splitlines(keepends=True)
    return not lines or not lines[-1].endswith(b"\n") or size > 65536 and len(lines) == 1 or _is_record(lines[-1])


# Several hosts on one database (--storage postgresql://...): each worker records a heartbeat for the trials
# it holds; a trial whose heartbeat is older than the grace period belongs to a dead host and is failed by
# the next worker's batch, which re-queues its parameters (RetryHeartbeatStaleTrialCallback): measured once.
HEARTBEAT_S = 20
GRACE_S = 120
MAX_RETRY = 2
RDB_SCHEMES = ("postgresql", "mysql", "sqlite")


MIN_GRACE_S = 10


def heartbeat_for(grace_s: int) -> int:
    """A heartbeat interval for a grace period: every 20 s, or a third of a shorter grace, so that a live
    host always beats several times within it."""
    return max(1, min(HEARTBEAT_S, grace_s // 3))


def check_storage_url(url: str | None, flag: str = "--storage") -> None:
    """One line for a storage URL Optuna cannot open: empty, junk, a scheme it has no database for, or
    a SQLite file in a folder that does not exist."""
    if url is None:
        return
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme.split("+", 1)[0] not in RDB_SCHEMES:
        raise ResultsError(f"{flag} {brief(url)} is not a database URL: give postgresql://USER@HOST/DB, "
                           "mysql://..., or sqlite:///PATH (or leave it out for the results folder's journal)")
    if scheme.startswith("sqlite"):
        path = url.split("://", 1)[1].removeprefix("/")
        if path and path != ":memory:" and not Path(path).parent.is_dir():
            raise ResultsError(f"{flag} {brief(url)}: folder {Path(path).parent} does not exist")


def study_storage(url: str | None, results_root: Path, slug: str, heartbeat_s: int = HEARTBEAT_S,
                  grace_s: int = GRACE_S):
    """The study storage: the results folder's journal by default; an RDB URL gets heartbeats and the
    retry of a dead host's trials; any other URL is Optuna's to read."""
    if url is None:
        return default_storage(results_root, slug)
    if url.split(":", 1)[0].split("+", 1)[0] in RDB_SCHEMES:
        import warnings

        import optuna

        check_storage_url(url)
        with warnings.catch_warnings():  # heartbeats and their retry callback are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat_s, grace_period=grace_s,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=MAX_RETRY))
            except Exception as error:  # noqa: BLE001 - SQLAlchemy's and the drivers' errors are many
                first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise ResultsError(f"--storage {brief(url)} cannot be opened: {brief(first, 200)}") from None
    check_storage_url(url)
    return url


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


# The journal's operations (optuna.storages.journal's JournalOperation): a record naming another stops
# Optuna's replay with an AssertionError.
JOURNAL_OP_CODES = range(0, 10)


def first_damaged_line(path: Path) -> int | None:
    """The number of the first line of an Optuna journal that is not a JSON record, or None. A last line
    without its newline is still being written by another process and counts as sound."""
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                break
            if not _is_record(line):
                return number
    return None


def _is_record(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("op_code") in JOURNAL_OP_CODES \
        and not isinstance(record.get("op_code"), bool)


def readable_journal(path: Path) -> tuple[object, int | None]:
    """A storage over what of the journal loads, for commands that only read it: up to its first damaged
    line (a prefix replays consistently); that line's number, or None."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import BaseJournalBackend

    storage, damaged = _open_journal(path)
    if damaged is None:
        return storage, None

    class Prefix(BaseJournalBackend):  # the sound records, in memory; nothing is written back
        def __init__(self, records: list[dict]):
            self.records = records

        def read_logs(self, log_number_from: int):
            return self.records[log_number_from:]

        def append_logs(self, logs: list[dict]) -> None:
            self.records.extend(logs)

    with open(path, "rb") as handle:
        records = [json.loads(line) for _, line in zip(range(damaged - 1), handle)]
    return JournalStorage(Prefix(records)), damaged


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


@dataclass(frozen=True)
class BestEntry:
    """What every best.yaml entry must hold (the rest, measurement detail, is optional): the schema a
    file is checked against when read, so that a damaged one is refused instead of half used."""

    problem: ConvProblem
    family: str
    params: tuple[tuple[str, object], ...]
    kernel: str
    runtime_us: float
    date: str = ""
    run: str | None = None          # the run id that wrote it (a resumed run skips the layer)
    study_name: str | None = None   # its study in the storage
    previous_us: float | None = None  # the entry it replaced, from another run

    @property
    def knobs(self) -> dict[str, object]:
        return dict(self.params)

    @classmethod
    def parse(cls, layer: str, entry: object) -> "BestEntry":
        def bad(what: str) -> ResultsError:
            return ResultsError(f"best.yaml layer {layer!r}: {what}")
        if (problem_text := layer_name_problem(layer)):
            raise ResultsError(f"best.yaml layer {brief(layer)}: {problem_text}")
        if not isinstance(entry, dict):
            raise bad(f"entry is {type(entry).__name__}, not a mapping")
        missing = [key for key in ("problem", "family", "params", "kernel", "runtime_us") if key not in entry]
        if missing:
            raise bad(f"missing {', '.join(missing)}")
        try:
            problem = problem_from_dict(entry["problem"]) if isinstance(entry["problem"], dict) else None
        except ProblemError as error:
            raise bad(str(error)) from None
        if problem is None:
            raise bad("problem is not a mapping")
        family, params, kernel, runtime = entry["family"], entry["params"], entry["kernel"], entry["runtime_us"]
        if not isinstance(family, str) or not FAMILY_NAME.fullmatch(family):
            raise bad(f"family {brief(family)} is not a family name")
        if not isinstance(params, dict) or not params or not all(isinstance(k, str) for k in params):
            raise bad("params is not a mapping of knob names")
        if not isinstance(kernel, str) or not kernel:
            raise bad(f"kernel {brief(kernel)} is not a kernel name")
        if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or not 0 < runtime < float("inf"):
            raise bad(f"runtime_us {brief(runtime)} is not a positive number")
        date = entry.get("date")
        if date is not None and not isinstance(date, (str, dt.date)):
            raise bad(f"date {brief(date)} is not a date")
        if "\0" in str(date or "") or "\0" in kernel:
            raise bad("a NUL character in the date or kernel name")
        study, previous = entry.get("study"), entry.get("previous")
        study_name = study.get("name") if isinstance(study, dict) else None
        previous_us = previous.get("runtime_us") if isinstance(previous, dict) else None
        run = entry.get("run")
        return cls(problem, family, tuple(sorted(params.items())), kernel, float(runtime), str(entry.get("date") or ""),
                   run if isinstance(run, str) else None, study_name if isinstance(study_name, str) else None,
                   float(previous_us) if isinstance(previous_us, (int, float)) and previous_us > 0 else None)


def read_best(folder: Path) -> dict:
    """best.yaml as a document, every entry checked against BestEntry and the layer count the file
    states (a file cut short at an entry's boundary still parses: the count tells)."""
    path = folder / BEST_FILE
    if not path.exists():
        return {"layers": {}}
    document = _read_results_yaml(path, MAX_BEST_BYTES) or {}
    if not isinstance(document, dict) or not isinstance(document.get("layers", {}), dict):
        raise ResultsError(f"{path} has no 'layers' mapping; restore it from version control")
    document.setdefault("layers", {})
    stated = document.get("layer_count")
    if stated is None and document["layers"]:
        raise ResultsError(f"{path} has no layer_count line (the tool always writes one): it was cut short or "
                           "edited; restore it from version control")
    if stated is not None and (isinstance(stated, bool) or stated != len(document["layers"])):
        raise ResultsError(f"{path} states {brief(stated)} layers but holds {len(document['layers'])}: it was cut "
                           "short or edited; restore it from version control")
    for section in ("device", "toolchain"):
        if not isinstance(document.get(section) or {}, dict):
            raise ResultsError(f"{path}: {section} is not a mapping; restore it from version control")
    for layer, entry in document["layers"].items():
        try:
            BestEntry.parse(str(layer), entry)
        except ResultsError as error:
            raise ResultsError(f"{path}: {error}; restore it from version control") from None
    return document


def _read_results_yaml(path: Path, max_bytes: int) -> object:
    """A results file the tool wrote, read as user files are: duplicate keys, aliases, binary content
    and oversized files refused in one line."""
    try:
        return read_yaml(path, "results file", max_bytes)
    except YamlFileError as error:
        raise ResultsError(f"{error}; restore it from version control") from None


def best_entries(folder: Path) -> dict[str, BestEntry]:
    """best.yaml's layers as typed entries (checked as read_best checks them)."""
    return {str(name): BestEntry.parse(str(name), entry) for name, entry in read_best(folder)["layers"].items()}


class ByCanonicalProblem(dict):
    """A mapping whose keys are problems up to the canonical fused form (tuner/core/problem.py canonical_problem):
    a layer tuned as conv + BatchNorm (scale+bias) is found for the same conv with its BatchNorm folded
    (bias), and the other way round. Every lookup and store takes the problem as the caller has it."""

    def __getitem__(self, problem: ConvProblem):
        return super().__getitem__(canonical_problem(problem))

    def __setitem__(self, problem: ConvProblem, value) -> None:
        super().__setitem__(canonical_problem(problem), value)

    def __contains__(self, problem: object) -> bool:
        return isinstance(problem, ConvProblem) and super().__contains__(canonical_problem(problem))

    def get(self, problem: ConvProblem, default=None):
        return super().get(canonical_problem(problem), default)

    def setdefault(self, problem: ConvProblem, default=None):
        return super().setdefault(canonical_problem(problem), default)


def names_by_problem(entries: dict[str, BestEntry]) -> ByCanonicalProblem:
    """The layer that holds each problem (the first in the file where several hold one), found for any
    problem of the same canonical fused form."""
    named = ByCanonicalProblem()
    for name, entry in entries.items():
        named.setdefault(entry.problem, name)
    return named


def read_bench(folder: Path) -> dict:
    """bench.yaml as a document (empty where there is none); one line for a file that is not YAML."""
    path = folder / BENCH_FILE
    if not path.is_file():
        return {}
    document = _read_results_yaml(path, MAX_BEST_BYTES) or {}
    if not isinstance(document, dict):
        raise ResultsError(f"{path} is not a mapping; restore it from version control")
    return document


def update_best(folder: Path, layer: str, entry: dict, header: dict) -> Path:
    """Put one layer's entry into best.yaml, keeping every other layer as it was; the entry is checked
    against BestEntry first, so nothing is written that the next read would refuse."""
    BestEntry.parse(layer, entry)
    with locked(folder):
        document = read_best(folder)
        document.update(header)
        document["layers"][layer] = entry
        document["layers"] = dict(sorted(document["layers"].items()))
        ordered = {**header, "layer_count": len(document["layers"]), "layers": document["layers"]}
        atomic_write(folder / BEST_FILE, yaml.safe_dump(ordered, sort_keys=False, width=110))
    return folder / BEST_FILE


def append_history(folder: Path, event: dict) -> None:
    """One JSON line per finished layer run; appends of a line are atomic enough on local disks."""
    folder.mkdir(parents=True, exist_ok=True)
    stamped = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **event}
    with locked(folder):
        drop_cut_last_line(folder / HISTORY_FILE)
        with open(folder / HISTORY_FILE, "a") as handle:
            handle.write(json.dumps(stamped, sort_keys=True) + "\n")
