"""`tune.py e2e --torchvision NAME --batch 1,32`: a whole network's forward with the tuned kernels against
PyTorch, in one run (tuner/torch_ops/e2e.py times it). Per network and batch it prints latency, throughput,
the speed-ups, the share of the optimized forward still spent in convolutions, and each variant's output
against eager's."""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.core.errors import UsageError
from tuner.torch_ops.e2e import (COMPILE_MODES, COMPILED, DEFAULT_VARIANTS, EAGER, OPTIMIZED, OPTIMIZED_VARIANTS,
                                 VARIANTS, ForwardTiming, NetworkResult, measure_network, onnx_model,
                                 torchvision_model)

REPO = Path(__file__).resolve().parents[2]


def summary_lines(result: NetworkResult) -> list[str]:
    lines = [f"{result.network} batch {result.batch}: {result.replaced}"]
    if result.optimize_s is not None:
        lines.append(f"  optimize (trace, fold, load the kernels, check each against eager): {result.optimize_s:.2f} s")
    best = result.best_compiled
    for variant in OPTIMIZED_VARIANTS:
        parts = [f"{label} {ratio:.3f}" for label, ratio in
                 (("eager", result.ratio(variant, EAGER)), (f"{best} (the faster mode)", result.ratio(variant, best)))
                 if ratio is not None]
        if parts:
            lines.append(f"  {variant} / " + ", / ".join(parts))
    if result.conv_share is not None:
        # each convolution timed alone pays the ramp and tail a graph of the whole forward overlaps, so at
        # batch 1 their sum can pass the forward (ResNet-50 on the H100: 0.313 ms against 0.307)
        lines.append(f"  convolutions, each timed alone: {result.conv_ms:.3f} ms, "
                     f"{100 * result.conv_share:.0f} % of the optimized forward's {result.latency(OPTIMIZED):.3f} ms"
                     + (" (a sum of separate launches: not a share)" if result.conv_share > 1 else ""))
    wrong = [v.variant for v in result.variants if not v.within]
    lines.append("  outputs: every variant within tolerance of eager" if not wrong else
                 f"  outputs: OUTSIDE tolerance of eager: {', '.join(wrong)}")
    return lines


def parse_batches(text: str) -> list[int]:
    try:
        batches = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--batch {text!r}: give batch sizes as whole numbers, e.g. 1,32") from None
    if not batches or any(b < 1 for b in batches):
        raise UsageError(f"--batch {text!r}: every batch size must be at least 1")
    return list(dict.fromkeys(batches))


def result_table(result: NetworkResult) -> Table:
    table = Table(title=f"{result.network}, batch {result.batch}: whole forward, CUDA-graph replay")
    for column in ("variant", "ms", "p10-p90 ms", "images/s", "/ eager", f"/ {result.best_compiled or '-'}",
                   "error vs eager"):
        table.add_column(column)
    for v in result.variants:
        eager, best = result.ratio(v.variant, EAGER), result.ratio(v.variant, result.best_compiled)
        table.add_row(v.variant, f"{v.latency_ms:.3f}", f"{v.p10_ms:.3f}-{v.p90_ms:.3f}",
                      f"{result.batch / v.latency_ms * 1e3:.0f}", f"{eager:.3f}" if eager else "-",
                      f"{best:.3f}" if best else "-", f"{v.error:.1e}" + ("" if v.within else " OUTSIDE"))
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py e2e",
        description="A whole network's forward with the tuned kernels (tuner.torch_ops.optimize) against PyTorch "
                    "eager and torch.compile, each captured in a CUDA graph and timed by replay, in one run; "
                    "outputs checked against eager's. f16, channels_last; a --torchvision model has random weights, "
                    "its batch norms calibrated on the random input batch (docs/torch.md). Needs the GPU.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--torchvision", metavar="NAME", help="a torchvision classification model, e.g. resnet50")
    source.add_argument("--onnx", type=Path, help="an ONNX model PyTorch can run (converted with onnx2torch)")
    parser.add_argument("--batch", default="32", help="batch sizes, comma-separated (default 32), e.g. 1,32")
    parser.add_argument("--image-size", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"which to time, comma-separated: {', '.join(VARIANTS)} (default: all but the two "
                             "'without pdl' ones, whose kernels are built without programmatic dependent launch)")
    parser.add_argument("--optimized-mode", choices=sorted(COMPILE_MODES), default=COMPILED,
                        help="the torch.compile mode of the optimized model (default: torch.compile, the default mode)")
    parser.add_argument("--replays", type=int, default=20, help="graph replays per timing (default 20)")
    parser.add_argument("--repeats", type=int, default=15, help="timings per variant; the median counts (default 15)")
    parser.add_argument("--gpu", help="whose results/<gpu>/best.yaml (default: this host's GPU)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results", help="default results/")
    parser.add_argument("--cache-dir", type=Path, help="the compile cache (default: the tuner's)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    return parser


def checked_arguments(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.batches = parse_batches(args.batch)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise UsageError(f"--variants: unknown {', '.join(map(repr, unknown)) or 'none given'}; "
                         f"choose from {', '.join(VARIANTS)}")
    args.variants = variants
    for flag in ("image_size", "replays", "repeats"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str], console: Console) -> int:
    args = checked_arguments(argv)
    from tuner.measure.timing import refuse_under_profiler

    refuse_under_profiler()
    import torch

    if not torch.cuda.is_available():
        from tuner.measure.evaluate import NoGpu

        raise NoGpu("torch.cuda.is_available() is False (no GPU, or a CPU build of PyTorch)")
    from tuner.torch_ops.optimize import OptimizeError

    name = args.torchvision or args.onnx.stem
    timing = ForwardTiming(tuple(args.variants), args.optimized_mode, args.replays, args.repeats)
    results = []
    for batch in args.batches:
        model = torchvision_model(args.torchvision) if args.torchvision else onnx_model(args.onnx)
        try:
            results.append(measure_network(name, model, batch, args.image_size, timing, args.gpu,
                                           args.results_dir, args.cache_dir, random_weights=bool(args.torchvision)))
        except OptimizeError as error:
            raise UsageError(str(error)) from None
        if not args.json:
            console.print(result_table(results[-1]))
            for line in summary_lines(results[-1]):
                console.print(escape(line))
    if args.json:
        from tuner.cli.tables import json_document

        print(json_document({"networks": [asdict(r) | {"best_compiled": r.best_compiled, "conv_share": r.conv_share}
                                          for r in results]}))
    return 0 if all(v.within for r in results for v in r.variants) else 1
