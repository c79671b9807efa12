"""What the tools beside this file share: the repository on sys.path (they run as `python tools/NAME.py`),
this GPU's facts, and best.yaml's entry of each named layer on it, each with a one-line error where it
cannot be had."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.core.device import DeviceFacts  # noqa: E402
from tuner.measure.evaluate import GpuUnavailable, NoGpu, local_device  # noqa: E402
from tuner.core.errors import ProblemError  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402
from tuner.store.best import best_entries  # noqa: E402
from tuner.store.results import ResultsError, recorded_gpu_dir  # noqa: E402
from tuner.store.schema import BestEntry  # noqa: E402

LAYERS_FILE = REPO / "search_spaces" / "layers.yaml"
RESULTS_DIR = REPO / "results"


def this_gpu() -> DeviceFacts:
    """The GPU's facts, asked of a worker process (this one never opens a CUDA context); without a
    usable GPU the tool stops with one line, exit status 2 where the host has no GPU at all, else 1."""
    try:
        return local_device()
    except GpuUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2 if isinstance(error, NoGpu) else 1)


def tuned_layers(parser: argparse.ArgumentParser, names: list[str],
                 gpu_slug: str) -> dict[str, tuple[ConvProblem, BestEntry]]:
    """Each named layer's best.yaml entry for the GPU and its problem (as the entry records it: layers of any
    layer table, the generalisation suite's too); a name without an entry ends the tool through parser.error
    (one line, exit 2)."""
    try:
        entries = best_entries(recorded_gpu_dir(RESULTS_DIR, gpu_slug))
    except (ProblemError, ResultsError) as error:
        parser.error(str(error))
    missing = [name for name in names if name not in entries]
    if missing:
        parser.error(f"no best.yaml entry on {gpu_slug} for {', '.join(missing)}: tune them first")
    return {name: (entries[name].problem, entries[name]) for name in names}
