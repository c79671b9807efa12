"""Many layers in one go (the nightly retune): what changed against the previous best, and one
worker process per GPU on the same studies."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from tuner.pipeline.tuning import LayerOutcome

# A layer whose best configuration now measures this much slower than before is a regression.
REGRESSION_THRESHOLD = 0.03


def default_run_id() -> str:
    """Runs started the same UTC day share an id, so a killed nightly resumes where it stopped."""
    return "nightly-" + dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def regressions(outcomes: list[LayerOutcome], threshold: float = REGRESSION_THRESHOLD) -> list[LayerOutcome]:
    return [o for o in outcomes if o.change is not None and o.change > threshold]


def regression_table(outcomes: list[LayerOutcome], threshold: float = REGRESSION_THRESHOLD) -> Table:
    table = Table(title=f"against the previous best (regression: more than {threshold:.0%} slower)")
    for column in ("layer", "previous µs", "now µs", "change", "", "kernel now"):
        table.add_column(column, justify="right" if "µs" in column or column == "change" else "left")
    for outcome in outcomes:
        change = outcome.change
        verdict = ("" if change is None else "[red]REGRESSION[/]" if change > threshold
                   else "[green]faster[/]" if change < -threshold else "same")
        table.add_row(escape(outcome.layer), _us(outcome.previous_us), _us(outcome.runtime_us),
                      "new" if change is None else f"{change:+.1%}", verdict, outcome.kernel or "none passed")
    return table


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


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
