"""A network's convolutions as the tuner's layers: every 2-D convolution (transposed ones too: ConvTranspose,
ConvTranspose2d) of an ONNX model or a PyTorch module becomes an NHWC problem (in the model's type, MODEL_DTYPES, or --dtype's) named after its node, with what follows it folded into its epilogue
where the tuner can fuse it (tuner/importers/fusion.py). Identical problems are tuned once and carry
their count and nodes. A convolution no family can take is listed with the reason, never dropped
(tuner/importers/tunable.py).

Each frontend (ONNX in tuner/importers/onnx_import.py, PyTorch in tuner/importers/torch_import.py) reads its graph
into the same form (tuner/importers/frontend.py): the operators as `Op`s in ONNX's vocabulary, the tensors' shapes,
and each convolution's `ConvFacts`; `assemble` does the rest for both."""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tuner.core.dtypes import dtype_name
from tuner.core.epilogue import Epilogue
from tuner.core.layers import Layer
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.importers.frontend import ConvFacts, NetworkError, Op
from tuner.importers.fusion import fused_convs
from tuner.importers.tunable import conv_flops, conv_problem


@dataclass(frozen=True)
class ImportedLayer:
    """One distinct problem of the network: how many convolutions have it, and which."""

    name: str
    problem: ConvProblem
    nodes: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class Unsupported:
    node: str
    reason: str
    flops: int | None = None  # the convolution's multiply-adds x 2, where its shape is known


@dataclass(frozen=True)
class Network:
    layers: tuple[ImportedLayer, ...]
    unsupported: tuple[Unsupported, ...]
    not_fused: tuple[str, ...]  # operators after a conv left to the framework, e.g. "conv1 -> Clip"

    def as_layers(self) -> dict[str, Layer]:
        return {layer.name: Layer(layer.name, layer.problem) for layer in self.layers}


def layer_name(node: str) -> str:
    """A layer-table name from a node name (identifier characters only, at most 120 of them)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", node).strip("_")[:120] or "conv"
    return cleaned if cleaned[0].isalpha() else f"n_{cleaned}"


def comment_text(text: str) -> str:
    """A name as it may stand in a '#' comment line: line breaks and other control characters as
    escapes (a node name holding a newline added a real layer to a written layers.yaml)."""
    return "".join(char.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char for char in text)


def assemble(convs: list[ConvFacts], ops: list[Op], shapes: dict[str, list], graph_outputs: set[str],
             network: str, dtype: str | None = None) -> Network:
    """The network from a frontend's convolutions and operator graph: each conv's epilogue read from what
    follows it, its types from `dtype` (--dtype) or its model's, identical problems merged (count and nodes),
    the rest listed with their reasons."""
    problems: dict[ConvProblem, list[str]] = {}
    unsupported, not_fused = [], []
    for conv in convs:
        if "\0" in conv.node:
            raise NetworkError(f"a convolution's node name holds a NUL character ({conv.node!r}); rename the node")
    for fused in fused_convs(convs, ops, shapes, graph_outputs):
        problem = conv_problem(fused.conv, fused.epilogue, dtype)
        if isinstance(problem, str) and fused.conv.transposed and fused.epilogue.fused:
            bare = conv_problem(fused.conv, Epilogue(), dtype)
            if not isinstance(bare, str):  # the convolution is tuned bare; its bias and what follows stay the model's
                not_fused.append(f"{fused.conv.node} -> {'+'.join(fused.epilogue.parts)} (no family fuses an epilogue "
                                 "into a transposed convolution yet)")
                problem = bare
        if isinstance(problem, str):
            unsupported.append(Unsupported(fused.conv.node, problem, conv_flops(fused.conv)))
            continue
        not_fused += fused.not_fused
        problems.setdefault(problem, []).append(fused.conv.node)
    return Network(_named(problems, network), tuple(unsupported), tuple(not_fused))


def _named(problems: dict[ConvProblem, list[str]], network: str) -> tuple[ImportedLayer, ...]:
    """Layer names are the network's, its type (but f16), its batch and the first node's: best.yaml is one table
    per GPU, so features.0 of vgg11 at batch 32 must not take the place of another network's (or batch's, or
    type's)."""
    taken: Counter = Counter()
    layers = []
    for problem, nodes in problems.items():
        dtype = dtype_name(problem)
        typed = "" if dtype == "f16" else f"_{dtype}"  # f16 layers keep the names they had before types
        base = layer_name(f"{network}{typed}_b{problem.n}_{nodes[0]}")
        taken[base] += 1
        name = base if taken[base] == 1 else f"{base}_{taken[base]}"
        layers.append(ImportedLayer(name, problem, tuple(nodes)))
    return tuple(layers)


# The `defaults:` line of a written layers file: the types every imported problem has.
LAYERS_DEFAULTS = ("defaults: {pad: 0, stride: 1, dilation: 1, input_type: f16, filter_type: f16, output_type: f16, "
                   "accumulator_type: f32}")


def layer_entry(name: str, p: ConvProblem) -> str:
    """One layer of a layers file under LAYERS_DEFAULTS, on one line: every shape field (per axis where the
    axes differ, groups where not 1), the types where they are not f16's, the epilogue where there is one."""
    f16 = dtype_name(p) == "f16"
    values = {key: value for key, value in problem_to_dict(p).items() if not (f16 and key.endswith("_type"))}
    return f"  {name}: {{{', '.join(f'{key}: {value}' for key, value in values.items())}}}"


def write_layers(network: Network, path: Path) -> None:
    """A layers.yaml the rest of the tool takes as it is (each layer's count and nodes as comments)."""
    from tuner.store.results import atomic_write

    lines = ["# Convolutions imported by cutlass-conv-tuner (tuner/importers/network.py): one entry per distinct problem.",
             LAYERS_DEFAULTS, "layers:"]
    for layer in network.layers:
        nodes = ", ".join(map(comment_text, layer.nodes[:6])) + (f", ... ({layer.count} in all)" if layer.count > 6
                                                                  else "")
        lines.append(f"  # x{layer.count}: {nodes}")
        lines.append(layer_entry(layer.name, layer.problem))
    for item in network.unsupported:
        lines.append(f"  # not tuned: {comment_text(item.node)}: {comment_text(item.reason)}")
    atomic_write(path, "\n".join(lines) + "\n")
