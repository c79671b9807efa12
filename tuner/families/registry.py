"""The kernel families, found by looking: every package under tuner/families/ that defines FAMILY.
Adding a family is adding its folder and its search_spaces/<name>.yaml; nothing here changes."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

import tuner.families
from tuner.core.device import DeviceFacts
from tuner.families.base import KernelConfig, SpaceError
from tuner.families.family import Family
from tuner.core.problem import ConvProblem


@lru_cache(maxsize=1)
def families() -> dict[str, Family]:
    found = {}
    for module in pkgutil.iter_modules(tuner.families.__path__):
        if not module.ispkg:
            continue
        family = getattr(importlib.import_module(f"tuner.families.{module.name}"), "FAMILY", None)
        if isinstance(family, Family):
            found[family.name] = family
    return dict(sorted(found.items()))


def names() -> tuple[str, ...]:
    return tuple(families())


def get(name: str) -> Family:
    known = families()
    if name not in known:
        raise SpaceError(f"unknown kernel family {name!r}; known: {', '.join(known)}")
    return known[name]


def family_of(config: KernelConfig) -> Family:
    return get(config.family)


def chained_build(config: KernelConfig) -> KernelConfig | None:
    """The kernel's build for programmatic dependent launch (its family's Family.chained), or None where the
    family has none."""
    chained = family_of(config).chained
    return None if chained is None else chained(config)


def eligible(device: DeviceFacts) -> dict[str, Family]:
    """The families this device can run."""
    return {name: family for name, family in families().items() if family.device_problem(device) is None}


def problem_reasons(problem: ConvProblem) -> dict[str, str | None]:
    """Each family's reason it cannot run `problem` (whatever the GPU), or None where it can."""
    return {name: family.problem_reason(problem) for name, family in families().items()}


def why_not(family: Family, problem: ConvProblem, device: DeviceFacts) -> str | None:
    """Why `family` cannot run `problem` on `device`, or None."""
    return family.device_problem(device) or family.problem_reason(problem)
