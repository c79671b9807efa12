"""Several hosts on a real PostgreSQL: a throwaway server (a temp dir, a Unix socket, stopped at the end),
two tuner processes posing as two hosts on one study with the replayed H100 measurements of conv_1, one
SIGKILLed mid-batch. No configuration is recorded twice, nothing recorded is lost, and the dead host's
unfinished trials are failed by the live host (heartbeats) and measured again, once. Needs PostgreSQL's
initdb/pg_ctl on PATH and psycopg (`pip install -e '.[postgres]'`)."""
from __future__ import annotations

import multiprocessing
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tuner.search.replay import ReplayCompiler, ReplayEvaluator, read_record
from tuner.store.journal import study_storage
from tuner.search.space import JointSpace
from tuner.search.study import StudyRunner, open_study
from tuner.search.trials import counted_in_run, params_key

RECORD = Path(__file__).parent / "data" / "h100_conv_1_record.csv"
RUN = "ci-two-hosts"
TRIALS = 20
HEARTBEAT_S, GRACE_S = 1, 2

def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    shutil.which("initdb") is None or shutil.which("pg_ctl") is None
    or __import__("importlib").util.find_spec("psycopg") is None
    or (os.geteuid() == 0 and (shutil.which("setpriv") is None or not _has_user("nobody"))),
    reason="needs PostgreSQL (initdb, pg_ctl), psycopg (pip install -e '.[postgres]'), and as root setpriv and "
           "the user nobody (PostgreSQL refuses to run as root)")


def _as_server_user() -> list[str]:
    """PostgreSQL refuses to run as root: drop to nobody where the tests run as root (CI)."""
    return [] if os.geteuid() else ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.fixture
def postgres_url():
    root = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = root / "data"
    server = _as_server_user()
    subprocess.run([*server, "initdb", "-D", str(data), "-U", "tuner", "--auth=trust"], check=True,
                   capture_output=True, cwd=root)
    subprocess.run([*server, "pg_ctl", "-D", str(data), "-o", f"-p {port} -k {root} -c listen_addresses=''",
                    "-l", str(root / "server.log"), "-w", "start"], check=True, capture_output=True, cwd=root)
    try:
        yield f"postgresql+psycopg://tuner@/postgres?host={root}&port={port}"
    finally:
        subprocess.run([*server, "pg_ctl", "-D", str(data), "-m", "immediate", "stop"], capture_output=True, cwd=root)
        shutil.rmtree(root, ignore_errors=True)


class _SlowReplay(ReplayEvaluator):
    """The recorded H100 outcome, after `delay` seconds: a kill lands in the middle of a batch."""

    def __init__(self, record, log: Path, delay: float):
        super().__init__(record, log)
        self.delay = delay

    def evaluate(self, binary, problem, launch, seed=None):
        outcome = super().evaluate(binary, problem, launch)  # logs the configuration first
        time.sleep(self.delay)
        return outcome


def _host(url: str, host: str, log: str, seed: int, delay: float, problem, space, device) -> None:
    os.environ["CUTLASS_TUNER_HOST"] = host
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = study_storage(url, Path("unused"), "unused", heartbeat_s=HEARTBEAT_S, grace_s=GRACE_S)
    study = open_study("two-hosts", storage, seed)
    evaluator = _SlowReplay(read_record(RECORD, problem, "sm80"), Path(log), delay)
    StudyRunner(study, problem, JointSpace((space,)), device, ReplayCompiler(jobs=4), evaluator, run_id=RUN,
                storage=storage).run(TRIALS)


@pytest.mark.slow
def test_two_hosts_one_killed(tmp_path, postgres_url, conv_1, sm80_space, h100):
    context = multiprocessing.get_context("spawn")
    logs = {host: tmp_path / f"{host}.log" for host in ("host-a", "host-b")}
    hosts = {host: context.Process(target=_host, args=(postgres_url, host, str(log), seed, delay, conv_1,
                                                        sm80_space, h100))
             for (host, log), seed, delay in zip(logs.items(), (0, 1), (0.4, 0.35))}
    hosts["host-a"].start()
    deadline = time.monotonic() + 120
    while not (logs["host-a"].exists() and logs["host-a"].read_text().split()):
        assert time.monotonic() < deadline and hosts["host-a"].is_alive(), "host-a never evaluated"
        time.sleep(0.02)
    os.kill(hosts["host-a"].pid, signal.SIGKILL)  # inside its first evaluation: its batch is RUNNING
    hosts["host-b"].start()
    hosts["host-a"].join(timeout=30)
    hosts["host-b"].join(timeout=240)
    assert hosts["host-a"].exitcode == -signal.SIGKILL and hosts["host-b"].exitcode == 0

    study = optuna.load_study(study_name="two-hosts", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    by_state = Counter(t.state for t in trials)
    assert by_state[TrialState.RUNNING] == 0 and by_state[TrialState.WAITING] == 0
    # evaluated: compiled and run here (one proposed again is answered from the record, not run)
    evaluated = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                 and "compile_s" in t.user_attrs and "from_record" not in t.user_attrs]
    keys = Counter(params_key(t.params) for t in evaluated)
    assert max(keys.values()) == 1  # no configuration evaluated twice
    assert all("status" in t.user_attrs and "worker" in t.user_attrs for t in evaluated)
    owners = Counter(t.user_attrs["worker"].rpartition(":")[0] for t in evaluated)
    assert owners["host-b"] >= TRIALS - 4  # the live host did the run
    dead = [t for t in trials if t.state is TrialState.FAIL and t.user_attrs.get("worker", "").startswith("host-a")]
    assert dead, "the kill left no unfinished trial: nothing was retried"
    retried = {RetryHeartbeatStaleTrialCallback.retried_trial_number(t): t for t in trials
               if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) is not None}
    for trial in dead:  # each measured again, by the live host, and recorded once
        again = retried[trial.number]
        assert again.state in (TrialState.COMPLETE, TrialState.PRUNED) and "compile_s" in again.user_attrs
        assert not trial.params or params_key(again.params) == params_key(trial.params)
        assert again.user_attrs["worker"].startswith("host-b:")
    assert TRIALS <= counted_in_run(study, RUN) <= TRIALS + 4
