"""The sm90_dsl family's static checks: why a layer or a configuration cannot run, found without building the
kernel (tuner/families/sm90_dsl/kernel.py builds only what these pass; geometry.geometry raises the same rules)."""
from __future__ import annotations

from tuner.core.axes import pair_text
from tuner.core.device import DeviceFacts
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.families.base import types_problem
from tuner.families.sm90_dsl.space import (CHANNEL_MULTIPLE, FAMILY, INPUT_TYPES, MIN_K_TILES_PER_SPLIT, AUTO_STAGES,
                                           EpilogueStore, Schedule, Sm90DslConfig, problem_spec)
from tuner.families.sm90_dsl.box import box_problem
from tuner.families.sm90_dsl.spec import (DIRECT_GATHER_PROBLEM, GATHER_BELOW_CHANNELS, OUTPUT_ELEMENTS,
                                          cluster_problem, cluster_reduce_problem, element_tile_problem,
                                          tile_m_problem, tile_n_problem)
from tuner.families.sm90_dsl.im2col import im2col_problem
from tuner.families.sm90_dsl.stream_plan import stream_k_problem

# Units of one tile a stream-K plan may have: the tile's last unit reads every unit's f32 partial back alone, so a
# plan of many small shares on few tiles costs more than split-K's even splits (which the space also holds). The
# ResNet-50 stage-5 layer at batch 32 it is for has 4 (52 tiles of 72 k tiles in 132 shares).
MAX_STREAM_K_UNITS = 4


def layer_problem(problem: ConvProblem) -> str | None:
    if (reason := types_problem(FAMILY, problem, INPUT_TYPES)):
        return reason
    if problem.output_type.value != OUTPUT_ELEMENTS[problem.input_type.value]:
        return (f"sm90_dsl kernels write the output in their input's type, f16 from e4m3 or f32 from tf32, got "
                f"{problem.dtype_key}")
    if problem.input_type is DataType.tf32:
        if problem.epilogue.residual:
            return ("sm90_dsl's tf32 kernels load no residual (its ring moves 16-bit elements by ldmatrix); sm80 and "
                    "sm90_conv fuse one")
        if problem.c < GATHER_BELOW_CHANNELS:
            return (f"sm90_dsl gathers C={problem.c} (under {GATHER_BELOW_CHANNELS}) in 16-bit elements only; sm80 and "
                    "sm90_conv run a tf32 stem")
    if problem.k % CHANNEL_MULTIPLE and problem.c < GATHER_BELOW_CHANNELS:
        return (f"sm90_dsl stores K={problem.k} (not a multiple of {CHANNEL_MULTIPLE}) element by element, which its "
                f"gathering kernel for C={problem.c} does not")
    if problem.k % CHANNEL_MULTIPLE and problem.epilogue.residual:
        return (f"sm90_dsl loads a residual by TMA rows of K: K={problem.k} must be a multiple of {CHANNEL_MULTIPLE} "
                "for a residual layer")
    if max(problem.strides) > 2 and problem.c >= GATHER_BELOW_CHANNELS:
        return (f"sm90_dsl runs strides 1 and 2 (one TMA view per stride phase); this one has stride "
                f"{pair_text(problem.strides)}")
    return None


# Each rule returns why the configuration cannot run, or None.
def _check_tile(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    m, n, k = config.tile.m, config.tile.n, config.tile.k
    if (reason := tile_n_problem(n)):
        return reason
    if (reason := tile_m_problem(m, n, config.schedule.value, config.shape.gathers)):
        return reason
    if (reason := element_tile_problem(n, k, config.input_type.value)):
        return reason
    return None


def _check_box(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    if config.box is None:
        return None
    if (reason := box_problem(config.shape, config.tile.m, config.columns)):
        return reason
    if config.columns >= 4 * config.shape.q and config.columns > 8:
        return (f"tile_q={config.columns} is four times the output's Q={config.shape.q} or more: most of the tile "
                "would be computed on padding (pick a narrower box)")
    return None


def _check_im2col(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    return im2col_problem(config.shape) if config.im2col else None


def _check_cluster(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    cm, cn, ck = config.cluster.m, config.cluster.n, config.cluster.k
    if ck != 1:
        return f"cluster {config.cluster.text}: K 1 (a cluster's CTAs lie along M and N)"
    if (reason := cluster_problem(cm, cn)):
        return reason
    if config.work_tiles < cm * cn:
        return f"{config.work_tiles} output tile(s) cannot fill a cluster of {cm * cn}"
    return None


def _check_shared_memory(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    fits = config.auto_stage_count
    if fits < 2:
        return f"only {fits} pipeline stage(s) of {config.stage_bytes} bytes fit beside the epilogue"
    if config.stages != AUTO_STAGES and config.stages > fits:
        return f"{config.stages} stages of {config.stage_bytes} bytes do not fit (at most {fits})"
    return None


def _check_gather(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    if not config.shape.gathers:
        return None
    if (config.cluster.m, config.cluster.n) != (1, 1) or config.split_k != 1:
        return (f"C={config.shape.c} is gathered by the producer warps (fewer channels than a 16-byte TMA row): "
                "no cluster multicast and no split-K")
    if config.schedule is Schedule.pingpong:
        return f"C={config.shape.c} is gathered by the producer warps: built with the single and cooperative schedules"
    if config.fusion.residual:
        return f"C={config.shape.c} is gathered by all four producer warps: none is left to load the residual"
    if config.tile.n < config.shape.k:
        return (f"C={config.shape.c} is gathered, and the kernel keeps the whole filter in shared memory: tile N "
                f"{config.tile.n} must hold all K={config.shape.k} output channels")
    if config.epi_store is EpilogueStore.direct:
        return DIRECT_GATHER_PROBLEM
    return None


def _check_split_k(config: Sm90DslConfig, device: DeviceFacts) -> str | None:
    if config.split_k == 1:
        return None
    if config.stream_k:
        plan = config.stream_plan
        if (reason := stream_k_problem(plan, config.schedule.value, config.shape.gathers)):
            return reason
        if plan.shortest_share < MIN_K_TILES_PER_SPLIT:
            return (f"stream-K: {plan.work} k tiles in {plan.clusters} shares leave a share fewer than "
                    f"{MIN_K_TILES_PER_SPLIT}")
        if plan.slots > MAX_STREAM_K_UNITS:
            return (f"stream-K: {plan.cluster_tiles} tiles in {plan.clusters} shares split a tile {plan.slots} ways, "
                    f"whose last unit reads every partial back (at most {MAX_STREAM_K_UNITS}: split-K serves a grid "
                    "this small)")
        return None
    if (reason := cluster_reduce_problem(config.split_k, config.split_reduce.value, config.cluster.m,
                                         config.cluster.n)):
        return reason
    if config.schedule is Schedule.pingpong:
        return "split-K is not built with the pingpong schedule (its groups skip each other's k tiles by count)"
    if config.split_k * MIN_K_TILES_PER_SPLIT > config.k_steps:
        return (f"split-K {config.split_k} leaves a split fewer than {MIN_K_TILES_PER_SPLIT} of the "
                f"{config.k_steps} k tiles of a tile")
    if device.sm_count and config.cluster_tiles >= device.sm_count:
        return (f"split-K {config.split_k}: the {config.cluster_tiles} CTAs of the output tiles already fill the "
                f"{device.sm_count} SMs")
    return None


# (pingpong with a residual in a cluster, refused from 2026-11-25, and the direct store with a residual are not:
# both computed wrong outputs because the residual ring released a slot to the TMA refill without a proxy fence
# (consumers.py); fenced, they validated on the H200, 2026-11-29)
RULES = (_check_tile, _check_box, _check_im2col, _check_cluster, _check_shared_memory, _check_gather, _check_split_k)


def static_problems(config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    if (reason := layer_problem(problem)):
        return [reason]
    if config.shape != problem_spec(problem):
        return [f"the kernel was built for {config.shape}, not this problem"]
    return [reason for rule in RULES if (reason := rule(config, device))]
