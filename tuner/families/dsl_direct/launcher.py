"""What cute.compile is handed for a dsl_direct spec: the kernel of its mapping and fake arguments."""
from __future__ import annotations

import cutlass

from .kernel import DirectKernel
from .kernel_mma import MmaKernel
from .spec import DirectBuildSpec


def build_launcher(spec: DirectBuildSpec):
    """The (jit function, fake arguments) that cute.compile takes for one spec: the mapping's kernel."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    p = spec.problem
    element = {"f16": cutlass.Float16, "bf16": cutlass.BFloat16}[spec.element]
    f32 = cutlass.Float32
    x = make_fake_compact_tensor(element, (p.n * p.h * p.w * p.c,), assumed_align=16)
    w = make_fake_compact_tensor(element, (p.c * p.r * p.s * p.group_width,), assumed_align=16)
    y = make_fake_compact_tensor(element, (p.n * p.p * p.q * p.c,), assumed_align=16)
    scale = make_fake_compact_tensor(f32, (p.c,), assumed_align=16)
    bias = make_fake_compact_tensor(f32, (p.c,), assumed_align=16)
    kernel = MmaKernel(spec, element) if spec.tile.mapping == "mma" else DirectKernel(spec, element)
    return kernel, (x, w, y, scale, bias)
