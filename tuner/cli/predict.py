"""`tune.py predict`: rank a layer's configurations for a GPU that need not be present, from the GPU
table (tuner/core/gpus.py), the families' static checks and the cost model (tuner/analysis/predict.py), and show
what one configuration would waste there. Nothing is compiled or run. Where results/<gpu>/ holds measurements of
the layer (best.yaml, bench.yaml's one run, the landscapes) they are shown as measured and rank the model's
figures (tuner/analysis/measured_ranking.py; docs/cost-model.md, "predict on a GPU with measurements")."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner.analysis.measured_ranking import (LIBRARY_FAMILY, Row, Source, combined_rows, config_row,
                                             layer_measurements, rank_key, results_folder)
from tuner.analysis.predict import ConfigVerdict, Prediction, ceilings, config_verdict, ranking
from tuner.cli.choices import UsageParser, positive
from tuner.cli.tables import add_output_arguments, csv_document, print_table
from tuner.core import gpus
from tuner.core.device import DeviceFacts
from tuner.core.errors import UsageError
from tuner.core.gpus import GpuSpec
from tuner.core.problem import ConvProblem
from tuner.core.layers import LONG_SHAPE, SHORT_SHAPE, Layer, find_layer, load_layers, parse_shape
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.families.sm80.space import FAMILY as SM80, REFERENCE_PARAMS, Sm80Config
from tuner.families.sm80_common.space import SWIZZLES, IteratorAlgorithm
from tuner.search.space import chosen_spaces, joint_valid_configs, layer_space
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TOP = 5
NOT_MEASURED = "These are predictions from the GPU table, static checks and the cost model, not measurements."


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
    add_output_arguments(parser, json_help="print the ranking as one JSON list of rows (name, family, "
                                           "configuration, measured_us or predicted_us, source, ...) instead of "
                                           "the table",
                         csv_help="print the ranking as CSV, a line per row with the fields of --json, instead of "
                                  "the table")
    return parser


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
    return registry.get(SM80).rules.make_config(problem, {**REFERENCE_PARAMS, **params})


def versus(us: float, other_us: float) -> str:
    """`us` against `other_us` in words that cannot be misread: '1.39x slower', '0.72x the time'."""
    ratio = us / other_us
    if round(ratio, 2) == 1:
        return "the same time"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{ratio:.2f}x the time"


def row_document(row: Row, rank: int, top_us: float) -> dict:
    """A row of the ranking as --json gives it."""
    figure = "measured_us" if row.source is Source.measured else "predicted_us"
    return {"rank": rank, "name": row.name, "family": row.family, "configuration": row.configuration,
            figure: round(row.us, 4), "source": row.source.value, "where": row.where or None,
            "model_us": round(row.model_us, 4) if row.model_us is not None else None,
            "scale": round(row.scale, 4) if row.scale is not None else None,
            "versus_top": versus(row.us, top_us) if rank > 1 else "the top",
            "variants": row.variants, "collapsed_knobs": list(row.collapsed),
            "below_measured_best": row.below_measured_best, "blocks": row.blocks,
            "waves": round(row.waves, 4) if row.waves is not None else None,
            "blocks_per_sm": row.blocks_per_sm}


def _layer(args: argparse.Namespace) -> Layer:
    if args.shape is not None:
        problem = parse_shape(args.shape)
        return Layer(f"--shape {args.shape}", problem)
    return find_layer(load_layers(args.layers_file), args.layer)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _describe(config: KernelConfig) -> str:
    return f"{config.family} {registry.family_of(config).describe(config)}"


def _config_lines(config: Sm80Config, verdict: ConfigVerdict, device: DeviceFacts, gpu: GpuSpec,
                  ranked: list[Prediction], rows: list[Row], mine: Row | None) -> list[str]:
    """The configuration's launch, its figure (measured where results/<gpu>/ measured it), its rank, its waste
    and what to take instead: rows ranked above it that no measurement contradicts."""
    lines = [f"config {_describe(config)} on {gpu.slug}:"]
    if verdict.cannot_run or mine is None:
        lines += [f"  cannot run: {problem_text}" for problem_text in verdict.cannot_run]
        return lines
    waste = verdict.waste
    occ, facts = waste.occupancy, waste.facts
    smem_kb = facts.smem_per_block_bytes / 1024
    lines.append(f"  {_plural(facts.grid_blocks, 'block')} on {facts.sm_count} SMs, {waste.waves:.2f} waves, "
                 f"{_plural(occ.blocks_per_sm, 'block')} per SM limited by {occ.limited_by_text} "
                 f"({smem_kb:.1f} KB shared memory per block of {device.smem_per_sm / 1024:.0f} KB per SM, "
                 f"~{facts.registers_per_thread} registers per thread, estimated)")
    if any(row.source is Source.measured for row in rows):
        above = sum(rank_key(row) < rank_key(mine) for row in rows if row.name != mine.name)
        rank = f", rank {above + 1} of {len(rows)} measured and modelled"
    else:
        rank = f", rank {verdict.rank} of {len(ranked)}" if verdict.rank else ", outside the search space"
    lines.append(f"  {_config_figure(mine, verdict.prediction.predicted_us)}{rank}")
    lines += [f"  {flag.code}: {flag.message}" for flag in waste.flags] or ["  no waste flagged"]
    for label, best in _instead(mine, rows, config.family, device.sm_count):
        launch = ""
        if best.blocks is not None:
            filled = "every SM busy" if best.blocks >= device.sm_count else f"{device.sm_count - best.blocks} SMs idle"
            launch = (f"{_plural(best.blocks, 'block')} on {device.sm_count} SMs ({filled}), {best.waves:.2f} waves, "
                      f"{_plural(best.blocks_per_sm, 'block')} per SM, ")
        lines.append(f"  instead: {best.family} {best.configuration} ({label}): {launch}{_row_figure(best)} "
                     f"({versus(best.us, mine.us)} of this configuration's)")
    return lines


def _config_figure(mine: Row, model_us: float) -> str:
    """The configuration's own figure: measured, with the model's beside it; or the model's, scaled as the
    ranking scales its family, and what measurement it may not beat."""
    if mine.source is Source.measured:
        return f"measured {mine.us:.2f} µs ({mine.where}); modelled {model_us:.2f} µs by the cost model alone"
    text = f"predicted {model_us:.2f} µs"
    if mine.scale is not None:
        text = (f"not measured: modelled {model_us:.2f} µs by the cost model, ~{mine.us:.2f} µs with {mine.family}'s "
                f"measured/modelled ratio on this layer (x{mine.scale:.2f})")
    if mine.below_measured_best:
        text += f"; no measured kernel beat {mine.rank_floor_us:.2f} µs here, so it ranks under that"
    return text


def _row_figure(row: Row) -> str:
    if row.source is Source.measured:
        return f"measured {row.us:.2f} µs ({row.where})"
    if row.scale is None:
        return f"predicted {row.us:.2f} µs"
    return f"modelled ~{row.us:.2f} µs ({row.model_us:.2f} x {row.scale:.2f})"


def _instead(mine: Row, rows: list[Row], family: str, sm_count: int) -> list[tuple[str, Row]]:
    """The kernels to take instead, each ranked above `mine` and none a modelled figure a measurement
    contradicts: the top-ranked; where it leaves SMs idle, the best-ranked that fills them; where neither is of
    `family`, that family's best-ranked."""
    better = [row for row in rows if row.family != LIBRARY_FAMILY and row.name != mine.name
              and not row.below_measured_best and rank_key(row) < rank_key(mine)]
    if not better:
        return []
    top = better[0]
    chosen = [("the top-ranked", top)]
    if top.blocks is None or top.blocks < sm_count:
        filling = next((row for row in better if row.blocks is not None and row.blocks >= sm_count), None)
        chosen += [("the best-ranked that fills every SM", filling)] if filling is not None else []
    if all(row.family != family for _, row in chosen):
        same = next((row for row in better if row.family == family), None)
        chosen += [(f"the best-ranked {family}", same)] if same is not None else []
    return chosen


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


RANKING_NUMBERS = ("rank", "family", "µs", "source", "vs rank 1", "blocks", "waves", "blocks/SM")  # never cut
LEGEND_ALIKE = ("'+N alike': configurations of one tile with the same figure and launch, which the model cannot "
                "tell apart, shown once (the knobs they differ in in brackets).")
LEGEND_MEASURED = ("~: modelled. A modelled figure is the cost model's, times its family's measured/modelled ratio on "
                   "this layer (median over the family's measured kernels: 'MODEL x RATIO'); none ranks above the "
                   "layer's or its family's fastest measured kernel (docs/cost-model.md). ")


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    positive("--top", args.top)
    if (args.json or args.csv) and args.config is not None:
        raise UsageError(f"--{'json' if args.json else 'csv'} prints the ranking alone; leave out --config")
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
    if args.json or args.csv:
        # the document owns stdout (the CLI's console writes to stderr when --json or --csv is given)
        documents = [row_document(row, rank, shown[0].us) for rank, row in enumerate(shown, 1)]
        sys.stdout.write(csv_document(documents) if args.csv else json.dumps(documents, indent=1) + "\n")
        return 0
    basis = (f"Measured figures are from {folder} ({len(measured)} of this layer); the rest are predictions "
             "from the GPU table, static checks and the cost model." if measured else NOT_MEASURED)
    say(f"Predictions for {gpu.summary}. {basis}")
    say(f"layer {layer.name}: {problem.shape_text}, {problem.dtype_key}, GEMM {'x'.join(map(str, problem.gemm_mnk))}"
        + (f"; families: {', '.join(joint.families)} ({len(ranked)} valid configurations)" if joint else ""))
    if config is not None:
        verdict = config_verdict(config, problem, device, ranked, rates)
        mine = None if verdict.cannot_run else config_row(config, measured, problem, device, rates)
        for line in _config_lines(config, verdict, device, gpu, ranked, rows, mine):
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
        print_table(console, table, RANKING_NUMBERS)
        say((LEGEND_MEASURED if measured else "~: modelled. ") + LEGEND_ALIKE)
    elif joint is not None:
        say(f"no configuration of {', '.join(joint.families)} passes the static checks on {gpu.slug}")
    return 0
