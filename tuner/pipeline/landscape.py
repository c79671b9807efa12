"""Bench's landscape step: every statically valid candidate of search_spaces/<family>_landscape.yaml, each
kernel compiled once and timed on every layer of the suite the family can run ->
results/<gpu>/landscape/<family>/<layer>.csv; and those landscapes read back. With --compile-only the kernels
are compiled for a GPU that need not be present, and nothing is timed."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from tuner.core.device import DeviceFacts
from tuner.core.errors import UsageError
from tuner.core.layers import Layer
from tuner.core.status import Status
from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.search.replay import read_record
from tuner.search.space import valid_configs
from tuner.store.bench_record import BENCH_FILE, read_bench
from tuner.store.best import read_best
from tuner.store.landscape import LANDSCAPE_DIR, landscape_path, write_landscape
from tuner.store.results import BEST_FILE, SLUG, gpu_slugs, results_slug
from tuner.store.schema import Landscape, LandscapeRow, Recorded

LANDSCAPE_REPEATS = 15


@dataclass(frozen=True)
class CompilingFor:
    """--compile-only: the GPU whose architecture the kernels are built for."""
    device: DeviceFacts


@dataclass(frozen=True)
class LandscapeCompiling:
    family: str
    kernels: int     # distinct kernels the layers need
    candidates: int  # valid configurations over the layers


@dataclass(frozen=True)
class LandscapeCompiled:
    family: str
    ready: int   # compiled or found in the cache
    failed: int


@dataclass(frozen=True)
class LandscapeTimed:
    family: str
    layer: str
    ok: int
    candidates: int
    best_us: float  # nan where none ran


LandscapeEvent = CompilingFor | LandscapeCompiling | LandscapeCompiled | LandscapeTimed


def exhaustive_best(record: dict[str, Recorded]) -> float:
    """The fastest valid candidate's µs in a landscape (math.inf where none ran)."""
    return min((r.median_us for r in record.values() if r.status is Status.ok), default=math.inf)


def read_landscapes(folder: Path, layer: Layer, families: tuple[str, ...]) -> dict[str, dict[str, Recorded]]:
    """Each family's recorded landscape of the layer, where there is one."""
    return {family: read_record(landscape_path(folder, family, layer.name), layer.problem, family)
            for family in families if landscape_path(folder, family, layer.name).exists()}


def recorded_layer_names(folder: Path) -> set[str]:
    return {path.stem for path in (folder / LANDSCAPE_DIR).glob("*/*.csv")}


def compile_landscape(layers: list[Layer], space: SearchSpace, device: DeviceFacts, compiler,
                      emit: Callable[[LandscapeEvent], None]) -> tuple[dict[str, list], dict]:
    """Every kernel of one family's landscape that the layers need, compiled once (or found in the cache):
    each layer's valid configurations, and each kernel's compile result."""
    per_layer = {layer.name: valid_configs(space, layer.problem, device) for layer in layers}
    kernels = sorted({c.compiled for configs in per_layer.values() for c in configs}, key=lambda c: c.name)
    emit(LandscapeCompiling(space.family, len(kernels), sum(len(c) for c in per_layer.values())))
    compiled = {r.config.compiled: r for r in compiler.compile_many(kernels)}
    failed = sum(not r.ok for r in compiled.values())
    emit(LandscapeCompiled(space.family, len(compiled) - failed, failed))
    return per_layer, compiled


def measure_landscape(layers: list[Layer], space: SearchSpace, device: DeviceFacts, compiler, evaluator,
                      folder: Path, emit: Callable[[LandscapeEvent], None]) -> None:
    """Compile every kernel of one family the suite needs once, then time every candidate on every
    layer the family can run."""
    per_layer, compiled = compile_landscape(layers, space, device, compiler, emit)
    family = registry.get(space.family)
    for index, layer in enumerate(layers):
        if not per_layer[layer.name]:
            continue
        rows = []
        for config in per_layer[layer.name]:
            result = compiled[config.compiled]
            if not result.ok:
                rows.append(LandscapeRow(tuple(config.search_params.items()), Recorded(Status.compile_failed)))
                continue
            evaluation = evaluator.evaluate(result.binary, layer.problem, family.launch_args(config, layer.problem),
                                            seed=1000 + index)
            m = evaluation.measurement
            rows.append(LandscapeRow(tuple(config.search_params.items()),
                                     Recorded(evaluation.status, m and m.median_us, m and m.p10_us, m and m.p90_us,
                                              evaluation.error),
                                     evaluation.grid_blocks,
                                     evaluation.attributes and evaluation.attributes.max_active_blocks_per_sm))
        # The header has always carried the name as rich markup escapes it; kept so that the files do not change.
        write_landscape(landscape_path(folder, space.family, layer.name), Landscape(
            space.family, family.knobs, tuple(rows),
            f"Landscape of {escape(layer.name)} on {device.name}: every statically valid candidate of "
            f"search_spaces/{space.family}_landscape.yaml,\nrecorded by: python tune.py bench "
            f"(same inputs for every candidate of the layer, {LANDSCAPE_REPEATS} graph replays each)"))
        ok = [r.recorded.median_us for r in rows if r.recorded.status is Status.ok]
        emit(LandscapeTimed(space.family, layer.name, len(ok), len(rows), min(ok, default=math.nan)))


def compile_landscapes(layers: list[Layer], spaces: dict[str, SearchSpace], device: DeviceFacts,
                       cache_dir: Path | None, jobs: int | None, emit: Callable[[LandscapeEvent], None]) -> None:
    """Every kernel of the landscapes of the families `device` can run, compiled into the cache; nothing timed."""
    from tuner.build.compile import Compiler

    emit(CompilingFor(device))
    for space in spaces.values():
        if registry.get(space.family).device_problem(device) is None:
            compile_landscape(layers, space, device, Compiler(device, cache_dir, jobs), emit)


def compile_target(results_root: Path, name: str) -> DeviceFacts:
    """The GPU that `--compile-only --gpu NAME` compiles for, none need be present: the facts measured on it
    (results/<NAME>/bench.yaml), else the GPU table's (tuner/core/gpus.py: h100, nvidia-h200, ...), else what
    results/<NAME>/best.yaml records of it."""
    from tuner.core import gpus
    from tuner.pipeline.export import best_device

    slug = results_slug(results_root, name, BENCH_FILE)
    folder = results_root / slug
    if SLUG.fullmatch(slug) and (device := read_bench(folder).device) is not None:
        return device
    try:
        return gpus.device_facts(gpus.lookup(name))
    except gpus.UnknownGpu:
        pass
    if SLUG.fullmatch(name) and (results_root / name / BEST_FILE).is_file():
        return best_device(read_best(results_root / name))
    raise UsageError(f"--gpu {name!r}: no results/<gpu>/ folder of that name with a bench.yaml or best.yaml "
                     f"({', '.join(gpu_slugs(results_root)) or 'none'}) and no GPU of that name in the table "
                     f"({gpus.known_names()})")
