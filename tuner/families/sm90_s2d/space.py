"""The sm90_s2d family's space: the sm90_conv kernel run on a space-to-depth fold of a strided conv.

A stride-s conv over C channels equals a stride-1 conv over s*s*C channels of the input folded s x s
(x'[n, i, j, (a, b, c)] = x[n, i*s + a - pad_h, j*s + b - pad_w, c], zero outside), with a filter of
ceil(R/s) x ceil(S/s) taps folded the same way (taps past R or S zero). For the C=3 stem this turns
3 of every 16 tile-K lanes doing work (sm90_conv pads C to 8 and walks it in slices of at least 16)
into 12 of 16. The knobs and every static rule are sm90_conv's, applied to the folded problem."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from tuner.core.device import DeviceFacts
from tuner.families.base import LaunchArgs, SearchSpace
from tuner.families.sm90_conv import space as conv_space
from tuner.families.sm90_conv.space import AUTO_STAGES, Sm90ConvConfig
from tuner.core.axes import pair_text
from tuner.core.problem import ConvProblem

FAMILY = "sm90_s2d"
# Folded channels beyond this leave little to gain over sm90_conv on the layer itself, and the fold's
# copy of the input grows with them.
MAX_FOLDED_CHANNELS = 64


@dataclass(frozen=True, order=True)
class Sm90S2dConfig(Sm90ConvConfig):
    @property
    def family(self) -> str:
        return FAMILY

    @property
    def compiled(self) -> "Sm90S2dConfig":
        return self

    @property
    def name(self) -> str:
        stages = "auto" if self.stages == AUTO_STAGES else str(self.stages)
        return (f"s2d_{self.tile.text}_c{self.cluster.text}_s{stages}_{self.epilogue.value}_a{self.alignment_c}"
                f"_{self.dtype_key}{self.fusion.short}")


def folded_problem(problem: ConvProblem) -> ConvProblem:
    """The stride-1, unpadded conv the sm90_conv kernel runs; its output is the layer's output."""
    s = problem.stride_h
    taps_r, taps_s = -(-problem.r // s), -(-problem.s // s)
    channels = s * s * problem.c
    channels = -(-channels // conv_space.CHANNEL_MULTIPLE) * conv_space.CHANNEL_MULTIPLE
    return replace(problem, h=problem.p + taps_r - 1, w=problem.q + taps_s - 1, c=channels, r=taps_r, s=taps_s,
                   pad_h=0, pad_w=0, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1)


def layer_problem(problem: ConvProblem) -> str | None:
    stride_h, stride_w = problem.strides
    if stride_h != stride_w:
        return (f"strides {stride_h}x{stride_w} (height x width): space-to-depth folds s x s pixels, one stride on "
                "both axes (sm90_conv runs it)")
    if stride_h < 2:
        return "space-to-depth folds a strided conv; stride 1 has nothing to fold (sm90_conv runs it)"
    if problem.dilations != (1, 1):
        return f"dilation {pair_text(problem.dilations)}: space-to-depth folds undilated filters only"
    if problem.r < stride_h or problem.s < stride_h:
        return (f"a {problem.r}x{problem.s} filter under stride {stride_h} folds into mostly zero taps "
                "(sm90_conv runs it)")
    folded = stride_h * stride_h * problem.c
    if folded > MAX_FOLDED_CHANNELS:
        return (f"stride² x C = {folded} folded channels, over {MAX_FOLDED_CHANNELS}: space-to-depth pays on "
                "few input channels (the stem); sm90_conv runs this layer")
    return conv_space.layer_problem(folded_problem(problem))


def parse_space(document: object) -> SearchSpace:
    return conv_space.parse_space(document, FAMILY)


def make_config(problem: ConvProblem, params: dict) -> Sm90S2dConfig:
    config = conv_space.make_config(problem, params)
    return Sm90S2dConfig(**{f.name: getattr(config, f.name) for f in fields(config)})


def static_problems(config: Sm90S2dConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    if (reason := layer_problem(problem)):
        return [reason]
    return [reason for rule in conv_space.RULES if (reason := rule(config, device))]


def launch_args(config: Sm90S2dConfig, problem: ConvProblem) -> LaunchArgs:
    return LaunchArgs(problem.c)  # the fold reads the layer's own channels; it pads them itself
