"""The sm80 family's C++: the kernel alias of a configuration, emitted from templates/kernel.h.in (a bare
conv) or templates/kernel_evt.h.in (a fused epilogue, on templates/conv2d_fprop_evt.h's kernel)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.families.base import CppPieces, read_template
from tuner.families.sm80.space import Sm80Config
from tuner.families.sm80_common.codegen import kernel_values, runner_pieces

TEMPLATES = Path(__file__).parent / "templates"


def kernel_alias(config: Sm80Config, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::ImplicitGemmConvolution<...>;` for the compiled config."""
    template = "kernel_evt.h.in" if config.fusion.fused else "kernel.h.in"
    return read_template(TEMPLATES / template).substitute(kernel_values(config, alias))


def cpp_pieces(configs: Sequence[Sm80Config] = ()) -> CppPieces:
    """The includes and runner of a translation unit of `configs`: the fused epilogue's only where one is fused."""
    return runner_pieces(fused=any(config.fusion.fused for config in configs))
