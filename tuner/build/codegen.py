"""CUTLASS C++ for configurations of any family, emitted only from templates: a candidate translation
unit (tuner/templates/candidate.cu.in) holds one kernel, or several of one family compiled together so
that they parse the CUTLASS headers once, each behind its own tuner_k<index>_* entry points."""
from __future__ import annotations

from pathlib import Path

from tuner.build.abi import ABI_VERSION
from tuner.families import registry
from tuner.families.base import KernelConfig, read_template

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
CANDIDATE_ALIAS = "TunedConv"


def problem_struct() -> str:
    """The C++ view of the problem array, shared by every candidate and exported header."""
    return (TEMPLATES / "problem.h").read_text()


def include_lines(headers: tuple[str, ...]) -> str:
    return "\n".join(f'#include "{header}"' for header in headers)


def kernel_alias(config: KernelConfig, alias: str) -> str:
    return registry.family_of(config).emitter.kernel_alias(config, alias)


def group_source(configs: list[KernelConfig]) -> str:
    """One translation unit: the kernels (all of one family), their runners and entry points; kernel i
    answers to tuner_k<i>_*."""
    families = {config.family for config in configs}
    if len(families) != 1:
        raise ValueError(f"a translation unit holds kernels of one family, got {sorted(families)}")
    family = registry.family_of(configs[0])
    pieces = family.emitter.cpp([config.compiled for config in configs])
    kernels, entry_points = [], []
    for index, config in enumerate(configs):
        alias = f"{CANDIDATE_ALIAS}{index}"
        kernels.append(family.emitter.kernel_alias(config.compiled, alias))
        kernels.append(f"using Runner{index} = {pieces.runner_class}<{alias}>;\n")
        entry_points.append(read_template(TEMPLATES / "entry_points.cu.in").substitute(
            index=index, config_name=config.compiled.name, runner=f"cutlass_conv_tuner::candidate::Runner{index}"))
    return read_template(TEMPLATES / "candidate.cu.in").substitute(
        family=family.name, includes=include_lines(pieces.includes), preamble="\n".join(pieces.preamble),
        problem=problem_struct(),
        runner=pieces.runner, kernels="\n".join(kernels), abi_version=ABI_VERSION, kernel_count=len(configs),
        entry_points="\n".join(entry_points))


def candidate_source(config: KernelConfig) -> str:
    """The translation unit of one candidate (its kernel is index 0)."""
    return group_source([config])


def kernel_symbol_marker(index: int) -> str:
    """Text that the device symbol of kernel `index` of a group contains, where the family names its
    kernel type after the alias (the 3.x families' `<alias>_detail::Kernel`)."""
    return f"{CANDIDATE_ALIAS}{index}_detail"
