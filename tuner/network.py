"""A network's convolutions as the tuner's layers: every 2-D Conv of an ONNX model becomes an NHWC f16
problem named after its node, with what follows it folded into its epilogue where the tuner can fuse it
(BatchNormalization: scale and bias; an Add of another tensor: the residual; Relu, Sigmoid-times-input
(SiLU), Gelu: the activation). Identical problems are tuned once and carry their count and nodes. A
convolution no family can take is listed with the reason, never dropped."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tuner.epilogue import Activation, Epilogue
from tuner.problem import ConvProblem, Layer, ProblemError

# The opsets whose Conv, BatchNormalization, Add and activations this importer reads (Conv's attributes
# have not changed since opset 11; Gelu is an operator from opset 20).
OPSETS = range(7, 24)


class NetworkError(ValueError):
    """A model file this importer cannot read: one line, what is wrong and how to mend it."""


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


@dataclass(frozen=True)
class Network:
    layers: tuple[ImportedLayer, ...]
    unsupported: tuple[Unsupported, ...]
    not_fused: tuple[str, ...]  # operators after a conv left to the framework, e.g. "conv1 -> Clip"

    def as_layers(self) -> dict[str, Layer]:
        return {layer.name: Layer(layer.name, layer.problem) for layer in self.layers}


def layer_name(node: str) -> str:
    """A layer-table name from a node name (identifier characters only)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", node).strip("_") or "conv"
    return cleaned if cleaned[0].isalpha() else f"n_{cleaned}"


def from_onnx(path: Path, batch: int | None = None) -> Network:
    try:
        import onnx
        from onnx import shape_inference
    except ImportError:
        raise NetworkError("reading ONNX needs the onnx package: pip install onnx") from None
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise NetworkError(f"{path}: no such file") from None
    except Exception as error:  # onnx raises DecodeError, ValueError, ... for a file that is not a model
        raise NetworkError(f"{path} is not an ONNX model ({type(error).__name__}); export one with "
                           "torch.onnx.export or pass a .onnx file") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset not in OPSETS:
        raise NetworkError(f"{path}: ONNX opset {opset} is not one this importer reads "
                           f"({OPSETS.start} to {OPSETS.stop - 1}); re-export with one of those")
    try:
        model = shape_inference.infer_shapes(model)
    except Exception as error:
        raise NetworkError(f"{path}: ONNX shape inference failed ({error}); check the model with onnx.checker") from None
    return _Graph(model.graph, batch, path).network()


class _Graph:
    def __init__(self, graph, batch: int | None, path: Path):
        from onnx import numpy_helper

        self.graph, self.batch, self.path = graph, batch, path
        self.initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.shapes: dict[str, list] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            dims = info.type.tensor_type.shape.dim
            self.shapes[info.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
        for name, array in self.initializers.items():
            self.shapes[name] = list(array.shape)
        self.consumers: dict[str, list] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def shape(self, name: str, node: str, batched: bool = True) -> list[int]:
        """The tensor's dimensions; `batched`: its first is the batch, which --batch sets."""
        dims = self.shapes.get(name)
        if dims is None:
            raise NetworkError(f"{self.path}: conv {node}: the shape of {name!r} is unknown after shape inference")
        resolved = []
        for index, dim in enumerate(dims):
            if index == 0 and batched and self.batch is not None:  # --batch sets the batch, symbolic or not
                resolved.append(self.batch)
            elif isinstance(dim, int) and dim > 0:
                resolved.append(dim)
            elif index == 0 and batched:
                if self.batch is None:
                    raise NetworkError(f"{self.path}: the batch dimension is symbolic ({dim!r}); pass --batch N")
                resolved.append(self.batch)
            else:
                raise NetworkError(f"{self.path}: conv {node}: dimension {index} of {name!r} is symbolic ({dim!r}); "
                                   "only the batch may be: export the model with fixed spatial sizes")
        return resolved

    def only_consumer(self, tensor: str):
        consumers = self.consumers.get(tensor, [])
        graph_outputs = {o.name for o in self.graph.output}
        return consumers[0] if len(consumers) == 1 and tensor not in graph_outputs else None

    def silu_of(self, tensor: str) -> bool:
        """SiLU as exporters write it: the tensor's only consumers are Sigmoid(t) and Mul(t, Sigmoid(t))."""
        consumers = self.consumers.get(tensor, [])
        if len(consumers) != 2 or tensor in {o.name for o in self.graph.output}:
            return False
        sigmoid = next((n for n in consumers if n.op_type == "Sigmoid"), None)
        multiply = next((n for n in consumers if n.op_type == "Mul"), None)
        return (sigmoid is not None and multiply is not None
                and sorted(multiply.input) == sorted([tensor, sigmoid.output[0]]))

    def epilogue_after(self, conv, has_bias: bool) -> tuple[Epilogue, list[str]]:
        """Follow the conv's single-consumer chain: BatchNormalization, Add, activation."""
        fields: dict = {"bias": has_bias}
        tensor, not_fused = conv.output[0], []
        node = self.only_consumer(tensor)
        if node is not None and node.op_type == "BatchNormalization":
            fields.update(scale=True, bias=True)
            tensor, node = node.output[0], self.only_consumer(node.output[0])
        if node is not None and node.op_type == "Add":
            other = next((name for name in node.input if name != tensor), None)
            if other is None or self.shapes.get(other) != self.shapes.get(tensor):  # a broadcast add: not a residual
                not_fused.append(f"{conv.name or conv.output[0]} -> Add (not shaped as the output)")
                return Epilogue(**fields), not_fused
            fields["residual"] = True
            tensor, node = node.output[0], self.only_consumer(node.output[0])
        if self.silu_of(tensor):
            fields["activation"] = Activation.silu
        elif node is not None:
            activation = {"Relu": Activation.relu, "Gelu": Activation.gelu}.get(node.op_type)
            if activation is not None:
                fields["activation"] = activation
            elif node.op_type not in ("Conv", "MaxPool", "GlobalAveragePool", "AveragePool", "Flatten", "Concat"):
                not_fused.append(f"{conv.name or conv.output[0]} -> {node.op_type}")
        return Epilogue(**fields), not_fused

    def network(self) -> Network:
        problems: dict[ConvProblem, list[str]] = {}
        unsupported, not_fused = [], []
        convs = [node for node in self.graph.node if node.op_type == "Conv"]
        if not convs:
            raise NetworkError(f"{self.path}: the model has no Conv node: nothing to tune")
        for conv in convs:
            name = conv.name or conv.output[0]
            attributes = {a.name: a for a in conv.attribute}
            weight = self.shape(conv.input[1], name, batched=False)
            if len(weight) != 4:
                unsupported.append(Unsupported(name, f"{len(weight) - 2}-D convolution: only 2-D convs are tuned"))
                continue
            group = attributes["group"].i if "group" in attributes else 1
            x = self.shape(conv.input[0], name)
            n, c, h, w = x
            k, c_per_group, r, s = weight
            if group != 1:
                kind = "depthwise" if group == c and c_per_group == 1 else f"grouped ({group} groups)"
                unsupported.append(Unsupported(name, f"{kind} convolution: no family runs groups > 1"))
                continue
            pads = list(attributes["pads"].ints) if "pads" in attributes else [0, 0, 0, 0]
            strides = list(attributes["strides"].ints) if "strides" in attributes else [1, 1]
            dilations = list(attributes["dilations"].ints) if "dilations" in attributes else [1, 1]
            auto_pad = attributes["auto_pad"].s.decode() if "auto_pad" in attributes else "NOTSET"
            if auto_pad not in ("NOTSET", "VALID"):
                unsupported.append(Unsupported(name, f"auto_pad {auto_pad}: export with explicit pads"))
                continue
            if len(set(pads)) != 1 or len(set(strides)) != 1 or len(set(dilations)) != 1:
                unsupported.append(Unsupported(name, f"asymmetric pads {pads}, strides {strides} or dilations "
                                                     f"{dilations}: the tuner's problems are symmetric"))
                continue
            epilogue, skipped = self.epilogue_after(conv, has_bias=len(conv.input) > 2 and bool(conv.input[2]))
            not_fused += skipped
            try:
                problem = ConvProblem(n=n, h=h, w=w, c=c, k=k, r=r, s=s, pad=pads[0], stride=strides[0],
                                      dilation=dilations[0], epilogue=epilogue)
            except ProblemError as error:
                unsupported.append(Unsupported(name, str(error)))
                continue
            problems.setdefault(problem, []).append(name)
        return Network(self._named(problems), tuple(unsupported), tuple(not_fused))

    @staticmethod
    def _named(problems: dict[ConvProblem, list[str]]) -> tuple[ImportedLayer, ...]:
        taken: Counter = Counter()
        layers = []
        for problem, nodes in problems.items():
            base = layer_name(nodes[0])
            taken[base] += 1
            name = base if taken[base] == 1 else f"{base}_{taken[base]}"
            layers.append(ImportedLayer(name, problem, tuple(nodes)))
        return tuple(layers)


def write_layers(network: Network, path: Path) -> None:
    """A layers.yaml the rest of the tool takes as it is (each layer's count and nodes as comments)."""
    from tuner.results import atomic_write

    lines = ["# Convolutions imported by cutlass-conv-tuner (tuner/network.py): one entry per distinct problem.",
             "defaults: {pad: 0, stride: 1, dilation: 1, input_type: f16, filter_type: f16, output_type: f16, "
             "accumulator_type: f32}", "layers:"]
    for layer in network.layers:
        p = layer.problem
        fields = f"n: {p.n}, h: {p.h}, w: {p.w}, c: {p.c}, k: {p.k}, r: {p.r}, s: {p.s}, pad: {p.pad}, " \
                 f"stride: {p.stride}, dilation: {p.dilation}"
        if p.epilogue.fused:
            fields += f", epilogue: {p.epilogue.key}"
        nodes = ", ".join(layer.nodes[:6]) + (f", ... ({layer.count} in all)" if layer.count > 6 else "")
        lines.append(f"  # x{layer.count}: {nodes}")
        lines.append(f"  {layer.name}: {{{fields}}}")
    for item in network.unsupported:
        lines.append(f"  # not tuned: {item.node}: {item.reason}")
    atomic_write(path, "\n".join(lines) + "\n")
