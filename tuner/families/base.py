"""The typed pieces the kernel families share: what their roles (tuner/families/family.py) take and return, and
the helpers their space files, checks and C++ are written with.

A family is one way to build a conv kernel (CUTLASS 2.x sm80, 3.x sm90 conv, 3.x sm90 GEMM, ...).
Nothing here imports the pipeline: families sit below it, next to problem and device, and the pipeline
reaches them through tuner.families.registry only."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Callable, Protocol

from tuner.core.cutlass_pkg import library as cutlass_lib
from tuner.core.epilogue import Activation, Epilogue
from tuner.core.device import DeviceFacts
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem


class SpaceError(ValueError):
    """A search-space file (or stored parameters) that does not parse into known, typed values."""


@dataclass(frozen=True, order=True)
class Shape3:
    m: int
    n: int
    k: int

    @classmethod
    def parse(cls, text: str) -> "Shape3":
        shape = _shape3_of(str(text))
        if shape is None:
            raise SpaceError(f"shape {text!r} must look like 128x128x64 (three whole numbers from 1 to 4096)")
        return shape

    @property
    def text(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def volume(self) -> int:
        return self.m * self.n * self.k


@lru_cache(maxsize=1024)  # a space's enumeration parses its few tile and warp texts once a configuration
def _shape3_of(text: str) -> Shape3 | None:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(re.fullmatch(r"[0-9]+", p) and 0 < int(p) <= 4096 for p in parts):
        return None
    return Shape3(*(int(p) for p in parts))


@dataclass(frozen=True)
class LaunchArgs:
    """What a compiled kernel takes at run time besides its buffers (tuner/measure/run.py's problem array)."""

    kernel_channels: int  # C as the kernel reads it: the tensors are zero-padded from the layer's C
    split_k: int = 1      # sm80 serial split-K slices; sm90_gemm stream-K/split-K units
    raster: int = 0       # 3.x tile scheduler raster order: 0 heuristic, 1 along M, 2 along N
    swizzle: int = 1      # 3.x tile scheduler max swizzle size


@dataclass(frozen=True)
class SearchSpace:
    """One family's sampled parameters and their choices, in the form the study stores them
    (strings and ints); the family parsed and checked every value when it built this."""

    family: str
    choices_items: tuple[tuple[str, tuple], ...]

    @property
    def choices(self) -> dict[str, tuple]:
        return dict(self.choices_items)

    @property
    def size(self) -> int:
        total = 1
        for _, values in self.choices_items:
            total *= len(values)
        return total

    def holding(self, knobs: tuple[str, ...]) -> "SearchSpace":
        """The space with each of these knobs held at its first choice."""
        return SearchSpace(self.family, tuple((knob, values[:1] if knob in knobs else values)
                                              for knob, values in self.choices_items))


@dataclass(frozen=True)
class CostTerms:
    """What the cost model (tuner/search/costmodel.py) needs to know of one candidate on one problem."""

    tile_m: int
    tile_n: int
    block_k_steps: int       # main-loop iterations of one output tile (all of K, before any split)
    flops_per_k_step: int    # multiply-add work of one iteration of one tile (2*M*N*K of the tile)
    blocks_per_sm: int       # resident CTAs per SM
    warps_per_block: int     # warps doing the math
    efficiency: float        # fraction of the SM's tensor rate one resident CTA sustains in its main loop
    stages: int
    split_k: int = 1
    persistent: bool = False  # a grid of one wave of CTAs that loop over the output tiles
    cluster_size: int = 1
    # clusters of cluster_size CTAs the GPU is sure to hold at once, where fewer than sm_count / cluster_size (a cluster
    # runs on one GPC): more make a second wave; None where the family does not say
    clusters_at_once: int | None = None
    # the splits' partials summed at once by the last to finish (f32 written by each, read back), not one
    # slice after another
    split_k_in_parallel: bool = False
    # ... and summed within a cluster through distributed shared memory: no global round trip
    split_k_in_cluster: bool = False
    # stream-K: the k tiles of all output tiles shared evenly by one wave of persistent CTAs (split_k is then 1), the
    # tiles that two or more CTAs sum fixed up as split-K's are
    stream_k: bool = False
    # A kernel of few multiply-adds an output (a depthwise conv's R*S): its bytes against the copy ceiling bind,
    # not the tensor rate (tuner/search/costmodel.py's bound says which does).
    memory_bound: bool = False


@dataclass(frozen=True)
class LaunchShape:
    """How a candidate cuts the implicit GEMM: what the waste diagnosis reads besides the launch."""

    tile_mnk: tuple[int, int, int]
    filter_taps: int          # K is walked per filter tap (C padded to tile K at each), or 1
    split_k_slices: int
    work_tiles: int           # output tiles x splits: the units of work the grid's CTAs take
    persistent: bool = False
    cluster: tuple[int, int, int] = (1, 1, 1)
    can_split_k: bool = True  # whether the family can split K at all (the diagnosis suggests it only then)
    # Warp-specialized TMA kernels hide latency with their pipeline, not with resident warps: one CTA
    # of 8-12 warps per SM is their design, not waste, so the occupancy rule does not apply.
    warp_specialized: bool = False
    # A memory-bound kernel (a direct depthwise conv): the diagnosis weighs its bytes against the copy ceiling, and
    # its tile and wave rules, made for tensor-core GEMM tiles, do not apply.
    memory_bound: bool = False
    # The GEMM rows the tiles compute where they are not the pixels in order (sm90_dsl's boxes of q x p x n output
    # pixels, which also compute padded ones): the tile_padding rule counts these, not M rounded up to the tile.
    padded_m: int | None = None


class KernelConfig(Protocol):
    """One candidate of any family: a frozen, hashable, ordered dataclass."""

    @property
    def family(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def compiled(self) -> "KernelConfig": ...

    @property
    def search_params(self) -> dict: ...

    @property
    def tile(self) -> Shape3: ...

    @property
    def output_type(self) -> DataType: ...

    @property
    def fusion(self) -> Epilogue: ...  # the layer's epilogue, compiled into the kernel


# C++ tags come from CUTLASS's own generator tables, keyed by our typed enums. A tf32 operand is
# cutlass::tfloat32_t: f32 in memory, read as TF32 by the MMA (2.x and 3.x alike).
ELEMENT_TAGS = {
    DataType.f16: cutlass_lib.DataTypeTag[cutlass_lib.DataType.f16],
    DataType.bf16: cutlass_lib.DataTypeTag[cutlass_lib.DataType.bf16],
    DataType.f32: cutlass_lib.DataTypeTag[cutlass_lib.DataType.f32],
    DataType.tf32: cutlass_lib.DataTypeTag[cutlass_lib.DataType.tf32],
    DataType.e4m3: cutlass_lib.DataTypeTag[cutlass_lib.DataType.e4m3],
}

# The tensor-op families' types: the input (and filter) type, and the outputs written from its f32
# accumulators.
TENSOR_OP_OUTPUTS = {
    DataType.f16: (DataType.f16, DataType.f32),
    DataType.bf16: (DataType.bf16, DataType.f32),
    DataType.tf32: (DataType.f32,),
    DataType.e4m3: (DataType.f16,),
}


def e4m3_problem(family: str, typed) -> str | None:
    """Why a family of no fp8 kernels cannot take an e4m3 problem (or configuration), or None for other types."""
    if typed.input_type is not DataType.e4m3:
        return None
    return (f"{family} runs no fp8: e4m3 needs sm90_dsl (CUTLASS 4.2's sm90 conv generator makes no fp8 kernel, and "
            "the C++ families' runners take no per-tensor scales)")


def types_problem(family: str, typed, inputs: tuple[DataType, ...] = tuple(TENSOR_OP_OUTPUTS)) -> str | None:
    """Why a family whose kernels read `inputs` cannot take the types of `typed` (a problem or a
    configuration), or None."""
    if typed.input_type not in inputs and (reason := e4m3_problem(family, typed)):
        return reason
    if typed.input_type not in inputs or typed.filter_type is not typed.input_type:
        names = "/".join(t.value for t in inputs)
        return f"{family} kernels take {names} inputs and filters of one type, got {typed.dtype_key}"
    outputs = TENSOR_OP_OUTPUTS[typed.input_type]
    if typed.accumulator_type is not DataType.f32 or typed.output_type not in outputs:
        return (f"{family} kernels accumulate {typed.input_type.value} in f32 and write "
                f"{' or '.join(t.value for t in outputs)}, got {typed.dtype_key}")
    return None

# The epilogue's activation functors (cutlass/epilogue/thread/activation.h), which CUTLASS 2.x visitor trees
# and 3.x fusion operations both take as templates. GELU is the erf form, as torch.nn.GELU() computes it.
ACTIVATION_TAGS = {
    Activation.none: "cutlass::epilogue::thread::Identity",
    Activation.relu: "cutlass::epilogue::thread::ReLu",
    Activation.gelu: "cutlass::epilogue::thread::GELU",
    Activation.silu: "cutlass::epilogue::thread::SiLu",
}
# The per-channel scale and bias vectors' element: f32, as tuner/templates/problem.h's TunerEpilogue hands them.
VECTOR_TYPE = DataType.f32


def ampere_device_problem(kernels: str, device: DeviceFacts) -> str | None:
    """Why kernels built for the device's own arch, compute capability 8.0 and later, cannot run on `device`,
    or None."""
    if device.cc < 80:
        return (f"{kernels} kernels need compute capability 8.0 or newer; this GPU is "
                f"{device.cc_major}.{device.cc_minor}")
    return None


def native_arch_flags(device: DeviceFacts) -> list[str]:
    return [f"-arch={device.arch_flag}"]


def sm90a_arch_flags(device: DeviceFacts) -> list[str]:
    return ["-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"]


def sm90a_device_problem(family: str, device: DeviceFacts) -> str | None:
    """Why a family of wgmma kernels (built for sm_90a) cannot run on `device`, or None."""
    if device.cc != 90:
        return (f"{family} kernels use wgmma, built for sm_90a: they run on compute capability 9.0 only; "
                f"this GPU is {device.cc_major}.{device.cc_minor}")
    return None


def pad_channels(problem: ConvProblem, multiple: int) -> ConvProblem:
    """The problem with C zero-padded up to a multiple of `multiple` (itself where C already is one)."""
    padded = -(-problem.c // multiple) * multiple
    return problem if padded == problem.c else replace(problem, c=padded)


def output_alignment(problem: ConvProblem) -> int:
    """Output elements per 16-byte access where K allows it (8 in f16, 4 in f32), else the widest
    power of two dividing K."""
    widest = 128 // problem.output_type.bits
    return next(w for w in (8, 4, 2, 1) if w <= widest and problem.k % w == 0)


# --- parsing helpers for the families' space files ------------------------------------------------

def int_list(family: str, name: str, values: object, allowed: Callable[[int], bool], rule: str) -> tuple[int, ...]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{family} search space: '{name}' must be a non-empty list")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not allowed(value):
            raise SpaceError(f"{family} search space: {name} value {value!r} is not allowed ({rule})")
    return tuple(sorted(set(values)))


def enum_list(family: str, name: str, values: object, kind: type[enum.Enum]) -> tuple:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{family} search space: '{name}' must be a non-empty list")
    known = [e.value for e in kind]
    parsed = []
    for value in values:
        if value not in known:
            raise SpaceError(f"{family} search space: {name} value {value!r} is not one of {', '.join(known)}")
        parsed.append(kind(value))
    return tuple(dict.fromkeys(parsed))


def flag_list(family: str, name: str, values: object) -> tuple[bool, ...]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{family} search space: '{name}' must be a non-empty list")
    for value in values:
        if not isinstance(value, bool):
            raise SpaceError(f"{family} search space: {name} value {value!r} is not true or false")
    return tuple(sorted(set(values)))


def shape_list(family: str, name: str, values: object) -> tuple[Shape3, ...]:
    if not isinstance(values, list) or not values:
        raise SpaceError(f"{family} search space: '{name}' must be a non-empty list")
    return tuple(dict.fromkeys(Shape3.parse(v) for v in values))


def check_keys(family: str, document: object, expected: set[str]) -> dict:
    if not isinstance(document, dict):
        raise SpaceError(f"{family} search space must be a YAML mapping")
    if document.get("family", family) != family:
        raise SpaceError(f"{family} search space: family {document['family']!r} is not {family!r}")
    missing, unknown = expected - set(document), set(document) - expected
    if missing or unknown:
        parts = [f"missing {', '.join(sorted(missing))}" if missing else "",
                 f"unknown {', '.join(sorted(map(str, unknown)))}" if unknown else ""]
        raise SpaceError(f"{family} search space: " + "; ".join(p for p in parts if p))
    return document


def param(params: dict, name: str, parse: Callable):
    """One stored parameter, parsed; a missing or malformed one is a SpaceError naming it."""
    if name not in params:
        raise SpaceError(f"parameter {name!r} missing from {sorted(params)}")
    try:
        return parse(params[name])
    except (TypeError, ValueError) as error:
        raise SpaceError(f"parameter {name}={params[name]!r} is not valid: {error}") from None


def whole(value: object) -> int:
    """An int from a stored parameter: ints and their decimal text only (no 3.9 -> 3, no True)."""
    if isinstance(value, bool):
        raise ValueError("a whole number, not a truth value")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    raise ValueError("a whole number")


def flag(value: object) -> bool:
    """A truth value from a stored parameter: a bool, or the text a record (CSV) wrote for one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip() in ("True", "False", "true", "false"):
        return value.strip() in ("True", "true")
    raise ValueError("true or false")


@lru_cache(maxsize=None)
def read_template(path: Path) -> Template:
    return Template(path.read_text())


@dataclass(frozen=True)
class CppPieces:
    """A family's C++: the headers its kernels need, its runner (plain C++ that binds a kernel type
    to the tuner's problem array: can_implement, workspace, grid, attributes, initialize, run) and
    the class template's name. `runners` holds the runner's source after those it is built on (another
    family's): a header emits each source once. `preamble` is C++ at global scope, after the includes
    (an extension of CUTLASS in its own namespaces), emitted once as well."""

    includes: tuple[str, ...]
    runners: tuple[str, ...]
    runner_class: str
    preamble: tuple[str, ...] = ()

    @property
    def runner(self) -> str:
        return "\n".join(self.runners)


@dataclass(frozen=True)
class BuildRequest:
    """How a family not built by nvcc from CUTLASS C++ builds one kernel: `command`, run in a scratch folder
    that holds `source` as `source_file`, writes candidate.so (the tuner's C entry points) and ptxas.txt
    there. The compile cache's key hashes `source` with `toolchain` (the builder's version)."""

    source: str
    source_file: str
    command: tuple[str, ...]
    toolchain: str
    # A long-lived builder that builds kernel after kernel (tuner/build/builder_pool.py's BuilderPool says how it is
    # spoken to): a toolchain that is slow to start but fast per kernel. Empty: `command`, a process a kernel.
    serve_command: tuple[str, ...] = ()
