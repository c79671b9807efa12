"""What results/<gpu>/ measured of a layer (best.yaml's tuned kernel, bench.yaml's one-run libraries, the
landscapes' kernels), and the ranking that holds the measurements beside the cost model's predictions
(docs/cost-model.md, "predict on a GPU with measurements")."""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from tuner.analysis.predict import Prediction, predict
from tuner.core.device import DeviceFacts
from tuner.core.gpus import GpuSpec
from tuner.core.problem import ConvProblem
from tuner.core.layers import Layer
from tuner.core.status import Status
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.search.costmodel import Ceilings, predicted_us
from tuner.search.space import make_config
from tuner.store.bench_record import read_bench
from tuner.store.best import best_entries, names_by_problem
from tuner.store.landscape import recorded_rows
from tuner.store.results import gpu_dir, layer_file_stem, results_slug

LANDSCAPE_DIR = "landscape"
# bench.yaml's one-run libraries, timed beside the tuned kernel (the same-kernel-bare figure is not a library).
LIBRARIES = (("cudnn_us", "cuDNN"), ("cublas_us", "cuBLAS"), ("eager_us", "PyTorch eager"),
             ("compiled_us", "torch.compile"))
LIBRARY_FAMILY = "library"


class Source(enum.Enum):
    measured = "measured"
    modelled = "modelled"


@dataclass(frozen=True)
class Measured:
    """One measured kernel or library of the layer on this GPU. config is None for a library, or for a
    kernel of a family this checkout does not know."""
    name: str
    family: str
    description: str
    us: float
    where: str  # the file it comes from, relative to the GPU's results folder
    config: KernelConfig | None = None


def _layer_name_in_results(entries: dict, layer: Layer) -> str:
    """The name the results hold the layer under: its own, or (for --shape) the layer tuned on that problem."""
    if layer.name in entries and entries[layer.name].problem == layer.problem:
        return layer.name
    return names_by_problem(entries).get(layer.problem, layer.name)


def layer_measurements(folder: Path, layer: Layer) -> list[Measured]:
    """What results/<gpu>/ measured of the layer: best.yaml's tuned kernel, bench.yaml's one-run libraries
    and every kernel the landscapes timed (status ok); one entry per kernel, best.yaml's figure first."""
    if not folder.is_dir():
        return []
    entries = best_entries(folder)
    name = _layer_name_in_results(entries, layer)
    found: dict[str, Measured] = {}
    entry = entries.get(name)
    if entry is not None and entry.problem == layer.problem:
        try:
            config = make_config(layer.problem, entry.family, entry.knobs)
            description = registry.family_of(config).describe(config)
        except (KeyError, ValueError, SpaceError):  # a family or knob this checkout no longer has
            config, description = None, entry.kernel
        found[entry.kernel] = Measured(entry.kernel, entry.family, description, entry.runtime_us,
                                       "best.yaml (tuned)", config)
    one_run = read_bench(folder).one_run.get(name)
    if one_run is not None:
        for key, library in LIBRARIES:
            if (us := one_run.us(key)) is not None:
                found[library] = Measured(library, LIBRARY_FAMILY, library, float(us), "bench.yaml one_run")
    for family in registry.names():
        path = folder / LANDSCAPE_DIR / family / f"{layer_file_stem(name)}.csv"
        if not path.is_file():
            continue
        for config, recorded in recorded_rows(path, layer.problem, family):
            if recorded.status is Status.ok and recorded.median_us and config.name not in found:
                found[config.name] = Measured(config.name, family, registry.family_of(config).describe(config),
                                              recorded.median_us, f"{LANDSCAPE_DIR}/{family}", config)
    return list(found.values())


@dataclass(frozen=True)
class Row:
    """One row of the ranking: a measured kernel or library, or one kernel as the model sees it, standing for
    `variants` configurations that differ only in knobs the model cannot tell apart (`collapsed`)."""
    name: str
    family: str
    configuration: str
    us: float                    # measured, or modelled (scaled by `scale`)
    source: Source
    where: str = ""              # measured: the file
    model_us: float | None = None  # the model's own figure
    scale: float | None = None   # modelled: the family's measured/modelled ratio on this layer, where it has one
    variants: int = 1
    collapsed: tuple[str, ...] = ()
    below_measured_best: bool = False  # modelled faster than a measured kernel it may not beat: ranked under it
    rank_floor_us: float = 0.0   # modelled: ranked no higher than this measured figure
    blocks: int | None = None
    waves: float | None = None
    blocks_per_sm: int | None = None


def family_scales(measured: list[Measured], problem: ConvProblem, device: DeviceFacts,
                  rates: Ceilings) -> dict[str, float]:
    """Per family with measured kernels on this layer: the median of measured / modelled over them."""
    ratios: dict[str, list[float]] = {}
    for entry in measured:
        if entry.config is not None:
            ratios.setdefault(entry.family, []).append(
                entry.us / predicted_us(entry.config, problem, device, rates))
    return {family: statistics.median(values) for family, values in ratios.items()}


def _model_view(prediction: Prediction) -> tuple:
    """What the model tells apart: configurations of one family and tile with the same figure and launch
    differ only in knobs it gives no weight on this layer (swizzle, raster, cluster, ...)."""
    config = prediction.config
    return (config.family, config.tile, round(prediction.predicted_us, 6), prediction.blocks,
            prediction.blocks_per_sm)


def _differing_knobs(configs: list[KernelConfig]) -> tuple[str, ...]:
    knobs = registry.get(configs[0].family).rules.knobs
    return tuple(knob for knob in knobs if len({str(c.search_params.get(knob)) for c in configs}) > 1)


def combined_rows(ranked: list[Prediction], measured: list[Measured], problem: ConvProblem, device: DeviceFacts,
                  rates: Ceilings) -> list[Row]:
    """The ranking of measured and modelled rows (docs/cost-model.md states the rule):
    - a measured kernel shows its measurement, and so stands for every configuration the model cannot tell
      from it;
    - modelled configurations the model cannot tell apart (same cost terms and launch) are one row;
    - a family's modelled figures are scaled by its median measured/modelled ratio on this layer;
    - no modelled figure ranks above the fastest measured kernel of the layer, nor above its own family's
      fastest measured kernel: one that comes out faster is ranked under it and marked, since the searches
      that measured them were seeded with the model's own picks."""
    scales = family_scales(measured, problem, device, rates)
    shapes = {entry.name: predict(entry.config, problem, device, rates) for entry in measured
              if entry.config is not None}
    measured_views = {_model_view(shape) for shape in shapes.values()}
    groups: dict[tuple, list[Prediction]] = {}
    for prediction in ranked:  # fastest first, fitted knob values first among equals
        groups.setdefault(_model_view(prediction), []).append(prediction)
    floors = _floors(measured)
    rows = [_measured_row(entry, shapes.get(entry.name)) for entry in measured]
    rows += [_modelled_row(members[0], scales, floors, [m.config for m in members])
             for view, members in groups.items() if view not in measured_views]
    return sorted(rows, key=rank_key)


def config_row(config: KernelConfig, measured: list[Measured], problem: ConvProblem, device: DeviceFacts,
               rates: Ceilings) -> Row:
    """The row of one configuration as the ranking would hold it: its measurement on this layer where it has
    one, else the model's figure scaled and ranked no higher than the measurements allow."""
    shape = predict(config, problem, device, rates)
    entry = next((entry for entry in measured if entry.name == config.name), None)
    if entry is not None:
        return _measured_row(entry, shape)
    return _modelled_row(shape, family_scales(measured, problem, device, rates), _floors(measured), [config])


def rank_key(row: Row) -> tuple:
    """Where a row ranks: by its figure, a modelled one no higher than the measured floor it may not beat."""
    return max(row.us, row.rank_floor_us), row.source is Source.modelled, row.us


def _floors(measured: list[Measured]) -> tuple[float, dict[str, float]]:
    """The layer's fastest measured kernel, and each family's (libraries are no kernel of a family)."""
    kernels = [entry for entry in measured if entry.family != LIBRARY_FAMILY]
    family_floor: dict[str, float] = {}
    for entry in kernels:
        family_floor[entry.family] = min(entry.us, family_floor.get(entry.family, math.inf))
    return min((entry.us for entry in kernels), default=0.0), family_floor


def _measured_row(entry: Measured, shape: Prediction | None) -> Row:
    return Row(entry.name, entry.family, entry.description, entry.us, Source.measured, entry.where,
               shape.predicted_us if shape else None,
               blocks=shape.blocks if shape else None, waves=shape.waves if shape else None,
               blocks_per_sm=shape.blocks_per_sm if shape else None)


def _modelled_row(best: Prediction, scales: dict[str, float], floors: tuple[float, dict[str, float]],
                  members: list[KernelConfig]) -> Row:
    """`best` standing for `members`, the configurations the model cannot tell from it."""
    scale = scales.get(best.config.family)
    us = best.predicted_us * (scale or 1.0)
    layer_floor, family_floor = floors
    floor = max(layer_floor, family_floor.get(best.config.family, 0.0))
    return Row(best.config.name, best.config.family, registry.family_of(best.config).describe(best.config), us,
               Source.modelled, model_us=best.predicted_us, scale=scale, variants=len(members),
               collapsed=_differing_knobs(members) if len(members) > 1 else (),
               below_measured_best=us < floor, rank_floor_us=floor, blocks=best.blocks, waves=best.waves,
               blocks_per_sm=best.blocks_per_sm)


def results_folder(results_root: Path, gpu_name: str, gpu: GpuSpec) -> Path:
    """results/<gpu>/ for --gpu NAME: the folder named so, else the table GPU's (which may not exist)."""
    slug = results_slug(results_root, gpu_name)
    if not (results_root / slug).is_dir():
        slug = results_slug(results_root, gpu.name)
    return gpu_dir(results_root, slug)
