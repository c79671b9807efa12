"""What the PyTorch op's tests share: small networks, a best.yaml that tunes them, stand-in kernels that compute on
the CPU what a tuned kernel computes on the GPU (or, planted, get it wrong), and a forward captured in a CUDA graph."""
from __future__ import annotations

from pathlib import Path

import torch
import yaml
from torch import nn
from torch.nn import functional as F

from tuner.families import registry
from tuner.core.problem import problem_to_dict
from tuner.search.space import entry_config
from tuner.importers.torch_import import from_torch

SLUG = "test-gpu"
SM80_PARAMS = {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1, "iterator": "optimized", "split_k": 1}
DIRECT_PARAMS = {"tile": "8x8", "channels": 8, "columns": 1}
DEVICE = {"name": "NVIDIA H100 80GB HBM3", "slug": SLUG, "compute_capability": "9.0", "sm_count": 132}


class Net(nn.Module):
    """stem (C=3: padded channels; BN, ReLU) -> conv + BN + the stem's output + ReLU (residual) -> conv with
    bias + SiLU -> grouped conv (4 groups of 8 channels: dsl_direct's) -> pool."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv, self.bn = nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Conv2d(16, 32, 3, padding=1)
        self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        for norm in (self.bn0, self.bn):  # statistics that make a scale and shift far from 1 and 0
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-1, 1)

    def forward(self, x):
        x = self.relu(self.bn0(self.stem(x)))
        y = self.bn(self.conv(x))
        y += x
        y = self.relu(y)
        return self.pool(self.grouped(F.silu(self.head(y)))).flatten(1)


def net(dtype=torch.float16) -> Net:
    torch.manual_seed(0)
    return Net().eval().to(dtype)


def write_best(results: Path, module: nn.Module, shape, skip: tuple[str, ...] = (),
               dense: tuple[str, dict] = ("sm80", SM80_PARAMS)) -> Path:
    """results/<SLUG>/best.yaml with an entry for every problem of the module at `shape` (`dense`'s family and
    knobs, dsl_direct's for a grouped one), but those of the nodes in `skip`."""
    folder = results / SLUG
    folder.mkdir(parents=True, exist_ok=True)
    layers = {}
    for layer in from_torch(module, shape).layers:
        if set(layer.nodes) & set(skip):
            continue
        family, params = dense if layer.problem.groups == 1 else ("dsl_direct", DIRECT_PARAMS)
        config = registry.get(family).rules.make_config(layer.problem, params)
        layers[layer.name] = {"problem": problem_to_dict(layer.problem), "family": family, "params": dict(params),
                              "kernel": config.name, "runtime_us": 1.0}
    (folder / "best.yaml").write_text(yaml.safe_dump({"device": DEVICE, "layer_count": len(layers),
                                                      "layers": layers}))
    return folder


class CpuKernel:
    """A tuned kernel's arithmetic on the CPU, on the op's operands: the padded NHWC-in-memory x and w, the
    f32 vectors, the residual; `activation` other than the problem's plants a wrong kernel."""

    def __init__(self, problem, kernel_channels, fusion, activation=None):
        self.problem, self.kernel_channels, self.fusion = problem, kernel_channels, fusion
        self.activation = activation or problem.epilogue.activation.value
        self.launches = 0

    def launch(self, x, w, y, scale, bias, residual):
        p = self.problem
        out = F.conv2d(x.float(), w.float(), None, p.strides, p.pads, p.dilations, p.groups)
        if scale is not None:
            out = out * scale.view(1, -1, 1, 1)
        if bias is not None:
            out = out + bias.view(1, -1, 1, 1)
        if residual is not None:
            out = out + p.epilogue.residual_scale * residual.float()
        act = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu, "none": lambda t: t}[self.activation]
        y.copy_(act(out))
        self.launches += 1


class CpuKernels:
    """optimize's kernel source for the CPU: a CpuKernel per best.yaml layer; `planted`: layer names whose
    kernel applies the wrong activation; `broken`: layer names whose kernel cannot be had."""

    def __init__(self, planted=(), broken=()):
        self.planted, self.broken = set(planted), set(broken)
        self.loaded = {}

    def load(self, wanted, device):
        for name, (entry, problem) in wanted.items():
            if name in self.broken:
                self.loaded[name] = "did not build: planted"
                continue
            config = entry_config(entry, name, entry.problem)
            channels = registry.family_of(config).rules.launch_args(config, entry.problem).kernel_channels
            wrong = "gelu" if problem.epilogue.activation.value != "gelu" else "relu"
            self.loaded[name] = CpuKernel(problem, channels, config.fusion, wrong if name in self.planted else None)
        return dict(self.loaded)


def captured(forward, static: torch.Tensor):
    """forward(static) captured in a CUDA graph, after a warm-up on the capture's stream as torch.cuda.graphs
    asks: the graph, and the output tensor each replay rewrites."""
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            forward(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = forward(static)
    return graph, out
