"""Many layers in one go (the nightly retune): what changed against the previous best, and one
worker process per GPU on the same studies."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from tuner.pipeline.tuning import LayerOutcome

# A layer whose best configuration now measures this much slower than before is a regression.
REGRESSION_THRESHOLD = 0.03


def default_run_id() -> str:
    """Runs started the same UTC day share an id, so a killed nightly resumes where it stopped."""
    return "nightly-" + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def regressions(outcomes: list[LayerOutcome], threshold: float = REGRESSION_THRESHOLD) -> list[LayerOutcome]:
    return [o for o in outcomes if o.change is not None and o.change > threshold]


def parse_gpus(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus or not all(g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus):
        raise ValueError(f"--gpus {text!r} must list distinct GPU indices, e.g. 0,1,2,3")
    return gpus


def without_gpus_flag(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--gpus":
            skip = True
        elif not arg.startswith("--gpus="):
            kept.append(arg)
    return kept


def run_on_gpus(argv: list[str], gpus: list[str], run_id: str, script: Path) -> int:
    """One `tune.py` process per GPU (CUDA_VISIBLE_DEVICES), all under the same run id on the same
    storage: they share each layer's study and split its trials. Exit status: the worst child's."""
    args = without_gpus_flag(argv) + ["--run-id", run_id]
    children = [subprocess.Popen([sys.executable, str(script), *args],
                                 env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu}) for gpu in gpus]
    codes = [child.wait() for child in children]
    return max(codes)
