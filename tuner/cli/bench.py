"""`tune.py bench`: the search proven on one GPU, every kernel family side by side in one table.

1. The exhaustive landscape of each family: every statically valid candidate of
   search_spaces/<family>_landscape.yaml, each kernel compiled once, timed on every layer of the suite
   the family can run -> results/<gpu>/landscape/<family>/<layer>.csv.
2. The tuner at several budgets and seeds, replayed on the joint landscape of the families that ran the
   layer (every candidate it can propose was measured there): best found / exhaustive best, and kernels
   compiled; with and without the cost model's prior.
3. cuDNN through PyTorch, and cuBLAS on the GEMM of each 1x1 stride-1 layer, timed the same way.
4. The share of the measured matrix and copy ceilings each layer reaches.
5. The tuner as `tune.py --trials 32` runs it, on the GPU: every family's whole space
   (search_spaces/<family>.yaml), the reference and the cost model's picks queued first, every kernel
   compiled into an empty cache: best found / the landscapes' best (under 1 where the whole spaces hold
   a better kernel than the slices), kernels compiled and wall seconds per layer.
With --replay-only the GPU steps are skipped and the committed landscapes are replayed (CPU). The steps are
tuner/pipeline/'s (bench.py runs those on the GPU); this parses the command and prints what they give."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console

from tuner.cli.bench_tables import (bench_table, gpu_tuner_line, layer_csv_rows, layer_rows, one_run_csv_rows,
                                    one_run_lines, one_run_rows, print_event, print_one_run, summary_lines)
from tuner.cli.choices import positive
from tuner.core.layers import matching_layers
from tuner.cli.results_doc import write_summary
from tuner.cli.tables import add_output_arguments, csv_document, json_document, print_table
from tuner.core.device import DeviceFacts
from tuner.core.errors import UsageError
from tuner.core.layers import Layer, load_layers
from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.pipeline.bench import (DEFAULT_STEPS, PRODUCT_TRIALS, STEPS, SUITE, GpuSteps, bench_ceilings,
                                  measure_on_gpu)
from tuner.pipeline.bench_summary import (layer_figures, product_summary, ratio_summary, search_summary,
                                          tuned_times)
from tuner.pipeline.landscape import (compile_landscapes, compile_target, read_landscapes,
                                      recorded_layer_names)
from tuner.pipeline.replayed_search import BUDGETS, SEEDS, replay_layers
from tuner.search.space import chosen_spaces, default_space_file, landscape_space_file, load_space
from tuner.store.bench_record import BENCH_FILE, BenchRecord, read_bench
from tuner.store.results import ResultsError, gpu_dir, gpu_slugs

REPO = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune.py bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", help=f"comma-separated suite or patterns (default when measuring: "
                                         f"{','.join(SUITE)}, or every layer of a --layers-file that does not "
                                         "hold them; with --replay-only: every layer with a landscape)")
    parser.add_argument("--family", help="comma-separated families whose landscapes to measure or replay "
                                         f"(default: all, {','.join(registry.names())})")
    parser.add_argument("--space-file", type=Path, action="append",
                        help="a family's landscape space in place of search_spaces/<family>_landscape.yaml "
                             "(repeatable, one per family)")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="the layer table (default search_spaces/layers.yaml)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where results/<gpu>/landscape/ and bench.yaml are read and written (default results/)")
    parser.add_argument("--gpu", help="with --replay-only: GPU slug under results/ (default: the only one); with "
                                      "--summary: the one GPU to summarise (default: every GPU with a best.yaml); "
                                      "with --compile-only: the GPU to compile for, none need be present (a "
                                      "results/<gpu>/ folder, or a GPU of tuner/core/gpus.py such as h100; default: "
                                      "this host's GPU)")
    parser.add_argument("--summary", action="store_true",
                        help="no GPU: write the results summary generated from results/<gpu>/bench.yaml and "
                             "best.yaml (--summary-file, and the README's lines between its summary markers), "
                             "print its short form and stop")
    parser.add_argument("--summary-file", type=Path, default=REPO / "docs" / "results.md",
                        help="with --summary: the document to write (default docs/results.md)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md",
                        help="with --summary: the README whose results lines to rewrite (default README.md; a "
                             "file without the markers is left as it is)")
    parser.add_argument("--replay-only", action="store_true",
                        help="no GPU: replay the committed landscapes and cuDNN/cuBLAS/ceiling numbers")
    parser.add_argument("--steps", type=steps_list, default=DEFAULT_STEPS,
                        help=f"GPU steps to run, comma-separated (default {','.join(DEFAULT_STEPS)}): 'landscape' "
                             "times every candidate of each family's landscape space, 'cudnn' the baselines (cuDNN, "
                             "and cuBLAS on 1x1 stride-1 layers), 'search' the tuner on the families' whole "
                             "spaces, 'tuned' best.yaml's kernel of each layer with cuDNN/cuBLAS timed right after "
                             "it; the table replays whatever is recorded")
    parser.add_argument("--product-trials", type=int, default=PRODUCT_TRIALS,
                        help=f"candidates per layer in the 'search' step (default {PRODUCT_TRIALS})")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile every kernel of the landscapes into the cache and stop (warms a GPU host's "
                             "cache for the tuner, or fills one on a build host without a GPU, given --gpu); "
                             "times nothing")
    parser.add_argument("--measure-only", action="store_true",
                        help="measure on the GPU and write results/<gpu>/, but replay no search (do that "
                             "later with --replay-only, on any machine)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS),
                        help="seeds per budget of the replayed search (default 3)")
    parser.add_argument("--budgets", type=budget_list, default=BUDGETS,
                        help=f"trial budgets of the replayed search, comma-separated (default "
                             f"{','.join(map(str, BUDGETS))})")
    parser.add_argument("--cache-dir", type=Path,
                        help="compile cache of the landscape step (default: the tuner's; the 'search' step "
                             "always compiles into an empty one, to time a cold start)")
    add_output_arguments(parser, json_help="print one JSON document on stdout in place of the tables: each "
                                           "layer's figures, the summary lines and the one run's rows (messages "
                                           "go to stderr)",
                         csv_help="print the families' table as CSV on stdout, a line per layer (with "
                                  "--measure-only: the one run's, a line per layer; messages go to stderr)")
    parser.add_argument("--jobs", type=int, help="parallel nvcc jobs; with --replay-only, layers replayed at once "
                                                 "(default: the cores)")
    return parser


def steps_list(text: str) -> tuple[str, ...]:
    steps = tuple(step.strip() for step in text.split(",") if step.strip())
    unknown = [step for step in steps if step not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(f"unknown step(s) {unknown or text!r}; choose from {','.join(STEPS)}")
    return steps


def budget_list(text: str) -> tuple[int, ...]:
    try:
        budgets = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budgets {text!r} must be whole numbers, e.g. 16,32,64") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"--budgets {text!r} must be whole numbers of 1 or more")
    return budgets


def recorded_measurements(results_dir: Path, gpu: str | None) -> tuple[DeviceFacts, BenchRecord]:
    """--replay-only: the bench record of the GPU named, or of the only one with a bench.yaml, or of the only one of
    those with landscapes to replay."""
    slugs = [gpu] if gpu else gpu_slugs(results_dir, BENCH_FILE)
    if len(slugs) > 1:
        slugs = [slug for slug in slugs if (gpu_dir(results_dir, slug) / "landscape").is_dir()] or slugs
    if len(slugs) != 1:
        raise ResultsError(f"--replay-only needs one results/<gpu>/{BENCH_FILE}; found {slugs or 'none'} (pass --gpu)")
    folder = gpu_dir(results_dir, slugs[0])
    record = read_bench(folder)
    if record.device is None or record.ceilings is None:
        raise ResultsError(f"{folder / BENCH_FILE} not found or holds no device: measure with `tune.py bench` "
                           "on that GPU first")
    return record.device, record


def landscape_spaces(family_text: str | None, space_files: list[Path] | None) -> dict[str, SearchSpace]:
    names = family_text or ",".join(registry.names())
    given = {load_space(path).family: path for path in space_files or []}
    files = [given.get(name.strip(), landscape_space_file(name.strip())) for name in names.split(",") if name.strip()]
    return {space.family: space for space in chosen_spaces(family_text, files)}


def default_layers(table: dict[str, Layer]) -> list[str]:
    """What the GPU steps measure without --layers: SUITE, the landscapes' layers, from the layer table
    that holds them; from another table (--layers-file search_spaces/suite.yaml) every layer of it."""
    return list(SUITE) if all(name in table for name in SUITE) else list(table)


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    if args.summary and args.csv:
        raise UsageError("--summary writes a document, no table: leave out --csv (--json gives its lines)")
    if args.summary:
        return write_summary(args.results_dir, args.gpu, args.summary_file, args.readme, console, args.json)
    for option, value in (("--seeds", args.seeds), ("--product-trials", args.product_trials), ("--jobs", args.jobs)):
        if value is not None:
            positive(option, value)
    table = load_layers(args.layers_file)
    spaces = landscape_spaces(args.family, args.space_file)  # a typo fails before any GPU work
    if args.compile_only and (args.replay_only or args.measure_only or "landscape" not in args.steps):
        raise UsageError("--compile-only compiles the landscapes and stops: it takes no --replay-only or "
                         "--measure-only, and no --steps without landscape")
    if args.compile_only and (args.json or args.csv):
        raise UsageError("--compile-only fills the compile cache and reports nothing: leave out "
                         f"--{'json' if args.json else 'csv'}")
    if args.gpu is not None and not (args.replay_only or args.compile_only):
        raise UsageError("--gpu goes with --replay-only, --summary or --compile-only: measuring takes this host's GPU")
    if args.replay_only:
        device, record = recorded_measurements(args.results_dir, args.gpu)
        recorded = recorded_layer_names(gpu_dir(args.results_dir, device.slug))
        default = [name for name in table if name in recorded]
    else:
        default = default_layers(table)
    names = args.layers.split(",") if args.layers else default
    layers = list({layer.name: layer for name in names if name.strip()
                   for layer in matching_layers(table, name.strip())}.values())

    def emit(event) -> None:
        print_event(event, console)

    if args.compile_only:
        from tuner.measure.evaluate import local_device

        device = compile_target(args.results_dir, args.gpu) if args.gpu else local_device()
        compile_landscapes(layers, spaces, device, args.cache_dir, args.jobs, emit)
        return 0
    if not args.replay_only:
        product = tuple(load_space(default_space_file(family)) for family in spaces)
        device, record = measure_on_gpu(layers, spaces, product, GpuSteps(args.steps, args.results_dir, args.cache_dir,
                                                                         args.jobs, args.product_trials), emit)
        if "tuned" in args.steps and not (args.json or args.csv):
            print_one_run(record, console)
            chosen = {layer.name for layer in layers}
            if set(record.one_run) - chosen:  # earlier runs' layers too: these alone as well
                for line in one_run_lines(record, chosen):
                    console.print(line)
    if args.measure_only:
        if args.json:
            print(json_document({"device": device.name, "one_run": one_run_rows(record),
                                 "one_run_summary": one_run_lines(record)}))
        elif args.csv:
            print(csv_document(one_run_csv_rows(record)), end="")
        return 0
    ceilings = bench_ceilings(record)
    console.print(f"{device.name}: measured ceilings {ceilings.matmul_tflops:.0f} TFLOP/s f16 matmul, "
                  f"{ceilings.copy_gbps:.0f} GB/s copy")
    folder = gpu_dir(args.results_dir, device.slug)
    landscapes = {layer.name: read_landscapes(folder, layer, tuple(spaces)) for layer in layers}
    searches = replay_layers([layer for layer in layers if landscapes[layer.name]], landscapes, spaces, device,
                             ceilings, args.budgets, tuple(range(args.seeds)), args.jobs or os.cpu_count() or 1,
                             emit)
    tuned = tuned_times(folder)
    chosen = {layer.name for layer in layers} if args.layers else None
    summary = summary_lines(search_summary(searches), ratio_summary(layers, landscapes, record, tuned))
    product_line = gpu_tuner_line(product_summary(layers, landscapes, record))
    figures = layer_figures(layers, landscapes, searches, record, tuned)
    if args.json:
        print(json_document({"device": device.name, "ceilings": record.ceilings.to_dict(),
                             "layers": layer_rows(figures),
                             "summary": summary + ([product_line] if product_line else []),
                             "one_run": one_run_rows(record, chosen),
                             "one_run_summary": one_run_lines(record, chosen)}))
        return 0
    if args.csv:
        print(csv_document(layer_csv_rows(figures, ceilings)), end="")
        return 0
    table = bench_table(figures, ceilings)
    print_table(console, table, [str(column.header) for column in table.columns[1:]])
    for line in summary:
        console.print(line)
    print_one_run(record, console, chosen)
    if product_line:
        console.print(product_line)
    return 0
