"""Predictions for a GPU that need not be present, from the GPU table (tuner/core/gpus.py), the families'
static checks and the cost model: a layer's configurations ranked, and what one configuration would waste
there (`tune.py predict`, tuner/cli/predict.py). Nothing is compiled or run; tuner/analysis/measured_ranking.py
puts measurements of the layer beside them."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.analysis.diagnose import LaunchFacts, Occupancy, WasteFlag, diagnose, kernel_facts, occupancy
from tuner.core import gpus
from tuner.core.device import DeviceFacts, block_limits
from tuner.core.gpus import GpuSpec
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.families.sm80.space import Sm80Config
from tuner.families.sm80_common.costmodel import REGISTER_OVERHEAD
from tuner.measure.run import KernelAttributes
from tuner.search.costmodel import Ceilings, predicted_us

MAX_REGISTERS_PER_THREAD = 255


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
    terms = family.model.cost_terms(config, problem, device)
    shape = family.model.launch_shape(config, problem, device)
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
        order = registry.family_of(prediction.config).model.prior_order(prediction.config, problem)
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
    shape = registry.family_of(config).model.launch_shape(config, problem, device)
    facts = kernel_facts(config, problem, device, shape.work_tiles, estimated_attributes(config, device), None)
    # The occupancy API's answer is estimated here: let the block limits speak, naming the binding one.
    facts = LaunchFacts(**{**facts.__dict__, "max_active_blocks_per_sm": None})
    return ConfigWaste(facts, occupancy(facts), tuple(diagnose(facts)))


@dataclass(frozen=True)
class ConfigVerdict:
    """One configuration on the device, statically: why it cannot run (then nothing else), or its waste, its
    predicted time and rank."""
    cannot_run: tuple[str, ...]
    waste: ConfigWaste | None = None
    prediction: Prediction | None = None
    rank: int | None = None                 # in the ranking; None: outside the search space


def config_verdict(config: Sm80Config, problem: ConvProblem, device: DeviceFacts, ranked: list[Prediction],
                   rates: Ceilings) -> ConfigVerdict:
    family = registry.family_of(config)
    reason = registry.why_not(family, problem, device)
    problems = [reason] if reason else family.rules.static_problems(config, problem, device)
    if problems:
        return ConfigVerdict(tuple(problems))
    rank = next((index for index, p in enumerate(ranked, 1) if p.config == config), None)
    return ConfigVerdict((), config_waste(config, problem, device), predict(config, problem, device, rates), rank)
