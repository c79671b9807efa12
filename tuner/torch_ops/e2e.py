"""A whole network's forward with the tuned kernels against PyTorch, in one run (`tune.py e2e`,
tuner/cli/e2e.py). Each variant's forward is captured in a CUDA graph and timed by replay (the median of
`repeats` timings of `replays` replays each): eager; torch.compile (default, and max-autotune without its
own CUDA graphs, since the forward is captured here); the optimized model (tuner.torch_ops.optimize) eagerly
and under torch.compile; on request the optimized model with its kernels built without programmatic dependent
launch (optimize(pdl=False)), eagerly and under torch.compile. Per network and batch: latency, the speed-ups,
the share of the optimized forward still spent in convolutions, and each variant's output against eager's."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from tuner.core.errors import UsageError

EAGER, COMPILED, AUTOTUNED, OPTIMIZED, OPTIMIZED_COMPILED = (
    "eager", "torch.compile", "torch.compile max-autotune", "optimized", "optimized + torch.compile")
OPTIMIZED_NO_PDL, OPTIMIZED_NO_PDL_COMPILED = "optimized without pdl", "optimized without pdl + torch.compile"
DEFAULT_VARIANTS = (EAGER, COMPILED, AUTOTUNED, OPTIMIZED, OPTIMIZED_COMPILED)
VARIANTS = DEFAULT_VARIANTS + (OPTIMIZED_NO_PDL, OPTIMIZED_NO_PDL_COMPILED)
OPTIMIZED_VARIANTS = (OPTIMIZED, OPTIMIZED_COMPILED, OPTIMIZED_NO_PDL, OPTIMIZED_NO_PDL_COMPILED)
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
    optimize_s: float | None = None  # optimize's wall time: trace, fold, load the kernels, check against eager

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


# A random network's batch norms get a per-channel affine in these ranges (seeded): folded, each kernel's scale
# and bias then differ per channel as a trained network's do, so a layer whose epilogue misplaces or drops them
# fails the check against eager. The bias stays small beside the unit RMS so the output stays well conditioned.
GAMMA_RANGE = (0.5, 1.5)
BETA_RANGE = (-0.1, 0.1)


def calibrate_batch_norms(model, x, seed: int = 0) -> None:
    """Give a model with random weights batch norms that keep its f16 forward in range and well conditioned:
    each norm divides by the root mean square of its input on `x` (one number for all its channels, mean 0)
    and gets a per-channel gamma and beta drawn from GAMMA_RANGE and BETA_RANGE.

    Why not batch norm's initial statistics (mean 0, variance 1): a deep network's activations then grow past
    f16's range (torchvision's ResNet-101 reaches 7e5; its f16 output is inf). Why not each channel's own
    statistics of the batch, as training would leave them: on random weights the per-channel mean subtraction
    and the division of near-dead channels make the network amplify rounding, so that torch.compile and eager
    differ by 3.4e-2 (ResNet-50) and 1.1e-1 (ResNet-101) on the same f16 input. With one scale per norm the
    f16 output is within 8e-4 of float64 (ResNet-50, ResNet-101, DenseNet-121) and 1.1e-3 (Inception-v3)."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    generator = torch.Generator().manual_seed(seed)

    def uniform(norm, bounds):
        low, high = bounds
        values = torch.rand(norm.num_features, generator=generator) * (high - low) + low
        return values.to(device=norm.running_var.device, dtype=norm.running_var.dtype)

    def calibrate(norm, inputs):
        norm.running_mean.zero_()
        norm.running_var.fill_(inputs[0].detach().float().pow(2).mean().item())
        if norm.affine:
            norm.weight.data.copy_(uniform(norm, GAMMA_RANGE))
            norm.bias.data.copy_(uniform(norm, BETA_RANGE))

    hooks = [norm.register_forward_pre_hook(calibrate) for norm in norms]
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()


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


@dataclass(frozen=True)
class ForwardTiming:
    """What to time of each network and batch, and how."""
    variants: tuple[str, ...]
    optimized_mode: str  # the torch.compile mode (a COMPILE_MODES key) of the optimized model
    replays: int         # graph replays per timing
    repeats: int         # timings per variant; the median counts


def measure_network(name: str, model, batch: int, image_size: int, timing: ForwardTiming, gpu: str | None,
                    results_dir: Path, cache_dir: Path | None, random_weights: bool = False) -> NetworkResult:
    """The variants' forwards timed, the model optimized with best.yaml of `gpu` (None: this host's) under
    `results_dir`, its kernels built through `cache_dir`. A model with `random_weights` first gets batch norms
    calibrated on the input batch (calibrate_batch_norms), in float32."""
    import torch

    from tuner.torch_ops.eager_check import TOLERANCE, output_error
    from tuner.torch_ops.optimize import DATA_TYPES, optimize

    torch.backends.cudnn.benchmark = True
    model = model.eval().to(device="cuda", memory_format=torch.channels_last)
    x = torch.randn(batch, 3, image_size, image_size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    if random_weights:
        calibrate_batch_norms(model, x.float())
    model = model.to(dtype=torch.float16)
    tolerance = TOLERANCE[DATA_TYPES[torch.float16]]
    with torch.no_grad():
        started = time.perf_counter()
        optimized = optimize(model, x, gpu=gpu, results_dir=results_dir, cache_dir=cache_dir)
        optimize_s = time.perf_counter() - started
        # the model each optimized variant runs, eagerly or under timing.optimized_mode's torch.compile
        models = {OPTIMIZED: optimized, OPTIMIZED_COMPILED: optimized}
        if OPTIMIZED_NO_PDL in timing.variants or OPTIMIZED_NO_PDL_COMPILED in timing.variants:
            plain = optimize(model, x, gpu=gpu, results_dir=results_dir, cache_dir=cache_dir, pdl=False)
            models |= {OPTIMIZED_NO_PDL: plain, OPTIMIZED_NO_PDL_COMPILED: plain}
        reference = model(x)
        forwards = {}
        for variant in timing.variants:
            torch._dynamo.reset()
            if variant == EAGER:
                forwards[variant] = model
            elif variant in COMPILE_MODES:
                forwards[variant] = torch.compile(model, mode=COMPILE_MODES[variant])
            elif variant in (OPTIMIZED, OPTIMIZED_NO_PDL):
                forwards[variant] = models[variant]
            else:
                forwards[variant] = torch.compile(models[variant], mode=COMPILE_MODES[timing.optimized_mode])
            forwards[variant](x)  # compiles here, outside the timing
        results = []
        for variant, forward in forwards.items():
            median, p10, p90 = time_forward(forward, x, timing.replays, timing.repeats)
            error = output_error(forward(x), reference)
            results.append(VariantResult(variant, median, p10, p90, error, error <= tolerance))
        conv_ms = None
        if OPTIMIZED in forwards:
            conv_ms = sum(time_forward(lambda _, m=module, a=arguments: m(*a), None, timing.replays, timing.repeats)[0]
                          for module, arguments in conv_inputs(optimized, x).values())
    from tuner.importers.plan import summary

    return NetworkResult(name, batch, tuple(results), conv_ms, summary(list(optimized.tuner_report.decisions)),
                         optimize_s)
