"""The PyTorch frontend of tuner/importers/network.py: a module traced by torch.fx, its shapes propagated with fake
tensors (no weights read, nothing computed), read into the network's operator form. torch and torchvision
are an optional extra; nothing here is imported unless a module is given."""
from __future__ import annotations

import contextlib
import io
import operator

from tuner.importers.frontend import ConvFacts, NetworkError, Op
from tuner.importers.fusion import FusedConv, fused_convs
from tuner.importers.network import Network, Unsupported, assemble

# The input torchvision's own recipes evaluate at: ImageNet classifiers 224x224 unless named here; segmentation
# models 520x520 (their weights' resize); a detection model its transform's min_size, square.
IMAGE_SIZES = {"inception_v3": 299}
SEGMENTATION_SIZE = 520
TASKS = ("classification", "segmentation", "detection")
DETECTION_HEAD = ("in the detection head, which torch.fx cannot trace (its proposals and boxes are data-dependent): "
                  "only the backbone (with its FPN or extra layers) is imported")


def _torch():
    try:
        import torch
        import torch.fx
    except ImportError:
        raise NetworkError("importing a PyTorch module needs torch: pip install 'cutlass-conv-tuner[torch]'") from None
    return torch


def from_torch(module, example_input, name: str | None = None, dtype: str | None = None) -> Network:
    """The module's convolutions for an input shaped like `example_input` (a tensor, or its shape), in the type
    the module runs in (network.MODEL_DTYPES) or `dtype` (--dtype); `name` (default: the module's class, lower
    case) begins every layer's name."""
    return traced_module(module, example_input, name).network(dtype)


def traced_module(module, example_input, name: str | None = None) -> "_FxGraph":
    """The module traced by torch.fx, each node's shape propagated with fake tensors (of the example's dtype,
    or for a shape of the module's parameters'): what from_torch reads, and what tuner/torch_ops rewrites."""
    torch = _torch()
    from torch._subclasses import FakeTensorMode
    from torch.fx.passes.shape_prop import ShapeProp

    shape = tuple(example_input.shape) if hasattr(example_input, "shape") else tuple(example_input)
    try:
        graph_module = torch.fx.symbolic_trace(module)
    except Exception as error:  # fx raises TraceError, TypeError, ... for data-dependent control flow
        raise NetworkError(f"torch.fx cannot trace {type(module).__name__} ({type(error).__name__}: "
                           f"{str(error).splitlines()[0] if str(error) else ''}); export it to ONNX and pass --onnx")
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    if isinstance(example_input, torch.Tensor):
        dtype = example_input.dtype
    else:  # a shape: the input in the module's own floating-point type (a half-precision model takes f16)
        dtype = parameter.dtype if parameter is not None and parameter.dtype.is_floating_point else None
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints a traceback of its own before raising
            ShapeProp(graph_module, fake_mode=mode).propagate(mode.from_tensor(torch.empty(shape, device=device,
                                                                                           dtype=dtype)))
    except Exception as error:
        raise NetworkError(f"{type(module).__name__} does not run on an input of shape {list(shape)} "
                           f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})") from None
    return _FxGraph(graph_module, name or type(module).__name__.lower())


def from_torchvision(name: str, batch: int, image_size: int | None = None, dtype: str | None = None) -> Network:
    """A torchvision architecture, built without weights (nothing is downloaded) on the meta device (nothing
    allocated): a classification or segmentation model whole; of a detection model the backbone, its head's
    convolutions listed as not tuned. Built in f32: tuned in f16 unless `dtype` (--dtype) says otherwise."""
    torch = _torch()
    try:
        import torchvision
    except ImportError:
        raise NetworkError("--torchvision needs torchvision: pip install 'cutlass-conv-tuner[torch]'") from None
    except RuntimeError as error:  # a torchvision built for another torch fails to register its operators
        raise NetworkError(f"torchvision does not load beside this torch ({error}); install the torchvision "
                           "release made for it (README: a CPU-only pair)") from None
    task = torchvision_task(torchvision, name)
    # A segmentation or detection builder loads ImageNet weights into its backbone unless told not to.
    options = {} if task == "classification" else {"weights_backbone": None}
    try:
        with torch.device("meta"):
            module = torchvision.models.get_model(name, weights=None, **options).eval()
    except Exception:  # a builder that computes with tensors (RegNet's widths) cannot run on the meta device
        try:
            with _parameters_on_meta(torch):
                module = torchvision.models.get_model(name, weights=None, **options).eval()
        except Exception as error:
            raise NetworkError(f"torchvision cannot build {name} ({type(error).__name__}: "
                               f"{str(error).splitlines()[0] if str(error) else ''})") from None
    if task != "detection":
        size = image_size or (SEGMENTATION_SIZE if task == "segmentation" else IMAGE_SIZES.get(name, 224))
        return from_torch(module, (batch, 3, size, size), name, dtype)
    size = image_size or int(module.transform.min_size[-1])
    network = from_torch(_backbone_of(torch, module), (batch, 3, size, size), name, dtype)
    head = tuple(Unsupported(path, DETECTION_HEAD) for path, part in module.named_modules()
                 if isinstance(part, torch.nn.modules.conv._ConvNd) and not path.startswith("backbone."))
    return Network(network.layers, network.unsupported + head, network.not_fused)


def torchvision_task(torchvision, name: str) -> str:
    """Which of TASKS torchvision's model `name` is for; a NetworkError listing the models otherwise."""
    modules = (torchvision.models, torchvision.models.segmentation, torchvision.models.detection)
    known = {task: sorted(torchvision.models.list_models(module=module)) for task, module in zip(TASKS, modules)}
    for task, names in known.items():
        if name in names:
            return task
    raise NetworkError(f"--torchvision {name!r} is not a torchvision classification, segmentation or detection "
                       "model; one of: " + "; ".join(f"{task}: {', '.join(names)}" for task, names in known.items()))


def _backbone_of(torch, detector):
    """The detector's backbone inside a module of its own, so that its nodes are named as in the whole model
    (backbone.body.conv1)."""
    from collections import OrderedDict

    return torch.nn.Sequential(OrderedDict(backbone=detector.backbone))


@contextlib.contextmanager
def _parameters_on_meta(torch):
    """Build a module with the default device for computation but every parameter and buffer moved to
    the meta device as it is registered, so that no weight is initialised or kept."""
    module_class = torch.nn.Module
    register_parameter, register_buffer = module_class.register_parameter, module_class.register_buffer

    def parameter_on_meta(self, name, param):
        register_parameter(self, name, param)
        if param is not None:
            self._parameters[name] = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    def buffer_on_meta(self, name, tensor, persistent=True):
        register_buffer(self, name, tensor if tensor is None else tensor.to("meta"), persistent)

    module_class.register_parameter, module_class.register_buffer = parameter_on_meta, buffer_on_meta
    try:
        yield
    finally:
        module_class.register_parameter, module_class.register_buffer = register_parameter, register_buffer


class _FxGraph:
    def __init__(self, graph_module, name: str):
        self.graph_module, self.name = graph_module, name
        self.modules = dict(graph_module.named_modules())

    def shape(self, node) -> tuple[int, ...] | None:
        meta = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
        return tuple(int(d) for d in meta.shape) if meta is not None and hasattr(meta, "shape") else None

    def element(self, node) -> str | None:
        """The tensor's element type as torch names it (float16, bfloat16, float32), or None."""
        meta = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
        dtype = getattr(meta, "dtype", None)
        return str(dtype).removeprefix("torch.") if dtype is not None else None

    def kind(self, node) -> str:
        import torch
        import torch.nn.functional as F

        nn = torch.nn
        if node.op == "call_module":
            module = self.modules[node.target]
            if isinstance(module, nn.GELU):
                return "Gelu" if module.approximate == "none" else f"Gelu({module.approximate})"
            for types, kind in ((nn.Conv2d, "Conv"), (nn.ConvTranspose2d, "ConvTranspose"),
                                ((nn.BatchNorm2d,), "BatchNormalization"), (nn.ReLU, "Relu"),
                                (nn.SiLU, "Silu"), (nn.Sigmoid, "Sigmoid"),
                                ((nn.MaxPool2d,), "MaxPool"), ((nn.AdaptiveAvgPool2d, nn.AvgPool2d), "AveragePool"),
                                (nn.Flatten, "Flatten")):
                if isinstance(module, types):
                    return kind
            return type(module).__name__
        if node.op == "call_function":
            if node.target is F.gelu:
                return "Gelu" if node.kwargs.get("approximate", "none") == "none" else "Gelu(tanh)"
            functions = {operator.add: "Add", operator.iadd: "Add", torch.add: "Add", operator.mul: "Mul",
                         torch.mul: "Mul", F.relu: "Relu", torch.relu: "Relu", torch.relu_: "Relu", F.silu: "Silu",
                         torch.sigmoid: "Sigmoid", torch.flatten: "Flatten", torch.cat: "Concat", F.conv2d: "Conv"}
            return functions.get(node.target, getattr(node.target, "__name__", str(node.target)))
        if node.op == "call_method":
            methods = {"add": "Add", "add_": "Add", "mul": "Mul", "relu": "Relu", "relu_": "Relu",
                       "sigmoid": "Sigmoid", "flatten": "Flatten", "view": "Reshape", "reshape": "Reshape"}
            return methods.get(node.target, node.target)
        return node.op

    def conv(self, node) -> ConvFacts | None:
        """The facts of a Conv*d module or an F.conv2d call; None for a node that is no convolution."""
        import torch

        nn = torch.nn
        x = self.shape(node.args[0]) if node.args else None
        element = self.element(node.args[0]) if node.args else None
        if node.op == "call_module":
            module = self.modules[node.target]
            transposed = isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d))
            if not isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) and not transposed:
                return None
            facts = dict(node=str(node.target), output=node.name, x=x or (), weight=tuple(module.weight.shape),
                         groups=module.groups, has_bias=module.bias is not None, element=element)
            if transposed:
                facts.update(transposed=True, output_padding=tuple(module.output_padding))
            if module.padding_mode != "zeros":
                return ConvFacts(**facts, unsupported=f"padding_mode {module.padding_mode}: the kernels pad with zeros")
            rank = len(module.kernel_size)
            if len(x or ()) != rank + 2:
                return ConvFacts(**facts, unsupported=f"input of rank {len(x or ())} to a {rank}-D convolution")
            padding, stride, dilation = module.padding, module.stride, module.dilation
        elif node.op == "call_function" and node.target is torch.nn.functional.conv2d:
            arguments = dict(zip(("input", "weight", "bias", "stride", "padding", "dilation", "groups"), node.args))
            arguments.update(node.kwargs)
            weight = self.shape(arguments["weight"])
            facts = dict(node=node.name, output=node.name, x=x or (), weight=weight or (),
                         groups=int(arguments.get("groups", 1)), has_bias=arguments.get("bias") is not None,
                         element=element)
            pair = (lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v))
            padding, stride, dilation = (pair(arguments.get(key, default)) for key, default in
                                         (("padding", 0), ("stride", 1), ("dilation", 1)))
            if isinstance(arguments.get("padding"), str):
                padding = arguments["padding"]
        else:
            return None
        if padding == "valid":
            padding = (0,) * len(stride)
        elif padding == "same":
            if any(s != 1 for s in stride) or any((k - 1) * d % 2 for k, d in zip(facts["weight"][2:], dilation)):
                return ConvFacts(**facts, unsupported="padding 'same' that pads one side more: give explicit padding")
            padding = tuple((k - 1) * d // 2 for k, d in zip(facts["weight"][2:], dilation))
        pads = tuple(padding) * 2  # begins then ends, as ONNX writes them
        return ConvFacts(**facts, pads=pads, strides=tuple(stride), dilations=tuple(dilation))

    def graph_parts(self) -> tuple[list[ConvFacts], list[Op], dict[str, list], set[str]]:
        """The convolutions, operators, shapes and graph outputs in the frontend-neutral form (tuner/importers/frontend.py)."""
        nodes = list(self.graph_module.graph.nodes)
        convs = [facts for facts in map(self.conv, nodes) if facts is not None]
        if not convs:
            raise NetworkError(f"{type(self.graph_module).__name__}: the module has no convolution: nothing to tune")
        ops = [Op(node.name, self.kind(node), tuple(arg.name for arg in node.all_input_nodes), (node.name,))
               for node in nodes if node.op not in ("placeholder", "output", "get_attr")]
        # A Conv op's name is its node's; ConvFacts names the module. The epilogue walk starts at the output.
        shapes = {node.name: list(self.shape(node) or ()) for node in nodes}
        outputs = {arg.name for node in nodes if node.op == "output" for arg in node.all_input_nodes}
        return convs, ops, shapes, outputs

    def network(self, dtype: str | None = None) -> Network:
        return assemble(*self.graph_parts(), self.name, dtype)

    def fused_convs(self) -> list[FusedConv]:
        return fused_convs(*self.graph_parts())
