"""`tune.py report --onnx MODEL | --torchvision NAME --batch N`: what the tuning is worth for a whole network
(tuner/pipeline/network_report.py looks each convolution up and sums it): per layer and total, tuned against
cuDNN and PyTorch, the network's coverage, and what tuner.torch_ops.optimize would do with each conv node, as
tables, --json or --csv."""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.cli.network_args import add_network_arguments, imported_network
from tuner.cli.tables import add_output_arguments, csv_document, json_document, print_table
from tuner.core.errors import UsageError
from tuner.importers.plan import Decision, network_decisions, summary
from tuner.measure.baseline import CUDNN_FP8_ABSENT, library_dtype
from tuner.pipeline.network_report import TOTAL, Coverage, LayerReport, coverage, draw, layer_reports, totals
from tuner.store.best import best_entries, names_by_problem
from tuner.store.results import gpu_slugs, recorded_gpu_dir, results_slug

REPO = Path(__file__).resolve().parents[2]


COVERAGE_NUMBERS = ("convolutions", "GFLOP", "share of GFLOP")


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


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


REPORT_NUMBERS = ("count", "tuned conv", "cuDNN", "ratio", "tuned as run", "PyTorch eager", "torch.compile")
E4M3_BASELINES = f"e4m3 layers: their cuDNN and PyTorch figures are f16's ({CUDNN_FP8_ABSENT})"


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
    if any(library_dtype(report.layer.problem) for report in reports):
        table.caption = E4M3_BASELINES
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
    if any(library_dtype(report.layer.problem) for report in reports):
        lines.append(E4M3_BASELINES)
    compiled = [(r.layer.count, r.as_run.tuned_us, r.compiled_us) for r in reports
                if r.as_run is not None and r.compiled_us is not None]
    if compiled:
        tuned, base = sum(c * t for c, t, _ in compiled), sum(c * b for c, _, b in compiled)
        lines.append(f"as run, against torch.compile: tuned {tuned:.1f} µs vs {base:.1f} µs, ratio "
                     f"{tuned / base:.3f} over {sum(c for c, _, _ in compiled)} convolutions")
    return lines


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
    add_output_arguments(parser)
    parser.add_argument("--png", type=Path, help="where to draw the bar chart (default "
                                                  "results/<gpu>/plots/report_<network>_b<batch>.png)")
    return parser


def main(argv: list[str], console: Console) -> int:
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
        rows = report_rows(reports)
        print(csv_document(rows) if args.csv else json_document(
            {"title": title, "gpu": slugs[0], "layers": rows, "totals": report_totals(reports),
             "coverage": coverage_document(covered),
             "not_tuned": [dataclasses.asdict(item) for item in network.unsupported],
             "pytorch_op": [torch_op_row(d) for d in torch_decisions]}), end="" if args.csv else "\n")
        return 0
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
