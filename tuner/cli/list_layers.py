"""`tune.py --list-layers`: the layer table, or an imported network's convolutions with their counts, nodes and
coverage, as a table or as one JSON or CSV document."""
from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.markup import escape

from tuner.core.problem import pair_text
from tuner.core.layers import Layer
from tuner.families import registry
from tuner.importers.network import Network


LAYER_NUMBERS = ("N", "H", "W", "C", "K", "GFLOP", "count")


def layer_rows(layers: dict[str, Layer], network: Network | None = None) -> list[dict]:
    """One record per layer of the table, as --list-layers --json/--csv gives it."""
    imported = {layer.name: layer for layer in network.layers} if network else {}
    rows = []
    for name, layer in layers.items():
        p = layer.problem
        row = {"name": name, "n": p.n, "h": p.h, "w": p.w, "c": p.c, "k": p.k, "r": p.r, "s": p.s,
               "pad_h": p.pad_h, "pad_w": p.pad_w, "stride_h": p.stride_h, "stride_w": p.stride_w,
               "dilation_h": p.dilation_h, "dilation_w": p.dilation_w, "groups": p.groups,
               "transposed": p.transposed, "output_padding_h": p.output_padding_h,
               "output_padding_w": p.output_padding_w, "types": p.dtype_key, "epilogue": p.epilogue.key,
               "gflop": round(p.flops / 1e9, 6),
               "families": [family for family, reason in registry.problem_reasons(p).items() if reason is None]}
        if name in imported:
            row["count"], row["nodes"] = len(imported[name].nodes), list(imported[name].nodes)
        rows.append(row)
    return rows


def layer_totals(rows: list[dict]) -> dict:
    counts = [row.get("count", 1) for row in rows]
    return {"layers": len(rows), "convolutions": sum(counts),
            "gflop": round(sum(row["gflop"] for row in rows), 6),
            "gflop_as_run": round(sum(c * row["gflop"] for c, row in zip(counts, rows)), 6)}


def print_layers(console: Console, layers: dict[str, Layer], network: Network | None = None,
                 form: str = "table") -> None:
    """The layer table; for an imported network, with each layer's count and nodes, then its coverage
    (tunable and not, with reasons), the convolutions not tuned and the operators left unfused. `form` json or
    csv: that document on stdout."""
    from rich.table import Table
    from tuner.cli import tables
    from tuner.cli.report import COVERAGE_NUMBERS, coverage_document, coverage_table
    from tuner.pipeline.network_report import coverage

    rows = layer_rows(layers, network)
    total = layer_totals(rows)
    if form == "json":
        print(tables.json_document({"layers": rows, "totals": total,
                                    "coverage": coverage_document(coverage(network)) if network else [],
                                    "not_tuned": [dataclasses.asdict(item) for item in network.unsupported]
                                    if network else [],
                                    "not_fused": list(network.not_fused) if network else []}))
        return
    if form == "csv":
        print(tables.csv_document(rows), end="")
        return
    table = Table(title="layers" if network is None else "the network's convolutions")
    for column in ("name", "N", "H", "W", "C", "K", "filter", "types", "epilogue", "GFLOP"):
        table.add_column(column, no_wrap=column != "name", overflow="fold")
    table.add_column("families", overflow="fold")  # wraps on a narrow terminal rather than losing names
    if network is not None:
        table.add_column("count", justify="right")
        table.add_column("nodes", overflow="fold")
    for row in rows:
        pair = (lambda name: pair_text((row[f"{name}_h"], row[f"{name}_w"])))
        dilation = f" d{pair('dilation')}" if (row["dilation_h"], row["dilation_w"]) != (1, 1) else ""
        groups = f" g{row['groups']}" if row["groups"] != 1 else ""
        output_padding = pair("output_padding")
        transposed = (" transposed" + (f" op{output_padding}" if output_padding != "0" else "")
                      if row["transposed"] else "")
        cells = [escape(row["name"]), *(str(row[key]) for key in "nhwck"),
                 f"{row['r']}x{row['s']} p{pair('pad')} s{pair('stride')}{dilation}{groups}{transposed}", row["types"],
                 row["epilogue"],
                 f"{row['gflop']:.3f}", ",".join(row["families"]) or "none"]
        if network is not None:
            nodes = row.get("nodes", [])
            cells += [str(row.get("count", "")), ", ".join(map(escape, nodes[:4])) + (" ..." if len(nodes) > 4 else "")]
        table.add_row(*cells)
    table.add_section()
    gflop = f"{total['gflop']:.3f}" if network is None else f"{total['gflop_as_run']:.3f}"
    totals = [f"total: {total['layers']} layers", "", "", "", "", "", "", "", "", gflop, ""]
    if network is not None:
        totals += [str(total["convolutions"]), "GFLOP: count x GFLOP"]
    table.add_row(*totals)
    tables.print_table(console, table, LAYER_NUMBERS)
    if network is not None:
        tables.print_table(console, coverage_table(coverage(network), "coverage (tuned: see tune.py report)"),
                           COVERAGE_NUMBERS)
    for item in network.unsupported if network else ():
        console.print(f"not tuned: {escape(item.node)}: {escape(item.reason)}")
    for item in network.not_fused if network else ():
        console.print(f"not fused (left to the framework): {escape(item)}")
