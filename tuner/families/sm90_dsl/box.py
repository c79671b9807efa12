"""A conv kernel's M tile as a box of output pixels: tile_q columns x rows x images, the one statement of the rules
a box obeys (geometry.geometry raises them, the family's static checks report them). Plain Python: a builder source."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .spec import MAX_TMA_BOX, ProblemSpec


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


@dataclass(frozen=True)
class ConvBox:
    """How a conv kernel's tile_m output pixels cover the output: tile_q columns x rows_p rows x images_n
    images (tile_q * rows_p * images_n == tile_m); a box past the edge of P or Q is computed on the TMA's
    zero fill and clipped by the TMA store. No side equals its input extent (W, H): CuTe would merge
    that mode with the next into one TMA dimension, and the padding would read the next row or image."""

    tile_q: int
    rows_p: int
    images_n: int

    def tiles(self, problem: ProblemSpec) -> int:
        """Output tiles along M: boxes over (q, p, n)."""
        return (-(-problem.q // self.tile_q)) * (-(-problem.p // self.rows_p)) * (-(-problem.n // self.images_n))

    def useful_fraction(self, problem: ProblemSpec) -> float:
        """Output pixels over the pixels the boxes compute (1.0: no box reaches past the output)."""
        return problem.n * problem.p * problem.q / (self.tiles(problem) * self.tile_q * self.rows_p * self.images_n)


def phase_extents(extent: int, stride: int) -> set[int]:
    """The extents of the input views a kernel reads along an axis of `extent`: one view per stride phase,
    every `stride`-th row or column (the input itself at stride 1). A TMA box side equal to one of them
    merges with the next mode and loses the padding."""
    return {-(-(extent - phase) // stride) for phase in range(min(stride, extent))}


@functools.lru_cache(maxsize=4096)  # a study's static checks ask it hundreds of thousands of times
def conv_box(problem: ProblemSpec, tile_m: int, tile_q: int) -> ConvBox:
    """rows_p the output rows a box spans: all of P rounded up to a power of two where that fits in the
    tile, else as many as the tile holds; the rest of the tile spans images."""
    rows = tile_m // tile_q
    heights = phase_extents(problem.h, problem.stride_h)
    # one image: no box spans images (a box of 2 images of N=1 faulted on the H100, cudaErrorIllegalInstruction,
    # 7x7 C512 3x3 with 128x128 tiles of 8 columns; CuTe drops the size-1 mode from the TMA view)
    splits = [(1 << i, rows >> i) for i in range(rows.bit_length())
              if (1 << i) <= next_power_of_two(problem.p) and (1 << i) not in heights
              and (problem.n > 1 or rows >> i == 1)]
    if not splits:
        return ConvBox(tile_q, rows, 1)  # the kernel refuses it: the static check says so first
    # the split that computes the fewest padded pixels, larger rows_p on a tie (as the kernel lays it out)
    rows_p, images_n = min(splits, key=lambda s: (-(-problem.p // s[0]) * s[0] * (-(-problem.n // s[1])) * s[1], -s[0]))
    return ConvBox(tile_q, rows_p, images_n)


def box_problem(problem: ProblemSpec, tile_m: int, tile_q: int) -> str | None:
    """Why tile_m output pixels in boxes of tile_q columns cannot be a TMA conv kernel's M tile, or None: the one
    statement of the box rules, raised by geometry.geometry and reported by the family's static checks.

    A box side equal to its tensor's extent lets CuTe merge that mode with the next one into one TMA dimension,
    whose bounds then no longer zero-fill the padding: the taps read the neighbouring row (or image) instead.
    Measured on the H100: W=16 with tile_q 16 gave relative error 0.21, 8 and 32 validated."""
    if tile_q < 8 or tile_q % 8:
        return f"tile_q {tile_q} must be a multiple of 8 (TMA boxes of whole swizzle rows)"
    if tile_m % tile_q:
        return f"tile_q={tile_q} must divide tile M={tile_m}"
    rows = tile_m // tile_q
    if rows & (rows - 1):
        return f"tile M / tile_q = {rows} rows must be a power of two (output rows x images)"
    box = conv_box(problem, tile_m, tile_q)
    widths, heights = phase_extents(problem.w, problem.stride_w), phase_extents(problem.h, problem.stride_h)
    if tile_q in widths or box.rows_p in heights:
        return (f"a box of {tile_q} columns x {box.rows_p} rows has a side equal to the input's {problem.w}x{problem.h} "
                f"(or a stride-{problem.stride_w}x{problem.stride_h} view of it): its TMA dimensions would merge and "
                "lose the padding")
    if box.rows_p > next_power_of_two(problem.p):
        return (f"tile M={tile_m} in boxes of {tile_q} columns needs {box.rows_p} output rows, more than the output's "
                f"{problem.p} (one image cannot be spanned): pick a wider tile_q")
    if max(tile_q, box.rows_p, box.images_n) > MAX_TMA_BOX:
        return f"a TMA box spans at most {MAX_TMA_BOX} elements a dimension"
    return None
