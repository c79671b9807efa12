"""The sm80_group family's C++: the kernel alias of a configuration, from templates/kernel.h.in (bare) or
templates/kernel_evt.h.in (fused, on sm80's visitor tree); the runner is sm80's (it takes groups)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tuner.core.cutlass_pkg import library as cutlass_lib
from tuner.families.base import CppPieces, read_template
from tuner.families.sm80_common import codegen as common
from tuner.families.sm80_group.space import GroupMode, Sm80GroupConfig

TEMPLATES = Path(__file__).parent / "templates"
GROUP_MODE_TAGS = {
    GroupMode.single: cutlass_lib.GroupModeTag[cutlass_lib.GroupMode.SingleGroup],
    GroupMode.multiple: cutlass_lib.GroupModeTag[cutlass_lib.GroupMode.MultipleGroup],
}
INCLUDES = ("cutlass/conv/kernel/default_conv2d_group_fprop.h", "cutlass/conv/device/implicit_gemm_convolution.h")


def kernel_alias(config: Sm80GroupConfig, alias: str) -> str:
    """`using <alias> = cutlass::conv::device::ImplicitGemmConvolution<...>;`: sm80's fields and the group mode."""
    template = "kernel_evt.h.in" if config.fusion.fused else "kernel.h.in"
    return read_template(TEMPLATES / template).substitute(
        common.kernel_values(config, alias), group_mode=GROUP_MODE_TAGS[config.group_mode])


def cpp_pieces(configs: Sequence[Sm80GroupConfig] = ()) -> CppPieces:
    fused = any(config.fusion.fused for config in configs)
    base = common.runner_pieces(fused)
    if not fused:
        return CppPieces(INCLUDES, base.runners, base.runner_class)
    evt = (TEMPLATES / "group_fprop_evt.h").read_text()
    # sm80's visitor kernel header names DefaultConv2dFprop too: its includes come along.
    return CppPieces(tuple(dict.fromkeys(INCLUDES + common.INCLUDES)) + common.FUSION_INCLUDES, base.runners[:-1] + (evt, base.runners[-1]), base.runner_class)
