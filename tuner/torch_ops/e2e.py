"""`tune.py e2e --torchvision NAME --batch 1,32`: a whole network's forward with the tuned kernels against
PyTorch, in one run. Each variant's forward is captured in a CUDA graph and timed by replay (the median of
`--repeats` timings of `--replays` replays each): eager; torch.compile (default, and max-autotune without its
own CUDA graphs, since the forward is captured here); the optimized model (tuner.torch_ops.optimize) eagerly
and under torch.compile. Per network and batch it prints latency, throughput, the speed-ups, the share of
the optimized forward still spent in convolutions, and each variant's output against eager's."""
from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tuner.core.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
EAGER, COMPILED, AUTOTUNED, OPTIMIZED, OPTIMIZED_COMPILED = (
    "eager", "torch.compile", "torch.compile max-autotune", "optimized", "optimized + torch.compile")
VARIANTS = (EAGER, COMPILED, AUTOTUNED, OPTIMIZED, OPTIMIZED_COMPILED)
COMPILE_MODES = {COMPILED: "default", AUTOTUNED: "max-autotune-no-cudagraphs"}
WARMUP_CALLS = 3


@dataclass(frozen=True)
class VariantResult:
    variant: str
    latency_ms: float        # median forward, CUDA-graph replay
    p10_ms: float
    p90_ms: float
    error: float             # relative L2 of the output against eager's
    within: bool             # error within the dtype's tolerance


@dataclass(frozen=True)
class NetworkResult:
    network: str
    batch: int
    variants: tuple[VariantResult, ...]
    conv_ms: float | None    # the optimized forward's convolutions (tuned and left), each timed alone
    replaced: str            # optimize's summary line

    def latency(self, variant: str) -> float | None:
        return next((v.latency_ms for v in self.variants if v.variant == variant), None)

    @property
    def best_compiled(self) -> str | None:
        """The faster torch.compile mode of the unoptimized model."""
        timed = [v for v in self.variants if v.variant in COMPILE_MODES]
        return min(timed, key=lambda v: v.latency_ms).variant if timed else None

    def ratio(self, variant: str, baseline: str | None) -> float | None:
        mine, base = self.latency(variant), self.latency(baseline) if baseline else None
        return mine / base if mine and base else None

    @property
    def conv_share(self) -> float | None:
        total = self.latency(OPTIMIZED)
        return self.conv_ms / total if self.conv_ms is not None and total else None

    def summary_lines(self) -> list[str]:
        lines = [f"{self.network} batch {self.batch}: {self.replaced}"]
        best = self.best_compiled
        for variant in (OPTIMIZED, OPTIMIZED_COMPILED):
            parts = [f"{label} {ratio:.3f}" for label, ratio in
                     (("eager", self.ratio(variant, EAGER)), (f"{best} (the faster mode)", self.ratio(variant, best)))
                     if ratio is not None]
            if parts:
                lines.append(f"  {variant} / " + ", / ".join(parts))
        if self.conv_share is not None:
            # each convolution timed alone pays the ramp and tail a graph of the whole forward overlaps, so at
            # batch 1 their sum can pass the forward (ResNet-50 on the H100: 0.313 ms against 0.307)
            lines.append(f"  convolutions, each timed alone: {self.conv_ms:.3f} ms, "
                         f"{100 * self.conv_share:.0f} % of the optimized forward's {self.latency(OPTIMIZED):.3f} ms"
                         + (" (a sum of separate launches: not a share)" if self.conv_share > 1 else ""))
        wrong = [v.variant for v in self.variants if not v.within]
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


# --- on the GPU -----------------------------------------------------------------------------------------

def torchvision_model(name: str):
    """A torchvision classifier with its random initialisation (no weights are downloaded)."""
    try:
        import torchvision
    except ImportError:
        raise UsageError("--torchvision needs torchvision: pip install 'cutlass-conv-tuner[torch]'") from None
    known = sorted(torchvision.models.list_models(module=torchvision.models))
    if name not in known:
        raise UsageError(f"--torchvision {name!r} is not a torchvision classification model; one of: {', '.join(known)}")
    return torchvision.models.get_model(name, weights=None)


def onnx_model(path: Path):
    """An ONNX model as a PyTorch module (onnx2torch)."""
    if not path.is_file():
        raise UsageError(f"--onnx {path}: no such file")
    try:
        import onnx
        from onnx2torch import convert
    except ImportError:
        raise UsageError("e2e --onnx runs the model in PyTorch through onnx2torch: pip install onnx onnx2torch") from None
    try:
        return convert(onnx.load(str(path)))
    except Exception as error:  # onnx2torch raises NotImplementedError and others for operators it lacks
        raise UsageError(f"--onnx {path}: onnx2torch cannot convert it ({type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else ''})") from None


def time_forward(forward, x, replays: int, repeats: int) -> tuple[float, float, float]:
    """(median, p10, p90) ms of one forward: the call captured in a CUDA graph, replayed `replays` times
    between two events, `repeats` times."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            forward(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward(x)
    for _ in range(WARMUP_CALLS):
        graph.replay()
    timings = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        timings.append(start.elapsed_time(end) / replays)
    timings.sort()
    return (statistics.median(timings), timings[int(0.1 * (len(timings) - 1))],
            timings[math.ceil(0.9 * (len(timings) - 1))])


def conv_inputs(model, x) -> dict:
    """Each convolution module of the model (tuned or PyTorch's) with the arguments one forward gave it."""
    import torch

    from tuner.torch_ops.optimize import TunedConv2d

    seen, hooks = {}, []

    def keep(name: str):
        def hook(module, args) -> None:  # a pre-hook that returned the record would replace the module's arguments
            seen.setdefault(name, (module, tuple(a.clone() if a is not None else None for a in args)))
        return hook

    for name, module in model.named_modules():
        if isinstance(module, (TunedConv2d, torch.nn.Conv2d)):
            hooks.append(module.register_forward_pre_hook(keep(name)))
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def measure_network(name: str, model, batch: int, image_size: int, args) -> NetworkResult:
    import torch

    from tuner.torch_ops.eager_check import TOLERANCE, output_error
    from tuner.torch_ops.optimize import DATA_TYPES, optimize

    torch.backends.cudnn.benchmark = True
    model = model.eval().to(device="cuda", dtype=torch.float16, memory_format=torch.channels_last)
    x = torch.randn(batch, 3, image_size, image_size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    tolerance = TOLERANCE[DATA_TYPES[torch.float16]]
    with torch.no_grad():
        optimized = optimize(model, x, gpu=args.gpu, results_dir=args.results_dir, cache_dir=args.cache_dir)
        reference = model(x)
        forwards = {}
        for variant in args.variants:
            torch._dynamo.reset()
            if variant == EAGER:
                forwards[variant] = model
            elif variant in COMPILE_MODES:
                forwards[variant] = torch.compile(model, mode=COMPILE_MODES[variant])
            elif variant == OPTIMIZED:
                forwards[variant] = optimized
            else:
                forwards[variant] = torch.compile(optimized, mode=COMPILE_MODES[args.optimized_mode])
            forwards[variant](x)  # compiles here, outside the timing
        results = []
        for variant, forward in forwards.items():
            median, p10, p90 = time_forward(forward, x, args.replays, args.repeats)
            error = output_error(forward(x), reference)
            results.append(VariantResult(variant, median, p10, p90, error, error <= tolerance))
        conv_ms = None
        if OPTIMIZED in forwards:
            conv_ms = sum(time_forward(lambda _, m=module, a=arguments: m(*a), None, args.replays, args.repeats)[0]
                          for module, arguments in conv_inputs(optimized, x).values())
    from tuner.importers.plan import summary

    return NetworkResult(name, batch, tuple(results), conv_ms, summary(list(optimized.tuner_report.decisions)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py e2e",
        description="A whole network's forward with the tuned kernels (tuner.torch_ops.optimize) against PyTorch "
                    "eager and torch.compile, each captured in a CUDA graph and timed by replay, in one run; "
                    "outputs checked against eager's. f16, channels_last, random weights. Needs the GPU.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--torchvision", metavar="NAME", help="a torchvision classification model, e.g. resnet50")
    source.add_argument("--onnx", type=Path, help="an ONNX model PyTorch can run (converted with onnx2torch)")
    parser.add_argument("--batch", default="32", help="batch sizes, comma-separated (default 32), e.g. 1,32")
    parser.add_argument("--image-size", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"which to time, comma-separated (default all): {', '.join(VARIANTS)}")
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
    import torch

    if not torch.cuda.is_available():
        from tuner.measure.evaluate import NoGpu

        raise NoGpu("torch.cuda.is_available() is False (no GPU, or a CPU build of PyTorch)")
    from tuner.torch_ops.optimize import OptimizeError

    name = args.torchvision or args.onnx.stem
    results = []
    for batch in args.batches:
        model = torchvision_model(args.torchvision) if args.torchvision else onnx_model(args.onnx)
        try:
            results.append(measure_network(name, model, batch, args.image_size, args))
        except OptimizeError as error:
            raise UsageError(str(error)) from None
        if not args.json:
            console.print(result_table(results[-1]))
            for line in results[-1].summary_lines():
                console.print(escape(line))
    if args.json:
        from tuner.cli.tables import json_document

        print(json_document({"networks": [asdict(r) | {"best_compiled": r.best_compiled, "conv_share": r.conv_share}
                                          for r in results]}))
    return 0 if all(v.within for r in results for v in r.variants) else 1
