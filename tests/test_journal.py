"""The study storage: the journal in the GPU's results folder, its lock, and a damaged journal line."""
import optuna
import pytest

from tuner.store.journal import default_storage
from tuner.store.results import JOURNAL_FILE


def test_default_storage_is_a_journal_in_the_gpu_folder(tmp_path):
    storage = default_storage(tmp_path, "nvidia-h100-80gb-hbm3")
    study = optuna.create_study(study_name="s", storage=storage)
    study.add_trial(optuna.trial.create_trial(value=1.0))
    journal = tmp_path / "nvidia-h100-80gb-hbm3" / JOURNAL_FILE
    assert journal.is_file() and journal.stat().st_size > 0
    again = optuna.load_study(study_name="s", storage=default_storage(tmp_path, "nvidia-h100-80gb-hbm3"))
    assert [t.value for t in again.trials] == [1.0]


def _journal_with_trials(folder, trials: int = 3):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    folder.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(folder / JOURNAL_FILE)))
    study = optuna.create_study(study_name="s", storage=storage)
    for value in range(trials):
        study.enqueue_trial({"x": value})
        study.optimize(lambda trial: trial.suggest_int("x", 0, 9), n_trials=1)
    return folder / JOURNAL_FILE


def test_a_damaged_journal_line_is_named_and_what_loads_is_kept(tmp_path):
    from tuner.store.journal import first_damaged_line, readable_journal
    from tuner.store.results import ResultsError

    path = _journal_with_trials(tmp_path / "gpu")
    assert first_damaged_line(path) is None
    lines = path.read_bytes().splitlines(keepends=True)
    whole = len(lines)
    path.write_bytes(b"".join(lines[:-4]) + b"{garbage\n" + b"".join(lines[-4:]))
    damaged = whole - 3
    assert first_damaged_line(path) == damaged
    with pytest.raises(ResultsError, match=f"line {damaged} is not a journal record.*head -n {damaged - 1}"):
        default_storage(tmp_path, "gpu")
    storage, line = readable_journal(path)
    assert line == damaged
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert 1 <= len(trials) < 3  # the records before the damaged line
    assert path.read_bytes().count(b"{garbage") == 1  # the file itself is untouched


def test_a_last_line_still_being_written_is_not_damage(tmp_path):
    from tuner.store.journal import first_damaged_line

    path = _journal_with_trials(tmp_path / "gpu", trials=1)
    path.write_bytes(path.read_bytes() + b'{"op_code": 4, "worker_id"')
    assert first_damaged_line(path) is None


def test_a_killed_holder_leaves_no_journal_lock(tmp_path):
    """The journal's lock is released by the kernel when its holder dies (SIGKILL): the next process
    takes it at once. While a live process holds it, others wait."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tuner.store.journal import KernelReleasedLock

    journal = tmp_path / "optuna.journal"
    holder = ("import os, signal, sys, time; sys.path.insert(0, %r); from pathlib import Path; "
              "from tuner.store.journal import KernelReleasedLock; lock = KernelReleasedLock(Path(%r)); lock.acquire(); "
              "print('held', flush=True); time.sleep(float(sys.argv[1])); os.kill(os.getpid(), signal.SIGKILL)"
              % (str(Path(__file__).resolve().parents[1]), str(journal)))
    child = subprocess.Popen([sys.executable, "-c", holder, "1.5"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    lock = KernelReleasedLock(journal)
    started = time.monotonic()
    assert lock.acquire()  # waits for the holder, which is then killed holding it
    waited = time.monotonic() - started
    lock.release()
    child.wait()
    assert child.returncode == -9 and 0.5 < waited < 10
    started = time.monotonic()
    assert lock.acquire()
    lock.release()
    assert time.monotonic() - started < 0.5
