"""What the tuning is worth for a whole network (`tune.py report`, tuner/cli/report.py). Each imported
convolution is looked up by its problem in results/<gpu>/best.yaml and in bench.yaml's one run (`tune.py
bench --measure-only --steps tuned`, where the tuned kernel and the baselines were timed side by side).
Two sums over the network, each count x µs:
- the convolutions alone: the bare problem's tuned kernel against cuDNN;
- as the network runs them: the imported problem (with its epilogue) against PyTorch eager (a bare
  conv's eager figure is cuDNN's, which is what eager runs) and torch.compile.
A convolution whose problem was not tuned, or not timed in the one run, is marked and left out of both
sums of that comparison, never counted as zero. Then, what tuner.torch_ops.optimize would do with each conv
node in a PyTorch program (tuner/importers/plan.py): the kernel that replaces it, or why it stays PyTorch's.

Coverage: the network's convolutions and FLOPs in three states, tuned (best.yaml holds the problem as the
network runs it), tunable (a family runs it, not tuned yet) and not tunable (with the importer's reason),
and their total; `--list-layers` of an imported network shows the same without the GPU's results."""
from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.core.epilogue import Epilogue
from tuner.importers.network import ImportedLayer, Network, Unsupported
from tuner.core.problem import ConvProblem
from tuner.store.bench_record import OneRunLayer, read_bench
from tuner.store.best import best_entries, names_by_problem
from tuner.store.schema import BestEntry


@dataclass(frozen=True)
class Pair:
    """One comparison of one problem, from the one run: the tuned kernel and the baseline timed beside it."""

    entry: str  # the best.yaml layer that holds the problem
    tuned_us: float
    baseline_us: float


@dataclass(frozen=True)
class LayerReport:
    layer: ImportedLayer
    conv_alone: Pair | None  # bare problem: tuned vs cuDNN
    as_run: Pair | None      # the imported problem: tuned vs PyTorch eager
    compiled_us: float | None  # torch.compile of the imported problem, where the one run timed it
    missing: str             # why a comparison is absent ("" when both are there)


@dataclass(frozen=True)
class Totals:
    tuned_us: float
    baseline_us: float
    counted: int  # convolutions (count-weighted) in the sums
    of: int       # convolutions the network has that a family can run

    @property
    def ratio(self) -> float:
        return self.tuned_us / self.baseline_us if self.baseline_us else math.nan


TUNED, TUNABLE, NOT_TUNABLE, TOTAL = "tuned", "tunable", "not tunable", "total"


@dataclass(frozen=True)
class Coverage:
    """Convolutions of a network in one state (TUNED, TUNABLE, NOT_TUNABLE with its reason, or the TOTAL)."""

    state: str
    reason: str | None
    convolutions: int
    flops: int
    flops_unknown: int = 0  # convolutions counted here whose FLOPs the importer could not know (left out of flops)


def _layers_coverage(state: str, layers: list[ImportedLayer]) -> Coverage:
    return Coverage(state, None, sum(layer.count for layer in layers),
                    sum(layer.count * layer.problem.flops for layer in layers))


def _unsupported_coverage(reason: str, items: list[Unsupported]) -> Coverage:
    return Coverage(NOT_TUNABLE, reason, len(items), sum(item.flops or 0 for item in items),
                    sum(item.flops is None for item in items))


def reason_kind(reason: str) -> str:
    """What a not-tunable convolution's reason says before its details: the text before its first colon
    ('one-sided padding', 'grouped convolution', 'no family runs it')."""
    return reason.split(": ", 1)[0]


def coverage(network: Network, tuned: Collection[ConvProblem] | None = None) -> list[Coverage]:
    """The network's convolutions by state, one NOT_TUNABLE row per kind of reason (most FLOPs first), then the
    TOTAL. `tuned`: the problems a GPU's best.yaml holds (names_by_problem finds a conv tuned with its batch norm
    folded or not); None (no GPU named) leaves the TUNED row out."""
    rows = []
    if tuned is not None:
        rows.append(_layers_coverage(TUNED, [layer for layer in network.layers if layer.problem in tuned]))
    rows.append(_layers_coverage(TUNABLE, [layer for layer in network.layers
                                           if tuned is None or layer.problem not in tuned]))
    by_reason: dict[str, list[Unsupported]] = {}
    for item in network.unsupported:
        by_reason.setdefault(reason_kind(item.reason), []).append(item)
    rows += sorted((_unsupported_coverage(reason, items) for reason, items in by_reason.items()),
                   key=lambda row: (-row.flops, -row.convolutions))
    rows.append(Coverage(TOTAL, None, sum(row.convolutions for row in rows), sum(row.flops for row in rows),
                         sum(row.flops_unknown for row in rows)))
    return rows


def _figure(record: OneRunLayer | None, key: str) -> float | None:
    value = record.us(key) if record is not None else None
    return float(value) if value is not None else None


def timed_names(entries: dict[str, BestEntry], one_run: dict[str, OneRunLayer]) -> dict[ConvProblem, str]:
    """The layer that holds each problem: best.yaml's first, unless only a later one was timed in the
    one run (a problem tuned under two names, e.g. vgg11_b32_features_0 and the suite's
    vgg16f_features_0_b32, benched under the second)."""
    named = names_by_problem(entries)
    for name, entry in entries.items():
        if name in one_run and named[entry.problem] not in one_run:
            named[entry.problem] = name
    return named


def layer_reports(network: Network, folder: Path) -> list[LayerReport]:
    one_run = read_bench(folder).one_run
    entries = timed_names(best_entries(folder), one_run)
    reports = []
    for layer in network.layers:
        bare = replace(layer.problem, epilogue=Epilogue())
        missing = []
        conv_alone = as_run = compiled = None
        bare_entry, entry = entries.get(bare), entries.get(layer.problem)
        record = one_run.get(bare_entry) if bare_entry else None
        tuned, cudnn = _figure(record, "tuned_us"), _figure(record, "cudnn_us")
        fused_record = one_run.get(entry) if entry else None
        own_bare, own_cudnn = _figure(fused_record, "bare_kernel_us"), _figure(fused_record, "cudnn_us")
        if bare_entry is None and own_bare and own_cudnn:
            # No bare twin tuned: the fused layer's own kernel built without its epilogue, timed in the run
            conv_alone = Pair(f"{entry} (its kernel bare)", own_bare, own_cudnn)
        elif bare_entry is None:
            missing.append("conv not tuned")
        elif tuned is None or cudnn is None:
            missing.append(f"{bare_entry} not in bench's one run")
        else:
            conv_alone = Pair(bare_entry, tuned, cudnn)
        if not layer.problem.epilogue.fused:
            as_run = conv_alone
        elif entry is None:
            missing.append(f"epilogue {layer.problem.epilogue.key} not tuned")
        else:
            tuned, eager = _figure(fused_record, "tuned_us"), _figure(fused_record, "eager_us")
            compiled = _figure(fused_record, "compiled_us")
            if tuned is None or eager is None:
                missing.append(f"{entry} not in bench's one run")
            else:
                as_run = Pair(entry, tuned, eager)
        reports.append(LayerReport(layer, conv_alone, as_run, compiled, "; ".join(missing)))
    return reports


def totals(reports: list[LayerReport], pick) -> Totals:
    counted = [(r.layer.count, pick(r)) for r in reports if pick(r) is not None]
    return Totals(sum(c * p.tuned_us for c, p in counted), sum(c * p.baseline_us for c, p in counted),
                  sum(c for c, _ in counted), sum(r.layer.count for r in reports))


def draw(reports: list[LayerReport], title: str, path: Path) -> Path:
    """Bars per layer of count x µs: tuned beside its baseline, for each comparison that has figures."""
    from tuner.analysis.plots import _pyplot, save_figure

    plt = _pyplot()
    shown = [r for r in reports if r.as_run or r.conv_alone]
    figure, axes = plt.subplots(figsize=(10, 0.35 * max(len(shown), 4) + 1.5))
    y = range(len(shown))
    bars = (("tuned as run", lambda r: r.as_run and r.as_run.tuned_us, "tab:green"),
            ("PyTorch eager", lambda r: r.as_run and r.as_run.baseline_us, "tab:gray"),
            ("tuned conv", lambda r: r.conv_alone and r.conv_alone.tuned_us, "tab:blue"),
            ("cuDNN conv", lambda r: r.conv_alone and r.conv_alone.baseline_us, "tab:orange"))
    height = 0.8 / len(bars)
    for index, (label, value, colour) in enumerate(bars):
        widths = [(value(r) or 0) * r.layer.count for r in shown]
        axes.barh([i + index * height for i in y], widths, height=height, label=label, color=colour)
    axes.set_yticks([i + 0.4 - height / 2 for i in y], [f"{r.layer.nodes[0]} x{r.layer.count}" for r in shown],
                    fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("count x µs (graph replay, one run)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7)
    return save_figure(plt, figure, path, size=None, dpi=120)
