"""`tune.py report --onnx MODEL | --torchvision NAME --batch N`: what the tuning is worth for a whole
network. Each imported convolution is looked up by its problem in results/<gpu>/best.yaml and in
bench.yaml's one run (`tune.py bench --measure-only --steps tuned`, where the tuned kernel and the
baselines were timed side by side). Two sums over the network, each count x µs:
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

import argparse
import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.core.epilogue import Epilogue
from tuner.importers.network import ImportedLayer, Network, Unsupported
from tuner.cli.network_args import add_network_arguments, imported_network
from tuner.core.problem import ConvProblem
from tuner.store.bench_record import OneRunLayer, read_bench
from tuner.store.results import BestEntry, best_entries, gpu_slugs, names_by_problem, recorded_gpu_dir, results_slug
from tuner.importers.plan import Decision, network_decisions, summary

REPO = Path(__file__).resolve().parents[2]


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
COVERAGE_NUMBERS = ("convolutions", "GFLOP", "share of GFLOP")


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


def _share(row: Coverage, total: Coverage) -> float:
    return row.flops / total.flops if total.flops else math.nan


def coverage_document(rows: list[Coverage]) -> list[dict]:
    """The coverage as --json gives it: each row with its GFLOP and share of the network's."""
    total = rows[-1]
    return [dataclasses.asdict(row) | {"gflop": round(row.flops / 1e9, 6), "share_of_flops": _share(row, total)}
            for row in rows]


def coverage_table(rows: list[Coverage], title: str) -> Table:
    table = Table(title=title)
    for column in ("state", "reason", *COVERAGE_NUMBERS):
        table.add_column(column, overflow="fold", justify="right" if column in COVERAGE_NUMBERS else "left")
    total = rows[-1]
    for row in rows:
        if row.state == TOTAL:
            table.add_section()
        unknown = f" (+{row.flops_unknown} convs of unknown size)" if row.flops_unknown else ""
        table.add_row(row.state, escape(row.reason or ""), str(row.convolutions), f"{row.flops / 1e9:.3f}{unknown}",
                      f"{_share(row, total):.1%}" if total.flops else "-")
    return table


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


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


REPORT_NUMBERS = ("count", "tuned conv", "cuDNN", "ratio", "tuned as run", "PyTorch eager", "torch.compile")


def report_rows(reports: list[LayerReport]) -> list[dict]:
    """One record per imported layer, as `report --json/--csv` gives it (µs; None where not timed)."""
    rows = []
    for report in reports:
        alone, run = report.conv_alone, report.as_run
        rows.append({"node": report.layer.nodes[0], "nodes": list(report.layer.nodes), "count": report.layer.count,
                     "epilogue": report.layer.problem.epilogue.key,
                     "best_yaml_layer": (run or alone).entry if (run or alone) else None,
                     "tuned_conv_us": alone and alone.tuned_us, "cudnn_us": alone and alone.baseline_us,
                     "tuned_as_run_us": run and run.tuned_us, "eager_us": run and run.baseline_us,
                     "compiled_us": report.compiled_us, "not_counted": report.missing or None})
    return rows


def report_totals(reports: list[LayerReport]) -> dict:
    alone, run = totals(reports, lambda r: r.conv_alone), totals(reports, lambda r: r.as_run)
    return {"convolutions": sum(r.layer.count for r in reports), "layers": len(reports),
            "conv_alone": dataclasses.asdict(alone) | {"ratio": alone.ratio},
            "as_run": dataclasses.asdict(run) | {"ratio": run.ratio}}


def report_table(reports: list[LayerReport], title: str) -> Table:
    table = Table(title=title)
    for column in ("node", "count", "epilogue", "best.yaml layer", "tuned conv", "cuDNN", "ratio",
                   "tuned as run", "PyTorch eager", "ratio", "torch.compile", "not counted"):
        table.add_column(column, overflow="fold")
    for report in reports:
        alone, run = report.conv_alone, report.as_run
        table.add_row(escape(report.layer.nodes[0]), str(report.layer.count), report.layer.problem.epilogue.key,
                      (run or alone).entry if (run or alone) else "-",
                      _us(alone and alone.tuned_us), _us(alone and alone.baseline_us),
                      f"{alone.tuned_us / alone.baseline_us:.2f}" if alone else "-",
                      _us(run and run.tuned_us), _us(run and run.baseline_us),
                      f"{run.tuned_us / run.baseline_us:.2f}" if run else "-", _us(report.compiled_us),
                      report.missing or "")
    alone, run = totals(reports, lambda r: r.conv_alone), totals(reports, lambda r: r.as_run)
    table.add_section()
    table.add_row(f"total: {len(reports)} layers", str(sum(r.layer.count for r in reports)), "", "count x µs",
                  f"{alone.tuned_us:.1f}", f"{alone.baseline_us:.1f}", f"{alone.ratio:.3f}" if alone.counted else "-",
                  f"{run.tuned_us:.1f}", f"{run.baseline_us:.1f}", f"{run.ratio:.3f}" if run.counted else "-", "",
                  f"{alone.of - alone.counted} alone, {run.of - run.counted} as run")
    return table


def summary_lines(reports: list[LayerReport]) -> list[str]:
    lines = []
    for label, baseline, pick in (("convolutions alone", "cuDNN", lambda r: r.conv_alone),
                                  ("as the network runs them (with epilogues)", "PyTorch eager",
                                   lambda r: r.as_run)):
        total = totals(reports, pick)
        if total.counted == 0:
            lines.append(f"{label}: nothing to compare yet (tune the layers, then run tune.py bench "
                         "--measure-only --steps tuned on them)")
            continue
        lines.append(f"{label}: tuned {total.tuned_us:.1f} µs vs {baseline} {total.baseline_us:.1f} µs, "
                     f"ratio {total.ratio:.3f} over {total.counted} of {total.of} convolutions")
    compiled = [(r.layer.count, r.as_run.tuned_us, r.compiled_us) for r in reports
                if r.as_run is not None and r.compiled_us is not None]
    if compiled:
        tuned, base = sum(c * t for c, t, _ in compiled), sum(c * b for c, _, b in compiled)
        lines.append(f"as run, against torch.compile: tuned {tuned:.1f} µs vs {base:.1f} µs, ratio "
                     f"{tuned / base:.3f} over {sum(c for c, _, _ in compiled)} convolutions")
    return lines


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


def torch_op_row(decision: Decision) -> dict:
    return {"node": decision.node, "replaced": decision.replaced, "best_yaml_layer": decision.entry,
            "fallback": decision.fallback.value if decision.fallback else None, "note": decision.note or None}


def torch_op_table(decisions: list[Decision]) -> Table:
    """What tuner.torch_ops.optimize does with each conv node: the same list its report gives."""
    table = Table(title="In PyTorch: tuner.torch_ops.optimize(model, example_input)")
    for column in ("node", "runs", "why / note"):
        table.add_column(column, overflow="fold")
    for decision in decisions:
        table.add_row(escape(decision.node), decision.entry if decision.replaced else "PyTorch",
                      escape(decision.note if decision.replaced else f"{decision.fallback.value}: {decision.note}"))
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py report",
        description="A network's convolution time, tuned against cuDNN (convolutions alone) and against "
                    "PyTorch eager and torch.compile (with the epilogues the network applies): per layer and "
                    "total, count x µs from results/<gpu>/bench.yaml's one run; then the network's coverage, its "
                    "convolutions and FLOPs tuned, tunable and not tunable (with the reasons). Needs no GPU.")
    add_network_arguments(parser)
    parser.add_argument("--gpu", help="GPU slug under results/, or a GPU's name from tuner/core/gpus.py (h100); "
                                      "default: the only one with a best.yaml")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results", help="default results/")
    from tuner.cli.tables import add_output_arguments

    add_output_arguments(parser)
    parser.add_argument("--png", type=Path, help="where to draw the bar chart (default "
                                                  "results/<gpu>/plots/report_<network>_b<batch>.png)")
    return parser


def main(argv: list[str], console: Console) -> int:
    from tuner.core.errors import UsageError

    args = build_parser().parse_args(argv)
    network = imported_network(args)
    if network is None:
        raise UsageError("report needs a network: --onnx MODEL or --torchvision NAME, with --batch N")
    slugs = [results_slug(args.results_dir, args.gpu)] if args.gpu else gpu_slugs(args.results_dir)
    if len(slugs) != 1:
        raise UsageError(f"report: pass --gpu (one of: {', '.join(slugs) or 'none tuned yet'})")
    folder = recorded_gpu_dir(args.results_dir, slugs[0])
    name = args.torchvision or args.onnx.stem
    title = f"{name}, batch {network.layers[0].problem.n if network.layers else args.batch}, on {slugs[0]}"
    reports = layer_reports(network, folder)
    entries = best_entries(folder)
    covered = coverage(network, names_by_problem(entries))  # tuned: up to the canonical fused form
    torch_decisions = network_decisions(network, entries)
    if args.json or args.csv:
        from tuner.cli.tables import csv_document, json_document

        rows = report_rows(reports)
        print(csv_document(rows) if args.csv else json_document(
            {"title": title, "gpu": slugs[0], "layers": rows, "totals": report_totals(reports),
             "coverage": coverage_document(covered),
             "not_tuned": [dataclasses.asdict(item) for item in network.unsupported],
             "pytorch_op": [torch_op_row(d) for d in torch_decisions]}), end="" if args.csv else "\n")
        return 0
    from tuner.cli.tables import print_table

    print_table(console, report_table(reports, title), REPORT_NUMBERS)
    for line in summary_lines(reports):
        console.print(line)
    print_table(console, coverage_table(covered, f"{title}: coverage"), COVERAGE_NUMBERS)
    for item in network.unsupported:
        console.print(f"not tuned (no family runs it): {escape(item.node)}: {escape(item.reason)}")
    print_table(console, torch_op_table(torch_decisions), ())
    console.print(f"PyTorch (tuner.torch_ops.optimize, eval mode, f16): {summary(torch_decisions)}")
    if any(r.as_run or r.conv_alone for r in reports):
        batch = network.layers[0].problem.n
        png = args.png or folder / "plots" / f"report_{name}_b{batch}.png"
        console.print(f"wrote {draw(reports, title, png)}")
    return 0
