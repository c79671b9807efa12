"""`tune.py predict`: rank a layer's configurations for a GPU that need not be present, from the GPU
table (tuner/gpus.py), the families' static checks and the cost model, and show what one configuration
would waste there. Nothing is compiled or run: every figure is a prediction."""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner import gpus
from tuner.choices import UsageError, UsageParser, chosen_spaces, positive
from tuner.costmodel import Ceilings, predicted_us
from tuner.device import DeviceFacts, block_limits
from tuner.diagnose import LaunchFacts, Occupancy, WasteFlag, diagnose, kernel_facts, occupancy
from tuner.families import registry
from tuner.families.base import KernelConfig, SpaceError
from tuner.families.sm80.costmodel import REGISTER_OVERHEAD
from tuner.families.sm80.space import FAMILY as SM80, REFERENCE_PARAMS, SWIZZLES, IteratorAlgorithm, Sm80Config
from tuner.gpus import GpuSpec
from tuner.problem import ConvProblem, Layer, find_layer, load_layers, parse_shape
from tuner.run import KernelAttributes
from tuner.space import joint_valid_configs, layer_space

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOP = 5
MAX_REGISTERS_PER_THREAD = 255
NOT_MEASURED = "These are predictions from the GPU table, static checks and the cost model, not measurements."


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="tune.py predict",
        description="Rank a layer's kernel configurations for a GPU that need not be present (from tuner/gpus.py: "
                    f"{gpus.known_names()}) by the static checks and the cost model, and with --config show what "
                    "one configuration would waste there: grid against SMs, waves, blocks per SM and what limits "
                    "them. Predictions, not measurements.")
    parser.add_argument("--gpu", required=True, help="the GPU, by name, alias or device name (e.g. rtx3060, h100-sxm)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--layer", help="layer name from the layer table (tune.py --list-layers)")
    target.add_argument("--shape", help="ad-hoc problem N,H,W,C,K,R,S[,pad,stride,dilation]; f16 in/out")
    parser.add_argument("--config", help="an sm80 configuration: TILE,wWARPS,sSTAGES[,swSWIZZLE][,skSPLIT_K]"
                                         "[,ITERATOR], e.g. 128x128x64,w2x2x1,s3 (swizzle 1, split-K 1 and the "
                                         "optimized iterator unless given)")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP,
                        help=f"configurations of the ranking to show (default {DEFAULT_TOP})")
    parser.add_argument("--family", help="comma-separated kernel families to rank (default: every family the GPU "
                                         f"and the layer allow; known: {', '.join(registry.names())})")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="layer table (default search_spaces/layers.yaml)")
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
    cannot tell swizzles or iterators apart: tuner/costmodel.py's prior picks break ties the same way)."""
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
    """The static diagnosis (tuner/diagnose.py) of the configuration's launch on the device."""
    shape = registry.family_of(config).launch_shape(config, problem, device)
    facts = kernel_facts(config, problem, device, shape.work_tiles, estimated_attributes(config, device), None)
    # The occupancy API's answer is estimated here: let the block limits speak, naming the binding one.
    facts = LaunchFacts(**{**facts.__dict__, "max_active_blocks_per_sm": None})
    return ConfigWaste(facts, occupancy(facts), tuple(diagnose(facts)))


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
                     f"({mine.predicted_us / best.predicted_us:.2g}x faster)")
    return lines


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    positive("--top", args.top)
    try:
        gpu = gpus.lookup(args.gpu)
    except gpus.UnknownGpu as error:
        raise UsageError(f"--gpu: {error}") from None
    device = gpus.device_facts(gpu)
    layer = _layer(args)
    problem = layer.problem
    config = parse_config_text(args.config, problem) if args.config is not None else None
    rates = ceilings(gpu)
    try:
        joint = layer_space(chosen_spaces(args.family, None), problem, device)
    except SpaceError as error:
        if config is None:
            raise
        joint, ranked = None, []
        console.print(f"ranking: {error}", markup=False, highlight=False)
    if joint is not None:
        ranked = ranking(joint_valid_configs(joint, problem, device), problem, device, rates)
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    say(f"Predictions for {gpu.summary}. {NOT_MEASURED}")
    say(f"layer {layer.name}: {problem.shape_text}, {problem.dtype_key}, GEMM {'x'.join(map(str, problem.gemm_mnk))}"
        + (f"; families: {', '.join(joint.families)} ({len(ranked)} valid configurations)" if joint else ""))
    if config is not None:
        for line in _config_lines(config, problem, device, gpu, ranked, rates):
            say(line)
    if ranked:
        table = Table(title=f"top {min(args.top, len(ranked))} of {len(ranked)} by the cost model on {gpu.slug} "
                            "(predicted, not measured)")
        for column in ("rank", "family", "configuration", "predicted µs", "blocks", "waves", "blocks/SM"):
            table.add_column(column, overflow="fold")
        for index, prediction in enumerate(ranked[:args.top], 1):
            table.add_row(str(index), prediction.config.family,
                          registry.family_of(prediction.config).describe(prediction.config),
                          f"{prediction.predicted_us:.2f}", str(prediction.blocks), f"{prediction.waves:.2f}",
                          str(prediction.blocks_per_sm))
        console.print(table)
    elif joint is not None:
        say(f"no configuration of {', '.join(joint.families)} passes the static checks on {gpu.slug}")
    return 0
