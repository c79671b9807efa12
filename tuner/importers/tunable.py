"""Whether a network's convolution is tuned: its problem, or the reason no family takes it (listed, never
dropped), and its flops, by which a network report weighs what is left untuned."""
from __future__ import annotations

from tuner.core.dtypes import dtype_fields
from tuner.core.epilogue import Epilogue
from tuner.core.errors import ProblemError
from tuner.core.problem import ConvProblem
from tuner.importers.frontend import ConvFacts, NetworkError, conv_dtype


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
