"""Long-lived builders for families that build with their own toolchain instead of nvcc (the sm90_dsl family's
CuTe DSL): each imports its toolchain once and then builds kernel after kernel."""
from __future__ import annotations

import json
import select
import subprocess
import threading
from pathlib import Path

from tuner.families.base import BuildRequest

# The folder that holds this process's `tuner` package. A builder runs `python -m`, which puts its working
# directory first on sys.path: started there, it imports the same sources whose digest keys the build cache,
# not a `tuner` folder that happens to sit in the user's working directory.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # tuner/build/builder_pool.py


class BuilderPool:
    """Long-lived builders (BuildRequest.serve_command), started as builds need them and kept for the next
    one: each imports its toolchain once. One JSON line a job each way: {"folder", "source_file"} in,
    {"rc", "log"} out. A builder that dies or overruns the timeout is killed, and its job is a transient
    failure (built again later, not cached)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, ...], list[subprocess.Popen]] = {}

    def prestart(self, command: tuple[str, ...], count: int) -> None:
        """Start builders until `count` of `command` are idle, without waiting for them: their toolchain
        imports while the study is set up, instead of in front of the first builds."""
        with self.lock:
            idle = self.idle.setdefault(command, [])
            missing = count - len(idle)
        started = [self._start(command) for _ in range(max(0, missing))]
        with self.lock:
            self.idle[command].extend(started)

    @staticmethod
    def _start(command: tuple[str, ...]) -> subprocess.Popen:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, start_new_session=True, cwd=PACKAGE_ROOT)

    def build(self, request: BuildRequest, folder: Path, timeout_s: float) -> tuple[str, bool, bool]:
        """(log, failed, transient) of building `request` in `folder`."""
        command = request.serve_command
        with self.lock:
            process = self.idle.get(command, []).pop() if self.idle.get(command) else None
        if process is None:
            process = self._start(command)
        try:
            process.stdin.write(json.dumps({"folder": str(folder.resolve()), "source_file": request.source_file})
                                + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], timeout_s)
            line = process.stdout.readline() if ready else ""
            answer = json.loads(line) if line else None
        except (OSError, ValueError):
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("log"), str):
            process.kill()
            process.wait()
            return f"the builder gave no answer in {timeout_s:.0f} s (or died): killed", True, True
        with self.lock:
            self.idle.setdefault(command, []).append(process)
        return answer["log"], answer.get("rc") != 0, False

    def close(self) -> None:
        with self.lock:
            processes = [p for group in self.idle.values() for p in group]
            self.idle.clear()
        for process in processes:
            process.stdin.close()  # a builder ends at the end of its input
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
