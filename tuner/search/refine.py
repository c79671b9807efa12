"""The finalists' refinement: each of a study's top configurations in the other choices of its family's refined knobs
(SpaceRules.refined_knobs: sm90_dsl's epilogue staging), measured beside it. A study holds those knobs at their first
choice (space.layer_space), because they are best fitted to a chosen tile: on an H200, 16 studies that sampled
sm90_dsl's staging beside the tile kept the default staging in every winner, while the same staging applied to the
winners' kernels took EfficientNet's C16 SiLU expand from 16.8 to 13.3 us (docs/dsl.md)."""
from __future__ import annotations

import itertools

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig, SearchSpace


def refined_variants(config: KernelConfig, space: SearchSpace, problem: ConvProblem,
                     device: DeviceFacts) -> list[KernelConfig]:
    """The configuration in every other combination of the space's choices for its family's refined knobs, each
    once, those the static checks pass; none where the family refines nothing."""
    rules = registry.family_of(config).rules
    params, choices = config.search_params, space.choices
    knobs = [knob for knob in rules.refined_knobs if knob in params]
    variants: list[KernelConfig] = []
    for values in itertools.product(*(choices.get(knob, (params[knob],)) for knob in knobs)):
        variant = rules.make_config(problem, {**params, **dict(zip(knobs, values))})
        if variant != config and variant not in variants and not rules.static_problems(variant, problem, device):
            variants.append(variant)
    return variants
