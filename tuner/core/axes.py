"""One spatial axis of a convolution: its output extent, the input pixels its filter windows read, and the
per-axis fields (pad, stride, dilation, output padding) a problem gives for height and width."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.core.errors import ProblemError


def output_extent(size: int, taps: int, pad: int, stride: int, dilation: int) -> int:
    """Output rows (or columns) of a convolution along one axis."""
    return (size + 2 * pad - dilation * (taps - 1) - 1) // stride + 1


def transposed_extent(size: int, taps: int, pad: int, stride: int, dilation: int, output_padding: int) -> int:
    """Output rows (or columns) of a transposed convolution along one axis (torch.nn.ConvTranspose2d's
    formula): the input extent of the convolution whose data gradient it is."""
    return (size - 1) * stride - 2 * pad + dilation * (taps - 1) + output_padding + 1


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a convolution: the input's extent, the filter's taps, the padding on each side,
    the stride and the dilation along it."""

    size: int
    taps: int
    pad: int
    stride: int
    dilation: int

    @property
    def extent(self) -> int:
        """The output's extent along the axis."""
        return output_extent(self.size, self.taps, self.pad, self.stride, self.dilation)

    @property
    def span(self) -> int:
        """Input pixels one output's filter window spans."""
        return self.dilation * (self.taps - 1) + 1

    @property
    def touched(self) -> int:
        """Input pixels some filter tap reads: a stride wider than the window skips pixels."""
        outputs = self.extent
        covered = outputs * self.span if self.stride >= self.span else (outputs - 1) * self.stride + self.span
        return min(self.size, covered)


def pair_text(values: tuple[int, int]) -> str:
    """A per-axis pair as text: '3' where both axes agree, height x width ('0x3') where not."""
    return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"


def axes_key(pad: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> str:
    """'p3u2d1', or 'p0x3u1d1' where the pads differ by axis: the part of a problem key (study names, sm90_dsl
    kernel names) that symmetric problems have always had."""
    return f"p{pair_text(pad)}u{pair_text(stride)}d{pair_text(dilation)}"


# The per-axis fields; each has a symmetric keyword (pad, stride, dilation) that sets both.
AXIS_FIELDS = (("pad", "pad_h", "pad_w"), ("stride", "stride_h", "stride_w"), ("dilation", "dilation_h", "dilation_w"))
# The per-axis fields in the order of --shape's long form.
PER_AXIS_FIELDS = ("pad_h", "pad_w", "stride_h", "stride_w", "dilation_h", "dilation_w")
# A transposed convolution's output padding, per axis as well; absent from every other problem's dict and key.
OUTPUT_PADDING_FIELDS = ("output_padding", "output_padding_h", "output_padding_w")
AXIS_DEFAULTS = {"pad": 0, "stride": 1, "dilation": 1, "output_padding": 0}


def axis_pair(symmetric: str, both: int | None, height: int | None, width: int | None) -> tuple[int, int]:
    """A per-axis field's (height, width): from its symmetric keyword or its _h and _w ones, else AXIS_DEFAULTS."""
    if both is not None and (height is not None or width is not None):
        raise ProblemError(f"give {symmetric} (both axes) or {symmetric}_h/{symmetric}_w, not both (dataclasses.replace "
                           f"passes {symmetric}_h and {symmetric}_w: replace those)")
    default = AXIS_DEFAULTS[symmetric] if both is None else both
    return (default if height is None else height), (default if width is None else width)
