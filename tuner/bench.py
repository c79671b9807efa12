"""`tune.py bench`: the search proven on one GPU, side by side in one table.

1. The exhaustive landscape: every statically valid candidate of search_spaces/sm80_landscape.yaml,
   each kernel compiled once, timed on every layer of the suite -> results/<gpu>/landscape/<layer>.csv.
2. The tuner at several budgets and seeds, replayed on that landscape (every candidate it can
   propose was measured there): best found / exhaustive best, and kernels compiled; with and
   without the cost model's prior.
3. cuDNN through PyTorch, timed the same way; tuned / cuDNN and the geometric mean.
4. The share of the measured matrix and copy ceilings each layer reaches.
5. The tuner as `tune.py --trials 32` runs it, on the GPU: the product's whole space
   (search_spaces/sm80.yaml, 50x the landscape's kernels), the reference and the cost model's picks
   queued first, every kernel compiled into an empty cache: best found / the landscape's best (the
   landscape is a slice of that space, so a ratio under 1 is a better kernel the slice lacks), kernels
   compiled and wall seconds per layer.
With --replay-only the GPU steps are skipped and the committed landscape is replayed (CPU)."""
from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml
from rich.console import Console
from rich.table import Table

from tuner.costmodel import PRIOR_PICKS, Ceilings, prior_picks
from tuner.device import DeviceFacts, device_from_dict
from tuner.problem import ConvProblem, Layer, load_layers
from tuner.replay import Recorded, ReplayCompiler, ReplayEvaluator, read_record, write_record
from tuner.results import BENCH_FILE, atomic_write, gpu_dir, gpu_slugs
from tuner.space import SearchSpace, load_space, valid_configs
from tuner.status import Status
from tuner.study import Tuner, open_study, ranked, recorded_trials
from tuner.problem import problem_to_dict

REPO = Path(__file__).resolve().parents[1]
SUITE = ("conv_1", "r50_s2_3x3_b1", "r50_s5_3x3_b1", "r50_s3_1x1_256to128_b32", "r50_s4_3x3_b32", "r50_s5_3x3_b32")
BUDGETS = (16, 32, 64)
SEEDS = (0, 1, 2)
LANDSCAPE_REPEATS = 15
PRODUCT_TRIALS = 32
STEPS = ("landscape", "cudnn", "search")


@dataclass(frozen=True)
class SearchResult:
    budget: int
    with_prior: bool
    ratios: tuple[float, ...]  # best found / exhaustive best, one per seed
    kernels: tuple[int, ...]   # distinct kernels compiled, one per seed

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)


@dataclass(frozen=True)
class ProductSearch:
    """One layer tuned the way `tune.py` tunes it, measured on the GPU."""
    best_us: float
    kernel: str
    kernels_compiled: int
    wall_s: float


def exhaustive_best(record: dict[str, Recorded]) -> float:
    """The fastest valid candidate's µs in a layer's landscape."""
    return min(r.median_us for r in record.values() if r.status is Status.ok)


def bench_ceilings(measured: dict) -> Ceilings:
    return Ceilings(measured["ceilings"]["matmul_tflops"], measured["ceilings"]["copy_gbps"])


def landscape_path(folder: Path, layer: str) -> Path:
    return folder / "landscape" / f"{layer}.csv"


def measure_landscape(layers: list[Layer], space: SearchSpace, device: DeviceFacts, compiler, evaluator,
                      folder: Path, console: Console) -> None:
    """Compile every kernel the suite needs once, then time every candidate on every layer."""
    per_layer = {layer.name: valid_configs(space, layer.problem, device) for layer in layers}
    kernels = sorted({c.compiled for configs in per_layer.values() for c in configs})
    console.print(f"landscape: {len(kernels)} kernels to compile, "
                  f"{sum(len(c) for c in per_layer.values())} candidates to time")
    compiled = {r.config.compiled: r for r in compiler.compile_many(kernels)}
    for index, layer in enumerate(layers):
        rows = []
        for config in per_layer[layer.name]:
            result = compiled[config.compiled]
            if not result.ok:
                rows.append({**config.search_params, "status": Status.compile_failed.value})
                continue
            evaluation = evaluator.evaluate(result.library, layer.problem, config.split_k, seed=1000 + index)
            m = evaluation.measurement
            rows.append({**config.search_params, "status": evaluation.status.value,
                         "median_us": m and m.median_us, "p10_us": m and m.p10_us, "p90_us": m and m.p90_us,
                         "error": evaluation.error, "grid_blocks": evaluation.grid_blocks,
                         "blocks_per_sm": evaluation.attributes and evaluation.attributes.max_active_blocks_per_sm})
        write_record(landscape_path(folder, layer.name), rows,
                     f"Landscape of {layer.name} on {device.name}: every statically valid candidate of "
                     f"search_spaces/sm80_landscape.yaml,\nrecorded by: python tune.py bench "
                     f"(same inputs for every candidate of the layer, {LANDSCAPE_REPEATS} graph replays each)")
        ok = [r["median_us"] for r in rows if r["status"] == Status.ok.value]
        console.print(f"  {layer.name}: {len(ok)} of {len(rows)} ok, best {min(ok, default=math.nan):.2f} µs")


def replay_search(problem: ConvProblem, space: SearchSpace, device: DeviceFacts, record: dict[str, Recorded],
                  budget: int, seed: int, prior: list) -> tuple[float, int]:
    """The tuner with `budget` candidates on the recorded landscape: best µs found, kernels compiled."""
    study = open_study("replay", optuna.storages.InMemoryStorage(), seed)
    for config in prior:
        study.enqueue_trial(config.search_params)
    compiler = ReplayCompiler(jobs=8)
    Tuner(study, problem, space, device, compiler, ReplayEvaluator(record), run_id="replay").run(budget)
    best = ranked(study, problem)
    return (best[0].median_us if best else math.inf), len(compiler.kernels)


def search_results(layer: Layer, space: SearchSpace, device: DeviceFacts, record: dict[str, Recorded],
                   ceilings: Ceilings, budgets=BUDGETS, seeds=SEEDS) -> list[SearchResult]:
    exhaustive = exhaustive_best(record)
    prior = prior_picks(space, layer.problem, device, PRIOR_PICKS, ceilings)
    results = []
    for with_prior in (False, True):
        for budget in budgets:
            runs = [replay_search(layer.problem, space, device, record, budget, seed, prior if with_prior else [])
                    for seed in seeds]
            results.append(SearchResult(budget, with_prior, tuple(best / exhaustive for best, _ in runs),
                                        tuple(kernels for _, kernels in runs)))
    return results


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def bench_table(layers: list[Layer], records: dict[str, dict[str, Recorded]], searches: dict[str, list[SearchResult]],
                measured: dict, ceilings: Ceilings) -> Table:
    table = Table(title="tuner vs exhaustive vs cuDNN. exh: best of the landscape (µs); TPE<budget>[+p]: best found "
                        "/ exhaustive best, median over seeds (kernels compiled); +p: seeded by the cost model; "
                        "GPU tuner: tune.py's search of its whole space on the GPU, best / exh (kernels compiled, "
                        "cold-cache wall time)")
    columns = ["layer", "exh µs", "median", "worst"]
    columns += [f"TPE{r.budget}" + ("+p" if r.with_prior else "") for r in next(iter(searches.values()))]
    product = measured.get("product_search") or {}
    columns += ["GPU tuner\n/exh", "cuDNN µs", "exh/cuDNN", "%peak", "%bw"]
    for column in columns:
        table.add_column(column, justify="left" if column == "layer" else "right", no_wrap=column == "layer")
    cudnn_ratios = []
    for layer in layers:
        times = sorted(r.median_us for r in records[layer.name].values() if r.status is Status.ok)
        best = times[0]
        row = [layer.name, f"{best:.2f}", f"{statistics.median(times) / best:.2f}x", f"{times[-1] / best:.2f}x"]
        row += [f"{r.median_ratio:.3f}\n({statistics.median(r.kernels):.0f})" for r in searches[layer.name]]
        found = product.get(layer.name)
        row += [f"{found['best_us'] / best:.3f}\n({found['kernels_compiled']}, {found['wall_s']:.0f} s)" if found else "-"]
        cudnn = (measured.get("cudnn") or {}).get(layer.name)
        if cudnn:
            cudnn_ratios.append(best / cudnn)
        row += [f"{cudnn:.2f}" if cudnn else "-", f"{best / cudnn:.2f}" if cudnn else "-"]
        row += [f"{100 * layer.problem.flops / (best * 1e-6) / (ceilings.matmul_tflops * 1e12):.1f}",
                f"{100 * layer.problem.bytes_moved / (best * 1e-6) / (ceilings.copy_gbps * 1e9):.1f}"]
        table.add_row(*row)
    if cudnn_ratios:
        table.add_row("geometric mean", *[""] * (len(columns) - 4), f"{geometric_mean(cudnn_ratios):.2f}", "", "")
    return table


def product_search(layer: Layer, space: SearchSpace, device: DeviceFacts, make_compiler, evaluator,
                   ceilings: Ceilings, trials: int) -> ProductSearch | None:
    """`trials` candidates of `space` with the product's seeding; `make_compiler(cache_dir)` is given
    an empty cache, so that the wall time is a cold start's."""
    from tuner.tuning import seed_study

    study = open_study("bench-product", optuna.storages.InMemoryStorage(), seed=0)
    seed_study(study, layer.problem, space, device, PRIOR_PICKS, ceilings)
    with tempfile.TemporaryDirectory(prefix="bench-cold-cache-") as cache:
        started = time.monotonic()
        Tuner(study, layer.problem, space, device, make_compiler(Path(cache)), evaluator, run_id="bench").run(trials)
        wall_s = time.monotonic() - started
    best = ranked(study, layer.problem)
    if not best:
        return None
    kernels = {t.config.compiled for t in recorded_trials(study, layer.problem).values()
               if t.status is not Status.invalid}
    return ProductSearch(best[0].median_us, best[0].config.name, len(kernels), wall_s)


def kept_measurements(folder: Path) -> dict:
    earlier = folder / BENCH_FILE
    return (yaml.safe_load(earlier.read_text()) or {}) if earlier.exists() else {}


def measure_on_gpu(layers: list[Layer], space: SearchSpace, args, console: Console) -> tuple[DeviceFacts, dict]:
    """Steps that need the GPU, all through one worker; earlier layers' figures in bench.yaml are kept."""
    from tuner.compile import Compiler
    from tuner.evaluate import GpuEvaluator, WorkerProcess, query_device_facts

    product_space = load_space(args.product_space) if "search" in args.steps else None  # a typo fails first
    worker = WorkerProcess(timeout_s=120)
    device = device_from_dict(query_device_facts(worker))
    folder = gpu_dir(args.results_dir, device.slug)
    kept = kept_measurements(folder)
    measured = {"device": device.to_dict(), "ceilings": worker.request({"op": "ceilings"}),
                "cudnn": dict(kept.get("cudnn") or {}), "product_search": dict(kept.get("product_search") or {})}
    if "cudnn_version" in kept:
        measured["cudnn_version"] = kept["cudnn_version"]
    ceilings = bench_ceilings(measured)
    evaluator = GpuEvaluator(device.l2_bytes, worker, repeats=LANDSCAPE_REPEATS)

    def save() -> None:  # after every layer, so that a kill keeps what was measured
        atomic_write(folder / BENCH_FILE, yaml.safe_dump(measured, sort_keys=False))

    try:
        if "landscape" in args.steps:
            measure_landscape(layers, space, device, Compiler(device.arch_flag, args.cache_dir, args.jobs),
                              evaluator, folder, console)
        for layer in layers if "cudnn" in args.steps else []:
            answer = worker.request({"op": "cudnn", "problem": problem_to_dict(layer.problem),
                                     "l2_bytes": device.l2_bytes})
            if "cudnn_us" in answer:
                measured["cudnn"][layer.name] = answer["cudnn_us"]
                measured["cudnn_version"] = answer["cudnn_version"]
            else:
                console.print(f"[yellow]cuDNN not timed for {layer.name}: {answer.get('reason')}[/]")
            save()
        tuner_evaluator = GpuEvaluator(device.l2_bytes, worker)  # the tuner's repeats; shares the worker
        for layer in layers if "search" in args.steps else []:
            found = product_search(layer, product_space, device,
                                   lambda cache: Compiler(device.arch_flag, cache, args.jobs), tuner_evaluator,
                                   ceilings, args.product_trials)
            if found is None:
                console.print(f"[yellow]{layer.name}: the tuner found no valid kernel[/]")
                continue
            measured["product_search"][layer.name] = {
                "best_us": round(found.best_us, 3), "kernel": found.kernel, "trials": args.product_trials,
                "kernels_compiled": found.kernels_compiled, "wall_s": round(found.wall_s, 1)}
            console.print(f"  tuner on {args.product_space.name}: {layer.name} {found.best_us:.2f} µs "
                          f"({found.kernel}), {found.kernels_compiled} kernels, {found.wall_s:.0f} s cold")
            save()
    finally:
        evaluator.close()
    save()
    return device, measured


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune.py bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", help=f"comma-separated suite or patterns (default when measuring: "
                                         f"{','.join(SUITE)}; with --replay-only: every layer with a landscape)")
    parser.add_argument("--space-file", type=Path, default=REPO / "search_spaces" / "sm80_landscape.yaml",
                        help="the landscape's search space (default search_spaces/sm80_landscape.yaml)")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="the layer table (default search_spaces/layers.yaml)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where results/<gpu>/landscape/ and bench.yaml are read and written (default results/)")
    parser.add_argument("--gpu", help="with --replay-only: GPU slug under results/ (default: the only one)")
    parser.add_argument("--replay-only", action="store_true",
                        help="no GPU: replay the committed landscape and cuDNN/ceiling numbers")
    parser.add_argument("--steps", type=steps_list, default=STEPS,
                        help=f"GPU steps to run, comma-separated (default {','.join(STEPS)}): 'landscape' times "
                             "every candidate of --space-file, 'cudnn' the baseline, 'search' the tuner on "
                             "--product-space; the table replays whatever is recorded")
    parser.add_argument("--product-space", type=Path, default=REPO / "search_spaces" / "sm80.yaml",
                        help="the space `tune.py` searches, for the 'search' step (default search_spaces/sm80.yaml)")
    parser.add_argument("--product-trials", type=int, default=PRODUCT_TRIALS,
                        help=f"candidates per layer in the 'search' step (default {PRODUCT_TRIALS})")
    parser.add_argument("--measure-only", action="store_true",
                        help="measure on the GPU and write results/<gpu>/, but replay no search (do that "
                             "later with --replay-only, on any machine)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS),
                        help="seeds per budget of the replayed search (default 3)")
    parser.add_argument("--cache-dir", type=Path,
                        help="compile cache of the landscape step (default: the tuner's; the 'search' step "
                             "always compiles into an empty one, to time a cold start)")
    parser.add_argument("--jobs", type=int, help="parallel nvcc jobs")
    return parser


def steps_list(text: str) -> tuple[str, ...]:
    steps = tuple(step.strip() for step in text.split(",") if step.strip())
    unknown = [step for step in steps if step not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(f"unknown step(s) {unknown or text!r}; choose from {','.join(STEPS)}")
    return steps


def recorded_measurements(args) -> tuple[DeviceFacts, dict]:
    from tuner.results import ResultsError

    slugs = [args.gpu] if args.gpu else gpu_slugs(args.results_dir, BENCH_FILE)
    if len(slugs) != 1:
        raise ResultsError(f"--replay-only needs one results/<gpu>/{BENCH_FILE}; found {slugs or 'none'} (pass --gpu)")
    measured = yaml.safe_load((gpu_dir(args.results_dir, slugs[0]) / BENCH_FILE).read_text())
    return device_from_dict(measured["device"]), measured


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    from tuner.cli import matching_layers, positive

    for option, value in (("--seeds", args.seeds), ("--product-trials", args.product_trials), ("--jobs", args.jobs)):
        if value is not None:
            positive(option, value)
    table = load_layers(args.layers_file)

    space = load_space(args.space_file)
    if args.replay_only:
        device, measured = recorded_measurements(args)
        recorded = {p.stem for p in (gpu_dir(args.results_dir, device.slug) / "landscape").glob("*.csv")}
        default = [name for name in table if name in recorded]
    else:
        default = list(SUITE)
    names = args.layers.split(",") if args.layers else default
    layers = [layer for name in names if name.strip() for layer in matching_layers(table, name.strip())]
    if not args.replay_only:
        device, measured = measure_on_gpu(layers, space, args, console)
    if args.measure_only:
        return 0
    ceilings = bench_ceilings(measured)
    console.print(f"{device.name}: measured ceilings {ceilings.matmul_tflops:.0f} TFLOP/s f16 matmul, "
                  f"{ceilings.copy_gbps:.0f} GB/s copy")
    folder = gpu_dir(args.results_dir, device.slug)
    records = {layer.name: read_record(landscape_path(folder, layer.name), layer.problem) for layer in layers}
    searches = {layer.name: search_results(layer, space, device, records[layer.name], ceilings,
                                           seeds=tuple(range(args.seeds))) for layer in layers}
    console.print(bench_table(layers, records, searches, measured, ceilings))
    line = product_summary(layers, records, measured)
    if line:
        console.print(line)
    return 0


def product_summary(layers: list[Layer], records: dict[str, dict[str, Recorded]], measured: dict) -> str | None:
    product = measured.get("product_search") or {}
    ratios, walls = [], []
    for layer in layers:
        if layer.name in product:
            best = exhaustive_best(records[layer.name])
            ratios.append(product[layer.name]["best_us"] / best)
            walls.append(product[layer.name]["wall_s"])
    if not ratios:
        return None
    return (f"GPU tuner over its whole space: best / landscape best within 2 % on {sum(r <= 1.02 for r in ratios)} "
            f"of {len(ratios)} layers, median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}; "
            f"cold-cache wall time per layer median {statistics.median(walls):.0f} s, longest {max(walls):.0f} s")
