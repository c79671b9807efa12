"""What a kernel family is: three small roles, each a frozen set of functions with a written contract, and the
Family that composes them with the facts that are the family's own (its name, the layers and GPUs it takes, how
tables show its kernels).

A family's folder, tuner/families/<name>/, builds one Family, FAMILY, from its role modules' functions; the
registry finds it there. Nothing subclasses Family or a role: a family differs from another only in the
functions and facts it wires in."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Mapping

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families.base import BuildRequest, CostTerms, CppPieces, KernelConfig, LaunchArgs, LaunchShape, SearchSpace


# What a family that gives none of its own has.
def as_stated(problem: ConvProblem) -> ConvProblem:
    return problem


def no_preference(config: KernelConfig, problem: ConvProblem) -> int | None:
    return 0


def no_missing_toolchain() -> str | None:
    return None


def by_name(config: KernelConfig) -> str:
    return config.name


def supersedes_none(problem: ConvProblem) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True, eq=False)
class SpaceRules:
    """The family's search space and what a configuration of it is.

    Takes the family's space file (a YAML mapping), stored parameters (the study's or best.yaml's: strings and
    ints), problems and the device's facts. Returns typed values: the SearchSpace, a KernelConfig, every reason a
    layer or a configuration cannot run, the problem as the kernel sees it and the launch's arguments.
    Must not compile, launch, time or read files, nor need the family's toolchain or a GPU: spaces and static
    checks run on any machine. What does not parse is a SpaceError naming the value."""

    knobs: tuple[str, ...]  # the knobs whose choices the space file gives, in study order
    parse_space: Callable[[object], SearchSpace]
    make_config: Callable[[ConvProblem, dict], KernelConfig]
    # Every reason the configuration cannot run this problem on this device, found without compiling; empty: valid.
    static_problems: Callable[[KernelConfig, ConvProblem, DeviceFacts], list[str]]
    # Why no configuration can run this problem (with the padding or change that would make it runnable, where
    # there is one), or None. Family.problem_reason asks it after the facts common to every family.
    layer_problem: Callable[[ConvProblem], str | None]
    # What the compiled kernel takes at run time besides its buffers.
    launch_args: Callable[[KernelConfig, ConvProblem], LaunchArgs]
    # The problem as the kernel sees it (channels zero-padded where the family pads them).
    kernel_problem: Callable[[ConvProblem], ConvProblem] = as_stated
    # A hand-picked configuration every study of the family measures first, if any (read, never changed).
    reference_params: Mapping[str, object] | None = None
    # Knobs a study holds at their first choice, whose other choices are tried on its finalists instead
    # (tuner/search/refine.py): what is best fitted to a chosen tile rather than sampled beside it.
    refined_knobs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class CppEmitter:
    """A family whose kernels are CUTLASS C++ that nvcc compiles (tuner/build/ puts them in translation units).

    Takes compiled configurations (config.compiled) and the device; returns nvcc's arch flags, the
    `using <alias> = ...;` line of one kernel, and the includes, runners and preamble a translation unit holding
    some of them needs (cpp(configs=()): what a fused epilogue needs only where one of them is fused).
    Must not read the problem beyond the configuration, run nvcc or write files: its text is what the compile
    cache keys and best_configs.h hold, so the same configuration must give the same bytes."""

    arch_flags: Callable[[DeviceFacts], list[str]]
    kernel_alias: Callable[[KernelConfig, str], str]
    cpp: Callable[..., CppPieces]
    # Whether several kernels may share a translation unit: the family's device symbols hold the alias (a named
    # `<alias>_detail` type), so that ptxas's report can be told apart.
    groupable: bool = False
    emits_cpp: ClassVar[bool] = True

    def build_request(self, config: KernelConfig) -> None:
        """None: nvcc builds the kernel from kernel_alias and cpp."""
        return None

    def toolchain_problem(self) -> str | None:
        return None  # a missing nvcc is the compile's own error, with its output


@dataclass(frozen=True, eq=False)
class BuilderEmitter:
    """A family whose kernels a builder of its own makes (not CUTLASS C++: best_configs.h cannot hold them).

    Takes a compiled configuration; returns the BuildRequest that says what to run, on which source, to build its
    candidate.so, and why this machine cannot build it (a missing optional package, with how to install it) or None.
    Must not build anything itself (the compile cache runs the request, and keys it by source and toolchain) nor
    need the toolchain to say that it is missing."""

    build_request: Callable[[KernelConfig], BuildRequest]
    toolchain_problem: Callable[[], str | None] = no_missing_toolchain
    groupable: ClassVar[bool] = False
    emits_cpp: ClassVar[bool] = False

    def arch_flags(self, device: DeviceFacts) -> list[str]:
        return []


@dataclass(frozen=True, eq=False)
class PerformanceModel:
    """What the cost model (tuner/search/costmodel.py) and the waste diagnosis know of a candidate before it runs.

    Takes a configuration, the layer's problem as the layer states it (the model applies kernel_problem itself
    where it needs the kernel's view) and the device. Returns the CostTerms the cost model combines, the
    LaunchShape the diagnosis reads, and an order among equally modelled candidates (lower first; None: not a
    prior pick, a knob the model cannot see is off its fitted value).
    Must not compile, launch or read measurements: a pure function of its arguments, fitted once."""

    cost_terms: Callable[[KernelConfig, ConvProblem, DeviceFacts], CostTerms]
    launch_shape: Callable[[KernelConfig, ConvProblem, DeviceFacts], LaunchShape]
    prior_order: Callable[[KernelConfig, ConvProblem], int | None] = no_preference


@dataclass(frozen=True, eq=False)
class Family:
    """One kernel family: its roles, and the facts that are its own."""

    name: str
    summary: str
    folder: Path
    rules: SpaceRules
    emitter: CppEmitter | BuilderEmitter
    model: PerformanceModel
    # Why this device cannot run the family's kernels, or None.
    device_problem: Callable[[DeviceFacts], str | None]
    # A short text of a configuration for tables.
    describe: Callable[[KernelConfig], str] = by_name
    # Families a default study (no --family) leaves out of this layer when this one can run it: what they build,
    # this one builds as fast or faster, in a fraction of their compile time.
    supersedes: Callable[[ConvProblem], frozenset[str]] = supersedes_none
    plot_colour: str = "tab:gray"  # its bars in the plots
    # The epilogue parts (tuner/core/epilogue.py's Epilogue.parts) its kernels fuse.
    fusable: frozenset[str] = frozenset()
    # Parts its kernels could fuse but that it refuses, each with why ("{family}" stands for its name).
    refused_parts: tuple[tuple[str, str], ...] = ()
    # Whether its kernels run grouped convolutions (groups > 1, depthwise among them).
    runs_groups: bool = False
    # Whether its kernels run transposed convolutions (ConvTranspose2d's forward, a dgrad), and those only.
    runs_transposed: bool = False
    # The same kernel built for programmatic dependent launch (it waits for the kernel before it, and lets the next
    # one launch early), for callers that launch kernels one after another; None where the family has no such build.
    chained: Callable[[KernelConfig], KernelConfig] | None = None

    def problem_reason(self, problem: ConvProblem) -> str | None:
        """Why the family cannot run this problem at all, whatever its knobs: a transposed or grouped convolution
        it does not run, a part of the layer's epilogue it cannot fuse or refuses, then its rules' layer_problem."""
        if problem.transposed and not self.runs_transposed:
            return (f"{self.name} runs convolutions (fprop) only; this is a transposed one (ConvTranspose2d, a dgrad): "
                    "a dgrad family runs it")
        if self.runs_transposed and not problem.transposed:
            return f"{self.name} runs transposed convolutions (ConvTranspose2d) only"
        if problem.groups != 1 and not self.runs_groups:
            kind = "a depthwise" if problem.groups == problem.c else "a grouped"
            return (f"{self.name} runs ungrouped convolutions only (groups=1); this is {kind} one, "
                    f"groups={problem.groups}")
        for part, why in self.refused_parts:
            if part in problem.epilogue.parts:
                return why.format(family=self.name)
        unfused = [part for part in problem.epilogue.parts if part not in self.fusable]
        if unfused:
            return f"{self.name} cannot fuse {' and '.join(unfused)} into its epilogue"
        return self.rules.layer_problem(problem)
