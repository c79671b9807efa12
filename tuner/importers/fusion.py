"""What follows a convolution in the operator graph, read into its epilogue where the tuner can fuse it: batch
norm (scale and bias), an add of another tensor shaped as the output (the residual), ReLU, SiLU (also as
x * sigmoid(x)) and exact GELU (the activation). Another elementwise operator after it is listed as not fused."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.core.epilogue import Activation, Epilogue
from tuner.importers.frontend import ConvFacts, Op

# Operators after a conv that are not elementwise: nothing to fuse, so not listed as "not fused".
STRUCTURAL = {"Conv", "ConvTranspose", "MaxPool", "GlobalAveragePool", "AveragePool", "Flatten", "Concat", "Reshape", "Pad"}
ACTIVATIONS = {"Relu": Activation.relu, "Gelu": Activation.gelu, "Silu": Activation.silu}


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
