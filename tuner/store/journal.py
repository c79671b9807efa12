"""The study storage of results/<gpu>/: the Optuna journal (under a lock the kernel releases when its
holder dies, a damaged line refused with its number), or a database URL with heartbeats for several hosts."""
from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

from optuna.storages.journal import JournalFileBackend

from tuner.core.yamlfile import brief
from tuner.store.results import JOURNAL_FILE, ResultsError, drop_cut_last_line, gpu_dir


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
