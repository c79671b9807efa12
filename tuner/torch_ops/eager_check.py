"""The tuned layers checked against eager PyTorch on the example input: each replaced layer on the inputs eager
gave it, and the whole network's output, by relative L2 within a tolerance per output type."""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from tuner.core.dtypes import DataType
from tuner.importers.plan import Fallback

# Relative L2 error against eager that a replaced layer, and the whole network, may show (docs/torch.md):
# both sides round to the output type; eager's f32 convolutions may run in TF32.
TOLERANCE = {DataType.f16: 1e-2, DataType.bf16: 2e-2, DataType.f32: 5e-3}


def relative_l2(output: torch.Tensor, reference: torch.Tensor) -> float:
    reference = reference.double()
    norm = torch.linalg.vector_norm(reference).item()
    error = torch.linalg.vector_norm(output.double() - reference).item()
    if not math.isfinite(error):
        return math.inf
    return error / norm if norm else error


def output_error(output, reference) -> float:
    """The largest relative L2 over the tensors of two outputs of one structure."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    references = reference if isinstance(reference, (tuple, list)) else (reference,)
    return max((relative_l2(o, r) for o, r in zip(outputs, references) if isinstance(o, torch.Tensor)), default=0.0)


def check_layers(graph_module, fused_convs, decisions, tuned, example_input):
    """Run the model eagerly on the example input; at each replaced layer's last fused node, run its
    TunedConv2d on the inputs eager gave that layer and compare. A layer outside the tolerance falls back."""
    by_output = {f.output: f for f in fused_convs if f.conv.node in tuned}
    by_conv = {f.conv.output: f for f in by_output.values()}
    by_add = {f.add: f for f in by_output.values() if f.add}
    tolerance = {f.conv.node: TOLERANCE[d.problem.output_type] for f, d in zip(fused_convs, decisions) if d.replaced}
    errors: dict[str, float] = {}

    class Checking(torch.fx.Interpreter):
        def __init__(self, module):
            super().__init__(module)
            self.inputs: dict[str, list] = {}

        def run_node(self, node):
            if node.name in by_conv:
                args, _ = self.fetch_args_kwargs_from_env(node)
                self.inputs[by_conv[node.name].conv.node] = [args[0], None]
            if node.name in by_add:
                fused = by_add[node.name]
                self.inputs[fused.conv.node][1] = self.env[self._residual_node(node, fused)].clone()
            result = super().run_node(node)
            if node.name in by_output:
                fused = by_output[node.name]
                x, residual = self.inputs.pop(fused.conv.node)
                got = tuned[fused.conv.node](x, residual) if residual is not None else tuned[fused.conv.node](x)
                errors[fused.conv.node] = relative_l2(got, result)
            return result

        @staticmethod
        def _residual_node(node, fused):
            return next(arg for arg in node.all_input_nodes if arg.name == fused.residual)

    with torch.no_grad():
        output = Checking(graph_module).run(example_input)
    checked = []
    for decision in decisions:
        error = errors.get(decision.node)
        if decision.replaced and (error is None or error > tolerance[decision.node]):
            note = "not reached on the example input" if error is None else \
                f"relative L2 {error:.2e} against eager on the example input, above {tolerance[decision.node]:g}"
            decision = decision.falls_back(Fallback.wrong_result, note)
            tuned.pop(decision.node, None)
        elif decision.replaced:
            decision = replace(decision, note=", ".join(filter(None, [decision.note, f"error {error:.1e}"])))
        checked.append(decision)
    return checked, output
