"""The test-only kernel family `fake` (its folder: tests/fakefamily/fake/) and what its tests need: its
registration for a test's duration, a search space, and a deterministic evaluator of what its builder built."""
from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Iterator

import yaml

import tuner.families
from tuner.measure.evaluate import Evaluation
from tuner.families import registry
from tuner.families.base import KernelConfig, LaunchArgs
from tuner.families.family import Family
from tuner.measure.timing import Measurement
from tuner.core.problem import ConvProblem
from tuner.build.abi import KernelBinary
from tuner.core.status import Status

# Holds fake/, as tuner/families/ holds the real families.
FOLDER = Path(__file__).resolve().parent
NAME = "fake"
# 4 tiles x 4 stages x 2 split-K: 32 candidates; 256x128x64 at 5 stages is over the H100's shared memory, and
# every 5-stage kernel fails to build.
SPACE = {"family": NAME, "tile": ["64x64x32", "128x64x32", "128x128x32", "256x128x64"], "stages": [2, 3, 4, 5],
         "split_k": [1, 2]}


@contextlib.contextmanager
def registered() -> Iterator[Family]:
    """The fake family, found by the registry the way a new folder under tuner/families/ is found."""
    saved = list(tuner.families.__path__)
    tuner.families.__path__.append(str(FOLDER))
    registry.families.cache_clear()
    try:
        yield registry.get(NAME)
    finally:
        tuner.families.__path__[:] = saved
        registry.families.cache_clear()


def write_space(path: Path, **choices) -> Path:
    path.write_text(yaml.safe_dump({**SPACE, **choices}))
    return path


def computes_garbage(config: KernelConfig) -> bool:
    """The fake GPU's wrong kernels: the largest tile at 2 stages."""
    return config.tile.m == 256 and config.stages == 2


def fake_median_us(config: KernelConfig, problem: ConvProblem) -> float:
    """A made-up device time that depends on every knob and on the problem: tile padding wastes work, a
    small tile runs slower, stages help up to 4, split-K costs a reduction."""
    m, n, _ = problem.gemm_mnk
    padded = math.ceil(m / config.tile.m) * config.tile.m * math.ceil(n / config.tile.n) * config.tile.n
    tile_speed = min(1.0, config.tile.m * config.tile.n / (128 * 128)) ** 0.5
    stage_speed = 0.7 + 0.1 * min(config.stages, 4)
    return round(problem.flops * padded / (m * n) / 2e8 / tile_speed / stage_speed + 0.3 * config.split_k
                 + 0.01 * config.stages, 6)


class FakeEvaluator:
    """Times what the fake builder built: the library names the kernel's knobs, the launch its split-K."""

    def __init__(self):
        self.evaluated: list[KernelConfig] = []

    def evaluate(self, binary: KernelBinary, problem: ConvProblem, launch: LaunchArgs,
                 seed: int | None = None) -> Evaluation:
        kernel = json.loads(binary.path.read_text())
        params = {knob: kernel[knob] for knob in registry.get(NAME).rules.knobs} | {"split_k": launch.split_k}
        config = registry.get(NAME).rules.make_config(problem, params)
        self.evaluated.append(config)
        if computes_garbage(config):
            return Evaluation(Status.wrong_result, reason="relative L2 error 0.5 above 0.01", error=0.5)
        us = fake_median_us(config, problem)
        return Evaluation(Status.ok, error=1e-4, measurement=Measurement(us, 0.99 * us, 1.01 * us, 20, 1, 4),
                          grid=(launch.split_k, 1, 1))
