"""`tune.py plots`: pictures of what the studies found, from the storage and best.yaml alone (no GPU).
tuner/analysis/plots.py draws them into results/<gpu>/plots/; this prints what it wrote and left out."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from tuner.analysis.plots import JournalCut, NoJournal, PlotsEvent, StudyMissing, Written, draw_gpu
from tuner.cli.tables import json_document
from tuner.store.results import ResultsError, gpu_slugs, recorded_gpu_dir, results_slug

REPO = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune.py plots", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", help="GPU slug under results/, or a GPU's name from tuner/core/gpus.py (h100); "
                                      "default: every GPU with a best.yaml")
    parser.add_argument("--layers", help="comma-separated layers to draw (default: every layer in best.yaml)")
    parser.add_argument("--storage", help="Optuna storage URL (default: the journal in results/<gpu>/)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="default results/; the pictures and the dashboard's journal go to <gpu>/plots/ in it")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout: for each GPU, the "
                                                            "files written and the layers left out, with why "
                                                            "(messages go to stderr)")
    return parser


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    slugs = [results_slug(args.results_dir, args.gpu)] if args.gpu else gpu_slugs(args.results_dir)
    if not slugs:
        raise ResultsError(f"no results/<gpu>/best.yaml under {args.results_dir}: tune a layer first")
    if len(slugs) > 1 and (args.layers or args.storage):
        raise ResultsError(f"--layers and --storage name one GPU's layers: say which with --gpu (found {slugs})")
    # without --gpu, every GPU with results
    layers = args.layers.split(",") if args.layers else None
    drawn = [draw_gpu(recorded_gpu_dir(args.results_dir, slug), slug, layers, args.storage,
                      lambda event: print_event(event, console)) for slug in slugs]
    if args.json:  # the document owns stdout (the CLI's console writes to stderr under --json)
        sys.stdout.write(json_document({"gpus": [dataclasses.asdict(item) for item in drawn]}) + "\n")
    return 0




def print_event(event: PlotsEvent, console: Console) -> None:
    if isinstance(event, NoJournal):
        console.print(f"[yellow]no {event.path}: the summary only, no per-layer plots[/]")
    elif isinstance(event, JournalCut):
        console.print(f"[yellow]{escape(event.note)}[/]")
    elif isinstance(event, StudyMissing):
        console.print(f"[yellow]{escape(event.layer)}: its study is not in the storage; no per-layer plots[/]")
    elif isinstance(event, Written):
        dashboard = (f": {event.studies} studies, one per layer (optuna-dashboard {escape(event.path)})"
                     if event.studies is not None else "")
        console.print(f"wrote {escape(event.path)}{dashboard}")
