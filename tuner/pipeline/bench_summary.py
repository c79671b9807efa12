"""The figures `tune.py bench` shows of what it measured and replayed: each layer's bests against cuDNN
and cuBLAS, the replayed searches' ratios, the GPU tuner against the landscapes, and the one run's ratios
(geometric means over the layers and per batch, how many are close, the worst); the command words them."""
from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.core.layers import Layer
from tuner.core.stats import geometric_mean
from tuner.pipeline.landscape import exhaustive_best
from tuner.pipeline.one_run import is_gemm_layer
from tuner.pipeline.replayed_search import SearchResult
from tuner.search.costmodel import Ceilings
from tuner.store.bench_record import BenchRecord, GpuTunerRun, OneRunLayer
from tuner.store.best import best_entries
from tuner.store.results import BEST_FILE
from tuner.store.schema import Recorded

ABOVE = 1.25   # the bar for a single layer against cuDNN
WITHIN = 1.05  # a layer this close to the baseline counts as level with it
REPLAY_WITHIN = 1.03
GPU_TUNER_WITHIN = 1.02
# The one run's baselines: (figure, name, compared on the layers with an epilogue rather than the bare ones).
ONE_RUN_BASELINES = (("cudnn_us", "cuDNN", False), ("cublas_us", "cuBLAS", False),
                     ("eager_us", "PyTorch eager", True), ("compiled_us", "torch.compile", True),
                     ("bare_kernel_us", "the same kernel without its epilogue", True),
                     ("relu_kernel_us", "the same kernel with ReLU for its activation", True))
Landscapes = dict[str, dict[str, dict[str, Recorded]]]  # layer -> family -> kernel -> recorded


def name_batch(layer: str) -> int | None:
    """The batch a layer's name ends with (r50_s4_3x3_b32, vgg16_features_0_b8: the tables' convention),
    or None."""
    match = re.search(r"_b(\d+)$", layer)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class RatioStats:
    """Ratios per layer against a baseline: geometric means (all, per batch), how many are close, the worst,
    and the layers above ABOVE."""
    layers: int
    mean: float
    by_batch: tuple[tuple[int, float, int], ...]  # (batch, geometric mean, layers), largest batch first
    worst_layer: str
    worst: float
    within: int                             # layers at most WITHIN
    above: tuple[tuple[str, float], ...]    # (layer, ratio) over ABOVE, by name


def ratio_stats(ratios: dict[str, float], batches: Mapping[str, int | None]) -> RatioStats | None:
    """The stats of ratios per layer, each layer's batch from `batches` (a layer without one counts in the
    overall mean only); None where there are no ratios."""
    if not ratios:
        return None
    by_batch: dict[int, list[float]] = {}
    for layer, ratio in ratios.items():
        if batches.get(layer):
            by_batch.setdefault(batches[layer], []).append(ratio)
    worst = max(ratios, key=ratios.get)
    return RatioStats(len(ratios), geometric_mean(ratios.values()),
                      tuple((batch, geometric_mean(values), len(values))
                            for batch, values in sorted(by_batch.items(), reverse=True)),
                      worst, ratios[worst], sum(r <= WITHIN for r in ratios.values()),
                      tuple((layer, ratios[layer]) for layer in sorted(ratios) if ratios[layer] > ABOVE))


def named_ratio_stats(ratios: dict[str, float]) -> RatioStats | None:
    """ratio_stats with each layer's batch from its name."""
    return ratio_stats(ratios, {layer: name_batch(layer) for layer in ratios})


def tuned_times(folder: Path) -> dict[str, float]:
    """best.yaml's µs per layer ({} without a best.yaml)."""
    if not (folder / BEST_FILE).exists():
        return {}
    return {name: entry.runtime_us for name, entry in best_entries(folder).items()}


def product_best(found: GpuTunerRun, landscapes: dict[str, dict[str, Recorded]]) -> float:
    """The landscapes' best among the families the recorded search searched: what it is compared with."""
    return min((exhaustive_best(landscapes[f]) for f in found.searched_families if f in landscapes), default=math.inf)


@dataclass(frozen=True)
class LayerFigures:
    """What bench shows of one layer (µs; None or inf where there is none)."""
    layer: Layer
    landscape_best_us: dict[str, float]  # each family's landscape best
    best_us: float                       # the best of all landscapes
    searches: tuple[SearchResult, ...]
    gpu_tuner: GpuTunerRun | None
    gpu_tuner_best_us: float             # the landscapes' best of the families the GPU tuner searched
    tuned_us: float | None
    cudnn_us: float | None
    cublas_us: float | None

    def shares(self, ceilings: Ceilings) -> tuple[float, float] | None:
        """The fastest kernel's share (%) of the matrix ceiling and of the copy ceiling (None: nothing ran)."""
        fastest = min(v for v in (self.best_us, self.tuned_us or math.inf) if v)
        if not math.isfinite(fastest):
            return None
        problem = self.layer.problem
        return (100 * problem.flops / (fastest * 1e-6) / (ceilings.matmul_tflops * 1e12),
                100 * problem.bytes_moved / (fastest * 1e-6) / (ceilings.copy_gbps * 1e9))


def layer_figures(layers: list[Layer], landscapes: Landscapes, searches: dict[str, list[SearchResult]],
                  record: BenchRecord, tuned: dict[str, float]) -> list[LayerFigures]:
    figures = []
    for layer in layers:
        per_family = {family: exhaustive_best(found) for family, found in landscapes[layer.name].items()}
        gpu_tuner = record.product_search.get(layer.name)
        figures.append(LayerFigures(
            layer, per_family, min(per_family.values(), default=math.inf), tuple(searches.get(layer.name, [])),
            gpu_tuner, product_best(gpu_tuner, landscapes[layer.name]) if gpu_tuner else math.inf,
            tuned.get(layer.name), record.cudnn.get(layer.name), record.cublas.get(layer.name)))
    return figures


@dataclass(frozen=True)
class Comparison:
    """`subject` / `baseline` over the layers that have both."""
    subject: str
    baseline: str
    stats: RatioStats


def ratio_summary(layers: list[Layer], landscapes: Landscapes, record: BenchRecord,
                  tuned: dict[str, float]) -> list[Comparison]:
    """Against cuDNN: best.yaml, the best of all landscapes and of each family's; against cuBLAS on the 1x1
    stride-1 layers: best.yaml and the landscapes' best."""
    comparisons = []

    def compare(subject: str, values: dict[str, float], baseline: dict[str, float], name: str) -> None:
        stats = named_ratio_stats({layer: values[layer] / baseline[layer] for layer in values if baseline.get(layer)})
        if stats:
            comparisons.append(Comparison(subject, name, stats))

    families = sorted({family for per_layer in landscapes.values() for family in per_layer})
    best = {layer.name: min(exhaustive_best(r) for r in landscapes[layer.name].values())
            for layer in layers if landscapes[layer.name]}
    best = {name: us for name, us in best.items() if math.isfinite(us)}
    if tuned:
        compare("tuned (best.yaml)", {layer.name: tuned[layer.name] for layer in layers if layer.name in tuned},
                record.cudnn, "cuDNN")
    compare("best of all landscapes", best, record.cudnn, "cuDNN")
    for family in families:
        mine = {layer.name: exhaustive_best(landscapes[layer.name][family]) for layer in layers
                if family in landscapes[layer.name]}
        compare(f"best {family}", {k: v for k, v in mine.items() if math.isfinite(v)}, record.cudnn, "cuDNN")
    gemm = {layer.name for layer in layers if is_gemm_layer(layer.problem)}
    if tuned:
        compare("tuned 1x1 stride-1", {k: v for k, v in tuned.items() if k in gemm}, record.cublas, "cuBLAS")
    compare("best 1x1 stride-1", {k: v for k, v in best.items() if k in gemm}, record.cublas, "cuBLAS")
    return comparisons


@dataclass(frozen=True)
class SearchStats:
    """One budget of the replayed search, with or without the prior, over the layers (median over seeds)."""
    budget: int
    with_prior: bool
    layers: int
    within: int   # layers within REPLAY_WITHIN of the joint landscape's best
    median: float
    worst: float


def search_summary(searches: dict[str, list[SearchResult]]) -> list[SearchStats]:
    results = [result for per_layer in searches.values() for result in per_layer]
    summary = []
    for budget, with_prior in sorted({(r.budget, r.with_prior) for r in results}):
        ratios = [r.median_ratio for r in results if (r.budget, r.with_prior) == (budget, with_prior)]
        summary.append(SearchStats(budget, with_prior, len(ratios), sum(r <= REPLAY_WITHIN for r in ratios),
                                   statistics.median(ratios), max(ratios)))
    return summary


@dataclass(frozen=True)
class GpuTunerStats:
    """The GPU tuner over the whole spaces of some families against those families' landscape best."""
    families: tuple[str, ...]
    layers: int
    within: int  # layers within GPU_TUNER_WITHIN
    median: float
    worst: float
    median_wall_s: float
    longest_wall_s: float


def product_summary(layers: list[Layer], landscapes: Landscapes, record: BenchRecord) -> list[GpuTunerStats]:
    by_families: dict[tuple[str, ...], tuple[list, list]] = {}
    for layer in layers:
        found = record.product_search.get(layer.name)
        if found and landscapes.get(layer.name):
            best = product_best(found, landscapes[layer.name])
            if math.isfinite(best):
                ratios, walls = by_families.setdefault(found.searched_families, ([], []))
                ratios.append(found.best_us / best)
                walls.append(found.wall_s)
    return [GpuTunerStats(families, len(ratios), sum(r <= GPU_TUNER_WITHIN for r in ratios), statistics.median(ratios),
                          max(ratios), statistics.median(walls), max(walls))
            for families, (ratios, walls) in sorted(by_families.items())]


def one_run_layers(record: BenchRecord, only: set[str] | None = None) -> dict[str, OneRunLayer]:
    """The one run's layers, or those of them `only` names."""
    return {name: row for name, row in record.one_run.items() if only is None or name in only}


def one_run_summary(record: BenchRecord, only: set[str] | None = None) -> list[tuple[str, RatioStats]]:
    """best.yaml's kernels against each library timed in the same run ((its name, stats)): the bare convolutions
    against cuDNN and cuBLAS, the layers with an epilogue against PyTorch and their kernel built bare."""
    rows = one_run_layers(record, only)
    summary = []
    for figure, name, fused in ONE_RUN_BASELINES:
        stats = named_ratio_stats({layer: row.tuned_us / row.us(figure) for layer, row in rows.items()
                                   if row.tuned_us and row.us(figure) and bool(row.epilogue) == fused})
        if stats:
            summary.append((name, stats))
    return summary
