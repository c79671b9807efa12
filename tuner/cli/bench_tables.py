"""What `tune.py bench` prints: its messages as the GPU steps go, the families' table, the summary lines, the
one run's fused layers, and the rows of its --json document (tuner/pipeline/bench_summary.py holds the figures)."""
from __future__ import annotations

import math
import re
import statistics

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.cli.tables import print_table
from tuner.core.stats import geometric_mean
from tuner.measure.baseline import CUDNN_FP8_ABSENT, library_dtype
from tuner.pipeline.bench import BenchEvent, GpuTunerFound, NoValidKernel
from tuner.pipeline.bench_summary import (ABOVE, Comparison, GpuTunerStats, LayerFigures, RatioStats, SearchStats,
                                          one_run_layers, one_run_summary)
from tuner.pipeline.landscape import CompilingFor, LandscapeCompiled, LandscapeCompiling, LandscapeTimed
from tuner.pipeline.one_run import EntryRefused, NoBestEntry, NotTimed, TunedStarted, TunedTimed
from tuner.pipeline.replayed_search import LayerReplayed
from tuner.search.costmodel import Ceilings
from tuner.store.bench_record import BenchRecord

FUSED_NUMBERS = ("tuned", "PyTorch eager", "torch.compile", "bare kernel", "ReLU kernel", "tuned/eager",
                 "tuned/compile", "tuned/bare", "tuned/ReLU")


def _us(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def print_event(event: BenchEvent | LayerReplayed, console: Console) -> None:
    """One message of a step, as it happens."""
    if isinstance(event, CompilingFor):
        console.print(f"compiling for {event.device.name} (sm_{event.device.cc})")
    elif isinstance(event, LandscapeCompiling):
        console.print(f"{event.family} landscape: {event.kernels} kernels to compile, "
                      f"{event.candidates} candidates on the layers")
    elif isinstance(event, LandscapeCompiled):
        console.print(f"  {event.ready} kernels compiled or cached, {event.failed} failed")
    elif isinstance(event, LandscapeTimed):
        console.print(f"  {event.family} {escape(event.layer)}: {event.ok} of {event.candidates} ok, "
                      f"best {event.best_us:.2f} µs")
    elif isinstance(event, LayerReplayed):
        console.print(f"replayed {escape(event.layer)} ({event.done} of {event.total}, {event.seconds:.0f} s)")
    elif isinstance(event, NotTimed):
        console.print(f"[yellow]{event.library} not timed for {escape(event.layer)}: {event.reason}[/]")
    elif isinstance(event, NoValidKernel):
        console.print(f"[yellow]{escape(event.layer)}: the tuner found no valid kernel[/]")
    elif isinstance(event, GpuTunerFound):
        found = event.found
        console.print(f"  tuner on {'+'.join(event.families)}: {escape(event.layer)} {found.best_us:.2f} µs "
                      f"({found.kernel}), {found.kernels_compiled} kernels, {found.wall_s:.0f} s cold")
    elif isinstance(event, NoBestEntry):
        console.print(f"[yellow]{escape(event.layer)}: no best.yaml entry to time[/]")
    elif isinstance(event, EntryRefused):
        console.print(f"[yellow]{event.reason}: not timed[/]")
    elif isinstance(event, TunedStarted):
        console.print(f"tuned: {event.layers} layers' best.yaml kernels ({event.kernels} to compile), each timed "
                      "beside cuDNN (and PyTorch where the layer has an epilogue)")
    elif isinstance(event, TunedTimed):
        row = event.row
        ratio = (row.tuned_us or math.nan) / (row.cudnn_us or math.nan)
        fused = (f", PyTorch eager {_us(row.eager_us)} µs, torch.compile {_us(row.compiled_us)} µs"
                 if event.fused else "")
        library = f" ({event.library_dtype}: {CUDNN_FP8_ABSENT})" if event.library_dtype else ""
        failed = f" [red]{row.status}: {escape(row.reason or 'no reason reported')}[/]" if row.status else ""
        console.print(f"  {escape(event.layer)}: tuned {_us(row.tuned_us)} µs, cuDNN {_us(row.cudnn_us)} µs "
                      f"({ratio:.2f}){fused}{library}{failed}")


def bench_table(figures: list[LayerFigures], ceilings: Ceilings) -> Table:
    families = sorted({family for layer in figures for family in layer.landscape_best_us})
    table = Table(title="families vs cuDNN/cuBLAS. <family> µs: best of its landscape; best: best of all families; "
                        "TPE<budget>[+p]: replayed search of the joint landscape, best found / best, median over "
                        "seeds (kernels compiled); +p: seeded by the cost model; GPU tuner: tune.py's search of "
                        "the whole spaces of the families named on the GPU / their landscapes' best (kernels, cold "
                        "wall time); tuned: best.yaml")
    columns = ["layer", *[f"{family}\nµs" for family in families], "best µs"]
    first = next((layer.searches for layer in figures if layer.searches), ())
    columns += [f"TPE{r.budget}" + ("+p" if r.with_prior else "") for r in first]
    columns += ["GPU tuner\n/best", "tuned µs", "cuDNN µs", "best\n/cuDNN", "tuned\n/cuDNN", "cuBLAS\nµs",
                "best\n/cuBLAS", "%peak", "%bw"]
    for column in columns:
        table.add_column(column, justify="left" if column == "layer" else "right", no_wrap=column == "layer")
    rows = []
    for layer in figures:
        best, mine, cudnn, cublas = layer.best_us, layer.tuned_us, layer.cudnn_us, layer.cublas_us
        row = [layer.layer.name, *[_us(layer.landscape_best_us.get(family)) for family in families], _us(best)]
        row += [f"{r.median_ratio:.3f}\n({statistics.median(r.kernels):.0f})" for r in layer.searches]
        row += [""] * (len(first) - len(layer.searches))
        found, searched = layer.gpu_tuner, layer.gpu_tuner_best_us
        row += [f"{found.best_us / searched:.3f}\n({'+'.join(found.searched_families)}, "
                f"{found.kernels_compiled}, {found.wall_s:.0f} s)" if math.isfinite(searched) else "-"]
        timed = library_dtype(layer.layer.problem)  # an e4m3 layer's cuDNN ran f16
        row += [_us(mine), _us(cudnn) + (f"\n({timed})" if timed and cudnn else ""),
                f"{best / cudnn:.2f}" if cudnn and math.isfinite(best) else "-",
                f"{mine / cudnn:.2f}" if cudnn and mine else "-", _us(cublas),
                f"{best / cublas:.2f}" if cublas and math.isfinite(best) else "-"]
        shares = layer.shares(ceilings)
        row += [f"{shares[0]:.1f}", f"{shares[1]:.1f}"] if shares else ["-", "-"]
        table.add_row(*row)
        rows.append(row)
    ratio_columns = {index for index, column in enumerate(columns) if "/" in column or column.startswith("TPE")}
    means = []
    for index in range(1, len(columns)):
        values = [float(row[index].split()[0]) for row in rows if index in ratio_columns
                  and re.match(r"[0-9.]+", row[index])]
        means.append(f"{geometric_mean(values):.3f}" if values else "")
    table.add_section()
    table.add_row(f"total: {len(figures)} layers (geomean)", *means)
    if any(library_dtype(layer.layer.problem) for layer in figures):
        table.caption = f"(f16): an e4m3 layer's cuDNN figure; {CUDNN_FP8_ABSENT}"
    return table


def ratio_line(label: str, stats: RatioStats) -> str:
    """One summary line of ratios per layer (against cuDNN or cuBLAS): geometric means over all layers
    and per batch, how many are within 5 %, the worst, and those above ABOVE (named when few)."""
    named = f" ({', '.join(f'{layer} {ratio:.2f}' for layer, ratio in stats.above)})" \
        if 0 < len(stats.above) <= 8 else ""
    batches = "; ".join(f"batch {batch}: {mean:.3f} over {count}" for batch, mean, count in stats.by_batch)
    return (f"{label}: geometric mean {stats.mean:.3f} over {stats.layers} layers"
            f"{f' ({batches})' if batches else ''}; within 5 %: {stats.within}; "
            f"worst {stats.worst_layer} {stats.worst:.2f}; above {ABOVE}: {len(stats.above)}{named}")


def summary_lines(searches: list[SearchStats], comparisons: list[Comparison]) -> list[str]:
    """Per budget, with and without the prior: layers whose replayed search got within 3 % of the joint
    landscape's best; then the bests against cuDNN and cuBLAS."""
    return [f"replayed TPE{s.budget}{'+prior' if s.with_prior else ''} on the joint landscapes: within 3 % of "
            f"the best on {s.within} of {s.layers} layers, median {s.median:.3f}, worst {s.worst:.3f}"
            for s in searches] + [ratio_line(f"{c.subject} / {c.baseline}", c.stats) for c in comparisons]


def gpu_tuner_line(summary: list[GpuTunerStats]) -> str | None:
    return "\n".join(
        f"GPU tuner over the whole space of {'+'.join(s.families)}: best / those families' landscape best within "
        f"2 % on {s.within} of {s.layers} layers, median {s.median:.3f}, worst {s.worst:.3f}; cold-cache wall time "
        f"per layer median {s.median_wall_s:.0f} s, longest {s.longest_wall_s:.0f} s" for s in summary) or None


def one_run_lines(record: BenchRecord, only: set[str] | None = None) -> list[str]:
    """The 'tuned' step's figures, of every layer bench.yaml's one run holds, or of the layers `only` names
    (labelled so)."""
    which = "" if only is None else f" (the {len(one_run_layers(record, only))} layers of this call)"
    return [ratio_line(f"one run{which}, best.yaml's kernels / {name} timed beside them", stats)
            for name, stats in one_run_summary(record, only)]


def fused_table(record: BenchRecord, only: set[str] | None = None) -> Table | None:
    """The one run's layers with an epilogue (of those `only` names, where given): the tuned fused kernel
    against the layer as PyTorch runs it (eager, torch.compile) and against the same kernel built without
    the epilogue."""
    rows = {name: row for name, row in one_run_layers(record, only).items() if row.epilogue}
    if not rows:
        return None
    table = Table(title="fused layers, one run (µs, graph replay, inputs rotated past L2)")
    for column in ("layer", "epilogue", "family", "tuned", "PyTorch eager", "torch.compile", "bare kernel",
                   "ReLU kernel", "tuned/eager", "tuned/compile", "tuned/bare", "tuned/ReLU"):
        table.add_column(column, justify="left" if column in ("layer", "epilogue", "family") else "right")

    def ratio(row, baseline: str) -> str:
        return f"{row.tuned_us / row.us(baseline):.2f}" if row.tuned_us and row.us(baseline) else "-"
    for name, row in rows.items():
        table.add_row(escape(name), row.epilogue, row.family or "-", _us(row.tuned_us), _us(row.eager_us),
                      _us(row.compiled_us), _us(row.bare_kernel_us), _us(row.relu_kernel_us), ratio(row, "eager_us"),
                      ratio(row, "compiled_us"), ratio(row, "bare_kernel_us"), ratio(row, "relu_kernel_us"))

    def mean(baseline: str) -> str:
        ratios = [row.tuned_us / row.us(baseline) for row in rows.values() if row.tuned_us and row.us(baseline)]
        return f"{geometric_mean(ratios):.3f}" if ratios else "-"
    table.add_section()
    table.add_row(f"total: {len(rows)} layers", "", "", "", "", "", "", "geomean", mean("eager_us"),
                  mean("compiled_us"), mean("bare_kernel_us"), mean("relu_kernel_us"))
    return table


def print_one_run(record: BenchRecord, console: Console, only: set[str] | None = None) -> None:
    table = fused_table(record, only)
    if table is not None:
        print_table(console, table, FUSED_NUMBERS)
    for line in one_run_lines(record, only):
        console.print(line)


def layer_rows(figures: list[LayerFigures]) -> list[dict]:
    """What the bench table shows of each layer, as `bench --json` gives it (µs; ratios to the landscapes' best)."""
    return [{"layer": layer.layer.name, "landscape_best_us": layer.landscape_best_us, "best_us": layer.best_us,
             "replayed_search": [{"budget": r.budget, "with_prior": r.with_prior, "ratios": list(r.ratios),
                                  "kernels": list(r.kernels), "median_ratio": r.median_ratio}
                                 for r in layer.searches],
             "gpu_tuner": layer.gpu_tuner.to_dict() if layer.gpu_tuner else None, "tuned_us": layer.tuned_us,
             "cudnn_us": layer.cudnn_us, "cublas_us": layer.cublas_us} for layer in figures]


def one_run_rows(record: BenchRecord, only: set[str] | None = None) -> dict[str, dict]:
    return {name: row.to_dict() for name, row in one_run_layers(record, only).items()}


def layer_csv_rows(figures: list[LayerFigures], ceilings: Ceilings) -> list[dict]:
    """The bench table as `bench --csv` gives it: a flat row per layer, the table's figures unrounded (µs; the
    replayed searches' and the GPU tuner's ratios to the landscapes' best; shares of the ceilings in %)."""
    families = sorted({family for layer in figures for family in layer.landscape_best_us})
    rows = []
    for layer in figures:
        row = {"layer": layer.layer.name, **{f"{family}_us": layer.landscape_best_us.get(family) for family in families},
               "best_us": layer.best_us}
        for search in layer.searches:
            name = f"tpe{search.budget}{'_prior' if search.with_prior else ''}"
            row |= {f"{name}_ratio": search.median_ratio, f"{name}_kernels": statistics.median(search.kernels)}
        found, searched = layer.gpu_tuner, layer.gpu_tuner_best_us
        row["gpu_tuner_ratio"] = found.best_us / searched if found and math.isfinite(searched) else None
        shares = layer.shares(ceilings) or (None, None)
        rows.append(row | {"tuned_us": layer.tuned_us, "cudnn_us": layer.cudnn_us, "cublas_us": layer.cublas_us,
                           "pct_peak": shares[0], "pct_bw": shares[1]})
    return rows


def one_run_csv_rows(record: BenchRecord, only: set[str] | None = None) -> list[dict]:
    """The one run as `bench --measure-only --csv` gives it: a row per layer."""
    return [{"layer": name, **row} for name, row in one_run_rows(record, only).items()]
