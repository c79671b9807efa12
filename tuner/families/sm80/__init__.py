"""sm80: CUTLASS 2.x `DefaultConv2dFprop` + `ImplicitGemmConvolution`, cp.async + mma.sync, arch tag
Sm80; runs on sm_80 and later, compiled for the device's own arch (sm_90 on an H100)."""
from __future__ import annotations

from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.families.base import CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace, types_problem
from tuner.families.sm80 import codegen, costmodel, space
from tuner.families.sm80.space import REFERENCE_PARAMS, IteratorAlgorithm, Sm80Config
from tuner.core.problem import ConvProblem


class Sm80Family(Family):
    name = space.FAMILY
    # Through templates/conv2d_fprop_evt.h's visitor-tree epilogue, at split-K 1 only.
    fusable = frozenset({"scale", "bias", "residual", "relu", "gelu", "silu"})
    summary = "CUTLASS 2.x implicit GEMM (cp.async + mma.sync), sm_80 and later"
    plot_colour = "tab:blue"
    folder = Path(__file__).parent
    knobs = ("tile", "warps", "stages", "swizzle", "iterator", "split_k")

    def device_problem(self, device: DeviceFacts) -> str | None:
        if device.cc < 80:
            return f"sm80 kernels need compute capability 8.0 or newer; this GPU is {device.cc_major}.{device.cc_minor}"
        return None

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return types_problem(self.name, problem, tuple(space.INSTRUCTION_SHAPES))

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return space.kernel_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm80Config:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm80Config, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def reference_params(self) -> dict:
        return dict(REFERENCE_PARAMS)

    def launch_args(self, config: Sm80Config, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return [f"-arch={device.arch_flag}"]

    def kernel_alias(self, config: Sm80Config, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces(fused=any(config.fusion.fused for config in configs))

    def cost_terms(self, config: Sm80Config, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        return costmodel.cost_terms(config, problem, device)

    def prior_order(self, config: Sm80Config, problem: ConvProblem) -> int | None:
        return costmodel.prior_order(config, problem)

    def launch_shape(self, config: Sm80Config, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        padded = space.kernel_problem(problem)
        m, n, _ = padded.gemm_mnk
        small_channels = config.iterator in (IteratorAlgorithm.few_channels, IteratorAlgorithm.fixed_channels)
        tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                           filter_taps=1 if small_channels else padded.r * padded.s,
                           split_k_slices=config.split_k, work_tiles=tiles * config.split_k,
                           can_split_k=not config.fusion.fused)

    def describe(self, config: Sm80Config) -> str:
        return (f"{config.tile.text} w{config.warps.text} s{config.stages} sw{config.swizzle} "
                f"{config.iterator.value} sk{config.split_k}")


FAMILY = Sm80Family()
