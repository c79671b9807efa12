"""Bench's replayed search: the tuner at several budgets and seeds on the joint landscape of the families
that ran a layer (every candidate it can propose was measured there), with and without the cost model's
prior: best found / exhaustive best, and kernels compiled. CPU only."""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.core.layers import Layer
from tuner.families.base import SearchSpace
from tuner.pipeline.landscape import exhaustive_best
from tuner.search.costmodel import PRIOR_PICKS, Ceilings, joint_prior_picks
from tuner.search.replay import ReplayCompiler, ReplayEvaluator
from tuner.search.space import JointSpace
from tuner.search.study import StudyRunner, open_study
from tuner.search.trials import ranked
from tuner.store.schema import Recorded

BUDGETS = (16, 32, 64)
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class SearchResult:
    budget: int
    with_prior: bool
    ratios: tuple[float, ...]  # best found / exhaustive best, one per seed
    kernels: tuple[int, ...]   # distinct kernels compiled, one per seed

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)


@dataclass(frozen=True)
class LayerReplayed:
    """A layer's replayed searches finished, `done` of `total` layers."""
    layer: str
    done: int
    total: int
    seconds: float


def replay_search(problem: ConvProblem, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                  budget: int, seed: int, prior: list) -> tuple[float, int]:
    """The tuner with `budget` candidates on the recorded landscapes: best µs found, kernels compiled."""
    from tuner.search.space import joint_params

    study = open_study("replay", optuna.storages.InMemoryStorage(), seed)
    for config in prior:
        study.enqueue_trial(joint_params(config))
    compiler = ReplayCompiler(jobs=8)
    StudyRunner(study, problem, joint, device, compiler, ReplayEvaluator(record), run_id="replay").run(budget)
    best = ranked(study, problem)
    return (best[0].median_us if best else math.inf), len(compiler.kernels)


def landscape_joint(landscapes: dict[str, dict[str, Recorded]], spaces: dict[str, SearchSpace]) -> JointSpace:
    return JointSpace(tuple(spaces[family] for family in sorted(landscapes)))


def merged(landscapes: dict[str, dict[str, Recorded]]) -> dict[str, Recorded]:
    return {name: recorded for record in landscapes.values() for name, recorded in record.items()}


def search_results(layer: Layer, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                   ceilings: Ceilings, budgets=BUDGETS, seeds=SEEDS) -> list[SearchResult]:
    exhaustive = exhaustive_best(record)
    prior = joint_prior_picks(joint, layer.problem, device, PRIOR_PICKS, ceilings)
    results = []
    for with_prior in (False, True):
        for budget in budgets:
            runs = [replay_search(layer.problem, joint, device, record, budget, seed, prior if with_prior else [])
                    for seed in seeds]
            results.append(SearchResult(budget, with_prior, tuple(best / exhaustive for best, _ in runs),
                                        tuple(kernels for _, kernels in runs)))
    return results


def _replay_layer(layer: Layer, joint: JointSpace, device: DeviceFacts, record: dict[str, Recorded],
                  ceilings: Ceilings, budgets: tuple[int, ...], seeds: tuple[int, ...]) -> tuple[list[SearchResult], float]:
    started = time.monotonic()
    return search_results(layer, joint, device, record, ceilings, budgets, seeds), time.monotonic() - started


def replay_layers(layers: list[Layer], landscapes: dict[str, dict[str, dict[str, Recorded]]],
                  spaces: dict[str, SearchSpace], device: DeviceFacts, ceilings: Ceilings, budgets: tuple[int, ...],
                  seeds: tuple[int, ...], jobs: int,
                  emit: Callable[[LayerReplayed], None]) -> dict[str, list[SearchResult]]:
    """The replayed searches of every layer, `jobs` layers at a time (each in a process of its own: a
    layer's replays take from seconds to minutes of one core), saying which finished."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    searches = {}
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_replay_layer, layer, landscape_joint(landscapes[layer.name], spaces), device,
                               merged(landscapes[layer.name]), ceilings, budgets, seeds): layer
                   for layer in layers}
        for done, future in enumerate(as_completed(futures), start=1):
            layer = futures[future]
            searches[layer.name], seconds = future.result()
            emit(LayerReplayed(layer.name, done, len(layers), seconds))
    return searches
