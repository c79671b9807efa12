"""The dsl_direct family's space: a direct convolution for depthwise layers and groups of 8 channels. Knobs: the
CTA's output tile (rows x columns), channels a CTA, `columns`, and the mapping: "simt" on CUDA cores (kernel.py,
`columns` output pixels of a row a thread) or, for groups of 8, "mma" on tensor cores (kernel_mma.py, `columns`
tiles of 16 pixels a warp). The problem (filter, pad, stride, dilation, groups) is compiled in."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.core.device import DeviceFacts
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.epilogue import Epilogue
from tuner.core.problem import ConvProblem
from tuner.families.base import (LaunchArgs, SearchSpace, Shape3, SpaceError, check_keys, int_list, param,
                                 types_problem, whole)
from tuner.families.dsl_direct.spec import (GROUP_WIDTHS, MAPPINGS, MAX_THREADS, MMA_PIXELS, VECTOR, DirectBuildSpec,
                                            DirectEpilogue, DirectProblem, DirectTile, mma_problem)

FAMILY = "dsl_direct"
INPUT_TYPES = (DataType.f16, DataType.bf16)
# Values a thread holds in registers (its accumulators, one filter row's input columns and one tap's weights)
# above which a spill is likely: the builds measured 72-86 registers at 120-152 values.
MAX_THREAD_VALUES = 224


@dataclass(frozen=True, order=True)
class DslDirectConfig:
    tile_p: int
    tile_q: int
    channels: int
    columns: int
    shape: DirectProblem  # every extent is compiled in
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()
    mapping: str = "simt"

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def compiled(self) -> "DslDirectConfig":
        return self

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def tile(self) -> Shape3:
        """The implicit GEMM's view: output pixels x channels x filter taps a CTA."""
        return Shape3(self.tile_p * self.tile_q, self.channels, self.shape.r * self.shape.s)

    @property
    def name(self) -> str:
        s = self.shape
        mapping = "" if self.mapping == "simt" else f"{self.mapping}_"  # simt's names are the ones results hold
        return (f"direct_{mapping}{self.tile_p}x{self.tile_q}_c{self.channels}_x{self.columns}_{self.dtype_key}"
                f"{self.fusion.short}_n{s.n}h{s.h}w{s.w}c{s.c}r{s.r}s{s.s}p{s.pad_h}x{s.pad_w}u{s.stride_h}x"
                f"{s.stride_w}d{s.dilation_h}x{s.dilation_w}g{s.group_width}")

    @property
    def search_params(self) -> dict[str, str | int]:
        return {"tile": f"{self.tile_p}x{self.tile_q}", "channels": self.channels, "columns": self.columns,
                "mapping": self.mapping}

    def build_spec(self) -> DirectBuildSpec:
        f = self.fusion
        return DirectBuildSpec(problem=self.shape,
                               tile=DirectTile(self.tile_p, self.tile_q, self.channels, self.columns, self.mapping),
                               epilogue=DirectEpilogue(scale=f.scale, bias=f.bias, activation=f.activation.value),
                               element=self.input_type.value)

    @property
    def threads(self) -> int:
        return self.build_spec().tile.threads()

    @property
    def thread_values(self) -> int:
        """32-bit values a thread holds: simt's accumulators, one filter row's input columns and one tap's weights;
        mma's A fragments (two words a tile a tap), accumulators and one B word a tap."""
        taps = self.shape.r * self.shape.s
        if self.mapping == "mma":
            return self.columns * (2 * taps + 4) + taps
        spec = self.build_spec()
        return (self.columns + spec.window_columns_a_thread()) * VECTOR + VECTOR * self.shape.group_width


def parse_tile(text: object) -> tuple[int, int]:
    parts = str(text).lower().split("x")
    if len(parts) != 2 or not all(part.isdigit() and 0 < int(part) <= 64 for part in parts):
        raise SpaceError(f"{FAMILY} tile {text!r} must look like 8x16 (output rows x columns, each 1 to 64)")
    return int(parts[0]), int(parts[1])


def parse_mapping(text: object) -> str:
    if text not in MAPPINGS:
        raise SpaceError(f"{FAMILY} mapping {text!r} must be one of {', '.join(MAPPINGS)}")
    return str(text)


def parse_space(document: object) -> SearchSpace:
    keys = {"family", "tile", "channels", "columns"}
    document = check_keys(FAMILY, document, keys | ({"mapping"} & set(document or ())))
    tiles = document["tile"]
    if not isinstance(tiles, list) or not tiles:
        raise SpaceError(f"{FAMILY} search space: 'tile' must be a non-empty list")
    choices = (
        ("tile", tuple(dict.fromkeys("x".join(map(str, parse_tile(t))) for t in tiles))),
        ("channels", int_list(FAMILY, "channels", document["channels"], lambda v: v % VECTOR == 0 and 0 < v <= 256,
                              f"a multiple of {VECTOR} up to 256")),
        ("columns", int_list(FAMILY, "columns", document["columns"], lambda v: v in (1, 2, 4, 8), "1, 2, 4 or 8")),
        ("mapping", _mappings(document.get("mapping", ["simt"]))),
    )
    return SearchSpace(FAMILY, choices)


def _mappings(values: object) -> tuple[str, ...]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{FAMILY} search space: 'mapping' must be a non-empty list of {', '.join(MAPPINGS)}")
    return tuple(dict.fromkeys(parse_mapping(v) for v in values))


def layer_problem(problem: ConvProblem) -> str | None:
    """Why no configuration runs the layer: depthwise (one channel a group) or groups of 8 channels, K = C, in f16
    or bf16 with f32 accumulation, channels in 16-byte vectors, no residual."""
    width = problem.c // problem.groups if problem.groups and problem.c % problem.groups == 0 else 0
    if problem.k != problem.c or width not in GROUP_WIDTHS or problem.groups == 1:
        return (f"{FAMILY} runs depthwise convolutions and groups of {VECTOR} channels with K = C; this has "
                f"C={problem.c} K={problem.k} groups={problem.groups}")
    if (reason := types_problem(FAMILY, problem, INPUT_TYPES)):
        return reason
    if problem.output_type is not problem.input_type:
        return f"{FAMILY} writes its input's type, got {problem.dtype_key}"
    if problem.c % VECTOR:
        return f"{FAMILY} reads and writes channels in {VECTOR}-element vectors: C={problem.c} is not a multiple"
    if problem.epilogue.residual:
        return f"{FAMILY} fuses scale, bias and an activation, not a residual"
    return None


def direct_problem(problem: ConvProblem) -> DirectProblem:
    return DirectProblem(n=problem.n, h=problem.h, w=problem.w, c=problem.c, r=problem.r, s=problem.s,
                         pad_h=problem.pad_h, pad_w=problem.pad_w, stride_h=problem.stride_h,
                         stride_w=problem.stride_w, dilation_h=problem.dilation_h, dilation_w=problem.dilation_w,
                         group_width=problem.c // problem.groups)


def make_config(problem: ConvProblem, params: dict) -> DslDirectConfig:
    tile_p, tile_q = param(params, "tile", parse_tile)
    return DslDirectConfig(
        tile_p=tile_p, tile_q=tile_q, channels=param(params, "channels", whole),
        columns=param(params, "columns", whole), shape=direct_problem(problem),
        input_type=problem.input_type, filter_type=problem.filter_type, output_type=problem.output_type,
        accumulator_type=problem.accumulator_type, fusion=problem.epilogue,
        mapping=param(params, "mapping", parse_mapping) if "mapping" in params else "simt")


def launch_args(config: DslDirectConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(problem.c)


REFERENCE_PARAMS = {"tile": "8x8", "channels": 8, "columns": 1, "mapping": "simt"}


def _check_channels(config: DslDirectConfig, device: DeviceFacts) -> str | None:
    if config.shape.c % config.channels:
        return f"{config.channels} channels a CTA do not divide C={config.shape.c}"
    return None


def _check_mapping(config: DslDirectConfig, device: DeviceFacts) -> str | None:
    if config.mapping != "mma":
        return None
    return mma_problem(config.tile_p, config.tile_q, config.columns, config.shape.group_width)


def _check_threads(config: DslDirectConfig, device: DeviceFacts) -> str | None:
    if config.mapping == "mma":
        warps_of_pixels = config.tile_p * config.tile_q // (MMA_PIXELS * config.columns)
        runs = f"{config.channels // VECTOR} groups x {warps_of_pixels} warps of pixels"
    elif config.tile_q % config.columns:
        return f"{config.columns} output columns a thread do not divide the tile's {config.tile_q}"
    else:
        runs = (f"{config.channels // VECTOR} channel vectors x {config.tile_p} rows x "
                f"{config.tile_q // config.columns} column runs")
    if not 32 <= config.threads <= MAX_THREADS:
        return f"{config.threads} threads a CTA ({runs}), outside 32 to {MAX_THREADS}"
    if config.thread_values > MAX_THREAD_VALUES:
        return f"a thread holds {config.thread_values} values: over {MAX_THREAD_VALUES}, a spill is likely"
    return None


def _check_tile_fits(config: DslDirectConfig, device: DeviceFacts) -> str | None:
    """A tile no larger than the output, beyond one wave of rows or columns wasted."""
    if config.tile_p > max(config.shape.p, 1) * 2 or config.tile_q > max(config.shape.q, 1) * 2:
        return (f"the {config.tile_p}x{config.tile_q} tile is more than twice the {config.shape.p}x{config.shape.q} "
                "output: most of its threads would idle")
    return None


def _check_shared_memory(config: DslDirectConfig, device: DeviceFacts) -> str | None:
    needed = config.build_spec().smem_bytes()
    if needed > device.smem_optin_per_block:
        return (f"{needed // 1024} KB of shared memory (the input window and the filter) exceed the "
                f"{device.smem_optin_per_block // 1024} KB a block may opt into")
    return None


RULES = (_check_channels, _check_mapping, _check_threads, _check_tile_fits, _check_shared_memory)


def static_problems(config: DslDirectConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    if (reason := layer_problem(problem)):
        return [reason]
    if config.shape != direct_problem(problem):
        return [f"the kernel was built for {config.shape}, not this problem"]
    return [reason for rule in RULES if (reason := rule(config, device))]
