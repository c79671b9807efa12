"""The command line behind tune.py: parse, check, then hand each stage its typed inputs."""
from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import uuid
from pathlib import Path

import optuna
from rich.console import Console
from rich.markup import escape

from tuner.pipeline import nightly
from tuner.cli.choices import matching_layers, positive
from tuner.search.space import chosen_spaces
from tuner.core.errors import UsageError
from tuner.build.compile import ToolchainError, nvcc_version
from tuner.search.costmodel import PRIOR_PICKS
from tuner.core.device import missing_gpu
from tuner.cli.diagnose import diagnose_command
from tuner.core.epilogue import EpilogueError, parse_epilogue
from tuner.measure.evaluate import GpuUnavailable, NoGpu
from tuner.pipeline.dsl_export import LIBRARY
from tuner.pipeline.export import export_header
from tuner.families import registry
from tuner.families.base import SearchSpace, SpaceError
from tuner.analysis.ncu import NcuReportError
from tuner.importers.network import Network, NetworkError, write_layers
from tuner.cli.network_args import add_network_arguments, imported_network
from tuner.core.problem import (LONG_SHAPE, SHORT_SHAPE, TRANSPOSED_HELP, Layer, ProblemError, dtype_fields, find_layer,
                           load_layers, pair_text, parse_shape)
from tuner.cli.tables import add_output_arguments, json_document
from tuner.store.results import (GRACE_S, MIN_GRACE_S, ResultsError, best_entries, check_results_dir, check_storage_url,
                           gpu_slugs, layer_file_stem, names_by_problem, recorded_gpu_dir, results_slug)
from tuner.core.yamlfile import brief
from tuner.search.study import request_stop
from tuner.pipeline.tuning import TuningOptions, TuningSession

REPO = Path(__file__).resolve().parents[2]
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 1
EXIT_REGRESSION = 3


MAX_TIMEOUT_S = 86400.0
# Where `export --onnx/--torchvision` writes a network's header, under results/<gpu>/ (ignored by git).
NETWORK_EXPORTS = "networks"


COMMAND_SUMMARIES = {
    "diagnose": "explain an Nsight Compute report (any form): the GPU, the bound, the waste",
    "export": "write results/<gpu>/best_configs.h for a C++ build",
    "bench": "prove the search against exhaustive landscapes; time best.yaml beside cuDNN, cuBLAS, PyTorch",
    "plots": "draw a GPU's results: optimisation history, importances, roofline share",
    "report": "a network's convolution time, tuned against cuDNN and PyTorch (--onnx / --torchvision)",
    "predict": "rank a layer's space for a GPU that need not be present, and show a configuration's waste",
    "e2e": "a whole network's forward with the tuned kernels in PyTorch against eager and torch.compile",
    "results": "pack or unpack results/<gpu>/'s untracked studies, history, logs and plots to move them between hosts",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py",
        description="Find the fastest correct CUTLASS conv2d fprop kernel per layer on this GPU, searching every "
                    "kernel family the GPU can run and the layer allows ("
                    + "; ".join(f"{family.name}: {family.summary}" for family in registry.families().values())
                    + ") in one study per layer. The commands below each take their own --help.")
    commands = parser.add_subparsers(title="commands", metavar="[COMMAND]", dest="command")
    for name, summary in COMMAND_SUMMARIES.items():
        # Listed here for --help; main() hands a command's arguments to its own parser.
        commands.add_parser(name, help=summary, add_help=False)
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--layer", help="layer name from the layer table (see --list-layers)")
    target.add_argument("--layers", help="comma-separated layer names or patterns (e.g. 'r50_*_b32'), "
                                         "tuned one after another")
    target.add_argument("--all", action="store_true", help="every layer of the layer table (the nightly retune)")
    target.add_argument("--shape", help=f"ad-hoc problem {SHORT_SHAPE} (pad, stride, dilation on both axes), or per "
                                        f"axis {LONG_SHAPE}; f16 in/out, f32 accumulation (--dtype: another type); "
                                        f"{TRANSPOSED_HELP}")
    target.add_argument("--list-layers", action="store_true", help="print the layer table and exit")
    add_network_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument("--write-layers", type=Path, help="with --onnx/--torchvision: write the imported "
                                                          "convolutions as a layers.yaml (for --layers-file) and exit")
    parser.add_argument("--epilogue", help="with --shape: what the layer does after the conv, parts joined by '+': "
                                           "scale, bias (per output channel), residual[*BETA] (a tensor shaped "
                                           "as the output), and one of relu, gelu, silu; e.g. "
                                           "scale+bias+residual+relu (default none; a layer table's layer takes "
                                           "an 'epilogue:' field)")
    parser.add_argument("--trials", type=int, default=64,
                        help="candidates to compile and measure per layer in this run, added to the layer's "
                             "study (impossible and already-measured configurations do not count; default 64)")
    parser.add_argument("--run-id", help="name of this run; a run started again under the same id only does what "
                                         "is left (default: unique per invocation, nightly-<UTC date> with --all/--layers)")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help=f"exit with status 3 if a layer's best got more than "
                             f"{nightly.REGRESSION_THRESHOLD * 100:.0f} %% slower than the previous best")
    parser.add_argument("--gpus", help="comma-separated GPU indices: one worker process per GPU on the same studies")
    parser.add_argument("--storage", help="Optuna storage URL (e.g. postgresql://user@host/db for several hosts); "
                                          "default: a journal file in results/<gpu>/ (several processes of one host)")
    parser.add_argument("--seed", type=int, default=0, help="TPE sampler seed, 0 to 2^32-1 (default 0)")
    parser.add_argument("--stale-after", type=int, default=GRACE_S, metavar="SECONDS",
                        help="with an RDB --storage shared by several hosts: seconds without a heartbeat after which "
                             f"a host's trials count as a dead host's and are measured again (default {GRACE_S}; "
                             f"at least {MIN_GRACE_S}; heartbeats come every 20 s or a third of this)"),
    parser.add_argument("--prior", type=int, default=PRIOR_PICKS,
                        help="queue this many of the cost model's best picks before the search, shared among the "
                             "layer's families (at least 3 each), each unless the study has it already "
                             "(default 8; 0: none)")
    parser.add_argument("--jobs", type=int, help="parallel nvcc jobs (default: cores, capped by free memory)")
    parser.add_argument("--top", type=int, default=3, help="configurations re-measured side by side at the end (default 3)")
    parser.add_argument("--confirm-rounds", type=int, default=3,
                        help="rounds of the side-by-side re-measurement; the median round counts (default 3)")
    parser.add_argument("--ncu-top", type=int, default=3,
                        help="profile this many of the fastest finalists with Nsight Compute (default 3)")
    parser.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute; the static diagnosis only")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a candidate may run on the GPU before it counts as hung (default 120)")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="layer table (default search_spaces/layers.yaml)")
    parser.add_argument("--family", help="comma-separated kernel families to search (default: every family this GPU "
                                         "and the layer allow, less those a family that runs the layer supersedes: "
                                         "sm90_dsl, where installed, in place of sm90_conv and sm90_gemm; known: "
                                         f"{', '.join(registry.names())})")
    parser.add_argument("--space-file", type=Path, action="append",
                        help="a family's search space, in place of search_spaces/<family>.yaml (repeatable, one "
                             "per family; the file's 'family:' key says whose)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where results/<gpu>/ lives (default results/ in the repository)")
    parser.add_argument("--cache-dir", type=Path, help="compile cache (default ~/.cache/cutlass-conv-tuner/compile "
                                                       "or $CUTLASS_TUNER_CACHE)")
    return parser


def shape_layer(text: str, epilogue_text: str | None = None, dtype: str | None = None) -> Layer:
    problem = parse_shape(text, dtype_fields(dtype or "f16"))
    if epilogue_text is not None:
        try:
            problem = dataclasses.replace(problem, epilogue=parse_epilogue(epilogue_text))
        except EpilogueError as error:
            raise UsageError(f"--epilogue: {error}") from None
    groups = f"g{problem.groups}" if problem.groups != 1 else ""
    name = (f"shape_{problem.n}x{problem.h}x{problem.w}x{problem.c}_k{problem.k}_{problem.r}x{problem.s}"
            f"_p{pair_text(problem.pads)}s{pair_text(problem.strides)}d{pair_text(problem.dilations)}{groups}"
            f"{'_' + problem.transposed_key if problem.transposed else ''}"
            f"{problem.epilogue.short}{problem.epilogue.beta_tag}" + (f"_{dtype}" if dtype not in (None, "f16") else ""))
    return Layer(name, problem)


def resolve_targets(args: argparse.Namespace, layers: dict[str, Layer]) -> list[Layer]:
    if args.epilogue is not None and not args.shape:
        raise UsageError("--epilogue goes with --shape; a layer of the table takes an 'epilogue:' field instead")
    if args.layer:
        return [find_layer(layers, args.layer)]
    if args.layers:
        names = [n.strip() for n in args.layers.split(",") if n.strip()]
        if not names:
            raise UsageError("--layers needs at least one layer name")
        return list({layer.name: layer for name in names for layer in matching_layers(layers, name)}.values())
    if args.all:
        return list(layers.values())
    if args.shape:
        return [shape_layer(args.shape, args.epilogue, args.dtype)]
    raise UsageError("say what to tune: --layer NAME, --layers A,B, --all, --shape N,H,W,C,K,R,S, or --list-layers")


def check_layers_runnable(targets: list[Layer], spaces: tuple[SearchSpace, ...], explicit: bool) -> None:
    """Before any GPU work: a layer that none of the families can run (whatever the GPU) is refused
    with each family's reason. A family the GPU cannot run is found once the GPU is known."""
    for layer in targets:
        reasons = [(space.family, registry.get(space.family).problem_reason(layer.problem)) for space in spaces]
        if all(reason for _, reason in reasons):
            said = "; ".join(f"{family}: {reason}" for family, reason in reasons)
            hint = " (or leave out --family to try every family)" if explicit else ""
            if layer.problem.epilogue.fused:
                fusing = [name for name, family in registry.families().items()
                          if set(layer.problem.epilogue.parts) <= family.fusable]
                hint += f"; families that fuse {layer.problem.epilogue.key}: {', '.join(fusing) or 'none'}"
            raise UsageError(f"layer {layer.name}: no kernel family can run it: {said}{hint}")


def options_from(args: argparse.Namespace, run_id: str | None) -> TuningOptions:
    for name in ("trials", "top", "confirm_rounds", "ncu_top"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.jobs is not None:
        positive("--jobs", args.jobs)
    if args.prior < 0:
        raise UsageError(f"--prior must be 0 or more, got {args.prior}")
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be from 0 to {2**32 - 1}, got {brief(args.seed)}")
    if not MIN_GRACE_S <= args.stale_after <= MAX_TIMEOUT_S:
        raise UsageError(f"--stale-after must be from {MIN_GRACE_S} to {MAX_TIMEOUT_S:.0f} seconds, got {args.stale_after}")
    if args.storage is not None:
        check_storage_url(args.storage)
    if args.gpus is not None:
        try:
            nightly.parse_gpus(args.gpus)
        except ValueError as error:
            raise UsageError(str(error)) from None
    check_results_dir(args.results_dir)
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # also refuses nan and inf, which the worker's waits cannot take
        raise UsageError(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds (a day), "
                         f"got {args.timeout}")
    return TuningOptions(trials=args.trials, top=args.top, confirm_rounds=args.confirm_rounds, ncu_top=args.ncu_top,
                         no_ncu=args.no_ncu, seed=args.seed, storage=args.storage, results_dir=args.results_dir,
                         cache_dir=args.cache_dir, jobs=args.jobs, timeout_s=args.timeout, run_id=run_id,
                         prior=args.prior, stale_after_s=args.stale_after,
                         skip_tuned_problems=args.onnx is not None or args.torchvision is not None,
                         prefer_superseding=not args.family)


def tune(args: argparse.Namespace, argv: list[str], console: Console) -> int:
    network = imported_network(args)
    if network is not None:
        layers = network.as_layers()
        if args.write_layers is not None:
            write_layers(network, args.write_layers)
            console.print(f"wrote {escape(str(args.write_layers))}: {len(network.layers)} layers, "
                          f"{len(network.unsupported)} convolutions not tuned")
            return 0
        if not (args.layer or args.layers or args.all or args.shape or args.list_layers):
            args.all = True
    elif args.batch is not None or args.write_layers is not None:
        raise UsageError("--batch and --write-layers go with --onnx MODEL or --torchvision NAME")
    else:
        layers = load_layers(args.layers_file)
    if args.dtype is not None and not (network is not None or args.shape):
        raise UsageError("--dtype goes with --shape, --onnx or --torchvision; a layer of the table takes "
                         "'input_type:', 'filter_type:' and 'output_type:' fields instead")
    if args.json or args.csv:
        if not args.list_layers:
            raise UsageError("--json and --csv go with --list-layers (and the report and bench commands)")
    if args.list_layers:
        print_layers(console, layers, network, "json" if args.json else "csv" if args.csv else "table")
        return 0
    if network is not None and network.unsupported:
        for item in network.unsupported:
            console.print(f"[yellow]not tuned: {escape(item.node)}: {escape(item.reason)}[/]")
    targets = resolve_targets(args, layers)
    spaces = chosen_spaces(args.family, args.space_file)
    check_layers_runnable(targets, spaces, explicit=bool(args.family))
    many = len(targets) > 1 or args.all or args.layers
    # Several layers: one id per UTC day, so a killed nightly resumes. Several GPUs on one layer:
    # one fresh id that all their workers share, so they split --trials between them.
    run_id = args.run_id or (nightly.default_run_id() if many else
                             f"gpus-{uuid.uuid4().hex[:12]}" if args.gpus else None)
    options = options_from(args, run_id)
    nvcc_version()  # fail before the GPU is touched if there is no compiler
    if args.gpus is not None:
        try:
            gpus = nightly.parse_gpus(args.gpus)
        except ValueError as error:
            raise UsageError(str(error)) from None
        if (why := missing_gpu()) is not None:  # said once here, not once by each GPU's process
            raise NoGpu(why)
        return nightly.run_on_gpus(argv, gpus, run_id, REPO / "tune.py")
    session = TuningSession(options, spaces, console)
    try:
        outcomes = [session.tune_layer(layer) for layer in targets]
    finally:
        session.close()
    console.print(nightly.regression_table(outcomes))
    if any(o.runtime_us is None for o in outcomes):
        return EXIT_ENVIRONMENT
    if args.fail_on_regression and nightly.regressions(outcomes):
        return EXIT_REGRESSION
    return 0


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
    from tuner.pipeline.network_report import COVERAGE_NUMBERS, coverage, coverage_document, coverage_table

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


def fail(message: str, code: int) -> int:
    message = " ".join(str(message).split())  # one line whatever the message holds
    if len(message) > 1000:
        message = message[:1000] + f"... ({len(message)} characters)"
    print(f"error: {message}", file=sys.stderr)
    return code


def build_export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py export",
        description="Turn results/<gpu>/best.yaml into results/<gpu>/best_configs.h: one alias per layer of exactly "
                    "the CUTLASS kernel that was measured, and a constexpr table with a lookup by layer name. "
                    "sm90_dsl layers' CuTe DSL kernels are built again into results/<gpu>/dsl/libtuned_dsl.a. "
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
    parser.add_argument("--cache-dir", type=Path, help="compile cache that sm90_dsl layers' kernels are built "
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


def _interrupt(signum, frame) -> None:
    """SIGTERM or Ctrl-C: the candidate in hand is finished and recorded, then the run stops and the
    unstarted ones are marked for a retry. A second signal stops at once."""
    request_stop()


def bench_command(argv: list[str], console: Console) -> int:
    from tuner.pipeline import bench
    return bench.main(argv, console)


def plots_command(argv: list[str], console: Console) -> int:
    from tuner.analysis import plots
    return plots.main(argv, console)


def report_command(argv: list[str], console: Console) -> int:
    from tuner.pipeline import network_report
    return network_report.main(argv, console)


def predict_command(argv: list[str], console: Console) -> int:
    from tuner.analysis import predict
    return predict.main(argv, console)


def e2e_command(argv: list[str], console: Console) -> int:
    from tuner.torch_ops import e2e
    return e2e.main(argv, console)


def results_command(argv: list[str], console: Console) -> int:
    from tuner.store import pack as results_pack
    return results_pack.main(argv, console)


COMMANDS = {"diagnose": diagnose_command, "export": export_command, "bench": bench_command, "plots": plots_command,
            "report": report_command, "predict": predict_command, "results": results_command, "e2e": e2e_command}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    from tuner.cli.tables import output_console

    # A JSON or CSV document owns stdout; what the command says besides goes to stderr. argparse takes a flag's
    # prefix too (--js, --cs).
    console = output_console(stderr=any(len(arg) > 2 and ("--json".startswith(arg) or "--csv".startswith(arg))
                                        for arg in argv))
    try:
        if argv[:1] and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:], console)
        return tune(build_parser().parse_args(argv), argv, console)
    except (UsageError, ProblemError, SpaceError, NcuReportError, ResultsError, NetworkError, NoGpu) as error:
        return fail(str(error), EXIT_USAGE)
    except (ToolchainError, GpuUnavailable) as error:
        return fail(str(error), EXIT_ENVIRONMENT)
    except OSError as error:  # a results folder that is read-only, a file, or under a file
        where = f" {error.filename}" if error.filename else ""
        return fail(f"cannot write{where}: {error.strerror or type(error).__name__}", EXIT_USAGE)
    except KeyboardInterrupt:
        return fail("interrupted: everything measured so far is in the study; run again to resume", 130)
