"""sm80_depthwise: CUTLASS 2.x direct depthwise convolution (`DefaultDepthwiseDirect2dConvFprop`, the fixed stride-
and-dilation iterator, SIMT FMAs in f32) for depthwise layers (MobileNet, EfficientNet, ConvNeXt's 7x7), with a
per-channel epilogue (scale, bias, activation), sm_80 and later. A depthwise conv does R*S multiply-adds an output:
it is memory-bound, and its cost model and diagnosis weigh its bytes against the copy ceiling."""
from __future__ import annotations

from pathlib import Path

from tuner.core.device import DeviceFacts, block_limits
from tuner.families.base import CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace
from tuner.families.sm80_depthwise import codegen, space
from tuner.families.sm80_depthwise.space import Sm80DepthwiseConfig
from tuner.core.problem import ConvProblem

# The SM's f32 FMA rate as a share of its dense f16 tensor rate, which the cost model's matrix ceiling holds
# (H100 SXM datasheet: 67 TFLOPS f32 against 989 TFLOPS f16 tensor): the direct kernel multiplies on CUDA cores.
SIMT_SHARE = 67 / 989
# Registers a thread of the direct kernel is taken to need when the cost model ranks (not measured: ptxas says).
REGISTERS_PER_THREAD = 128


class Sm80DepthwiseFamily(Family):
    name = space.FAMILY
    summary = "CUTLASS 2.x direct depthwise convolution (SIMT, fixed stride and dilation), sm_80 and later"
    plot_colour = "tab:olive"
    folder = Path(__file__).parent
    knobs = ("output_tile", "channels", "warps", "stages", "split")
    fusable = frozenset({"scale", "bias", "relu", "gelu", "silu"})
    runs_groups = True

    def device_problem(self, device: DeviceFacts) -> str | None:
        if device.cc < 80:
            return (f"{self.name} kernels need compute capability 8.0 or newer; this GPU is "
                    f"{device.cc_major}.{device.cc_minor}")
        return None

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm80DepthwiseConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def reference_params(self) -> dict:
        return dict(space.REFERENCE_PARAMS)

    def launch_args(self, config: Sm80DepthwiseConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return [f"-arch={device.arch_flag}"]

    def kernel_alias(self, config: Sm80DepthwiseConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces()

    def cost_terms(self, config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        """A CTA of the model is one of the kernel's: its M extent the output tiles it walks (a slice's tiles over
        `split` CTAs), its steps each tile's R*S taps. The multiply-adds run at the SIMT share of the matrix
        ceiling; the model's memory floor (the bytes against the copy ceiling) is what binds."""
        tiles = -(-space.output_tiles(config, problem) // config.split)
        taps = config.filter[0] * config.filter[1]
        limits = block_limits(REGISTERS_PER_THREAD, space.smem_bytes(config), config.warps, device)
        return CostTerms(
            tile_m=tiles * config.output_tile.pixels, tile_n=config.channels,
            block_k_steps=tiles * taps,
            flops_per_k_step=2 * config.output_tile.pixels * config.channels,
            blocks_per_sm=max(1, min(limits.values())),
            warps_per_block=config.warps,
            efficiency=SIMT_SHARE,
            stages=config.stages,
            memory_bound=True,
        )

    def prior_order(self, config: Sm80DepthwiseConfig, problem: ConvProblem) -> int | None:
        return 0

    def launch_shape(self, config: Sm80DepthwiseConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        slices = -(-problem.k // config.channels)
        return LaunchShape(tile_mnk=(config.output_tile.pixels, config.channels, config.filter[0] * config.filter[1]),
                           filter_taps=1, split_k_slices=1, work_tiles=slices * config.split,
                           can_split_k=False, memory_bound=True)

    def describe(self, config: Sm80DepthwiseConfig) -> str:
        return (f"{config.output_tile.text} px c{config.channels} w{config.warps} s{config.stages} "
                f"x{config.split} CTAs")


FAMILY = Sm80DepthwiseFamily()
