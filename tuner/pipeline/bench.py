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
With --replay-only the GPU steps are skipped and the committed landscapes are replayed (CPU)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.cli.choices import matching_layers, positive
from tuner.search.space import chosen_spaces
from tuner.core.errors import UsageError
from tuner.search.costmodel import PRIOR_PICKS, Ceilings, joint_prior_picks
from tuner.core.device import DeviceFacts, device_from_dict
from tuner.core.epilogue import Epilogue
from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.core.problem import ConvProblem, Layer, load_layers, problem_to_dict
from tuner.search.replay import Recorded, ReplayCompiler, ReplayEvaluator, read_record, write_record
from tuner.store.results import (BENCH_FILE, BEST_FILE, SLUG, ResultsError, atomic_write, best_entries, gpu_dir, gpu_slugs,
                           layer_file_stem, read_bench)
from tuner.search.space import (JointSpace, default_space_file, landscape_space_file, layer_space, load_space,
                         entry_config, valid_configs)
from tuner.core.status import Status
from tuner.cli.tables import geometric_mean
from tuner.search.study import StudyRunner, open_study, ranked, recorded_trials

REPO = Path(__file__).resolve().parents[2]
SUITE = ("conv_1", "r50_s2_3x3_b1", "r50_s5_3x3_b1", "r50_s3_1x1_256to128_b32", "r50_s4_3x3_b32", "r50_s5_3x3_b32")
BUDGETS = (16, 32, 64)
SEEDS = (0, 1, 2)
LANDSCAPE_REPEATS = 15
PRODUCT_TRIALS = 32
STEPS = ("landscape", "cudnn", "search", "tuned")
DEFAULT_STEPS = ("landscape", "cudnn", "search")
ABOVE = 1.25  # the bar for a single layer against cuDNN
LANDSCAPE_DIR = "landscape"


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
    family: str
    kernels_compiled: int
    wall_s: float


def exhaustive_best(record: dict[str, Recorded]) -> float:
    """The fastest valid candidate's µs in a landscape (math.inf where none ran)."""
    return min((r.median_us for r in record.values() if r.status is Status.ok), default=math.inf)


def bench_ceilings(measured: dict) -> Ceilings:
    return Ceilings(measured["ceilings"]["matmul_tflops"], measured["ceilings"]["copy_gbps"])


def landscape_path(folder: Path, family: str, layer: str) -> Path:
    return folder / LANDSCAPE_DIR / family / f"{layer_file_stem(layer)}.csv"


def read_landscapes(folder: Path, layer: Layer, families: tuple[str, ...]) -> dict[str, dict[str, Recorded]]:
    """Each family's recorded landscape of the layer, where there is one."""
    return {family: read_record(landscape_path(folder, family, layer.name), layer.problem, family)
            for family in families if landscape_path(folder, family, layer.name).exists()}


def recorded_layer_names(folder: Path) -> set[str]:
    return {path.stem for path in (folder / LANDSCAPE_DIR).glob("*/*.csv")}


def is_gemm_layer(problem: ConvProblem) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped conv: in NHWC exactly a GEMM, which cuBLAS can run."""
    return ((problem.r, problem.s, problem.strides, problem.pads, problem.groups)
            == (1, 1, (1, 1), (0, 0), 1))


def compile_landscape(layers: list[Layer], space: SearchSpace, device: DeviceFacts, compiler,
                      console: Console) -> tuple[dict[str, list], dict]:
    """Every kernel of one family's landscape that the layers need, compiled once (or found in the cache):
    each layer's valid configurations, and each kernel's compile result."""
    per_layer = {layer.name: valid_configs(space, layer.problem, device) for layer in layers}
    kernels = sorted({c.compiled for configs in per_layer.values() for c in configs}, key=lambda c: c.name)
    console.print(f"{space.family} landscape: {len(kernels)} kernels to compile, "
                  f"{sum(len(c) for c in per_layer.values())} candidates on the layers")
    compiled = {r.config.compiled: r for r in compiler.compile_many(kernels)}
    failed = sum(not r.ok for r in compiled.values())
    console.print(f"  {len(compiled) - failed} kernels compiled or cached, {failed} failed")
    return per_layer, compiled


def measure_landscape(layers: list[Layer], space: SearchSpace, device: DeviceFacts, compiler, evaluator,
                      folder: Path, console: Console) -> None:
    """Compile every kernel of one family the suite needs once, then time every candidate on every
    layer the family can run."""
    per_layer, compiled = compile_landscape(layers, space, device, compiler, console)
    family = registry.get(space.family)
    for index, layer in enumerate(layers):
        if not per_layer[layer.name]:
            continue
        rows = []
        for config in per_layer[layer.name]:
            result = compiled[config.compiled]
            if not result.ok:
                rows.append({**config.search_params, "status": Status.compile_failed.value})
                continue
            evaluation = evaluator.evaluate(result.binary, layer.problem, family.launch_args(config, layer.problem),
                                            seed=1000 + index)
            m = evaluation.measurement
            rows.append({**config.search_params, "status": evaluation.status.value,
                         "median_us": m and m.median_us, "p10_us": m and m.p10_us, "p90_us": m and m.p90_us,
                         "error": evaluation.error, "grid_blocks": evaluation.grid_blocks,
                         "blocks_per_sm": evaluation.attributes and evaluation.attributes.max_active_blocks_per_sm})
        write_record(landscape_path(folder, space.family, layer.name), rows,
                     f"Landscape of {escape(layer.name)} on {device.name}: every statically valid candidate of "
                     f"search_spaces/{space.family}_landscape.yaml,\nrecorded by: python tune.py bench "
                     f"(same inputs for every candidate of the layer, {LANDSCAPE_REPEATS} graph replays each)",
                     space.family)
        ok = [r["median_us"] for r in rows if r["status"] == Status.ok.value]
        console.print(f"  {space.family} {escape(layer.name)}: {len(ok)} of {len(rows)} ok, "
                      f"best {min(ok, default=math.nan):.2f} µs")


def replay_search(problem: ConvProblem, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                  budget: int, seed: int, prior: list) -> tuple[float, int]:
    """The tuner with `budget` candidates on the recorded landscapes: best µs found, kernels compiled."""
    from tuner.search.space import joint_params

    study = open_study("replay", optuna.storages.InMemoryStorage(), seed)
    for config in prior:
        study.enqueue_trial(joint_params(config))
    compiler = ReplayCompiler(jobs=8)
    StudyRunner(study, problem, joint, device, compiler, ReplayEvaluator(record), run_id="replay").run(budget)
    best = ranked(study, problem)
    return (best[0].median_us if best else math.inf), len(compiler.kernels)


def landscape_joint(landscapes: dict[str, dict[str, Recorded]], spaces: dict[str, SearchSpace]) -> JointSpace:
    return JointSpace(tuple(spaces[family] for family in sorted(landscapes)))


def merged(landscapes: dict[str, dict[str, Recorded]]) -> dict[str, Recorded]:
    return {name: recorded for record in landscapes.values() for name, recorded in record.items()}


def search_results(layer: Layer, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                   ceilings: Ceilings, budgets=BUDGETS, seeds=SEEDS) -> list[SearchResult]:
    exhaustive = exhaustive_best(record)
    prior = joint_prior_picks(joint, layer.problem, device, PRIOR_PICKS, ceilings)
    results = []
    for with_prior in (False, True):
        for budget in budgets:
            runs = [replay_search(layer.problem, joint, device, record, budget, seed, prior if with_prior else [])
                    for seed in seeds]
            results.append(SearchResult(budget, with_prior, tuple(best / exhaustive for best, _ in runs),
                                        tuple(kernels for _, kernels in runs)))
    return results


def _replay_layer(layer: Layer, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                  ceilings: Ceilings, budgets: tuple[int, ...], seeds: tuple[int, ...]) -> tuple[list[SearchResult], float]:
    started = time.monotonic()
    return search_results(layer, joint, device, record, ceilings, budgets, seeds), time.monotonic() - started


def replay_layers(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]],
                  spaces: dict[str, SearchSpace], device: DeviceFacts, ceilings: Ceilings, budgets: tuple[int, ...],
                  seeds: tuple[int, ...], jobs: int, console: Console) -> dict[str, list[SearchResult]]:
    """The replayed searches of every layer, `jobs` layers at a time (each in a process of its own: a
    layer's replays take from seconds to minutes of one core), saying which finished."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    searches = {}
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_replay_layer, layer, landscape_joint(landscapes[layer.name], spaces), device,
                               merged(landscapes[layer.name]), ceilings, budgets, seeds): layer
                   for layer in layers}
        for done, future in enumerate(as_completed(futures), start=1):
            layer = futures[future]
            searches[layer.name], seconds = future.result()
            console.print(f"replayed {escape(layer.name)} ({done} of {len(layers)}, {seconds:.0f} s)")
    return searches


def _us(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def bench_table(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]],
                searches: dict[str, list[SearchResult]], measured: dict, ceilings: Ceilings,
                tuned: dict[str, float]) -> Table:
    families = sorted({family for per_layer in landscapes.values() for family in per_layer})
    table = Table(title="families vs cuDNN/cuBLAS. <family> µs: best of its landscape; best: best of all families; "
                        "TPE<budget>[+p]: replayed search of the joint landscape, best found / best, median over "
                        "seeds (kernels compiled); +p: seeded by the cost model; GPU tuner: tune.py's search of "
                        "the whole spaces of the families named on the GPU / their landscapes' best (kernels, cold "
                        "wall time); tuned: best.yaml")
    columns = ["layer", *[f"{family}\nµs" for family in families], "best µs"]
    first = next(iter(searches.values()), [])
    columns += [f"TPE{r.budget}" + ("+p" if r.with_prior else "") for r in first]
    columns += ["GPU tuner\n/best", "tuned µs", "cuDNN µs", "best\n/cuDNN", "tuned\n/cuDNN", "cuBLAS\nµs",
                "best\n/cuBLAS", "%peak", "%bw"]
    for column in columns:
        table.add_column(column, justify="left" if column == "layer" else "right", no_wrap=column == "layer")
    product = measured.get("product_search") or {}
    rows = []
    for layer in layers:
        per_family = {family: exhaustive_best(record) for family, record in landscapes[layer.name].items()}
        best = min(per_family.values(), default=math.inf)
        row = [layer.name, *[_us(per_family.get(family)) for family in families], _us(best)]
        row += [f"{r.median_ratio:.3f}\n({statistics.median(r.kernels):.0f})" for r in searches.get(layer.name, [])]
        row += [""] * (len(first) - len(searches.get(layer.name, [])))
        found = product.get(layer.name)
        searched = product_best(found, landscapes[layer.name]) if found else math.inf
        row += [f"{found['best_us'] / searched:.3f}\n({'+'.join(searched_families(found))}, "
                f"{found['kernels_compiled']}, {found['wall_s']:.0f} s)" if math.isfinite(searched) else "-"]
        cudnn = (measured.get("cudnn") or {}).get(layer.name)
        cublas = (measured.get("cublas") or {}).get(layer.name)
        mine = tuned.get(layer.name)
        row += [_us(mine), _us(cudnn), f"{best / cudnn:.2f}" if cudnn and math.isfinite(best) else "-",
                f"{mine / cudnn:.2f}" if cudnn and mine else "-", _us(cublas),
                f"{best / cublas:.2f}" if cublas and math.isfinite(best) else "-"]
        fastest = min(v for v in (best, mine or math.inf) if v)
        row += [f"{100 * layer.problem.flops / (fastest * 1e-6) / (ceilings.matmul_tflops * 1e12):.1f}"
                if math.isfinite(fastest) else "-",
                f"{100 * layer.problem.bytes_moved / (fastest * 1e-6) / (ceilings.copy_gbps * 1e9):.1f}"
                if math.isfinite(fastest) else "-"]
        table.add_row(*row)
        rows.append(row)
    ratio_columns = {index for index, column in enumerate(columns) if "/" in column or column.startswith("TPE")}
    means = []
    for index in range(1, len(columns)):
        values = [float(row[index].split()[0]) for row in rows if index in ratio_columns
                  and re.match(r"[0-9.]+", row[index])]
        means.append(f"{geometric_mean(values):.3f}" if values else "")
    table.add_section()
    table.add_row(f"total: {len(layers)} layers (geomean)", *means)
    return table


def name_batch(layer: str) -> int | None:
    """The batch a layer's name ends with (r50_s4_3x3_b32, vgg16_features_0_b8: the tables' convention),
    or None."""
    match = re.search(r"_b(\d+)$", layer)
    return int(match.group(1)) if match else None


def ratio_line(label: str, pairs: dict[str, float]) -> str:
    """One summary line of ratios per layer (against cuDNN or cuBLAS): geometric means over all layers
    and per batch (largest first, by the name's _b<N>), how many are within 5 %, the worst, and those
    above ABOVE (named when few)."""
    by_batch: dict[int, list[float]] = {}
    for layer, r in pairs.items():
        batch = name_batch(layer)
        if batch is not None:
            by_batch.setdefault(batch, []).append(r)
    worst = max(pairs, key=pairs.get)
    above = sorted(layer for layer, r in pairs.items() if r > ABOVE)
    named = f" ({', '.join(f'{layer} {pairs[layer]:.2f}' for layer in above)})" if 0 < len(above) <= 8 else ""
    batches = "; ".join(f"batch {batch}: {geometric_mean(ratios):.3f} over {len(ratios)}"
                        for batch, ratios in sorted(by_batch.items(), reverse=True))
    return (f"{label}: geometric mean {geometric_mean(list(pairs.values())):.3f} over {len(pairs)} layers"
            f"{f' ({batches})' if batches else ''}; within 5 %: {sum(r <= 1.05 for r in pairs.values())}; "
            f"worst {worst} {pairs[worst]:.2f}; above {ABOVE}: {len(above)}{named}")


def ratio_summary(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]], measured: dict,
                  tuned: dict[str, float]) -> list[str]:
    """Geometric means against cuDNN (all layers, batch 32, batch 1, per family) and against cuBLAS."""
    cudnn = measured.get("cudnn") or {}
    cublas = measured.get("cublas") or {}
    lines = []

    def line(label: str, values: dict[str, float], baseline: dict[str, float], name: str) -> None:
        pairs = {layer: values[layer] / baseline[layer] for layer in values if baseline.get(layer)}
        if pairs:
            lines.append(ratio_line(f"{label} / {name}", pairs))

    families = sorted({family for per_layer in landscapes.values() for family in per_layer})
    best = {layer.name: min(exhaustive_best(r) for r in landscapes[layer.name].values())
            for layer in layers if landscapes[layer.name]}
    best = {name: us for name, us in best.items() if math.isfinite(us)}
    if tuned:
        line("tuned (best.yaml)", {layer.name: tuned[layer.name] for layer in layers if layer.name in tuned},
             cudnn, "cuDNN")
    line("best of all landscapes", best, cudnn, "cuDNN")
    for family in families:
        mine = {layer.name: exhaustive_best(landscapes[layer.name][family]) for layer in layers
                if family in landscapes[layer.name]}
        line(f"best {family}", {k: v for k, v in mine.items() if math.isfinite(v)}, cudnn, "cuDNN")
    gemm = {layer.name for layer in layers if is_gemm_layer(layer.problem)}
    if tuned:
        line("tuned 1x1 stride-1", {k: v for k, v in tuned.items() if k in gemm}, cublas, "cuBLAS")
    line("best 1x1 stride-1", {k: v for k, v in best.items() if k in gemm}, cublas, "cuBLAS")
    return lines


def product_search(layer: Layer, joint: JointSpace, device: DeviceFacts, make_compiler, evaluator,
                   ceilings: Ceilings, trials: int) -> ProductSearch | None:
    """`trials` candidates of the joint space with the product's seeding; `make_compiler(cache_dir)`
    is given an empty cache, so that the wall time is a cold start's."""
    from tuner.pipeline.tuning import seed_study

    study = open_study("bench-product", optuna.storages.InMemoryStorage(), seed=0)
    seed_study(study, layer.problem, joint, device, PRIOR_PICKS, ceilings)
    with tempfile.TemporaryDirectory(prefix="bench-cold-cache-") as cache:
        started = time.monotonic()
        StudyRunner(study, layer.problem, joint, device, make_compiler(Path(cache)), evaluator, run_id="bench").run(trials)
        wall_s = time.monotonic() - started
    best = ranked(study, layer.problem)
    if not best:
        return None
    kernels = {t.config.compiled for t in recorded_trials(study, layer.problem).values()
               if t.status is not Status.invalid}
    return ProductSearch(best[0].median_us, best[0].config.name, best[0].config.family, len(kernels), wall_s)


def time_baselines(worker, layer: Layer, device: DeviceFacts, measured: dict, console: Console) -> dict:
    """cuDNN (the bare conv), cuBLAS on a 1x1 stride-1 layer, and for a layer with an epilogue PyTorch
    eager and torch.compile running the whole layer, timed by the worker and recorded in `measured`;
    returns {"cudnn_us": ..., "cublas_us": ..., "eager_us": ..., "compiled_us": ...} with what was timed."""
    timed = {}
    answer = worker.request({"op": "cudnn", "problem": problem_to_dict(layer.problem), "l2_bytes": device.l2_bytes})
    if "cudnn_us" in answer:
        measured["cudnn"][layer.name] = timed["cudnn_us"] = answer["cudnn_us"]
        measured["cudnn_version"] = answer["cudnn_version"]
    else:
        console.print(f"[yellow]cuDNN not timed for {escape(layer.name)}: {answer.get('reason')}[/]")
    if is_gemm_layer(layer.problem):
        answer = worker.request({"op": "cublas", "problem": problem_to_dict(layer.problem),
                                 "l2_bytes": device.l2_bytes})
        if "cublas_us" in answer:
            measured["cublas"][layer.name] = timed["cublas_us"] = answer["cublas_us"]
    if layer.problem.epilogue.fused:  # the layer as PyTorch runs it: eager, and torch.compile'd
        for compiled, key in ((False, "eager_us"), (True, "compiled_us")):
            answer = worker.request({"op": "pytorch", "problem": problem_to_dict(layer.problem),
                                     "l2_bytes": device.l2_bytes, "compiled": compiled})
            if key in answer:
                measured.setdefault(key.removesuffix("_us"), {})[layer.name] = timed[key] = answer[key]
            else:
                console.print(f"[yellow]{key.removesuffix('_us')} PyTorch not timed for {escape(layer.name)}: "
                              f"{answer.get('reason')}[/]")
    return timed


def measure_tuned(layers: list[Layer], folder: Path, device: DeviceFacts, compiler, evaluator, worker,
                  measured: dict, console: Console, save) -> None:
    """best.yaml's kernel of each layer re-timed with cuDNN (and cuBLAS) right after it, in one run:
    the figures the goals are judged by, free of the drift between runs on different days."""
    entries = best_entries(folder)
    configs = {}
    for layer in layers:
        entry = entries.get(layer.name)
        if entry is None:
            console.print(f"[yellow]{escape(layer.name)}: no best.yaml entry to time[/]")
            continue
        try:
            configs[layer.name] = entry_config(entry, layer.name, layer.problem)
        except ResultsError as error:
            console.print(f"[yellow]{error}: not timed[/]")
    # A layer with an epilogue also times its kernel built without one, on the bare conv: what the
    # epilogue costs that kernel.
    fused_layers = {layer.name for layer in layers if layer.problem.epilogue.fused}
    bare = {name: dataclasses.replace(config, fusion=Epilogue()) for name, config in configs.items()
            if name in fused_layers}
    kernels = sorted({config.compiled for config in [*configs.values(), *bare.values()]}, key=lambda c: c.name)
    console.print(f"tuned: {len(configs)} layers' best.yaml kernels ({len(kernels)} to compile), each timed "
                  "beside cuDNN (and PyTorch where the layer has an epilogue)")
    compiled = {r.config.compiled: r for r in compiler.compile_many(kernels)}

    def timed(config, problem: ConvProblem, seed: int) -> tuple[float | None, Status]:
        """The kernel's median µs on the problem (None unless it compiled and validated), and its status."""
        result = compiled[config.compiled]
        if not result.ok:
            return None, Status.compile_failed
        launch = registry.get(config.family).launch_args(config, problem)
        evaluation = evaluator.evaluate(result.binary, problem, launch, seed=seed)
        ok = evaluation.status is Status.ok
        return (round(evaluation.measurement.median_us, 3) if ok else None), evaluation.status

    one_run = measured.setdefault("one_run", {})
    for index, layer in enumerate(layers):
        config = configs.get(layer.name)
        if config is None:
            continue
        row = {"kernel": config.name, "family": config.family}
        if layer.problem.epilogue.fused:
            row["epilogue"] = layer.problem.epilogue.key
        us, status = timed(config, layer.problem, 2000 + index)
        if us is not None:
            row["tuned_us"] = us
        else:
            row["status"] = status.value
        if layer.name in bare:
            us, _ = timed(bare[layer.name], dataclasses.replace(layer.problem, epilogue=Epilogue()), 2000 + index)
            if us is not None:
                row["bare_kernel_us"] = us
        row.update(time_baselines(worker, layer, device, measured, console))
        one_run[layer.name] = row
        ratio = row.get("tuned_us", math.nan) / row.get("cudnn_us", math.nan)
        fused = (f", PyTorch eager {_us(row.get('eager_us'))} µs, torch.compile {_us(row.get('compiled_us'))} µs"
                 if layer.problem.epilogue.fused else "")
        console.print(f"  {escape(layer.name)}: tuned {_us(row.get('tuned_us'))} µs, cuDNN {_us(row.get('cudnn_us'))} µs "
                      f"({ratio:.2f}){fused}")
        save()


FUSED_NUMBERS = ("tuned", "PyTorch eager", "torch.compile", "bare kernel", "tuned/eager", "tuned/compile",
                 "tuned/bare")


def fused_table(measured: dict, only: set[str] | None = None) -> Table | None:
    """The one run's layers with an epilogue (of those `only` names, where given): the tuned fused kernel
    against the layer as PyTorch runs it (eager, torch.compile) and against the same kernel built without
    the epilogue."""
    rows = {name: row for name, row in (measured.get("one_run") or {}).items()
            if row.get("epilogue") and (only is None or name in only)}
    if not rows:
        return None
    table = Table(title="fused layers, one run (µs, graph replay, inputs rotated past L2)")
    for column in ("layer", "epilogue", "family", "tuned", "PyTorch eager", "torch.compile", "bare kernel",
                   "tuned/eager", "tuned/compile", "tuned/bare"):
        table.add_column(column, justify="left" if column in ("layer", "epilogue", "family") else "right")

    def ratio(row: dict, baseline: str) -> str:
        return f"{row['tuned_us'] / row[baseline]:.2f}" if row.get("tuned_us") and row.get(baseline) else "-"
    for name, row in rows.items():
        table.add_row(escape(name), row["epilogue"], row.get("family", "-"), _us(row.get("tuned_us")), _us(row.get("eager_us")),
                      _us(row.get("compiled_us")), _us(row.get("bare_kernel_us")), ratio(row, "eager_us"),
                      ratio(row, "compiled_us"), ratio(row, "bare_kernel_us"))

    def mean(baseline: str) -> str:
        ratios = [row["tuned_us"] / row[baseline] for row in rows.values() if row.get("tuned_us") and row.get(baseline)]
        return f"{geometric_mean(ratios):.3f}" if ratios else "-"
    table.add_section()
    table.add_row(f"total: {len(rows)} layers", "", "", "", "", "", "geomean", mean("eager_us"), mean("compiled_us"),
                  mean("bare_kernel_us"))
    return table


def one_run_summary(measured: dict, only: set[str] | None = None) -> list[str]:
    """The 'tuned' step's figures: best.yaml's kernels against cuDNN and cuBLAS timed in the same run (bare
    convolutions), and against PyTorch eager and torch.compile (layers with an epilogue); of every
    layer bench.yaml's one run holds, or of the layers `only` names (labelled so)."""
    rows = {name: row for name, row in (measured.get("one_run") or {}).items() if only is None or name in only}
    which = "" if only is None else f" (the {len(rows)} layers of this call)"
    lines = []
    for baseline, name, fused in (("cudnn_us", "cuDNN", False), ("cublas_us", "cuBLAS", False),
                                  ("eager_us", "PyTorch eager", True), ("compiled_us", "torch.compile", True),
                                  ("bare_kernel_us", "the same kernel without its epilogue", True)):
        pairs = {layer: row["tuned_us"] / row[baseline] for layer, row in rows.items()
                 if row.get("tuned_us") and row.get(baseline) and bool(row.get("epilogue")) == fused}
        if pairs:
            lines.append(ratio_line(f"one run{which}, best.yaml's kernels / {name} timed beside them", pairs))
    return lines


def kept_measurements(folder: Path) -> dict:
    return read_bench(folder)


def compile_target(results_root: Path, name: str) -> DeviceFacts:
    """The GPU that `--compile-only --gpu NAME` compiles for, none need be present: the facts measured on it
    (results/<NAME>/bench.yaml), else the GPU table's (tuner/core/gpus.py: h100, nvidia-h200, ...), else what
    results/<NAME>/best.yaml records of it."""
    from tuner.core import gpus
    from tuner.pipeline.export import best_device
    from tuner.store.results import read_best, results_slug

    slug = results_slug(results_root, name, BENCH_FILE)
    folder = results_root / slug
    if SLUG.fullmatch(slug) and "device" in read_bench(folder):
        return device_from_dict(read_bench(folder)["device"])
    try:
        return gpus.device_facts(gpus.lookup(name))
    except gpus.UnknownGpu:
        pass
    if SLUG.fullmatch(name) and (results_root / name / BEST_FILE).is_file():
        return best_device(read_best(results_root / name))
    raise UsageError(f"--gpu {name!r}: no results/<gpu>/ folder of that name with a bench.yaml or best.yaml "
                     f"({', '.join(gpu_slugs(results_root)) or 'none'}) and no GPU of that name in the table "
                     f"({gpus.known_names()})")


def compile_landscapes(layers: list[Layer], landscape_spaces: dict[str, SearchSpace], device: DeviceFacts, args,
                       console: Console) -> None:
    """Every kernel of the landscapes of the families `device` can run, compiled into the cache; nothing timed."""
    from tuner.build.compile import Compiler

    console.print(f"compiling for {device.name} (sm_{device.cc})")
    for space in landscape_spaces.values():
        if registry.get(space.family).device_problem(device) is None:
            compile_landscape(layers, space, device, Compiler(device, args.cache_dir, args.jobs), console)


def measure_on_gpu(layers: list[Layer], landscape_spaces: dict[str, SearchSpace],
                   product_spaces: tuple[SearchSpace, ...], args, console: Console) -> tuple[DeviceFacts, dict]:
    """Steps that need the GPU, all through one worker; earlier layers' figures in bench.yaml are kept."""
    from tuner.build.compile import Compiler
    from tuner.measure.evaluate import GpuEvaluator, WorkerProcess, query_device_facts

    worker = WorkerProcess(timeout_s=120)
    device = device_from_dict(query_device_facts(worker))
    folder = gpu_dir(args.results_dir, device.slug)
    kept = kept_measurements(folder)
    measured = {"device": device.to_dict(), "ceilings": worker.request({"op": "ceilings"}),
                "cudnn": dict(kept.get("cudnn") or {}), "cublas": dict(kept.get("cublas") or {}),
                "product_search": dict(kept.get("product_search") or {}),
                "one_run": dict(kept.get("one_run") or {})}
    if "cudnn_version" in kept:
        measured["cudnn_version"] = kept["cudnn_version"]
    ceilings = bench_ceilings(measured)
    evaluator = GpuEvaluator(device.l2_bytes, worker, repeats=LANDSCAPE_REPEATS)

    def save() -> None:  # after every layer, so that a kill keeps what was measured
        atomic_write(folder / BENCH_FILE, yaml.safe_dump(measured, sort_keys=False))

    try:
        for space in landscape_spaces.values() if "landscape" in args.steps else ():
            if registry.get(space.family).device_problem(device) is None:
                measure_landscape(layers, space, device, Compiler(device, args.cache_dir, args.jobs),
                                  evaluator, folder, console)
        for layer in layers if "cudnn" in args.steps else []:
            time_baselines(worker, layer, device, measured, console)
            save()
        tuner_evaluator = GpuEvaluator(device.l2_bytes, worker)  # the tuner's repeats; shares the worker
        runnable = tuple(s for s in product_spaces if registry.get(s.family).device_problem(device) is None)
        for layer in layers if "search" in args.steps else []:
            found = product_search(layer, layer_space(runnable, layer.problem, device), device,
                                   lambda cache: Compiler(device, cache, args.jobs), tuner_evaluator,
                                   ceilings, args.product_trials)
            if found is None:
                console.print(f"[yellow]{escape(layer.name)}: the tuner found no valid kernel[/]")
                continue
            measured["product_search"][layer.name] = {
                "best_us": round(found.best_us, 3), "kernel": found.kernel, "family": found.family,
                "families": list(layer_space(runnable, layer.problem, device).families),
                "trials": args.product_trials, "kernels_compiled": found.kernels_compiled,
                "wall_s": round(found.wall_s, 1)}
            console.print(f"  tuner on {'+'.join(s.family for s in runnable)}: {escape(layer.name)} {found.best_us:.2f} µs "
                          f"({found.kernel}), {found.kernels_compiled} kernels, {found.wall_s:.0f} s cold")
            save()
        if "tuned" in args.steps:
            measure_tuned(layers, folder, device, Compiler(device, args.cache_dir, args.jobs), tuner_evaluator,
                          worker, measured, console, save)
    finally:
        evaluator.close()
    save()
    return device, measured


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
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout in place of the "
                                                            "tables: each layer's figures, the summary lines and "
                                                            "the one run's rows (messages go to stderr)")
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


def recorded_measurements(args) -> tuple[DeviceFacts, dict]:
    slugs = [args.gpu] if args.gpu else gpu_slugs(args.results_dir, BENCH_FILE)
    if len(slugs) != 1:
        raise ResultsError(f"--replay-only needs one results/<gpu>/{BENCH_FILE}; found {slugs or 'none'} (pass --gpu)")
    folder = gpu_dir(args.results_dir, slugs[0])
    measured = read_bench(folder)
    if "device" not in measured:
        raise ResultsError(f"{folder / BENCH_FILE} not found or holds no device: measure with `tune.py bench` "
                           "on that GPU first")
    return device_from_dict(measured["device"]), measured


def landscape_spaces(family_text: str | None, space_files: list[Path] | None) -> dict[str, SearchSpace]:
    names = family_text or ",".join(registry.names())
    given = {load_space(path).family: path for path in space_files or []}
    files = [given.get(name.strip(), landscape_space_file(name.strip())) for name in names.split(",") if name.strip()]
    return {space.family: space for space in chosen_spaces(family_text, files)}


def default_layers(table: dict[str, Layer]) -> list[str]:
    """What the GPU steps measure without --layers: SUITE, the landscapes' layers, from the layer table
    that holds them; from another table (--layers-file search_spaces/suite.yaml) every layer of it."""
    return list(SUITE) if all(name in table for name in SUITE) else list(table)


def tuned_times(folder: Path) -> dict[str, float]:
    if not (folder / BEST_FILE).exists():
        return {}
    return {name: entry.runtime_us for name, entry in best_entries(folder).items()}


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    if args.summary:
        return write_summary(args, console)
    for option, value in (("--seeds", args.seeds), ("--product-trials", args.product_trials), ("--jobs", args.jobs)):
        if value is not None:
            positive(option, value)
    table = load_layers(args.layers_file)
    spaces = landscape_spaces(args.family, args.space_file)  # a typo fails before any GPU work
    if args.compile_only and (args.replay_only or args.measure_only or "landscape" not in args.steps):
        raise UsageError("--compile-only compiles the landscapes and stops: it takes no --replay-only or "
                         "--measure-only, and no --steps without landscape")
    if args.compile_only and args.json:
        raise UsageError("--compile-only fills the compile cache and reports nothing: leave out --json")
    if args.gpu is not None and not (args.replay_only or args.compile_only):
        raise UsageError("--gpu goes with --replay-only, --summary or --compile-only: measuring takes this host's GPU")
    if args.replay_only:
        device, measured = recorded_measurements(args)
        recorded = recorded_layer_names(gpu_dir(args.results_dir, device.slug))
        default = [name for name in table if name in recorded]
    else:
        default = default_layers(table)
    names = args.layers.split(",") if args.layers else default
    layers = list({layer.name: layer for name in names if name.strip()
                   for layer in matching_layers(table, name.strip())}.values())
    if args.compile_only:
        from tuner.measure.evaluate import local_device

        device = compile_target(args.results_dir, args.gpu) if args.gpu else local_device()
        compile_landscapes(layers, spaces, device, args, console)
        return 0
    if not args.replay_only:
        product = tuple(load_space(default_space_file(family)) for family in spaces)
        device, measured = measure_on_gpu(layers, spaces, product, args, console)
        if "tuned" in args.steps and not args.json:
            print_one_run(measured, console)
            chosen = {layer.name for layer in layers}
            if set(measured.get("one_run") or {}) - chosen:  # earlier runs' layers too: these alone as well
                for line in one_run_summary(measured, chosen):
                    console.print(line)
    if args.measure_only:
        if args.json:
            from tuner.cli.tables import json_document

            print(json_document({"device": device.name, "one_run": one_run_rows(measured),
                                 "one_run_summary": one_run_summary(measured)}))
        return 0
    ceilings = bench_ceilings(measured)
    console.print(f"{device.name}: measured ceilings {ceilings.matmul_tflops:.0f} TFLOP/s f16 matmul, "
                  f"{ceilings.copy_gbps:.0f} GB/s copy")
    folder = gpu_dir(args.results_dir, device.slug)
    landscapes = {layer.name: read_landscapes(folder, layer, tuple(spaces)) for layer in layers}
    searches = replay_layers([layer for layer in layers if landscapes[layer.name]], landscapes, spaces, device,
                             ceilings, args.budgets, tuple(range(args.seeds)), args.jobs or os.cpu_count() or 1,
                             console)
    tuned = tuned_times(folder)
    chosen = {layer.name for layer in layers} if args.layers else None
    summary = search_summary(searches) + ratio_summary(layers, landscapes, measured, tuned)
    product_line = product_summary(layers, landscapes, measured)
    if args.json:
        from tuner.cli.tables import json_document

        print(json_document({"device": device.name, "ceilings": measured.get("ceilings"),
                             "layers": bench_rows(layers, landscapes, searches, measured, tuned),
                             "summary": summary + ([product_line] if product_line else []),
                             "one_run": one_run_rows(measured, chosen),
                             "one_run_summary": one_run_summary(measured, chosen)}))
        return 0
    from tuner.cli.tables import print_table

    table = bench_table(layers, landscapes, searches, measured, ceilings, tuned)
    print_table(console, table, [str(column.header) for column in table.columns[1:]])
    for line in summary:
        console.print(line)
    print_one_run(measured, console, chosen)
    if product_line:
        console.print(product_line)
    return 0


def bench_rows(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]],
               searches: dict[str, list[SearchResult]], measured: dict, tuned: dict[str, float]) -> list[dict]:
    """What the bench table shows of each layer, as `bench --json` gives it (µs; ratios to the landscapes' best)."""
    rows = []
    for layer in layers:
        per_family = {family: exhaustive_best(record) for family, record in landscapes[layer.name].items()}
        rows.append({"layer": layer.name, "landscape_best_us": per_family,
                     "best_us": min(per_family.values(), default=math.inf),
                     "replayed_search": [{"budget": r.budget, "with_prior": r.with_prior, "ratios": list(r.ratios),
                                          "kernels": list(r.kernels), "median_ratio": r.median_ratio}
                                         for r in searches.get(layer.name, [])],
                     "gpu_tuner": (measured.get("product_search") or {}).get(layer.name),
                     "tuned_us": tuned.get(layer.name), "cudnn_us": (measured.get("cudnn") or {}).get(layer.name),
                     "cublas_us": (measured.get("cublas") or {}).get(layer.name)})
    return rows


def one_run_rows(measured: dict, only: set[str] | None = None) -> dict[str, dict]:
    return {name: row for name, row in (measured.get("one_run") or {}).items() if only is None or name in only}


def write_summary(args, console: Console) -> int:
    from tuner.pipeline import results_summary as summary
    gpus = [summary.gpu_summary(args.results_dir, slug)
            for slug in summary.summary_slugs(args.results_dir, [args.gpu] if args.gpu else None)]
    atomic_write(args.summary_file, summary.document(gpus))
    console.print(f"wrote {args.summary_file}")
    short = summary.short_form(gpus)
    readme = args.readme.read_text() if args.readme.is_file() else ""
    updated = summary.with_readme_block(readme, short)
    if updated is not None and updated != readme:
        atomic_write(args.readme, updated)
        console.print(f"wrote the results lines of {args.readme}")
    if args.json:  # the document owns stdout (the CLI's console writes to stderr under --json)
        from tuner.cli.tables import json_document

        print(json_document({"summary_file": str(args.summary_file),
                             "readme": str(args.readme) if updated is not None else None,
                             "gpus": [{"gpu": gpu.slug, "name": gpu.name, "best": gpu.best_line,
                                       "lines": list(gpu.lines)} for gpu in gpus]}))
        return 0
    console.print(short, markup=False, highlight=False, soft_wrap=True)
    return 0


def print_one_run(measured: dict, console: Console, only: set[str] | None = None) -> None:
    from tuner.cli.tables import print_table

    table = fused_table(measured, only)
    if table is not None:
        print_table(console, table, FUSED_NUMBERS)
    for line in one_run_summary(measured, only):
        console.print(line)


def searched_families(found: dict) -> tuple[str, ...]:
    """The families a recorded 'search' step searched (figures recorded before there were families:
    the sm80 family's space alone)."""
    return tuple(found.get("families") or ("sm80",))


def product_best(found: dict, landscapes: dict[str, dict[str, Recorded]]) -> float:
    """The landscapes' best among the families the recorded search searched: what it is compared with."""
    return min((exhaustive_best(landscapes[f]) for f in searched_families(found) if f in landscapes), default=math.inf)


def product_summary(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]],
                    measured: dict) -> str | None:
    product = measured.get("product_search") or {}
    by_families: dict[tuple[str, ...], tuple[list, list]] = {}
    for layer in layers:
        found = product.get(layer.name)
        if found and landscapes.get(layer.name):
            best = product_best(found, landscapes[layer.name])
            if math.isfinite(best):
                ratios, walls = by_families.setdefault(searched_families(found), ([], []))
                ratios.append(found["best_us"] / best)
                walls.append(found["wall_s"])
    return "\n".join(
        f"GPU tuner over the whole space of {'+'.join(families)}: best / those families' landscape best within 2 % "
        f"on {sum(r <= 1.02 for r in ratios)} of {len(ratios)} layers, median {statistics.median(ratios):.3f}, "
        f"worst {max(ratios):.3f}; cold-cache wall time per layer median {statistics.median(walls):.0f} s, "
        f"longest {max(walls):.0f} s" for families, (ratios, walls) in sorted(by_families.items())) or None


def search_summary(searches: dict[str, list[SearchResult]]) -> list[str]:
    """Per budget, with and without the prior: layers whose replayed search got within 3 % of the joint
    landscape's best (median over seeds), and the median ratio."""
    lines = []
    results = [result for per_layer in searches.values() for result in per_layer]
    for budget, with_prior in sorted({(r.budget, r.with_prior) for r in results}):
        ratios = [r.median_ratio for r in results if (r.budget, r.with_prior) == (budget, with_prior)]
        lines.append(f"replayed TPE{budget}{'+prior' if with_prior else ''} on the joint landscapes: within 3 % of "
                     f"the best on {sum(r <= 1.03 for r in ratios)} of {len(ratios)} layers, median "
                     f"{statistics.median(ratios):.3f}, worst {max(ratios):.3f}")
    return lines
