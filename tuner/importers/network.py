"""A network's convolutions as the tuner's layers: every 2-D convolution (transposed ones too: ConvTranspose,
ConvTranspose2d) of an ONNX model or a PyTorch module becomes an NHWC problem (in the model's type, MODEL_DTYPES, or --dtype's) named after its node, with what follows it folded into its epilogue
where the tuner can fuse it (batch norm: scale and bias; an add of another tensor: the residual; ReLU,
SiLU (also as x * sigmoid(x)), exact GELU: the activation). Identical problems are tuned once and carry
their count and nodes. A convolution no family can take is listed with the reason, never dropped.

Each frontend (ONNX here, PyTorch in tuner/importers/torch_import.py) reads its graph into the same form: the
operators as `Op`s in ONNX's vocabulary, the tensors' shapes, and each convolution's `ConvFacts`;
`assemble` does the rest for both."""
from __future__ import annotations

import ast
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tuner.core.epilogue import Activation, Epilogue
from tuner.core.problem import ConvProblem, Layer, ProblemError, dtype_fields, dtype_name, problem_to_dict

# The opsets whose Conv, BatchNormalization, Add and activations this importer reads (Conv's attributes
# have not changed since opset 11; Gelu is an operator from opset 20).
OPSETS = range(7, 24)
# Operators after a conv that are not elementwise: nothing to fuse, so not listed as "not fused".
STRUCTURAL = {"Conv", "ConvTranspose", "MaxPool", "GlobalAveragePool", "AveragePool", "Flatten", "Concat", "Reshape", "Pad"}
ACTIVATIONS = {"Relu": Activation.relu, "Gelu": Activation.gelu, "Silu": Activation.silu}
# Convolutions of other kinds than fprop f16/f32 Conv: listed as not tuned, with the reason, never dropped.
OTHER_CONVS = {"ConvInteger": "an integer (quantised) convolution: only f16 Conv is tuned",
               "QLinearConv": "a quantised convolution: only f16 Conv is tuned",
               "DeformConv": "a deformable convolution: only Conv is tuned"}


# Names the newer (torch.export) ONNX exporter gives nodes: node_Conv_344, node_conv2d_60. It keeps the module
# each came from in the node's metadata, as the list of name scopes (or the older "namespace" string).
GENERATED_NODE_NAME = re.compile(r"node_\w+")
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
NAMESPACE_KEY = "namespace"
MAX_METADATA_CHARS = 10_000
MAX_STREAM_BYTES = 256 << 20  # read from a device or a pipe given as --onnx
# ONNX shape inference names a dimension it cannot work out unk__0, unk__1, ...
INFERRED_DIM_PREFIX = "unk__"  # a scope list longer than this is not read: the node keeps its own name


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


@dataclass(frozen=True)
class Op:
    """One operator of an imported graph in ONNX's vocabulary ("Conv", "BatchNormalization", "Add", "Relu",
    "Gelu" (exact), "Silu", "Sigmoid", "Mul"; any other keeps its framework's name)."""

    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class ConvFacts:
    """One convolution as its frontend read it: x is N, C, H, W with the batch resolved; weight is
    K, C / groups, kernel dims (two for a 2-D conv); pads as ONNX writes them, every axis's begin, then every
    axis's end ([top, left, bottom, right]). `unsupported`: a reason the frontend already knows."""

    node: str
    output: str
    x: tuple[int, ...]
    weight: tuple[int, ...]
    groups: int = 1
    pads: tuple[int, ...] = (0, 0, 0, 0)
    strides: tuple[int, ...] = (1, 1)
    dilations: tuple[int, ...] = (1, 1)
    has_bias: bool = False
    unsupported: str | None = None
    element: str | None = None  # the input's element type as the frontend names it: float16, bfloat16, float32, ...
    # A transposed convolution (ONNX ConvTranspose, torch's ConvTranspose2d): its weight is C, K / groups, kernel
    # dims; output_padding per axis.
    transposed: bool = False
    output_padding: tuple[int, ...] = (0, 0)


# A model's element type -> the --dtype its convolutions are tuned in. An f32 model is tuned in f16, as the
# tuner always has (inference in half precision); --dtype tf32 keeps its f32 tensors, with TF32 math.
MODEL_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f16"}


def conv_dtype(conv: ConvFacts, dtype: str | None) -> str | None:
    """The --dtype a convolution is tuned in: `dtype` where given, else its model's (MODEL_DTYPES; f16 where the
    frontend could not tell); None where its model's type is none of those."""
    if dtype is not None:
        return dtype
    return "f16" if conv.element is None else MODEL_DTYPES.get(conv.element)


def from_onnx(path: Path, batch: int | None = None, dtype: str | None = None) -> Network:
    try:
        import onnx
        from onnx import shape_inference
    except ImportError:
        raise NetworkError("reading ONNX needs the onnx package: pip install onnx") from None
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            # a device or a pipe has no size to stop at (/dev/zero never ends): read it with a cap
            with open(path, "rb") as handle:
                data = handle.read(MAX_STREAM_BYTES + 1)
            if len(data) > MAX_STREAM_BYTES:
                raise NetworkError(f"{path} is not a file and gives more than {MAX_STREAM_BYTES >> 20} MB: refused; "
                                   "pass a .onnx file")
            model = onnx.load_model_from_string(data)
        else:
            model = onnx.load(str(path))
    except FileNotFoundError:
        raise NetworkError(f"{path}: no such file") from None
    except NetworkError:
        raise
    except Exception as error:  # onnx raises DecodeError, ValueError, ... for a file that is not a model
        raise NetworkError(f"{path} is not an ONNX model ({type(error).__name__}); export one with "
                           "torch.onnx.export or pass a .onnx file") from None
    if not model.graph.node:
        raise NetworkError(f"{path} holds no ONNX graph (an empty or truncated file?); export one with "
                           "torch.onnx.export or pass a .onnx file")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset not in OPSETS:
        raise NetworkError(f"{path}: ONNX opset {opset} is not one this importer reads "
                           f"({OPSETS.start} to {OPSETS.stop - 1}); re-export with one of those")
    try:
        model = shape_inference.infer_shapes(model)
    except Exception as error:
        raise NetworkError(f"{path}: ONNX shape inference failed ({error}); check the model with onnx.checker") from None
    return _OnnxGraph(model.graph, batch, path, dtype).network()


class _OnnxGraph:
    def __init__(self, graph, batch: int | None, path: Path, dtype: str | None = None):
        from onnx import TensorProto, numpy_helper

        self.graph, self.batch, self.path, self.dtype = graph, batch, path, dtype
        self.initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.shapes: dict[str, list] = {}
        # each tensor's element type, lower case as numpy and torch name them (FLOAT16 -> float16; FLOAT: float32)
        self.elements: dict[str, str] = {t.name: TensorProto.DataType.Name(t.data_type).lower()
                                          for t in graph.initializer}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            dims = info.type.tensor_type.shape.dim
            self.shapes[info.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            if info.type.tensor_type.elem_type:
                self.elements[info.name] = TensorProto.DataType.Name(info.type.tensor_type.elem_type).lower()
        self.elements = {name: {"float": "float32", "double": "float64"}.get(e, e) for name, e in self.elements.items()}
        for name, array in self.initializers.items():
            self.shapes[name] = list(array.shape)

    def shape(self, name: str, node: str, batched: bool = True) -> tuple[int, ...]:
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
            elif dim == 0:
                raise NetworkError(f"{self.path}: conv {node}: dimension {index} of {name!r} is 0 (an empty tensor): "
                                   "nothing to convolve; export the model with its real sizes")
            elif index == 0 and batched:
                if self.batch is None:
                    raise NetworkError(f"{self.path}: the batch dimension is symbolic ({dim!r}); pass --batch N")
                resolved.append(self.batch)
            elif (origin := self.run_time_size()) is not None and str(dim).startswith(INFERRED_DIM_PREFIX):
                raise NetworkError(
                    f"{self.path}: conv {node}: dimension {index} of {name!r} is only known when the model runs: "
                    f"{origin} takes its output size from another tensor's shape, which ONNX shape inference cannot "
                    "follow (the legacy TorchScript exporter writes F.interpolate(x, size=y.shape[-2:]) so, as in "
                    "DeepLabV3's ASPP pooling); export with torch.onnx.export(model, (x,), path, dynamo=True) (the "
                    "default from PyTorch 2.9), which writes those sizes as constants, or for a torchvision model "
                    "pass --torchvision NAME")
            else:
                raise NetworkError(f"{self.path}: conv {node}: dimension {index} of {name!r} is symbolic ({dim!r}); "
                                   "only the batch may be: export the model with fixed spatial sizes")
        return tuple(resolved)

    def run_time_size(self) -> str | None:
        """The first node (in graph order) whose output has a size that shape inference had to leave
        unknown (an inferred name after the batch), e.g. "Resize node 'up'"; None where there is none."""
        for node in self.graph.node:
            for output in node.output:
                if any(str(dim).startswith(INFERRED_DIM_PREFIX) for dim in self.shapes.get(output, [])[1:]):
                    return f"{node.op_type} node {node.name or output!r}"
        return None

    @staticmethod
    def kind(node) -> str:
        if node.op_type == "Gelu":
            approximate = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
            return "Gelu" if approximate == "none" else f"Gelu({approximate})"
        return node.op_type

    def node_names(self) -> dict[int, str]:
        """Each conv-like node's name as the importer shows it (by position in the graph): its own, or where
        that is empty or the newer exporter's generated name, the module it came from (see module_of); a
        module that made several such nodes names the later ones with their own name after it."""
        names, taken = {}, set()
        for index, node in enumerate(self.graph.node):
            if node.op_type not in ("Conv", "ConvTranspose") and node.op_type not in OTHER_CONVS:
                continue
            own = node.name or node.output[0]
            module = module_of(node) if not node.name or GENERATED_NODE_NAME.fullmatch(node.name) else None
            name = own if module is None else module if module not in taken else f"{module} ({own})"
            taken.add(name)
            names[index] = name
        return names

    def conv(self, node, name: str) -> ConvFacts:
        attributes = {a.name: a for a in node.attribute}
        weight = self.shape(node.input[1], name, batched=False)
        x = self.shape(node.input[0], name)
        rank = len(weight) - 2
        auto_pad = attributes["auto_pad"].s.decode() if "auto_pad" in attributes else "NOTSET"
        unsupported = None if auto_pad in ("NOTSET", "VALID") else f"auto_pad {auto_pad}: export with explicit pads"
        transposed = node.op_type == "ConvTranspose"
        if transposed and "output_shape" in attributes and unsupported is None:
            unsupported = "ConvTranspose with output_shape (pads worked out by the runtime): export with explicit pads"
        return ConvFacts(
            name, node.output[0], x, weight,
            groups=attributes["group"].i if "group" in attributes else 1,
            pads=tuple(attributes["pads"].ints) if "pads" in attributes else (0,) * (2 * rank),
            strides=tuple(attributes["strides"].ints) if "strides" in attributes else (1,) * rank,
            dilations=tuple(attributes["dilations"].ints) if "dilations" in attributes else (1,) * rank,
            has_bias=len(node.input) > 2 and bool(node.input[2]),
            unsupported=unsupported,
            element=self.elements.get(node.input[0], self.elements.get(node.input[1])),
            transposed=transposed,
            output_padding=tuple(attributes["output_padding"].ints) if "output_padding" in attributes else (0,) * rank)

    def network(self) -> Network:
        names = self.node_names()
        convs = [self.conv(node, names[index]) for index, node in enumerate(self.graph.node)
                 if node.op_type in ("Conv", "ConvTranspose")]
        others = [Unsupported(names[index], f"{node.op_type}: {OTHER_CONVS[node.op_type]}")
                  for index, node in enumerate(self.graph.node) if node.op_type in OTHER_CONVS]
        if not convs:
            named = "; ".join(f"{item.node} ({item.reason})" for item in others[:3])
            raise NetworkError(f"{self.path}: the model has no Conv node: nothing to tune"
                               + (f"; its convolutions are not tuned: {named}" if named else ""))
        ops = [Op(node.name or node.output[0], self.kind(node), tuple(node.input), tuple(node.output))
               for node in self.graph.node]
        network = assemble(convs, ops, self.shapes, {o.name for o in self.graph.output}, self.path.stem, self.dtype)
        return Network(network.layers, network.unsupported + tuple(others), network.not_fused)


def module_of(node) -> str | None:
    """The dotted path of the module that produced an ONNX node (backbone.layer1.0.conv1), as the torch
    exporter records it in the node's metadata; None where it recorded none. With BatchNormalization folded
    into the conv by the exporter's optimiser, that module is the batch norm after the conv."""
    metadata = {entry.key: entry.value for entry in node.metadata_props}
    scopes = metadata.get(NAME_SCOPES_KEY, "")
    if scopes and len(scopes) <= MAX_METADATA_CHARS:
        try:
            parsed = ast.literal_eval(scopes)  # the exporter writes the list as Python's repr
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            parsed = None
        # The scopes run from the model ('') to the module, then the operator's own name (conv2d_60).
        if isinstance(parsed, list) and len(parsed) >= 2 and isinstance(parsed[-2], str) and parsed[-2]:
            return parsed[-2]
    namespace = metadata.get(NAMESPACE_KEY, "")
    if namespace and len(namespace) <= MAX_METADATA_CHARS:
        # ": Model/backbone: Class/backbone.conv1: torch.nn.modules.conv.Conv2d/conv2d: aten.conv2d.default"
        parts = namespace.split("/")
        module = parts[-2].rpartition(": ")[0] if len(parts) >= 2 else ""
        return module or None
    return None


class _Epilogues:
    """Reads what follows a conv in the operator graph, whichever frontend built it."""

    def __init__(self, ops: list[Op], shapes: dict[str, list], graph_outputs: set[str]):
        self.shapes, self.graph_outputs = shapes, graph_outputs
        # Adds already fused as a residual: where two convs' chains meet at one (a residual block's main
        # path and its downsample branch), the first conv in graph order takes it, the other stops before.
        self.claimed: set[str] = set()
        self.consumers: dict[str, list[Op]] = {}
        for op in ops:
            for name in op.inputs:
                self.consumers.setdefault(name, []).append(op)

    def only_consumer(self, tensor: str) -> Op | None:
        consumers = self.consumers.get(tensor, [])
        return consumers[0] if len(consumers) == 1 and tensor not in self.graph_outputs else None

    def silu_of(self, tensor: str) -> bool:
        """SiLU as exporters write it: the tensor's only consumers are Sigmoid(t) and Mul(t, Sigmoid(t))."""
        consumers = self.consumers.get(tensor, [])
        if len(consumers) != 2 or tensor in self.graph_outputs:
            return False
        sigmoid = next((op for op in consumers if op.kind == "Sigmoid"), None)
        multiply = next((op for op in consumers if op.kind == "Mul"), None)
        return (sigmoid is not None and multiply is not None
                and sorted(multiply.inputs) == sorted([tensor, sigmoid.outputs[0]]))

    def after(self, conv: ConvFacts) -> "FusedConv":
        """Follow the conv's single-consumer chain: batch norm, add, activation."""
        fields: dict = {"bias": conv.has_bias}
        tensor, not_fused, chain = conv.output, [], {}
        op = self.only_consumer(tensor)
        if op is not None and op.kind == "BatchNormalization":
            fields.update(scale=True, bias=True)
            chain["norm"] = op.name
            tensor, op = op.outputs[0], self.only_consumer(op.outputs[0])
        if op is not None and op.kind == "Add" and op.name in self.claimed:
            return FusedConv(conv, Epilogue(**fields), tensor, tuple(not_fused), **chain)  # fused into the other conv
        if op is not None and op.kind == "Add":
            other = next((name for name in op.inputs if name != tensor), None)
            if other is None or self.shapes.get(other) != self.shapes.get(tensor):  # a broadcast add: not a residual
                not_fused.append(f"{conv.node} -> Add (not shaped as the output)")
                return FusedConv(conv, Epilogue(**fields), tensor, tuple(not_fused), **chain)
            fields["residual"] = True
            self.claimed.add(op.name)
            chain.update(add=op.name, residual=other)
            tensor, op = op.outputs[0], self.only_consumer(op.outputs[0])
        if self.silu_of(tensor):
            fields["activation"] = Activation.silu
            consumers = self.consumers[tensor]
            chain["activation"] = tuple(op.name for op in consumers)
            tensor = next(op for op in consumers if op.kind == "Mul").outputs[0]
        elif op is not None:
            if op.kind in ACTIVATIONS:
                fields["activation"] = ACTIVATIONS[op.kind]
                chain["activation"] = (op.name,)
                tensor = op.outputs[0]
            elif op.kind not in STRUCTURAL:
                not_fused.append(f"{conv.node} -> {op.kind}")
        return FusedConv(conv, Epilogue(**fields), tensor, tuple(not_fused), **chain)


@dataclass(frozen=True)
class FusedConv:
    """A convolution with what its epilogue takes of the graph: the operators fused into it (by name), the
    residual's tensor, and the tensor its last fused operator writes, which the fused kernel writes instead."""

    conv: ConvFacts
    epilogue: Epilogue
    output: str
    not_fused: tuple[str, ...] = ()
    norm: str | None = None
    add: str | None = None
    residual: str | None = None
    activation: tuple[str, ...] = ()

    @property
    def fused_ops(self) -> tuple[str, ...]:
        return tuple(name for name in (self.norm, self.add, *self.activation) if name)


def fused_convs(convs: list[ConvFacts], ops: list[Op], shapes: dict[str, list],
                graph_outputs: set[str]) -> list[FusedConv]:
    """Each conv with its epilogue read from what follows it, in graph order (the order decides which of two
    convs meeting at one add takes it as its residual)."""
    epilogues = _Epilogues(ops, shapes, graph_outputs)
    return [epilogues.after(conv) for conv in convs]


def conv_problem(conv: ConvFacts, epilogue: Epilogue, dtype: str | None = None) -> ConvProblem | str:
    """The tuner's problem for a convolution in `dtype` (default: its model's, conv_dtype), or why no family
    takes it."""
    if conv.unsupported:
        return conv.unsupported
    dtype = conv_dtype(conv, dtype)
    if dtype is None:
        return (f"a {conv.element} convolution: the kernels take f16, bf16 and f32 models; pass --dtype "
                "f16|bf16|tf32 to tune it in one of those")
    if len(conv.weight) != 4:
        return f"{len(conv.weight) - 2}-D convolution: only 2-D convs are tuned"
    if len(conv.x) != 4:
        return f"input of shape {list(conv.x)} to a 2-D convolution: expected N, C, H, W"
    n, c, h, w = conv.x
    if conv.transposed:
        weight_c, k_per_group, r, s = conv.weight
        k, c_per_group = k_per_group * conv.groups, weight_c // conv.groups
        if weight_c != c:
            raise NetworkError(f"transposed conv {conv.node}: its weight takes {weight_c} input channels, its input has "
                               f"{c}: the model is inconsistent; check it with onnx.checker")
    else:
        k, c_per_group, r, s = conv.weight
    if c_per_group * conv.groups != c:
        raise NetworkError(f"conv {conv.node}: its weight takes {c_per_group} channels per group x {conv.groups} "
                           f"group(s), its input has {c}: the model is inconsistent; check it with onnx.checker")
    (top, left), (bottom, right) = conv.pads[:2], conv.pads[2:]
    if (top, left) != (bottom, right):
        return (f"one-sided padding: pads [top, left, bottom, right] = {list(conv.pads)}; the kernels pad both sides "
                "of an axis alike")
    transposed = {}
    if conv.transposed:
        if conv.groups != 1:
            return f"grouped transposed convolution: {conv.groups} groups; transposed convolutions are tuned ungrouped"
        transposed = dict(transposed=True, output_padding_h=conv.output_padding[0],
                          output_padding_w=conv.output_padding[1])
    try:
        problem = ConvProblem(n=n, h=h, w=w, c=c, k=k, r=r, s=s, pad_h=top, pad_w=left, stride_h=conv.strides[0],
                              stride_w=conv.strides[1], dilation_h=conv.dilations[0], dilation_w=conv.dilations[1],
                              groups=conv.groups, epilogue=epilogue, **dtype_fields(dtype), **transposed)
    except ProblemError as error:
        return str(error)
    from tuner.families import registry  # here: the families' modules are not needed to read a graph

    reasons = registry.problem_reasons(problem)
    if all(reasons.values()):  # each names what it needs, e.g. "pad K to 8"
        if problem.groups != 1:  # the reasons of the families that run grouped convolutions
            grouped = {name: reasons[name] for name, family in registry.families().items() if family.runs_groups}
            kind = "depthwise convolution: " if problem.groups == c else f"grouped convolution: {problem.groups} groups; "
            return kind + "; ".join(f"{name}: {reason}" for name, reason in grouped.items())
        return "no family runs it: " + "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
    return problem


def conv_flops(conv: ConvFacts) -> int | None:
    """2 x the multiply-adds of a 2-D convolution as the frontend read it (one-sided pads and groups
    included); None where its shape is not that of one, or its frontend already found it of another kind."""
    if conv.unsupported or len(conv.x) != 4 or len(conv.weight) != 4 or len(conv.pads) != 4 or conv.groups < 1:
        return None
    n, _, h, w = conv.x
    if conv.transposed:  # every input pixel times every tap: the flops of the conv whose dgrad it is
        c, k_per_group, r, s = conv.weight
        return 2 * n * h * w * c * k_per_group * r * s
    k, c_per_group, r, s = conv.weight
    rows, cols = ((size + begin + end - dilation * (taps - 1) - 1) // stride + 1
                  for size, begin, end, taps, stride, dilation in
                  ((h, conv.pads[0], conv.pads[2], r, conv.strides[0], conv.dilations[0]),
                   (w, conv.pads[1], conv.pads[3], s, conv.strides[1], conv.dilations[1])))
    return 2 * n * max(rows, 0) * max(cols, 0) * k * c_per_group * r * s


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
