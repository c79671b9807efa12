"""The ONNX frontend of tuner/importers/network.py: a model read after ONNX shape inference (a symbolic batch
takes --batch), each conv node named as the importer shows it, into the frontend-neutral form."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tuner.importers.frontend import ConvFacts, NetworkError, Op
from tuner.importers.network import Network, Unsupported, assemble

# The opsets whose Conv, BatchNormalization, Add and activations this importer reads (Conv's attributes
# have not changed since opset 11; Gelu is an operator from opset 20).
OPSETS = range(7, 24)
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
            elif str(dim).startswith(INFERRED_DIM_PREFIX) and (origin := self.run_time_size()) is not None:
                raise NetworkError(self.computed_at_run_time(name, node, dims, origin))
            elif index == 0 and batched:  # no --batch: the first branch takes it
                raise NetworkError(f"{self.path}: the batch dimension is symbolic ({dim!r}); pass --batch N")
            else:
                raise NetworkError(f"{self.path}: conv {node}: dimension {index} of {name!r} is symbolic ({dim!r}); "
                                   "only the batch may be: export the model with fixed spatial sizes")
        return tuple(resolved)

    def computed_at_run_time(self, name: str, node: str, dims: list, origin: str) -> str:
        """Which of the tensor's dimensions are computed when the model runs (shape inference names them unk__N:
        no --batch, which sets a symbolic batch, gives them), why, and what export writes them as constants."""
        axes = ("batch", "channels", "height", "width") if len(dims) == 4 else ("batch", "channels")
        computed = [f"{index} ({axes[index]})" if index < len(axes) else str(index)
                    for index, dim in enumerate(dims) if str(dim).startswith(INFERRED_DIM_PREFIX)]
        inputs = [self.shapes.get(info.name, []) for info in self.graph.input if info.name not in self.initializers]
        fixed = {shape[0] for shape in inputs if shape and isinstance(shape[0], int) and shape[0] > 0}
        batch = f" (the model's input batch is a fixed {min(fixed)})" \
            if len(fixed) == 1 and str(dims[0]).startswith(INFERRED_DIM_PREFIX) else ""
        many = len(computed) > 1
        return (f"{self.path}: conv {node}: dimension{'s' if many else ''} {', '.join(computed)} of {name!r} "
                f"{'are' if many else 'is'} computed when the model runs, not symbolic: no --batch sets "
                f"{'them' if many else 'it'}{batch}. {origin} takes its output size from another tensor's shape, "
                "which ONNX shape inference "
                "cannot follow (the legacy TorchScript exporter writes F.interpolate(x, size=y.shape[-2:]) so, as in "
                "DeepLabV3's ASPP pooling); export with torch.onnx.export(model, (x,), path, dynamo=True) (the "
                "default from PyTorch 2.9), which writes those sizes as constants, or for a torchvision model pass "
                "--torchvision NAME")

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
