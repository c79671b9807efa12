"""CUTLASS C++ for a configuration of any family, emitted only from templates: the candidate
translation unit (tuner/templates/candidate.cu.in around the family's runner and kernel alias)."""
from __future__ import annotations

from pathlib import Path

from tuner.families import registry
from tuner.families.base import KernelConfig, read_template

TEMPLATES = Path(__file__).parent / "templates"
# The C entry points' version (tuner/run.py checks it): 2 added raster/swizzle and the cluster shape.
ABI_VERSION = 2
CANDIDATE_ALIAS = "TunedConv"


def problem_struct() -> str:
    """The C++ view of the problem array, shared by every candidate and exported header."""
    return (TEMPLATES / "problem.h").read_text()


def include_lines(headers: tuple[str, ...]) -> str:
    return "\n".join(f'#include "{header}"' for header in headers)


def kernel_alias(config: KernelConfig, alias: str) -> str:
    return registry.family_of(config).kernel_alias(config, alias)


def candidate_source(config: KernelConfig) -> str:
    """A whole translation unit: the kernel, its family's runner and the extern "C" entry points."""
    family = registry.family_of(config)
    pieces = family.cpp()
    return read_template(TEMPLATES / "candidate.cu.in").substitute(
        family=family.name, includes=include_lines(pieces.includes), problem=problem_struct(),
        runner=pieces.runner, kernel_alias=family.kernel_alias(config, CANDIDATE_ALIAS),
        runner_class=pieces.runner_class, alias=CANDIDATE_ALIAS, abi_version=ABI_VERSION)
