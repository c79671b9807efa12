"""What a layer's study measures first, queued before the search (Optuna's enqueue_trial): the reference
configuration, the fastest configurations this GPU's landscapes recorded for the layer, the kernels other GPUs of
its compute capability keep for it, those its twins (the bare convolution, the same one in the other 16-bit type)
measured fastest, and the cost model's picks."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
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
from tuner.store.best import ByCanonicalProblem, best_records, names_by_problem
from tuner.store.results import BEST_FILE, ResultsError, gpu_slugs

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
                params = joint.held(measured.family, measured.config.search_params)
                config = make_config(problem, measured.family, params)
            except (SpaceError, ValueError):
                continue
            if config not in seeds and joint.contains(config) and not static_problems(config, problem, device):
                seeds.append(config)
                found += 1
            if found == count:
                break
    return seeds


def sibling_seeds(results_root: Path | None, gpu: str, problem: ConvProblem, joint: JointSpace,
                  device: DeviceFacts) -> list[KernelConfig]:
    """The kernel each other GPU of this one's compute capability keeps in its results/<gpu>/best.yaml for the
    layer's problem (where it has none, for a twin's: twin_problems), built for the layer's own problem: an H200's
    study starts from what the H100's found fastest. The same compute capability runs the same instructions,
    tiles and limits; the SM count, clocks and memory differ, so each is a seed, measured here like the others.
    A best.yaml that cannot be read gives none: another GPU's damaged results never stop this one's tuning."""
    if results_root is None:
        return []
    capability = f"{device.cc_major}.{device.cc_minor}"
    seeds: list[KernelConfig] = []
    for sibling in gpu_slugs(results_root):  # the folders that hold a best.yaml
        if sibling == gpu:
            continue
        path = results_root / sibling / BEST_FILE
        stat = path.stat()
        kept = _kept_by_problem(path, stat.st_mtime_ns, stat.st_size, capability)
        for wanted in (problem, *twin_problems(problem)):
            entry = kept.get(wanted)
            if entry is None:
                continue
            try:
                config = make_config(problem, entry.family, joint.held(entry.family, dict(entry.knobs)))
            except (SpaceError, ValueError, KeyError, TypeError):
                continue
            if config not in seeds and joint.contains(config) and not static_problems(config, problem, device):
                seeds.append(config)
                break
    return seeds


@lru_cache(maxsize=8)  # read once a run, not once a layer (a best.yaml of 450 layers takes about a second)
def _kept_by_problem(path: Path, mtime_ns: int, size: int, capability: str) -> ByCanonicalProblem:
    """A best.yaml's fastest entry for each problem, where the GPU it records has `capability`; empty otherwise,
    or where the file cannot be read. The file's time and size are the cache key."""
    try:
        header, entries = best_records(path.parent)
    except ResultsError:
        return ByCanonicalProblem()
    if header.device is None or header.device.compute_capability != capability:
        return ByCanonicalProblem()
    kept = ByCanonicalProblem()
    for problem, layer in names_by_problem(entries).items():
        kept[problem] = entries[layer]
    return kept


def seed_configs(problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int, ceilings: Ceilings,
                 measured: list[KernelConfig] = (), twins: list[KernelConfig] = (),
                 siblings: list[KernelConfig] = ()) -> list[tuple[KernelConfig, str]]:
    """What seed_study queues, in its order, each with why: the reference, the landscape's fastest, the other
    GPUs' kernels, the twins' fastest, the cost model's picks."""
    reference = reference_config(joint, problem, device)
    seeds = ([(reference, "reference")] if reference is not None else []) + [(c, "landscape") for c in measured]
    seeds += [(c, "sibling") for c in siblings] + [(c, "twin") for c in twins]
    return seeds + [(c, "prior") for c in joint_prior_picks(joint, problem, device, prior, ceilings)]


def seed_study(study, problem: ConvProblem, joint: JointSpace, device: DeviceFacts, prior: int,
               ceilings: Ceilings, measured: list[KernelConfig] = (), twins: list[KernelConfig] = (),
               siblings: list[KernelConfig] = ()) -> None:
    """Queue the reference config, the configurations this GPU's landscapes measured fastest for the
    layer, the kernels other GPUs of its compute capability keep for it, those its twins measured fastest, and
    the cost model's picks, each unless the study has measured it or holds it queued: a
    study made before the model (or before a change to it) gets the current picks on its next run, and
    a seed asked by a run that was interrupted before measuring it (its trial FAILed) is queued again."""
    known = set(recorded_trials(study, problem)) | queued_keys(study)
    for config, why in seed_configs(problem, joint, device, prior, ceilings, measured, twins, siblings):
        params = joint_params(config)
        if params_key(params) not in known:
            study.enqueue_trial(params, user_attrs={why: True})
            known.add(params_key(params))
