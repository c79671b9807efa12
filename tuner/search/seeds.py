"""What a layer's study measures first, queued before the search (Optuna's enqueue_trial): the reference
configuration, the fastest configurations this GPU's landscapes recorded for the layer, those its twins (the bare
convolution, the same one in the other 16-bit type) measured fastest, and the cost model's picks."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna

from tuner.core.device import DeviceFacts
from tuner.core.dtypes import DataType
from tuner.core.epilogue import Epilogue
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.search.costmodel import Ceilings, joint_prior_picks
from tuner.search.measurements import MeasurementDB, Source
from tuner.search.space import JointSpace, joint_params, make_config, static_problems
from tuner.search.trials import params_key, queued_keys, recorded_trials

# How many of the fastest configurations of each family's recorded landscape seed a layer's study.
LANDSCAPE_SEEDS = 2
# Configurations a layer takes from each twin's study (twin_seeds).
TWIN_SEEDS = 4
# The 16-bit types whose kernels tile alike (the same wgmma and mma shapes, the same bytes): a bf16 layer's study
# starts from what its f16 twin found fastest, and the other way round. On the H100 the cold bf16 tunes of stage 5
# at batch 32 stayed behind f16's (s5_3x3 1.18 of cuDNN against 0.87) where f16 had studies of several sessions.
TYPE_TWINS = {DataType.f16: DataType.bf16, DataType.bf16: DataType.f16}


def reference_config(joint: JointSpace, problem: ConvProblem, device: DeviceFacts) -> KernelConfig | None:
    """The hand-picked configuration of the first family in the study that has one (sm80's is the
    reference ncu log's 128x128x64, 3 stages), where it can run the problem."""
    for family in joint.families:
        params = registry.get(family).rules.reference_params
        if params is None:
            continue
        config = make_config(problem, family, params)
        if joint.contains(config) and not static_problems(config, problem, device):
            return config
    return None


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


def twin_problems(problem: ConvProblem) -> list[ConvProblem]:
    """The convolutions whose fastest configurations are the first worth trying for `problem`: without its
    epilogue (which costs a kernel little), and in the other 16-bit type, where its types are one 16-bit type."""
    twins = [replace(problem, epilogue=Epilogue())] if problem.epilogue.fused else []
    other = TYPE_TWINS.get(problem.input_type)
    if other is not None and problem.filter_type is problem.input_type and problem.output_type is problem.input_type:
        twins.append(replace(problem, input_type=other, filter_type=other, output_type=other))
    return twins


def twin_seeds(folder: Path | None, storage: optuna.storages.BaseStorage | str | None, problem: ConvProblem,
               joint: JointSpace, device: DeviceFacts, count: int = TWIN_SEEDS) -> list[KernelConfig]:
    """The `count` fastest configurations each twin of the layer (twin_problems, a best.yaml entry of this GPU)
    measured in its study, built for the layer's own problem, in twin order."""
    if folder is None:
        return []
    seeds: list[KernelConfig] = []
    measurements = MeasurementDB(folder, storage)
    for twin in twin_problems(problem):
        found = 0
        for measured in measurements.top_k(twin, None, sources=(Source.tuned,)):
            try:
                config = make_config(problem, measured.family, measured.config.search_params)
            except (SpaceError, ValueError):
                continue
            if config not in seeds and joint.contains(config) and not static_problems(config, problem, device):
                seeds.append(config)
                found += 1
            if found == count:
                break
    return seeds


def seed_configs(problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int, ceilings: Ceilings,
                 measured: list[KernelConfig] = (), twins: list[KernelConfig] = ()) -> list[tuple[KernelConfig, str]]:
    """What seed_study queues, in its order, each with why: the reference, the landscape's fastest, the
    bare twin's fastest, the cost model's picks."""
    reference = reference_config(joint, problem, device)
    seeds = ([(reference, "reference")] if reference is not None else []) + [(c, "landscape") for c in measured]
    seeds += [(c, "twin") for c in twins]
    return seeds + [(c, "prior") for c in joint_prior_picks(joint, problem, device, prior, ceilings)]


def seed_study(study, problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int,
               ceilings: Ceilings, measured: list[KernelConfig] = (), twins: list[KernelConfig] = ()) -> None:
    """Queue the reference config, the configurations this GPU's landscapes measured fastest for the
    layer, those its bare twin measured fastest (a layer with an epilogue), and the cost model's
    picks, each unless the study has measured it or holds it queued: a
    study made before the model (or before a change to it) gets the current picks on its next run, and
    a seed asked by a run that was interrupted before measuring it (its trial FAILed) is queued again."""
    known = set(recorded_trials(study, problem)) | queued_keys(study)
    for config, why in seed_configs(problem, joint, device, prior, ceilings, measured, twins):
        params = joint_params(config)
        if params_key(params) not in known:
            study.enqueue_trial(params, user_attrs={why: True})
            known.add(params_key(params))
