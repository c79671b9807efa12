"""What this GPU measured before that a layer's study starts from: the fastest of its landscapes, and for
a layer with an epilogue, the fastest its bare twin's study measured (tuning.seed_study queues them)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna

from tuner.core.device import DeviceFacts
from tuner.core.epilogue import Epilogue
from tuner.core.problem import ConvProblem
from tuner.families.base import KernelConfig, SpaceError
from tuner.search.measurements import MeasurementDB, Source
from tuner.search.space import JointSpace, make_config, static_problems

# How many of the fastest configurations of each family's recorded landscape seed a layer's study.
LANDSCAPE_SEEDS = 2
# Configurations a layer with an epilogue takes from its bare twin's study (twin_seeds).
TWIN_SEEDS = 4


def landscape_seeds(folder: Path | None, layer: str, problem: ConvProblem, joint: JointSpace, device: DeviceFacts,
                    per_family: int = LANDSCAPE_SEEDS) -> list[KernelConfig]:
    """The fastest configurations `tune.py bench` measured for this layer on this GPU
    (results/<gpu>/landscape/<family>/<layer>.csv), `per_family` of each family the study searches."""
    measurements = MeasurementDB(folder)
    seeds = []
    for family in joint.families:
        found = measurements.top_k(problem, per_family, layer=layer, family=family, sources=(Source.landscape,))
        seeds += [measured.config for measured in found
                  if joint.contains(measured.config) and not static_problems(measured.config, problem, device)]
    return seeds


def twin_seeds(folder: Path | None, storage: optuna.storages.BaseStorage | str | None, problem: ConvProblem,
               joint: JointSpace, device: DeviceFacts, count: int = TWIN_SEEDS) -> list[KernelConfig]:
    """For a layer with an epilogue: the `count` fastest configurations its bare twin (the same
    convolution without the epilogue, a best.yaml entry of this GPU) measured in its study, built with the
    epilogue. The epilogue costs a kernel little, so they are the first candidates worth trying."""
    if folder is None or not problem.epilogue.fused:
        return []
    bare = replace(problem, epilogue=Epilogue())
    seeds = []
    for measured in MeasurementDB(folder, storage).top_k(bare, None, sources=(Source.tuned,)):
        try:
            config = make_config(problem, measured.family, measured.config.search_params)
        except (SpaceError, ValueError):
            continue
        if config not in seeds and joint.contains(config) and not static_problems(config, problem, device):
            seeds.append(config)
        if len(seeds) == count:
            break
    return seeds
