"""A Candidate: a configuration of a family for one problem, its family looked up once."""
from __future__ import annotations

from dataclasses import replace

from conftest import params
from tuner.families import registry
from tuner.families.candidate import Candidate
from tuner.families.sm80.space import make_config


def test_a_candidate_carries_its_family_and_launches_as_the_family_says(conv_1):
    config = make_config(conv_1, params("64x64x32", "2x2x1", stages=3, split_k=2))
    candidate = Candidate.of(config, conv_1)
    assert candidate.family is registry.get("sm80")
    assert candidate.launch == registry.get("sm80").rules.launch_args(config, conv_1)
    assert candidate == Candidate.of(config, conv_1) and candidate != Candidate.of(config, replace(conv_1, n=2))


def test_a_candidate_runs_on_a_device_only_where_the_family_and_its_static_checks_allow(conv_1, h100):
    runnable = Candidate.of(make_config(conv_1, params("64x64x32", "2x2x1", stages=3)), conv_1)
    assert runnable.runs_on(h100)
    too_deep = Candidate.of(make_config(conv_1, params("256x128x64", "4x2x1", stages=7)), conv_1)
    assert registry.get("sm80").rules.static_problems(too_deep.config, conv_1, h100)
    assert not too_deep.runs_on(h100)
