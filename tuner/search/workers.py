"""Several workers on one study, on one host or several: who holds a trial (worker_id), the trials of a
worker that was killed (fail_orphans), and the heartbeats that tell other hosts a worker is alive."""
from __future__ import annotations

import datetime as dt
import os
import socket
import threading

import optuna
from optuna.trial import TrialState

# How long a RUNNING trial without its worker tag may wait before fail_orphans takes it for a kill
# between ask and tag (sampling a knob is a storage round trip: seconds at worst on a remote database).
UNTAGGED_GRACE = dt.timedelta(minutes=10)


def worker_id() -> str:
    """host:pid. CUTLASS_TUNER_HOST names the host where the machine's name does not tell hosts apart
    (containers that share one, or a test posing as two hosts)."""
    return f"{os.environ.get('CUTLASS_TUNER_HOST') or socket.gethostname()}:{os.getpid()}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_orphans(study: optuna.Study, now: dt.datetime | None = None) -> int:
    """RUNNING trials whose worker process on this host is gone (killed hard) become FAIL, so the
    study neither waits on them nor counts them. Other hosts' trials are left to their own workers,
    except one that never got its worker tag (killed between ask and tag, on any host) once it is
    older than UNTAGGED_GRACE: a live worker tags within milliseconds of asking."""
    host = worker_id().rpartition(":")[0]
    now = now or dt.datetime.now()
    orphans = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(trial.user_attrs.get("worker", ""))
        owner_host, _, pid = owner.rpartition(":")
        untagged_and_old = (not owner and trial.datetime_start is not None
                            and now - trial.datetime_start > UNTAGGED_GRACE)
        if untagged_and_old or (owner_host == host and pid.isdigit() and not _process_alive(int(pid))):
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            orphans += 1
    return orphans


def _heartbeat_storage(storage: optuna.storages.BaseStorage | str | None):
    """The storage the study was opened on, where it keeps heartbeats (an RDB opened with a heartbeat interval,
    journal.study_storage), else None."""
    interval = getattr(storage, "get_heartbeat_interval", None)
    return storage if interval is not None and interval() else None


class Heartbeat:
    """Records a heartbeat for every trial this worker holds, from its ask to its tell, every interval,
    so that other hosts do not take them for a dead host's (Optuna beats only inside study.optimize).
    Does nothing where the storage keeps no heartbeats."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage | str | None):
        self.storage = _heartbeat_storage(storage)
        self.study_name = study.study_name
        self.study_id: int | None = None
        self.held: dict[int, int] = {}  # trial number -> the storage's trial id
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None

    def hold(self, trial: optuna.Trial) -> None:
        if self.storage is None:
            return
        if self.study_id is None:
            self.study_id = self.storage.get_study_id_from_name(self.study_name)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)
        self.storage.record_heartbeat(trial_id)
        with self.lock:
            self.held[trial.number] = trial_id
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, daemon=True, name="trial-heartbeat")
                self.thread.start()

    @property
    def stale_after_s(self) -> float:
        """How long until a trial whose heartbeats stopped counts as a dead host's: the storage's grace
        period (unset, Optuna takes two intervals)."""
        return getattr(self.storage, "grace_period", None) or 2 * self.storage.get_heartbeat_interval()

    def release(self, trial: optuna.Trial) -> None:
        with self.lock:
            self.held.pop(trial.number, None)

    def _beat(self) -> None:
        while not self.finished.wait(self.storage.get_heartbeat_interval()):
            with self.lock:
                held = list(self.held.values())
            for trial_id in held:
                self.storage.record_heartbeat(trial_id)

    def close(self) -> None:
        """Stops the beating thread; a later hold starts another."""
        self.finished.set()
        if self.thread is not None:
            self.thread.join()
        self.thread = None
        self.finished = threading.Event()
