"""`tune.py export`: results/<gpu>/best.yaml as results/<gpu>/best_configs.h for a C++ build (and a network's
node table beside it), for any GPU that has results; none need be present."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from tuner.cli.network_args import add_network_arguments, imported_network
from tuner.cli.tables import json_document
from tuner.pipeline.dsl_export import LIBRARY
from tuner.pipeline.export import export_header
from tuner.store.best import best_entries, names_by_problem
from tuner.store.results import ResultsError, gpu_slugs, layer_file_stem, recorded_gpu_dir, results_slug

REPO = Path(__file__).resolve().parents[2]
# Where `export --onnx/--torchvision` writes a network's header, under results/<gpu>/ (ignored by git).
NETWORK_EXPORTS = "networks"


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py export",
        description="Turn results/<gpu>/best.yaml into results/<gpu>/best_configs.h: one alias per layer of exactly "
                    "the CUTLASS kernel that was measured, and a constexpr table with a lookup by layer name. "
                    "The CuTe DSL layers' kernels (sm90_dsl, dsl_direct) are built again into "
                    "results/<gpu>/dsl/libtuned_dsl.a. "
                    "With --onnx/--torchvision the header also maps each node of the network to its kernel, and "
                    f"goes to results/<gpu>/{NETWORK_EXPORTS}/<network>_b<batch>/ (ignored by git) unless "
                    "--output-dir says where: a network's header never rewrites the committed one.")
    parser.add_argument("--gpu", action="append", help="GPU slug under results/, or a GPU's name from tuner/core/gpus.py "
                                                        "(h100: results/nvidia-h100-80gb-hbm3/); repeatable; default: "
                                                        "every GPU folder that has a best.yaml. No GPU need be present")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results", help="default results/")
    parser.add_argument("--output-dir", type=Path, metavar="DIR",
                        help="write each GPU's header and its dsl/ library into DIR/<gpu>/ (default: results/<gpu>/, "
                             f"or results/<gpu>/{NETWORK_EXPORTS}/<network>_b<batch>/ for a network)")
    parser.add_argument("--cache-dir", type=Path, help="compile cache that the DSL layers' kernels are built "
                                                       "through (default as for tuning)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout: for each GPU the "
                                                            "header and library written, and with a network its "
                                                            "node count and the nodes without a tuned kernel "
                                                            "(messages go to stderr)")
    add_network_arguments(parser)  # the header's node table: each node of that network -> its tuned kernel
    return parser


def export_command(argv: list[str], console: Console) -> int:
    args = build_export_parser().parse_args(argv)
    slugs = [results_slug(args.results_dir, name) for name in args.gpu] if args.gpu else gpu_slugs(args.results_dir)
    if not slugs:
        raise ResultsError(f"no results/<gpu>/best.yaml under {args.results_dir}: tune a layer first")
    network = imported_network(args)
    nodes = [(node, layer.problem) for layer in network.layers for node in layer.nodes] if network else []
    name = args.torchvision or (args.onnx.name if args.onnx else "")
    batch = args.batch or (nodes[0][1].n if nodes else "?")
    label = f"Network: {name}, batch {batch}, {len(nodes)} nodes." if network else ""
    exported = []
    for slug in slugs:
        folder = recorded_gpu_dir(args.results_dir, slug)
        if args.output_dir is not None:
            output = args.output_dir / slug
        elif network is not None:  # a network's node table: beside the committed header, never over it
            stem = args.torchvision or args.onnx.stem
            output = folder / NETWORK_EXPORTS / layer_file_stem(f"{stem}_b{batch}")
        else:
            output = folder
        path = export_header(folder, nodes, label, cache_dir=args.cache_dir, output=output)
        library = path.parent / LIBRARY
        record = {"gpu": slug, "header": str(path), "library": str(library) if library.exists() else None,
                  "network": None}
        if network is None:
            console.print(f"wrote {escape(str(path))}")
        else:
            tuned = names_by_problem(best_entries(folder))  # read once, not once per node
            untuned = [node for node, problem in nodes if problem not in tuned]
            record["network"] = {"name": name, "batch": batch, "nodes": len(nodes), "without_tuned_kernel": untuned}
            console.print(f"wrote {escape(str(path))} ({len(nodes)} network nodes, {len(untuned)} without a tuned "
                          "kernel)")
        exported.append(record)
    if args.json:  # the document owns stdout (the CLI's console writes to stderr under --json)
        print(json_document({"exports": exported}))
    return 0
