"""sm90_dsl: persistent, warp-specialized Hopper kernels written in the CuTe DSL (TMA, wgmma, one or two
consumer warpgroups, TMA multicast clusters, the fused epilogue), compiled per problem in about a second
by the DSL instead of nvcc. Needs the optional `dsl` extra (nvidia-cutlass-dsl) to build kernels; its
space, static checks and cost model work without it."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.families.base import (BuildRequest, CostTerms, CppPieces, Family, LaunchArgs, LaunchShape, SearchSpace,
                                 SpaceError, sm90a_device_problem)
from tuner.families.sm90_dsl import costmodel, space
from tuner.families.sm90_dsl.space import AUTO_STAGES, Sm90DslConfig
from tuner.families.sm90_dsl.spec import GATHER_BELOW_CHANNELS
from tuner.core.problem import ConvProblem

INSTALL_HINT = "pip install -e '.[dsl]' (nvidia-cutlass-dsl)"
SMALL_CHANNELS = 16  # from 8 to this, a default study keeps the C++ Hopper families beside this one
# What the compiled kernel depends on besides its build spec: a change to any of them is a new kernel.
BUILDER_SOURCES = ("kernel.py", "build.py", "spec.py", "entry.c.in", "serve.py")


@lru_cache(maxsize=1)
def dsl_version() -> str | None:
    """The installed nvidia-cutlass-dsl's version, or None where the DSL is not importable."""
    if importlib.util.find_spec("cutlass") is None or importlib.util.find_spec("cutlass.cute") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:  # importable from a folder on sys.path (an unpacked wheel)
        import cutlass

        return str(getattr(cutlass, "__version__", "unversioned"))


@lru_cache(maxsize=1)
def builder_digest() -> str:
    digest = hashlib.sha256()
    for name in BUILDER_SOURCES:
        path = Path(__file__).parent / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    return digest.hexdigest()


class Sm90DslFamily(Family):
    name = space.FAMILY
    fusable = frozenset({"scale", "bias", "residual", "relu", "gelu", "silu"})
    summary = "CuTe DSL persistent warp-specialized kernels (TMA + wgmma), one per problem, sm_90a only"
    plot_colour = "tab:red"
    folder = Path(__file__).parent
    groupable = False
    emits_cpp = False  # its kernels are DSL-exported objects, not templates
    knobs = ("tile", "cluster", "schedule", "stages", "raster", "swizzle", "tile_q", "split_k")

    def device_problem(self, device: DeviceFacts) -> str | None:
        return sm90a_device_problem(self.name, device)

    def layer_problem(self, problem: ConvProblem) -> str | None:
        return space.layer_problem(problem)

    def kernel_problem(self, problem: ConvProblem) -> ConvProblem:
        return space.kernel_problem(problem)

    def parse_space(self, document: dict) -> SearchSpace:
        return space.parse_space(document)

    def make_config(self, problem: ConvProblem, params: dict) -> Sm90DslConfig:
        return space.make_config(problem, params)

    def static_problems(self, config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
        return space.static_problems(config, problem, device)

    def launch_args(self, config: Sm90DslConfig, problem: ConvProblem) -> LaunchArgs:
        return space.launch_args(config, problem)

    def supersedes(self, problem: ConvProblem) -> frozenset[str]:
        """The same TMA + wgmma kernels as sm90_conv and sm90_gemm, persistent and with two consumers, built in
        a second instead of nvcc's minute: on the H100 its cold studies beat or matched the C++ families'
        tuned kernels on the layers measured (docs/dsl.md). sm80 too: in the 16 suite layers studied with
        both, sm80 won one, by 2 %, and its nvcc compiles were most of a 30-67 s cold study. Below 8 channels
        its gathering kernel replaces sm90_s2d's fold as well: the ResNet-50 stem's tuned kernels, bare and
        fused at batch 1 and 32, ran 0.69-0.78x sm90_s2d's (r50_stem_b32 72.7 µs against 94.2). Not from 8 to
        15 channels: it pads C to 8 or 16 and reads a box a tap (the 7x7 stem with C=8 ran 4.95x cuDNN)."""
        if problem.k % GATHER_BELOW_CHANNELS:
            return frozenset()  # its element-by-element store of such a K is not measured against the others yet
        if problem.c < GATHER_BELOW_CHANNELS:
            return frozenset({"sm80", "sm90_conv", "sm90_gemm", "sm90_s2d"})
        return frozenset() if problem.c < SMALL_CHANNELS else frozenset({"sm80", "sm90_conv", "sm90_gemm"})

    def toolchain_problem(self) -> str | None:
        if dsl_version() is None:
            return f"the CuTe DSL is not installed: {INSTALL_HINT}"
        return None

    def build_request(self, config: Sm90DslConfig) -> BuildRequest:
        version = dsl_version()
        if version is None:
            raise SpaceError(f"{self.name} kernels need the CuTe DSL: {INSTALL_HINT}")
        return BuildRequest(source=config.build_spec().to_json() + "\n", source_file="spec.json",
                            command=(sys.executable, "-m", "tuner.families.sm90_dsl.build", "spec.json", "."),
                            toolchain=f"nvidia-cutlass-dsl {version}; builder {builder_digest()}",
                            serve_command=(sys.executable, "-m", "tuner.families.sm90_dsl.serve"))

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return []

    def kernel_alias(self, config: Sm90DslConfig, alias: str) -> str:
        raise SpaceError(f"{self.name} kernels are not CUTLASS C++: they reach a C++ build as exported objects")

    def cpp(self, configs=()) -> CppPieces:
        raise SpaceError(f"{self.name} kernels are not CUTLASS C++: they reach a C++ build as exported objects")

    def cost_terms(self, config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> CostTerms:
        return costmodel.cost_terms(config, device)

    def prior_order(self, config: Sm90DslConfig, problem: ConvProblem) -> int | None:
        return costmodel.prior_order(config)

    def launch_shape(self, config: Sm90DslConfig, problem: ConvProblem, device: DeviceFacts) -> LaunchShape:
        return LaunchShape(tile_mnk=(config.tile.m, config.tile.n, config.tile.k),
                           filter_taps=config.shape.r * config.shape.s, split_k_slices=config.split_k,
                           work_tiles=config.work_tiles * config.split_k, persistent=True,
                           cluster=(config.cluster.m, config.cluster.n, 1), can_split_k=True, warp_specialized=True)

    def describe(self, config: Sm90DslConfig) -> str:
        stages = "auto" if config.stages == AUTO_STAGES else config.stages
        box = "" if config.shape.is_gemm else f" q{config.tile_q or 'auto'}"
        split = f" sk{config.split_k}" if config.split_k > 1 else ""
        return (f"{config.tile.text}{box} c{config.cluster.m}x{config.cluster.n} {config.schedule.value} s{stages} "
                f"r{config.raster.value} sw{config.swizzle}{split}")


FAMILY = Sm90DslFamily()
