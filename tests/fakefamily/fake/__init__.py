"""fake: a kernel family for the tests of the generic pipeline (study, compile cache, replay, bench).

It is laid out as a real family is, a package that defines FAMILY, but it lives under tests/: the tests
add its parent folder to the registry's search path for their duration (tests/fakefamily's `registered`).
Its build is a Python one-liner instead of nvcc (the "library" is a JSON file that holds the
configuration's knobs), and tests/fakefamily's evaluator times it by a formula: no nvcc, no CUTLASS C++
and no GPU. Some configurations are statically invalid, some fail to build, so every outcome of a trial
can be reached."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.core.epilogue import Epilogue
from tuner.families.base import (BuildRequest, CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace,
                                 Shape3, check_keys, int_list, param, shape_list, whole)
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem

NAME = "fake"
REFERENCE_PARAMS = {"tile": "128x128x32", "stages": 3, "split_k": 1}
# The builder: reads kernel.json, refuses the failing ones, else writes the "library" and a ptxas line.
BUILD_SCRIPT = (
    "import json, pathlib, sys\n"
    "kernel = json.loads(pathlib.Path('kernel.json').read_text())\n"
    "if kernel['fails']:\n"
    "    sys.exit('kernel.json: error: the fake builder refuses ' + kernel['name'])\n"
    "pathlib.Path('candidate.so').write_text(json.dumps(kernel))\n"
    "pathlib.Path('ptxas.txt').write_text('ptxas info    : Used 96 registers, 0 bytes stack frame, "
    "0 bytes spill stores, 0 bytes spill loads')\n"
)


@dataclass(frozen=True, order=True)
class FakeConfig:
    tile: Shape3
    stages: int
    split_k: int
    output_type: DataType
    fusion: Epilogue = Epilogue()

    @property
    def family(self) -> str:
        return NAME

    @property
    def name(self) -> str:
        return f"fake_{self.tile.text}_s{self.stages}_sk{self.split_k}_{self.output_type.value}{self.fusion.short}"

    @property
    def compiled(self) -> "FakeConfig":
        return replace(self, split_k=1)  # split-K is a launch argument, as sm80's

    @property
    def search_params(self) -> dict[str, str | int]:
        return {"tile": self.tile.text, "stages": self.stages, "split_k": self.split_k}

    def smem_bytes(self, problem: ConvProblem) -> int:
        return self.stages * (self.tile.m + self.tile.n) * self.tile.k * problem.input_type.bytes


class FakeFamily(Family):
    name = NAME
    summary = "a test-only family: built by Python, timed by a formula"
    folder = Path(__file__).parent
    knobs = ("tile", "stages", "split_k")
    emits_cpp = False
    fusable = frozenset({"scale", "bias", "relu"})
    # Kernels of this many stages "fail to compile": the builder exits 1 with an error line.
    failing_stages = 5

    def device_problem(self, device: DeviceFacts) -> str | None:
        return None

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return None if problem.c % 2 == 0 else "fake kernels need an even C"

    def parse_space(self, document: dict) -> SearchSpace:
        document = check_keys(NAME, document, {"family", "tile", "stages", "split_k"})
        return SearchSpace(NAME, (
            ("tile", tuple(t.text for t in shape_list(NAME, "tile", document["tile"]))),
            ("stages", int_list(NAME, "stages", document["stages"], lambda v: 2 <= v <= 8, "2 to 8")),
            ("split_k", int_list(NAME, "split_k", document["split_k"], lambda v: 1 <= v <= 16, "1 to 16")),
        ))

    def make_config(self, problem: ConvProblem, params: dict) -> FakeConfig:
        return FakeConfig(tile=param(params, "tile", Shape3.parse), stages=param(params, "stages", whole),
                          split_k=param(params, "split_k", whole), output_type=problem.output_type,
                          fusion=problem.epilogue)

    def static_problems(self, config: FakeConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        problems = []
        if config.smem_bytes(problem) > device.smem_optin_per_block:
            problems.append(f"shared memory {config.smem_bytes(problem)} B > {device.smem_optin_per_block} B")
        if config.split_k > 1 and config.fusion.fused:
            problems.append("a fused epilogue needs split-K 1")
        return problems

    def reference_params(self) -> dict:
        return dict(REFERENCE_PARAMS)

    def launch_args(self, config: FakeConfig, problem: ConvProblem) -> LaunchArgs:
        return LaunchArgs(problem.c, split_k=config.split_k)

    def build_request(self, config: FakeConfig) -> BuildRequest:
        kernel = {"name": config.name, "fails": config.stages == self.failing_stages, **config.search_params}
        return BuildRequest(source=json.dumps(kernel, sort_keys=True), source_file="kernel.json",
                            command=(sys.executable, "-c", BUILD_SCRIPT), toolchain="fake-builder 1")

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return []

    def kernel_alias(self, config: FakeConfig, alias: str) -> str:
        raise NotImplementedError("fake kernels have no C++")

    def cpp(self, configs=()) -> CppPieces:
        raise NotImplementedError("fake kernels have no C++")

    def cost_terms(self, config: FakeConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        _, _, k = problem.gemm_mnk
        return CostTerms(tile_m=config.tile.m, tile_n=config.tile.n, block_k_steps=-(-k // config.tile.k),
                         flops_per_k_step=2 * config.tile.volume, blocks_per_sm=1, warps_per_block=4,
                         efficiency=0.5, stages=config.stages, split_k=config.split_k)

    def launch_shape(self, config: FakeConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        m, n, _ = problem.gemm_mnk
        tiles = -(-m // config.tile.m) * -(-n // config.tile.n)
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k), filter_taps=problem.r * problem.s,
                           split_k_slices=config.split_k, work_tiles=tiles * config.split_k)


FAMILY = FakeFamily()
