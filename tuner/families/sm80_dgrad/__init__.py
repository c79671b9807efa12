"""sm80_dgrad: transposed convolutions (ConvTranspose2d's forward pass) as CUTLASS 2.x's dgrad,
`DefaultConv2dDgrad` + `ImplicitGemmConvolution` (the strided dgrad for stride > 1), cp.async +
mma.sync; runs on sm_80 and later, built as sm80 is. It runs transposed problems only, bare (no epilogue
fused yet); space.py says how a transposed problem maps onto CUTLASS's dgrad."""
from __future__ import annotations

from pathlib import Path

from tuner.families.base import CppPieces, LaunchArgs, LaunchShape, SearchSpace, CostTerms
from tuner.families.sm80 import Sm80Family
from tuner.families.sm80_dgrad import codegen, costmodel, space
from tuner.families.sm80_dgrad.space import REFERENCE_PARAMS, Sm80DgradConfig
from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem


class Sm80DgradFamily(Sm80Family):
    name = space.FAMILY
    summary = "CUTLASS 2.x implicit-GEMM dgrad (cp.async + mma.sync) as a transposed convolution, sm_80 and later"
    plot_colour = "tab:cyan"
    folder = Path(__file__).parent
    knobs = ("tile", "warps", "stages", "swizzle", "iterator", "stride_support", "split_k")
    fusable = frozenset()
    runs_transposed = True

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return problem

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm80DgradConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def reference_params(self) -> dict:
        return dict(REFERENCE_PARAMS)

    def launch_args(self, config: Sm80DgradConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def kernel_alias(self, config: Sm80DgradConfig, alias: str) -> str:
        return codegen.kernel_alias(config, alias)

    def cpp(self, configs=()) -> CppPieces:
        return codegen.cpp_pieces()

    def cost_terms(self, config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        return costmodel.cost_terms(config, problem, device)

    def prior_order(self, config: Sm80DgradConfig, problem: ConvProblem) -> int | None:
        return costmodel.prior_order(config, problem)

    def launch_shape(self, config: Sm80DgradConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        m, n, _ = problem.gemm_mnk
        tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                           filter_taps=space.taps_per_phase(config, problem),
                           split_k_slices=config.split_k, work_tiles=tiles * config.split_k,
                           can_split_k=problem.strides == (1, 1))

    def describe(self, config: Sm80DgradConfig) -> str:
        return f"dgrad {config.stride_support.value} " + super().describe(config)


FAMILY = Sm80DgradFamily()
