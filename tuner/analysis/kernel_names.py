"""Short names of the demangled kernel names a report gives: CUTLASS 2.x convolutions by tile and stages, the
CUTLASS 3.x kernels this tuner emits by their layer's alias."""
from __future__ import annotations

import re


def _template_arguments(text: str, template: str) -> list[str] | None:
    """Top-level arguments of the first `template<...>` in a demangled name, or None."""
    match = re.search(rf"(?<![\w]){re.escape(template)}<", text)
    if match is None:
        return None
    arguments, depth, start = [], 0, match.end()
    for index in range(match.end(), len(text)):
        char = text[index]
        if char in "<(":
            depth += 1
        elif char in ">)":
            if depth == 0:
                arguments.append(text[start:index].strip())
                return arguments
            depth -= 1
        elif char == "," and depth == 0:
            arguments.append(text[start:index].strip())
            start = index + 1
    return None


def _integer(argument: str) -> int | None:
    """'128' or '(int)128' -> 128."""
    match = re.fullmatch(r"(?:\([\w:]+\))?(\d+)", argument)
    return int(match[1]) if match else None


def _mainloop_stages(mainloop: str) -> int | None:
    if re.match(r"(?:\w+::)*ImplicitGemmPipelined<", mainloop):
        return 2
    arguments = _template_arguments(mainloop, "ImplicitGemmMultistage")
    # ImplicitGemmMultistage<Shape, IterA, SmemIterA, CacheA, IterB, SmemIterB, CacheB, Policy, Stages, ...>
    if arguments is None or len(arguments) < 9:
        return None
    return _integer(arguments[8])


def kernel_short_name(kernel_name: str) -> str:
    """'ImplicitGemmConvolution 128x128x64, 3 stages' for CUTLASS 2.x convs; 'CUTLASS 3.x <name>' for the
    3.x kernels this tuner emits (cutlass::device_kernel<...::<alias>_detail::Kernel>); else the name's
    first 60 chars."""
    fallback = kernel_name.removeprefix("void ")[:60]
    device_kernel = _template_arguments(kernel_name, "device_kernel")
    if device_kernel:
        named = re.search(r"(\w+)_detail::\w*Kernel$", device_kernel[0])
        if named:
            return f"CUTLASS 3.x {named[1]}"
    kernel_arguments = _template_arguments(kernel_name, "ImplicitGemmConvolution")
    if not kernel_arguments:
        return fallback
    shape = _template_arguments(kernel_arguments[0], "GemmShape")
    dims = [_integer(argument) for argument in shape or []]
    if len(dims) != 3 or None in dims:
        return fallback
    name = f"ImplicitGemmConvolution {'x'.join(map(str, dims))}"
    stages = _mainloop_stages(kernel_arguments[0])
    return f"{name}, {stages} stages" if stages else name
