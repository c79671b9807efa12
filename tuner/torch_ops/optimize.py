"""`optimize(model, example_input)`: the model as a torch.fx GraphModule in which every Conv2d that has a tuned
kernel, with the BatchNorm, residual add and activation the importer fuses after it, is one `TunedConv2d`
running the custom op of tuner/torch_ops/kernels.py. Everything else stays PyTorch's. Each replaced layer is
checked against eager on the example input before it goes in (tuner/torch_ops/eager_check.py); the decisions
(tuner/importers/plan.py) say what was replaced and why the rest fell back."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F

from tuner.core.epilogue import Activation
from tuner.families import registry
from tuner.importers.frontend import NetworkError
from tuner.importers.fusion import FusedConv
from tuner.importers.network import LAYERS_DEFAULTS, layer_entry
from tuner.importers.tunable import conv_problem
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.store.best import best_entries, read_best
from tuner.store.results import ResultsError, gpu_slugs, recorded_gpu_dir, results_slug
from tuner.store.schema import BestEntry
from tuner.measure.run import LaunchError, padded_filter_channels
from tuner.importers.torch_import import traced_module
from tuner.torch_ops import kernels
from tuner.torch_ops.eager_check import TOLERANCE, check_layers, output_error
from tuner.torch_ops.fold import NotFoldable, fold, kernel_filter
from tuner.importers.plan import Decision, Fallback, TunedIndex, decide, summary, with_dtype

REPO = Path(__file__).resolve().parents[2]
DATA_TYPES = {torch.float16: DataType.f16, torch.bfloat16: DataType.bf16, torch.float32: DataType.f32}
# A bounded on-the-fly tune (optimize(tune=N)) takes at most this many layers.
MAX_TUNED_LAYERS = 32
ACTIVATIONS = {Activation.none: None, Activation.relu: F.relu, Activation.gelu: F.gelu, Activation.silu: F.silu}


class OptimizeError(ValueError):
    """An argument optimize cannot work with: one line, what is wrong and how to mend it."""


class KernelSource(Protocol):
    """Where optimize gets a layer's kernel from: the compiled candidates (CompiledKernels), or a stand-in."""

    def load(self, wanted: dict[str, tuple[BestEntry, ConvProblem]], device: torch.device) \
            -> dict[str, kernels.Kernel | str]:
        """For each best.yaml layer named: its kernel for the problem, or why it cannot be had."""


class CompiledKernels:
    """The candidate libraries the tuner validated: each best.yaml kernel through the compile cache (built
    with the Compiler where it is missing), loaded with tuner/measure/run.py's KernelLibrary."""

    def __init__(self, folder: Path, cache_dir: Path | None = None, pdl: bool = False):
        from tuner.pipeline.export import best_device

        self.device = best_device(read_best(folder))
        self.cache_dir = cache_dir
        self.pdl = pdl

    def tuned_config(self, name: str, entry: BestEntry):
        """The entry's kernel as the tuner timed it, checked as export checks it. Every build load asks for comes
        from here (a stand-in source overrides it)."""
        from tuner.pipeline.export import checked_config

        return checked_config(name, entry, self.device)

    def launched(self, tuned):
        """The build of the tuned kernel `tuned` that optimize launches: with `pdl`, its family's build for
        programmatic dependent launch where the family has one (Family.chained)."""
        return (registry.chained_build(tuned) or tuned) if self.pdl else tuned

    def load(self, wanted, device):
        from tuner.build.compile import Compiler

        tuned, loaded = {}, {}
        for name, (entry, _) in wanted.items():
            try:
                tuned[name] = self.tuned_config(name, entry)
            except ResultsError as error:
                loaded[name] = str(error)
        configs = {name: self.launched(config) for name, config in tuned.items()}
        compiler = Compiler(self.device, self.cache_dir)
        try:
            results = dict(zip(configs, compiler.compile_many(list(configs.values()))))
            # a kernel whose build for programmatic dependent launch fails still has the build the tuner timed
            retried = {name: tuned[name] for name, result in results.items()
                       if not result.ok and tuned[name] != result.config}
            if retried:
                results |= {name: result for name, result in
                            zip(retried, compiler.compile_many(list(retried.values()))) if result.ok}
        finally:
            compiler.close()
        for name, result in results.items():
            entry, problem = wanted[name]
            if not result.ok:
                loaded[name] = f"{result.config.name} did not build: {(result.error or '').strip()[:200]}"
                continue
            family = registry.family_of(result.config)
            try:
                loaded[name] = kernels.LoadedKernel(result.binary, problem, family.rules.launch_args(result.config,
                                                    entry.problem), result.config.fusion, device)
            except (LaunchError, OSError) as error:
                loaded[name] = str(error)
        return loaded


class TunedConv2d(torch.nn.Module):
    """conv2d (+ folded batch norm) (+ residual) (+ activation) as one tuned kernel. forward(x[, residual])
    launches it for the shape, dtype and device it was built for; any other input runs the same layer in
    PyTorch (reference()), so the module is right for every input and fast for the tuned one."""

    def __init__(self, kernel_id: int, family: str, problem: ConvProblem, kernel_channels: int,
                 weight: torch.Tensor, scale: torch.Tensor | None, bias: torch.Tensor | None,
                 stride: tuple, padding: tuple, dilation: tuple):
        super().__init__()
        self.kernel, self.family = kernel_id, family
        self.op = kernels.op_for(family)
        self.input_shape = (problem.n, problem.c, problem.h, problem.w)
        self.in_channels, self.extra_channels = problem.c, kernel_channels - problem.c
        self.groups = problem.groups
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.beta = problem.epilogue.residual_scale
        self.activation = problem.epilogue.activation.value
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if tuple(x.shape) != self.input_shape or x.dtype != self.weight.dtype or x.device != self.weight.device:
            return self.reference(x, residual)
        if self.extra_channels:
            x = F.pad(x, (0, 0, 0, 0, 0, self.extra_channels))
        x = x.contiguous(memory_format=torch.channels_last)
        if residual is not None:
            residual = residual.contiguous(memory_format=torch.channels_last)
        return self.op(x, self.weight, self.scale, self.bias, residual, self.kernel)

    def reference(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The same fused layer in PyTorch, in float32 after the convolution."""
        weight = self.weight[:, :self.in_channels // self.groups].to(x.dtype)
        y = F.conv2d(x, weight, None, self.stride, self.padding, self.dilation, self.groups).float()
        if self.scale is not None:
            y = y * self.scale.view(1, -1, 1, 1)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1)
        if residual is not None:
            y = y + self.beta * residual.float()
        activation = ACTIVATIONS[Activation(self.activation)]
        return (activation(y) if activation else y).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.family} kernel {self.kernel}, input {list(self.input_shape)}"


@dataclass(frozen=True)
class OptimizeReport:
    """What optimize did: one decision per conv node, and the whole network's error against eager."""

    gpu: str
    decisions: tuple[Decision, ...]
    network_error: float | None   # relative L2 of the optimized model's output against eager; None: unchecked
    tolerance: float

    def lines(self) -> list[str]:
        lines = [f"{summary(list(self.decisions))} (results/{self.gpu})"]
        lines += [f"  {d.node}: {d.text}" for d in self.decisions]
        if self.network_error is not None:
            verdict = "within" if self.network_error <= self.tolerance else "OUTSIDE"
            lines.append(f"network output against eager: relative L2 {self.network_error:.2e}, {verdict} "
                         f"{self.tolerance:g}")
        return lines


def results_folder(results_dir: Path, gpu: str | None) -> tuple[str, Path]:
    """results/<gpu>/ with a best.yaml: `gpu` (a slug or a tuner/core/gpus.py name), else this host's GPU, else
    the only GPU with results."""
    if gpu is None and torch.cuda.is_available():
        from tuner.core.device import slugify

        gpu = slugify(torch.cuda.get_device_name())
    if gpu is None:
        slugs = gpu_slugs(results_dir)
        if len(slugs) != 1:
            raise OptimizeError(f"no GPU here to pick results by: pass gpu= (one of: {', '.join(slugs) or 'none'})")
        gpu = slugs[0]
    slug = results_slug(results_dir, gpu)
    try:
        return slug, recorded_gpu_dir(results_dir, slug)
    except ResultsError as error:
        raise OptimizeError(str(error)) from None


def optimize(model: torch.nn.Module, example_input: torch.Tensor, gpu: str | None = None,
             results_dir: Path | str = REPO / "results", cache_dir: Path | None = None, check: bool = True,
             tune: int = 0, kernel_source: KernelSource | None = None, verbose: bool = False,
             pdl: bool = True) -> torch.fx.GraphModule:
    """The model with its tuned convolutions replaced (docs/torch.md). `gpu`: whose results (default this
    host's GPU); `check`: compare each replaced layer, and the network, with eager on `example_input` (a
    layer that disagrees falls back); `tune`: trials per layer to tune on the fly for convolutions not tuned
    at this shape (0: never; needs the GPU, at most MAX_TUNED_LAYERS layers); `pdl` (the default): the kernels of
    families that have such a build (sm90_dsl) built for programmatic dependent launch, each overlapping its launch
    with the end of the kernel before it (False: built as the tuner timed them). The result's `tuner_report` (an
    OptimizeReport) lists what was replaced and why the rest fell back; `verbose` prints it."""
    if not isinstance(model, torch.nn.Module):
        raise OptimizeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_input, torch.Tensor) or example_input.dim() != 4:
        raise OptimizeError("example_input must be one 4-D tensor [N, C, H, W] the model runs on, got "
                            + (f"shape {list(example_input.shape)}" if isinstance(example_input, torch.Tensor)
                               else type(example_input).__name__))
    if isinstance(tune, bool) or not isinstance(tune, int) or tune < 0:
        raise OptimizeError(f"tune must be a whole number of trials (0: never tune), got {tune!r}")
    if not isinstance(pdl, bool):
        raise OptimizeError(f"pdl must be True or False, got {pdl!r}")
    slug, folder = results_folder(Path(results_dir), gpu)
    try:
        traced = traced_module(model, example_input)
        fused_convs = traced.fused_convs()
    except NetworkError as error:
        raise OptimizeError(str(error)) from None
    graph_module = traced.graph_module
    modules = dict(graph_module.named_modules())
    # a fused node (the batch norm) is named as the graph names it ('layer1_0_bn1'), its module by its path
    module_of_node = {node.name: modules.get(node.target) for node in graph_module.graph.nodes
                      if node.op == "call_module"}
    dtype = DATA_TYPES.get(example_input.dtype)
    decisions = plan(fused_convs, modules, dtype, model.training, TunedIndex(best_entries(folder)))
    if tune and any(d.fallback in (Fallback.not_tuned, Fallback.other_shape) for d in decisions):
        tune_missing([d.problem for d in decisions if d.fallback in (Fallback.not_tuned, Fallback.other_shape)],
                     tune, Path(results_dir), slug, cache_dir)
        decisions = plan(fused_convs, modules, dtype, model.training, TunedIndex(best_entries(folder)))
    source = kernel_source or CompiledKernels(folder, cache_dir, pdl)
    decisions, tuned = build_modules(fused_convs, decisions, modules, module_of_node, best_entries(folder),
                                     source, example_input.device)
    eager_output = None
    if check and tuned:
        decisions, eager_output = check_layers(graph_module, fused_convs, decisions, tuned, example_input)
    rewrite(graph_module, fused_convs, decisions, tuned)
    network_error = None
    if check:
        with torch.no_grad():
            if eager_output is None:
                eager_output = model(example_input)
            network_error = output_error(graph_module(example_input), eager_output)
    report = OptimizeReport(slug, tuple(decisions), network_error, TOLERANCE.get(dtype, TOLERANCE[DataType.f32]))
    graph_module.tuner_report = report
    if verbose:
        print("\n".join(report.lines()), file=sys.stderr)
    return graph_module


def plan(fused_convs: list[FusedConv], modules: dict, dtype: DataType | None, training: bool,
         index: TunedIndex) -> list[Decision]:
    """plan.decide for each conv, then what only the live model tells: its mode, its dtype, and whether the
    conv and its batch norm are modules a kernel can take the place of."""
    decisions = []
    for fused in fused_convs:
        problem = conv_problem(fused.conv, fused.epilogue)
        if isinstance(problem, ConvProblem) and dtype is not None:
            problem = with_dtype(problem, dtype)
        decision = decide(fused.conv.node, problem, index)
        conv = modules.get(fused.conv.node)
        if decision.replaced and dtype is None:
            decision = decision.falls_back(Fallback.wrong_dtype, "the example input is no float16, bfloat16 "
                                                                   "or float32 tensor")
        elif decision.replaced and training:
            decision = decision.falls_back(Fallback.training, "batch norm is folded in eval mode only and the "
                                                              "kernels have no backward: call model.eval()")
        elif decision.replaced and not isinstance(conv, torch.nn.Conv2d):
            decision = decision.falls_back(Fallback.not_replaceable, "a functional conv2d: only nn.Conv2d "
                                                                     "modules are replaced")
        elif decision.replaced and conv.weight.dtype != TORCH_DTYPE[dtype]:
            decision = decision.falls_back(Fallback.wrong_dtype, f"the conv's weight is {conv.weight.dtype}, its "
                                                                 f"input {TORCH_DTYPE[dtype]}")
        decisions.append(decision)
    return decisions


TORCH_DTYPE = {value: key for key, value in DATA_TYPES.items()}


def build_modules(fused_convs, decisions, modules, module_of_node, entries, source: KernelSource, device):
    """A TunedConv2d for each replaced decision; a layer whose kernel cannot be had, or whose batch norm does
    not fold, falls back with the reason. `modules` by path (a conv's ConvFacts.node), `module_of_node` by
    graph node name (a fused batch norm's FusedConv.norm)."""
    wanted = {d.entry: (entries[d.entry], d.problem) for d in decisions if d.replaced}
    loaded = source.load(wanted, device) if wanted else {}
    decisions, tuned = list(decisions), {}
    for position, (fused, decision) in enumerate(zip(fused_convs, decisions)):
        if not decision.replaced:
            continue
        kernel = loaded.get(decision.entry, "not loaded")
        if isinstance(kernel, str):
            decisions[position] = decision.falls_back(Fallback.kernel_failed, kernel)
            continue
        conv = modules[fused.conv.node]
        norm = module_of_node.get(fused.norm) if fused.norm else None
        if fused.norm and not isinstance(norm, torch.nn.modules.batchnorm._BatchNorm):
            decisions[position] = decision.falls_back(Fallback.not_replaceable, f"its batch norm {fused.norm} is "
                                                      "no BatchNorm module whose statistics can be folded")
            continue
        fusion = getattr(kernel, "fusion", decision.problem.epilogue)
        problem = decision.problem
        try:
            folded = fold(conv, norm, fusion)
            filter_channels = padded_filter_channels(problem, kernel.kernel_channels)
        except NotFoldable as error:
            decisions[position] = decision.falls_back(Fallback.not_replaceable, str(error))
            continue
        except LaunchError as error:
            decisions[position] = decision.falls_back(Fallback.kernel_failed, str(error))
            continue
        family = entries[decision.entry].family
        tuned[fused.conv.node] = TunedConv2d(
            kernels.register(kernel), family, problem, kernel.kernel_channels,
            kernel_filter(folded.weight, filter_channels, TORCH_DTYPE[problem.filter_type]).to(device),
            None if folded.scale is None else folded.scale.to(device),
            None if folded.bias is None else folded.bias.to(device), conv.stride, conv.padding, conv.dilation)
    return decisions, tuned


def rewrite(graph_module, fused_convs, decisions, tuned) -> None:
    """Each replaced layer's nodes (conv, batch norm, add, activation) become one call of its TunedConv2d,
    placed after the last of them; the nodes nothing uses any more go, and so do their modules."""
    graph = graph_module.graph
    nodes = {node.name: node for node in graph.nodes}
    for fused, decision in zip(fused_convs, decisions):
        if not decision.replaced or fused.conv.node not in tuned:
            continue
        target = "tuned_" + fused.conv.node.replace(".", "_")
        graph_module.add_submodule(target, tuned[fused.conv.node])
        conv_node, last = nodes[fused.conv.output], nodes[fused.output]
        arguments = [conv_node.args[0]]
        if fused.add:
            chain = {nodes[name] for name in (fused.conv.output, fused.norm) if name}
            arguments.append(next(arg for arg in nodes[fused.add].all_input_nodes if arg not in chain))
        with graph.inserting_after(last):
            call = graph.call_module(target, tuple(arguments))
        last.replace_all_uses_with(call)
        for name in reversed((fused.conv.output, *fused.fused_ops)):
            if not nodes[name].users:
                graph.erase_node(nodes[name])
    graph.lint()
    graph_module.recompile()
    graph_module.delete_all_unused_submodules()


def tune_missing(problems: list[ConvProblem], trials: int, results_dir: Path, slug: str,
                 cache_dir: Path | None) -> None:
    """A bounded on-the-fly tune: the distinct problems (at most MAX_TUNED_LAYERS) through `tune.py` with
    `trials` candidates each and no profiling, into the same results folder."""
    distinct = list(dict.fromkeys(problems))[:MAX_TUNED_LAYERS]
    with tempfile.TemporaryDirectory(prefix="tuner-torch-") as scratch:
        layers = Path(scratch) / "layers.yaml"
        lines = [LAYERS_DEFAULTS, "layers:"]
        lines += [layer_entry(f"torch_{index}_b{problem.n}", problem) for index, problem in enumerate(distinct)]
        layers.write_text("\n".join(lines) + "\n")
        command = [sys.executable, str(REPO / "tune.py"), "--layers-file", str(layers), "--layers", "*",
                   "--trials", str(trials), "--no-ncu", "--top", "2", "--confirm-rounds", "1",
                   "--results-dir", str(results_dir)]
        if cache_dir is not None:
            command += ["--cache-dir", str(cache_dir)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            raise OptimizeError(f"the on-the-fly tune failed: {tail[0]}")
