"""What the dsl_direct builder is asked to build: one direct depthwise or narrow-group convolution kernel for one
problem, as a frozen record that crosses the process boundary as JSON (build.py reads it where the DSL is
imported). Nothing here imports the DSL."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tuner.families.sm90_common.space import SMEM_CAPACITY  # the opt-in shared memory of an sm_90 CTA

SPEC_VERSION = 1
VECTOR = 8                  # 16-bit channels of one 16-byte load or store
GROUP_WIDTHS = (1, VECTOR)  # channels a group: 1 (depthwise) or 8 (RegNet's groups), one vector either way
# How a CTA's threads cover its tile: "simt" sweeps rows of outputs on CUDA cores (kernel.py); "mma" gives each
# warp 16-pixel tiles of one group of 8 on tensor cores, an mma.sync.m16n8k8 a filter tap (kernel_mma.py).
MAPPINGS = ("simt", "mma")
MMA_PIXELS = 16             # output pixels of one m16n8k8 instruction (its M)
WARP = 32
ELEMENTS = ("f16", "bf16")
ACTIVATIONS = ("none", "relu", "gelu", "silu")
MAX_THREADS = 1024


class SpecError(ValueError):
    """A build request that does not describe a kernel the builder can make."""


@dataclass(frozen=True)
class DirectProblem:
    """x[n,h,w,c] * w[k,r,s,g] -> y[n,p,q,k] with k = c, groups = c / g, g the group width (1 or 8); pad (each side),
    stride and dilation per axis."""

    n: int
    h: int
    w: int
    c: int
    r: int
    s: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    group_width: int

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad_h - (self.r - 1) * self.dilation_h - 1) // self.stride_h + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad_w - (self.s - 1) * self.dilation_w - 1) // self.stride_w + 1


def mma_problem(tile_p: int, tile_q: int, columns: int, group_width: int) -> str | None:
    """Why the mma mapping cannot run this tile, or None: the one statement of its rules, raised by
    DirectBuildSpec.check and reported by the family's static checks."""
    if group_width != VECTOR:
        return f"the mma mapping runs groups of {VECTOR} channels, not depthwise ones"
    if (tile_p * tile_q) % (MMA_PIXELS * columns):
        return f"{columns} tiles of {MMA_PIXELS} pixels a warp do not divide the {tile_p}x{tile_q} tile's pixels"
    return None


@dataclass(frozen=True)
class DirectTile:
    """A CTA's tile_p x tile_q output pixels of one image for `channels` channels. simt: a thread's `columns`
    consecutive output pixels of one row for one vector of 8 channels. mma: a warp's `columns` tiles of 16 of the
    CTA's pixels (row-major) for one group of 8."""

    tile_p: int
    tile_q: int
    channels: int
    columns: int
    mapping: str = "simt"

    def threads(self) -> int:
        if self.mapping == "mma":
            return WARP * (self.channels // VECTOR) * (self.tile_p * self.tile_q // (MMA_PIXELS * self.columns))
        return (self.channels // VECTOR) * self.tile_p * (self.tile_q // self.columns)


@dataclass(frozen=True)
class DirectEpilogue:
    scale: bool = False
    bias: bool = False
    activation: str = "none"


@dataclass(frozen=True)
class DirectBuildSpec:
    problem: DirectProblem
    tile: DirectTile
    epilogue: DirectEpilogue
    element: str = "f16"
    version: int = SPEC_VERSION

    def window(self) -> tuple[int, int]:
        """The input rows and columns a CTA's output tile reads (zero-filled outside the image)."""
        p, t = self.problem, self.tile
        return ((t.tile_p - 1) * p.stride_h + (p.r - 1) * p.dilation_h + 1,
                (t.tile_q - 1) * p.stride_w + (p.s - 1) * p.dilation_w + 1)

    def window_columns_a_thread(self) -> int:
        """Input columns a thread holds in registers for one filter row: its outputs' columns and their taps."""
        p = self.problem
        return (self.tile.columns - 1) * p.stride_w + (p.s - 1) * p.dilation_w + 1

    def smem_bytes(self) -> int:
        """simt: the staged window (16-bit) and the CTA's filter (f32, tap-major), with alignment slack. mma reads
        its operands straight from global memory into fragments: none."""
        if self.tile.mapping == "mma":
            return 0
        rows, cols = self.window()
        p = self.problem
        return rows * cols * self.tile.channels * 2 + p.r * p.s * self.tile.channels * p.group_width * 4 + 256

    def grid(self) -> tuple[int, int, int]:
        p, t = self.problem, self.tile
        return (-(-p.q // t.tile_q) * -(-p.p // t.tile_p) * p.n, p.c // t.channels, 1)

    def check(self) -> None:
        p, t = self.problem, self.tile
        if self.version != SPEC_VERSION:
            raise SpecError(f"spec version {self.version}, this builder reads {SPEC_VERSION}")
        if self.element not in ELEMENTS:
            raise SpecError(f"element {self.element!r} is not one of {ELEMENTS}")
        if self.epilogue.activation not in ACTIVATIONS:
            raise SpecError(f"activation {self.epilogue.activation!r} is not one of {ACTIVATIONS}")
        if p.group_width not in GROUP_WIDTHS:
            raise SpecError(f"group width {p.group_width} is not one of {GROUP_WIDTHS}")
        if t.mapping not in MAPPINGS:
            raise SpecError(f"mapping {t.mapping!r} is not one of {MAPPINGS}")
        if t.channels % VECTOR or p.c % t.channels:
            raise SpecError(f"{t.channels} channels a CTA must be a multiple of {VECTOR} dividing C={p.c}")
        if t.mapping == "mma":
            if (reason := mma_problem(t.tile_p, t.tile_q, t.columns, p.group_width)):
                raise SpecError(reason)
        elif t.tile_q % t.columns:
            raise SpecError(f"{t.columns} columns a thread do not divide the tile's {t.tile_q}")
        if not 32 <= t.threads() <= MAX_THREADS:
            raise SpecError(f"{t.threads()} threads a CTA, outside 32 to {MAX_THREADS}")
        if self.smem_bytes() > SMEM_CAPACITY:
            raise SpecError(f"{self.smem_bytes()} bytes of shared memory exceed {SMEM_CAPACITY}")
        if min(p.n, p.h, p.w, p.c, p.r, p.s, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w) < 1 \
                or min(p.pad_h, p.pad_w) < 0 or p.p < 1 or p.q < 1:
            raise SpecError(f"not a convolution: {p}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DirectBuildSpec":
        try:
            data = json.loads(text)
            spec = cls(problem=DirectProblem(**data["problem"]), tile=DirectTile(**data["tile"]),
                       epilogue=DirectEpilogue(**data["epilogue"]), element=data["element"],
                       version=data["version"])
        except (ValueError, KeyError, TypeError) as error:
            raise SpecError(f"not a dsl_direct build spec: {error}") from None
        spec.check()
        return spec
