"""The sm80_depthwise family's space: CUTLASS 2.x direct depthwise convolutions (DefaultDepthwiseDirect2dConvFprop
with the fixed stride-and-dilation iterator, SIMT): the output tile, channels (groups) a CTA, warps, stages and the
CTAs that share a channel slice's output tiles; the filter size, stride and dilation are compiled in from the layer.
The static checks are those of the CUTLASS 4.2 sources the names cite."""
from __future__ import annotations

from dataclasses import dataclass, replace

from tuner.core.device import DeviceFacts
from tuner.core.epilogue import Epilogue
from tuner.families.base import (LaunchArgs, SearchSpace, Shape3, SpaceError, check_keys, e4m3_problem, int_list, param,
                                 whole)
from tuner.core.dtypes import DataType, dtype_key
from tuner.core.problem import ConvProblem

FAMILY = "sm80_depthwise"
INPUT_TYPES = (DataType.f16, DataType.bf16)
# 16-byte accesses of 16-bit elements: the MmaCore's lane access (128 bits) and the epilogue's output vectors.
ALIGNMENT = 8
MAX_THREADS_PER_BLOCK = 1024
# A CTA's grid lies along y (channel slices) and z (the CTAs sharing them): CUDA's limit on both.
MAX_GRID_YZ = 65535
# (pixels a warp computes, threads of a warp along them) -> the P x Q patch of one thread: the specializations of
# conv/threadblock/depthwise_mma_core_with_lane_access_size.h's SimtWarpShape; other pairs do not compile.
THREAD_PATCHES = {(4, 4): (1, 1), (4, 2): (2, 1), (4, 1): (2, 2), (8, 1): (2, 4), (8, 2): (2, 2), (8, 4): (1, 2),
                  (16, 1): (4, 4), (16, 2): (2, 4), (16, 4): (2, 2), (25, 1): (5, 5), (32, 1): (4, 8),
                  (32, 2): (4, 4), (32, 4): (2, 4)}
# Channels one thread computes (GroupsPerThread of the MmaCore, 16-bit types) and threads in a warp.
CHANNELS_PER_THREAD = 2
WARP_THREADS = 32
# Channels of one thread's vector (the MmaCore's LaneN: 128 bits of 16-bit elements at most).
MAX_LANE_CHANNELS = 8
# Values a thread holds (its accumulators, its input window and its filter taps, each of its lane's channels)
# above which ptxas spills: on sm_90 a 7x7 kernel of 330 spilled 624 bytes at 255 registers (8x8 tile, 64 channels,
# 4 warps), one of 214 did not (4x4, 16 channels, 2 warps); CUTLASS's example warns of spills for large filters.
MAX_THREAD_VALUES = 256


@dataclass(frozen=True, order=True)
class OutputTile:
    p: int
    q: int

    @classmethod
    def parse(cls, text: str) -> "OutputTile":
        parts = str(text).lower().split("x")
        if len(parts) != 2 or not all(part.isdigit() and 0 < int(part) <= 64 for part in parts):
            raise SpaceError(f"output tile {text!r} must look like 8x8 (rows x columns, each 1 to 64)")
        return cls(int(parts[0]), int(parts[1]))

    @property
    def text(self) -> str:
        return f"{self.p}x{self.q}"

    @property
    def pixels(self) -> int:
        return self.p * self.q


@dataclass(frozen=True, order=True)
class Sm80DepthwiseConfig:
    """One direct depthwise kernel: what is compiled (tile, channels a CTA, warps, stages, the layer's filter,
    stride and dilation, types, epilogue) and the run-time CTAs a channel slice (`split`)."""

    output_tile: OutputTile
    channels: int        # channels (groups) a CTA computes: the kernel's ThreadblockShape::kN
    warps: int           # warps along the output tile's pixels (one warp holds all of the CTA's channels)
    stages: int
    split: int           # CTAs sharing one channel slice's output tiles (the problem array's split_k)
    filter: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    input_type: DataType
    filter_type: DataType
    output_type: DataType
    accumulator_type: DataType
    fusion: Epilogue = Epilogue()

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def tile(self) -> Shape3:
        """The implicit GEMM's view: output pixels x channels x filter taps a CTA tile."""
        return Shape3(self.output_tile.pixels, self.channels, self.filter[0] * self.filter[1])

    @property
    def threads(self) -> int:
        return WARP_THREADS * self.warps

    @property
    def warp_pixels(self) -> int:
        return self.output_tile.pixels // self.warps

    @property
    def warp_threads_along_pixels(self) -> int:
        return WARP_THREADS // min(self.channels // CHANNELS_PER_THREAD, WARP_THREADS)

    @property
    def thread_values(self) -> int | None:
        """Accumulators, input window and filter taps one thread holds, or None where the warp shape is none of
        CUTLASS's."""
        threads_n = min(self.channels // CHANNELS_PER_THREAD, WARP_THREADS)
        patch = THREAD_PATCHES.get((self.warp_pixels, WARP_THREADS // threads_n))
        if patch is None:
            return None
        lane = min(MAX_LANE_CHANNELS, self.channels // threads_n)
        rows = (patch[0] - 1) * self.stride[0] + (self.filter[0] - 1) * self.dilation[0] + 1
        cols = (patch[1] - 1) * self.stride[1] + (self.filter[1] - 1) * self.dilation[1] + 1
        return lane * (patch[0] * patch[1] + rows * cols + self.filter[0] * self.filter[1])

    @property
    def compiled(self) -> "Sm80DepthwiseConfig":
        return replace(self, split=1)

    @property
    def dtype_key(self) -> str:
        return dtype_key(self)

    @property
    def name(self) -> str:
        pair = "x".join
        return (f"{self.output_tile.text}_c{self.channels}_w{self.warps}_s{self.stages}_x{self.split}"
                f"_f{pair(map(str, self.filter))}_u{pair(map(str, self.stride))}_d{pair(map(str, self.dilation))}"
                f"_{self.dtype_key}{self.fusion.short}")

    @property
    def search_params(self) -> dict[str, str | int]:
        return {"output_tile": self.output_tile.text, "channels": self.channels, "warps": self.warps,
                "stages": self.stages, "split": self.split}


def parse_space(document: object) -> SearchSpace:
    document = check_keys(FAMILY, document, {"family", "output_tile", "channels", "warps", "stages", "split"})
    tiles = document["output_tile"]
    if not isinstance(tiles, list) or not tiles:
        raise SpaceError(f"{FAMILY} search space: 'output_tile' must be a non-empty list")
    choices = (
        ("output_tile", tuple(dict.fromkeys(OutputTile.parse(t).text for t in tiles))),
        ("channels", int_list(FAMILY, "channels", document["channels"], lambda v: v in (8, 16, 32, 64, 128),
                              "8, 16, 32, 64 or 128")),
        ("warps", int_list(FAMILY, "warps", document["warps"], lambda v: v in (1, 2, 4, 8, 16), "1 to 16, a power of 2")),
        ("stages", int_list(FAMILY, "stages", document["stages"], lambda v: 1 <= v <= 8, "1 to 8")),
        ("split", int_list(FAMILY, "split", document["split"], lambda v: 1 <= v <= MAX_GRID_YZ, f"1 to {MAX_GRID_YZ}")),
    )
    return SearchSpace(FAMILY, choices)


def layer_problem(problem: ConvProblem) -> str | None:
    """Why no configuration runs the layer: depthwise only (one channel a group, one output channel a group), in
    f16 or bf16 with f32 accumulation, channels in 16-byte vectors."""
    if problem.groups != problem.c or problem.k != problem.c:
        return (f"{FAMILY} runs depthwise convolutions only (groups = C = K); this has C={problem.c} K={problem.k} "
                f"groups={problem.groups}")
    if (reason := e4m3_problem(FAMILY, problem)):
        return reason
    if problem.input_type not in INPUT_TYPES or problem.filter_type is not problem.input_type \
            or problem.output_type is not problem.input_type or problem.accumulator_type is not DataType.f32:
        return (f"{FAMILY} kernels take f16 or bf16 inputs, filters and outputs of one type with f32 accumulation, "
                f"got {problem.dtype_key}")
    if problem.c % ALIGNMENT:
        return (f"{FAMILY} reads and writes channels in {ALIGNMENT}-element vectors: C={problem.c} is not a multiple "
                f"of {ALIGNMENT}")
    return None


def make_config(problem: ConvProblem, params: dict) -> Sm80DepthwiseConfig:
    return Sm80DepthwiseConfig(
        output_tile=param(params, "output_tile", OutputTile.parse),
        channels=param(params, "channels", whole),
        warps=param(params, "warps", whole),
        stages=param(params, "stages", whole),
        split=param(params, "split", whole),
        filter=(problem.r, problem.s),
        stride=problem.strides,
        dilation=problem.dilations,
        input_type=problem.input_type,
        filter_type=problem.filter_type,
        output_type=problem.output_type,
        accumulator_type=problem.accumulator_type,
        fusion=problem.epilogue,
    )


def launch_args(config: Sm80DepthwiseConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(problem.c, split_k=config.split)


REFERENCE_PARAMS = {"output_tile": "8x8", "channels": 64, "warps": 4, "stages": 3, "split": 1}


def output_tiles(config: Sm80DepthwiseConfig, problem: ConvProblem) -> int:
    """Output tiles of one channel slice: the units a slice's CTAs share."""
    return problem.n * -(-problem.p // config.output_tile.p) * -(-problem.q // config.output_tile.q)


def activation_bytes(config: Sm80DepthwiseConfig) -> int:
    """The input window of one output tile in shared memory (the fixed iterator's ActivationShape)."""
    rows = (config.output_tile.p - 1) * config.stride[0] + (config.filter[0] - 1) * config.dilation[0] + 1
    cols = (config.output_tile.q - 1) * config.stride[1] + (config.filter[1] - 1) * config.dilation[1] + 1
    return rows * cols * config.channels * config.input_type.bytes


def activation_load_bytes(config: Sm80DepthwiseConfig) -> int:
    """One stage of the input window as the iterator loads it (kActivationSize): whole rounds of every thread's
    16-byte vector."""
    vectors = -(-activation_bytes(config) // (ALIGNMENT * config.input_type.bytes))
    return -(-vectors // config.threads) * config.threads * ALIGNMENT * config.input_type.bytes


def epilogue_bytes(config: Sm80DepthwiseConfig) -> int:
    """The epilogue's accumulator tile in shared memory."""
    return config.output_tile.pixels * config.channels * config.accumulator_type.bytes


def epilogue_read_bytes(config: Sm80DepthwiseConfig) -> int:
    """What the epilogue's shared loads span: whole rounds of every thread's vector of accumulators."""
    vectors = config.output_tile.pixels * config.channels // ALIGNMENT
    return -(-vectors // config.threads) * config.threads * ALIGNMENT * config.accumulator_type.bytes


def stages_bytes(config: Sm80DepthwiseConfig) -> int:
    """The stages' part of the kernel's shared memory: each the larger of the input window and the epilogue tile."""
    return config.stages * max(activation_load_bytes(config), epilogue_bytes(config))


def smem_bytes(config: Sm80DepthwiseConfig) -> int:
    """DirectConvolutionParams::get_smem_size: the stages, and the CTA's filter once."""
    filter_bytes = config.filter[0] * config.filter[1] * config.channels * config.filter_type.bytes
    return stages_bytes(config) + filter_bytes


def _check_layer(config, problem, device) -> str | None:
    return layer_problem(problem)


def _check_compiled_for(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    """The filter, stride and dilation are template arguments; can_implement checks only the last two."""
    built = (config.filter, config.stride, config.dilation)
    if built != ((problem.r, problem.s), problem.strides, problem.dilations):
        return (f"the kernel is built for a {config.filter[0]}x{config.filter[1]} filter, stride {config.stride} and "
                f"dilation {config.dilation}; the layer has {problem.r}x{problem.s}, {problem.strides} and "
                f"{problem.dilations}")
    return None


def _check_warps(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    pixels, warps = config.output_tile.pixels, config.warps
    if pixels % warps:
        return f"the {config.output_tile.text} output tile ({pixels} pixels) does not split over {warps} warps"
    if config.threads > MAX_THREADS_PER_BLOCK:
        return f"{config.threads} threads per block exceed {MAX_THREADS_PER_BLOCK}"
    key = (config.warp_pixels, config.warp_threads_along_pixels)
    if key not in THREAD_PATCHES:
        return (f"{config.warp_pixels} pixels a warp over {key[1]} thread(s) (with {config.channels} channels a CTA) "
                "has no SimtWarpShape in CUTLASS (depthwise_mma_core_with_lane_access_size.h)")
    patch_p, patch_q = THREAD_PATCHES[key]
    if config.output_tile.p % patch_p or config.output_tile.q % patch_q:
        return (f"a thread's {patch_p}x{patch_q} patch of pixels does not tile the {config.output_tile.text} output "
                "tile")
    if config.thread_values > MAX_THREAD_VALUES:
        return (f"a thread holds {config.thread_values} values (accumulators, input window, filter taps) of its "
                f"{patch_p}x{patch_q} pixels: over {MAX_THREAD_VALUES}, ptxas spills")
    return None


def _check_epilogue_reads(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    """The epilogue's shared loads of the last stage stay inside the kernel's shared memory. Threads beyond the
    output tile's vectors still load (only their global stores are guarded, predicated_tile_iterator_direct_conv.h),
    from the stage's offset on: past the allocation that is an illegal address (8x4 pixels, 16 channels, 8 warps
    on every layer of an H200 tune)."""
    last_stage = (config.stages - 1) * activation_load_bytes(config)
    read = epilogue_read_bytes(config)
    if last_stage + read > stages_bytes(config):
        return (f"the epilogue's {config.threads} threads read {read} bytes from the last "
                f"stage on, past the kernel's shared memory ({config.output_tile.text} pixels x {config.channels} "
                f"channels are {config.output_tile.pixels * config.channels // ALIGNMENT} vectors)")
    return None


def _check_shared_memory(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    needed = smem_bytes(config)
    if needed > device.smem_optin_per_block:
        return (f"{needed // 1024} KB of shared memory exceeds the {device.smem_optin_per_block // 1024} KB a block "
                "may opt into")
    return None


def _check_split(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    tiles = output_tiles(config, problem)
    if config.split > tiles:
        return f"{config.split} CTAs a channel slice exceed its {tiles} output tiles"
    if -(-problem.k // config.channels) > MAX_GRID_YZ:
        return f"{-(-problem.k // config.channels)} channel slices exceed the grid's {MAX_GRID_YZ}"
    return None


def _check_stages(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> str | None:
    if not 1 <= config.stages <= 8:
        return f"stages {config.stages} is not from 1 to 8"
    return None


STATIC_RULES = (_check_layer, _check_compiled_for, _check_stages, _check_warps, _check_epilogue_reads,
                _check_shared_memory, _check_split)


def static_problems(config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    return [reason for rule in STATIC_RULES if (reason := rule(config, problem, device))]
