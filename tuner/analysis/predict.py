"""`tune.py predict`: rank a layer's configurations for a GPU that need not be present, from the GPU
table (tuner/core/gpus.py), the families' static checks and the cost model, and show what one configuration
would waste there. Nothing is compiled or run. Where results/<gpu>/ holds measurements of the layer
(best.yaml, bench.yaml's one run, the landscapes) they are shown as measured and rank the model's figures
(docs/cost-model.md, "predict on a GPU with measurements")."""
from __future__ import annotations

import argparse
import enum
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner.core import gpus
from tuner.cli.choices import UsageParser, positive
from tuner.search.space import chosen_spaces
from tuner.core.errors import UsageError
from tuner.search.costmodel import Ceilings, predicted_us
from tuner.core.device import DeviceFacts, block_limits
from tuner.analysis.diagnose import LaunchFacts, Occupancy, WasteFlag, diagnose, kernel_facts, occupancy
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.families.sm80.costmodel import REGISTER_OVERHEAD
from tuner.families.sm80.space import FAMILY as SM80, REFERENCE_PARAMS, SWIZZLES, IteratorAlgorithm, Sm80Config
from tuner.core.gpus import GpuSpec
from tuner.core.layers import LONG_SHAPE, SHORT_SHAPE, Layer, find_layer, load_layers, parse_shape
from tuner.core.problem import ConvProblem
from tuner.search.replay import recorded_rows
from tuner.store.results import (ResultsError, best_entries, gpu_dir, layer_file_stem, names_by_problem, read_bench,
                           results_slug)
from tuner.measure.run import KernelAttributes
from tuner.search.space import joint_valid_configs, layer_space, make_config
from tuner.core.status import Status

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TOP = 5
MAX_REGISTERS_PER_THREAD = 255
NOT_MEASURED = "These are predictions from the GPU table, static checks and the cost model, not measurements."
LANDSCAPE_DIR = "landscape"
# bench.yaml's one-run libraries, timed beside the tuned kernel (the same-kernel-bare figure is not a library).
LIBRARIES = (("cudnn_us", "cuDNN"), ("cublas_us", "cuBLAS"), ("eager_us", "PyTorch eager"),
             ("compiled_us", "torch.compile"))
LIBRARY_FAMILY = "library"


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="tune.py predict",
        description="Rank a layer's kernel configurations for a GPU that need not be present (from tuner/core/gpus.py: "
                    f"{gpus.known_names()}) by the static checks and the cost model, and with --config show what "
                    "one configuration would waste there: grid against SMs, waves, blocks per SM and what limits "
                    "them. Predictions, not measurements.")
    parser.add_argument("--gpu", required=True, help="the GPU, by name, alias or device name (e.g. rtx3060, h100-sxm)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--layer", help="layer name from the layer table (tune.py --list-layers)")
    target.add_argument("--shape", help=f"ad-hoc problem {SHORT_SHAPE}, or per axis {LONG_SHAPE}; f16 in/out")
    parser.add_argument("--config", help="an sm80 configuration: TILE,wWARPS,sSTAGES[,swSWIZZLE][,skSPLIT_K]"
                                         "[,ITERATOR], e.g. 128x128x64,w2x2x1,s3 (swizzle 1, split-K 1 and the "
                                         "optimized iterator unless given)")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP,
                        help=f"configurations of the ranking to show (default {DEFAULT_TOP})")
    parser.add_argument("--family", help="comma-separated kernel families to rank (default: every family the GPU "
                                         f"and the layer allow; known: {', '.join(registry.names())})")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="layer table (default search_spaces/layers.yaml)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where the GPU's measurements are read from, if it has any (default results/)")
    parser.add_argument("--json", action="store_true",
                        help="print the ranking as one JSON list of rows (name, family, configuration, "
                             "measured_us or predicted_us, source, ...) instead of the table")
    return parser


# --- the configuration text ------------------------------------------------------------------------

# The ranges the sm80 space file may give (tuner/families/sm80/space.py's parse_space).
MIN_STAGES, MAX_STAGES, MAX_SPLIT_K = 2, 16, 64
_ITERATORS = tuple(iterator.value for iterator in IteratorAlgorithm)
_CONFIG_PARTS = (
    (re.compile(r"\d+x\d+x\d+"), "tile", str),
    (re.compile(r"w(\d+x\d+x\d+)"), "warps", str),
    (re.compile(r"s(\d+)"), "stages", int),
    (re.compile(r"sw(\d+)"), "swizzle", int),
    (re.compile(r"sk(\d+)"), "split_k", int),
    (re.compile("|".join(_ITERATORS)), "iterator", str),
)


def parse_config_text(text: str, problem: ConvProblem) -> Sm80Config:
    """'128x128x64,w2x2x1,s3' -> the sm80 configuration; knobs not given take the reference values."""
    params: dict = {}
    for part in (piece.strip().lower() for piece in text.split(",")):
        for pattern, knob, kind in _CONFIG_PARTS:
            match = pattern.fullmatch(part)
            if match:
                if knob in params:
                    raise UsageError(f"--config {text!r} gives {knob} twice")
                params[knob] = kind(match[match.lastindex or 0])
                break
        else:
            raise UsageError(f"--config {text!r}: cannot read {part!r}; write TILE,wWARPS,sSTAGES[,swSWIZZLE]"
                             f"[,skSPLIT_K][,ITERATOR] with ITERATOR one of {', '.join(_ITERATORS)}, "
                             "e.g. 128x128x64,w2x2x1,s3")
    missing = [knob for knob in ("tile", "warps", "stages") if knob not in params]
    if missing:
        raise UsageError(f"--config {text!r} lacks {', '.join(missing)}; e.g. 128x128x64,w2x2x1,s3")
    for knob, allowed, rule in (("stages", range(MIN_STAGES, MAX_STAGES + 1), f"{MIN_STAGES} to {MAX_STAGES}"),
                                ("swizzle", SWIZZLES, ", ".join(map(str, SWIZZLES))),
                                ("split_k", range(1, MAX_SPLIT_K + 1), f"1 to {MAX_SPLIT_K}")):
        if knob in params and params[knob] not in allowed:
            raise UsageError(f"--config {text!r}: {knob} {params[knob]} is not {rule}")
    return registry.get(SM80).make_config(problem, {**REFERENCE_PARAMS, **params})


# --- predictions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    config: KernelConfig
    predicted_us: float
    blocks: int
    blocks_per_sm: int
    sm_count: int

    @property
    def waves(self) -> float:
        return self.blocks / (self.sm_count * self.blocks_per_sm)


def ceilings(gpu: GpuSpec) -> Ceilings:
    """The cost model's rates for this GPU: the share of its peaks a tuned kernel sustains."""
    return Ceilings(matmul_tflops=gpus.achievable_tflops(gpu), copy_gbps=gpus.achievable_gbps(gpu))


def predict(config: KernelConfig, problem: ConvProblem, device: DeviceFacts, rates: Ceilings) -> Prediction:
    family = registry.family_of(config)
    terms = family.cost_terms(config, problem, device)
    shape = family.launch_shape(config, problem, device)
    blocks = shape.work_tiles
    if shape.persistent:  # one wave of CTAs that loop over the tiles
        blocks = min(blocks, device.sm_count * terms.blocks_per_sm)
    return Prediction(config, predicted_us(config, problem, device, rates), blocks, terms.blocks_per_sm,
                      device.sm_count)


def ranking(configs: list[KernelConfig], problem: ConvProblem, device: DeviceFacts,
            rates: Ceilings) -> list[Prediction]:
    """Fastest predicted first; among equal predictions the family's fitted knob values first (the model
    cannot tell swizzles or iterators apart: tuner/search/costmodel.py's prior picks break ties the same way)."""
    def key(prediction: Prediction) -> tuple:
        order = registry.family_of(prediction.config).prior_order(prediction.config, problem)
        return round(prediction.predicted_us, 9), order is None, order or 0, prediction.config.name

    return sorted((predict(config, problem, device, rates) for config in configs), key=key)


def fills(prediction: Prediction) -> bool:
    """Every SM gets a block."""
    return prediction.blocks >= prediction.sm_count


def estimated_attributes(config: Sm80Config, device: DeviceFacts) -> KernelAttributes:
    """What ptxas and the occupancy API would say of the compiled kernel, estimated: registers as the
    cost model counts them (accumulators plus overhead), shared memory of the main loop's stages."""
    registers = min(MAX_REGISTERS_PER_THREAD, config.warp_tile.m * config.warp_tile.n // 32 + REGISTER_OVERHEAD)
    smem = config.mainloop_smem_bytes
    limits = block_limits(registers, smem, config.warp_count, device)
    return KernelAttributes(registers_per_thread=registers, static_smem_bytes=0, dynamic_smem_bytes=smem,
                            local_bytes_per_thread=0, threads_per_block=config.threads,
                            max_active_blocks_per_sm=max(0, min(limits.values())))


@dataclass(frozen=True)
class ConfigWaste:
    facts: LaunchFacts
    occupancy: Occupancy
    flags: tuple[WasteFlag, ...]

    @property
    def waves(self) -> float:
        blocks_per_sm = self.occupancy.blocks_per_sm
        return self.facts.grid_blocks / (self.facts.sm_count * blocks_per_sm) if blocks_per_sm else math.inf


def config_waste(config: Sm80Config, problem: ConvProblem, device: DeviceFacts) -> ConfigWaste:
    """The static diagnosis (tuner/analysis/diagnose.py) of the configuration's launch on the device."""
    shape = registry.family_of(config).launch_shape(config, problem, device)
    facts = kernel_facts(config, problem, device, shape.work_tiles, estimated_attributes(config, device), None)
    # The occupancy API's answer is estimated here: let the block limits speak, naming the binding one.
    facts = LaunchFacts(**{**facts.__dict__, "max_active_blocks_per_sm": None})
    return ConfigWaste(facts, occupancy(facts), tuple(diagnose(facts)))


# --- measurements, and the ranking that holds them ------------------------------------------------------


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
    one_run = (read_bench(folder).get("one_run") or {}).get(name)
    if isinstance(one_run, dict):
        for key, library in LIBRARIES:
            us = one_run.get(key)
            if isinstance(us, (int, float)) and not isinstance(us, bool) and 0 < us < math.inf:
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

    def as_json(self, rank: int, top_us: float) -> dict:
        figure = "measured_us" if self.source is Source.measured else "predicted_us"
        return {"rank": rank, "name": self.name, "family": self.family, "configuration": self.configuration,
                figure: round(self.us, 4), "source": self.source.value, "where": self.where or None,
                "model_us": round(self.model_us, 4) if self.model_us is not None else None,
                "scale": round(self.scale, 4) if self.scale is not None else None,
                "versus_top": versus(self.us, top_us) if rank > 1 else "the top",
                "variants": self.variants, "collapsed_knobs": list(self.collapsed),
                "below_measured_best": self.below_measured_best, "blocks": self.blocks,
                "waves": round(self.waves, 4) if self.waves is not None else None,
                "blocks_per_sm": self.blocks_per_sm}


def versus(us: float, other_us: float) -> str:
    """`us` against `other_us` in words that cannot be misread: '1.39x slower', '0.72x the time'."""
    ratio = us / other_us
    if round(ratio, 2) == 1:
        return "the same time"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{ratio:.2f}x the time"


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
    knobs = registry.get(configs[0].family).knobs
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
    kernels = [entry for entry in measured if entry.family != LIBRARY_FAMILY]
    layer_floor = min((entry.us for entry in kernels), default=0.0)
    family_floor: dict[str, float] = {}
    for entry in kernels:
        family_floor[entry.family] = min(entry.us, family_floor.get(entry.family, math.inf))
    rows = []
    for entry in measured:
        shape = shapes.get(entry.name)
        rows.append(Row(entry.name, entry.family, entry.description, entry.us, Source.measured, entry.where,
                        shape.predicted_us if shape else None,
                        blocks=shape.blocks if shape else None, waves=shape.waves if shape else None,
                        blocks_per_sm=shape.blocks_per_sm if shape else None))
    for view, members in groups.items():
        if view in measured_views:
            continue
        best = members[0]
        scale = scales.get(best.config.family)
        us = best.predicted_us * (scale or 1.0)
        floor = max(layer_floor, family_floor.get(best.config.family, 0.0))
        rows.append(Row(best.config.name, best.config.family,
                        registry.family_of(best.config).describe(best.config), us, Source.modelled,
                        model_us=best.predicted_us, scale=scale, variants=len(members),
                        collapsed=_differing_knobs([m.config for m in members]) if len(members) > 1 else (),
                        below_measured_best=us < floor, rank_floor_us=floor, blocks=best.blocks, waves=best.waves,
                        blocks_per_sm=best.blocks_per_sm))
    return sorted(rows, key=lambda row: (max(row.us, row.rank_floor_us), row.source is Source.modelled, row.us))


# --- the command ---------------------------------------------------------------------------------------


def _layer(args: argparse.Namespace) -> Layer:
    if args.shape is not None:
        problem = parse_shape(args.shape)
        return Layer(f"--shape {args.shape}", problem)
    return find_layer(load_layers(args.layers_file), args.layer)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _describe(config: KernelConfig) -> str:
    return f"{config.family} {registry.family_of(config).describe(config)}"


def _config_lines(config: Sm80Config, problem: ConvProblem, device: DeviceFacts, gpu: GpuSpec,
                  ranked: list[Prediction], rates: Ceilings) -> list[str]:
    lines = [f"config {_describe(config)} on {gpu.slug}:"]
    reason = registry.why_not(registry.family_of(config), problem, device)
    problems = [reason] if reason else registry.family_of(config).static_problems(config, problem, device)
    if problems:
        lines += [f"  cannot run: {problem_text}" for problem_text in problems]
        return lines
    waste = config_waste(config, problem, device)
    occ, facts = waste.occupancy, waste.facts
    smem_kb = facts.smem_per_block_bytes / 1024
    lines.append(f"  {_plural(facts.grid_blocks, 'block')} on {facts.sm_count} SMs, {waste.waves:.2f} waves, "
                 f"{_plural(occ.blocks_per_sm, 'block')} per SM limited by {occ.limited_by_text} "
                 f"({smem_kb:.1f} KB shared memory per block of {device.smem_per_sm / 1024:.0f} KB per SM, "
                 f"~{facts.registers_per_thread} registers per thread, estimated)")
    mine = predict(config, problem, device, rates)
    place = next((index for index, p in enumerate(ranked, 1) if p.config == config), None)
    lines.append(f"  predicted {mine.predicted_us:.2f} µs" +
                 (f", rank {place} of {len(ranked)}" if place else ", outside the search space"))
    lines += [f"  {flag.code}: {flag.message}" for flag in waste.flags] or ["  no waste flagged"]
    better = [ranked[0]] if ranked else []
    if better and not fills(better[0]):
        better += [p for p in ranked if fills(p)][:1]
    for label, best in zip(("the top-ranked", "the best-ranked that fills every SM"), better):
        if best.config == config:
            continue
        filled = "every SM busy" if fills(best) else f"{device.sm_count - best.blocks} SMs idle"
        lines.append(f"  instead: {_describe(best.config)} ({label}): {_plural(best.blocks, 'block')} on "
                     f"{device.sm_count} SMs ({filled}), {best.waves:.2f} waves, "
                     f"{_plural(best.blocks_per_sm, 'block')} per SM, predicted {best.predicted_us:.2f} µs "
                     f"({versus(best.predicted_us, mine.predicted_us)} of this configuration's)")
    return lines


def results_folder(results_root: Path, gpu_name: str, gpu: GpuSpec) -> Path:
    """results/<gpu>/ for --gpu NAME: the folder named so, else the table GPU's (which may not exist)."""
    slug = results_slug(results_root, gpu_name)
    if not (results_root / slug).is_dir():
        slug = results_slug(results_root, gpu.name)
    return gpu_dir(results_root, slug)


def _us(row: Row) -> str:
    return f"{row.us:.2f}" if row.source is Source.measured else f"~{row.us:.2f}"


def _note(row: Row) -> str:
    parts = [row.where] if row.where else []
    if row.scale is not None:
        parts.append(f"{row.model_us:.2f} x {row.scale:.2f}")
    if row.variants > 1:
        parts.append(f"+{row.variants - 1} alike ({', '.join(row.collapsed)})")
    if row.below_measured_best:
        parts.append(f"ranked under the measured {row.rank_floor_us:.2f}")
    return "; ".join(parts)


LEGEND_ALIKE = ("'+N alike': configurations of one tile with the same figure and launch, which the model cannot "
                "tell apart, shown once (the knobs they differ in in brackets).")
LEGEND_MEASURED = ("~: modelled. A modelled figure is the cost model's, times its family's measured/modelled ratio on "
                   "this layer (median over the family's measured kernels: 'MODEL x RATIO'); none ranks above the "
                   "layer's or its family's fastest measured kernel (docs/cost-model.md). ")


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    positive("--top", args.top)
    if args.json and args.config is not None:
        raise UsageError("--json prints the ranking alone; leave out --config")
    try:
        gpu = gpus.lookup(args.gpu)
    except gpus.UnknownGpu as error:
        raise UsageError(f"--gpu: {error}") from None
    device = gpus.device_facts(gpu)
    layer = _layer(args)
    problem = layer.problem
    config = parse_config_text(args.config, problem) if args.config is not None else None
    rates = ceilings(gpu)
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    try:
        joint = layer_space(chosen_spaces(args.family, None), problem, device)
    except SpaceError as error:
        if config is None:
            raise
        joint, ranked = None, []
        say(f"ranking: {error}")
    if joint is not None:
        ranked = ranking(joint_valid_configs(joint, problem, device), problem, device, rates)
    folder = results_folder(args.results_dir, args.gpu, gpu)
    try:
        measured = layer_measurements(folder, layer)
    except ResultsError as error:
        raise ResultsError(f"{error} (or pass --results-dir to a folder without it)") from None
    if joint is not None:
        wanted = set(joint.families) | {LIBRARY_FAMILY}
        measured = [entry for entry in measured if entry.family in wanted]
    rows = combined_rows(ranked, measured, problem, device, rates)
    shown = rows[:args.top]
    if args.json:
        # the document owns stdout (the CLI's console writes to stderr when --json is given)
        sys.stdout.write(json.dumps([row.as_json(rank, shown[0].us) for rank, row in enumerate(shown, 1)],
                                    indent=1) + "\n")
        return 0
    basis = (f"Measured figures are from {folder} ({len(measured)} of this layer); the rest are predictions "
             "from the GPU table, static checks and the cost model." if measured else NOT_MEASURED)
    say(f"Predictions for {gpu.summary}. {basis}")
    say(f"layer {layer.name}: {problem.shape_text}, {problem.dtype_key}, GEMM {'x'.join(map(str, problem.gemm_mnk))}"
        + (f"; families: {', '.join(joint.families)} ({len(ranked)} valid configurations)" if joint else ""))
    if config is not None:
        for line in _config_lines(config, problem, device, gpu, ranked, rates):
            say(line)
    if shown:
        modelled = sum(row.source is Source.modelled for row in rows)
        title = (f"top {len(shown)} of {len(rows)} on {gpu.slug}: {len(rows) - modelled} measured, {modelled} "
                 "modelled (one row per kernel the model tells apart)")
        table = Table(title=title)
        for column in ("rank", "family", "configuration", "µs", "source", "vs rank 1", "blocks", "waves",
                       "blocks/SM", "note"):
            table.add_column(column, overflow="fold")
        for index, row in enumerate(shown, 1):
            table.add_row(str(index), row.family, row.configuration, _us(row), row.source.value,
                          versus(row.us, shown[0].us) if index > 1 else "-",
                          "-" if row.blocks is None else str(row.blocks),
                          "-" if row.waves is None else f"{row.waves:.2f}",
                          "-" if row.blocks_per_sm is None else str(row.blocks_per_sm), _note(row))
        console.print(table)
        say((LEGEND_MEASURED if measured else "~: modelled. ") + LEGEND_ALIKE)
    elif joint is not None:
        say(f"no configuration of {', '.join(joint.families)} passes the static checks on {gpu.slug}")
    return 0
