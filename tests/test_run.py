"""tuner/measure/run.py without a GPU: the problem array the entry points read, the filter the kernel is handed and
the operands create takes."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from tuner.core.dtypes import dtype_fields
from tuner.core.epilogue import Activation, Epilogue
from tuner.core.problem import ConvProblem
from tuner.measure.run import (EpilogueOperands, LaunchError, ScaledEpilogueOperands, TensorSet, padded_filter_channels,
                               random_operand_scales)

STEM = ConvProblem(n=1, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)
REGNET = ConvProblem(n=8, h=28, w=28, c=104, k=104, r=3, s=3, pad=1, groups=13)


def test_an_ungrouped_filter_is_padded_with_the_input():
    assert padded_filter_channels(STEM, 8) == 8


def test_a_grouped_filter_keeps_its_channels_per_group():
    # Padding it to C would spread every output channel's weights over 13 groups' worth of columns.
    assert padded_filter_channels(REGNET, 104) == 8


def test_a_grouped_conv_with_padded_channels_is_refused():
    with pytest.raises(LaunchError, match="grouped convolution's channels are not padded"):
        padded_filter_channels(REGNET, 112)


class DeviceStandIn:
    """What run.pointer and the operands read of a CuPy array: its address and element size."""

    def __init__(self, address: int, itemsize: int = 4):
        self.data, self.itemsize = SimpleNamespace(ptr=address), itemsize


def test_an_e4m3_set_hands_its_scales_after_the_epilogue_operands():
    scales = DeviceStandIn(0x9000)
    bare = TensorSet(DeviceStandIn(0x1000), DeviceStandIn(0x2000), DeviceStandIn(0x3000), operand_scales=scales)
    operands = bare.epilogue_operands(Epilogue())
    assert isinstance(operands, ScaledEpilogueOperands)
    assert ScaledEpilogueOperands.epilogue.offset == 0  # a TunerEpilogue pointer reads its first member
    assert (operands.input_scale, operands.filter_scale) == (0x9000, 0x9004)
    assert (operands.epilogue.scale, operands.epilogue.bias, operands.epilogue.residual) == (None, None, None)
    fused = TensorSet(DeviceStandIn(0x1000), DeviceStandIn(0x2000), DeviceStandIn(0x3000),
                      bias=DeviceStandIn(0x5000), operand_scales=scales).epilogue_operands(Epilogue(bias=True))
    assert fused.epilogue.bias == 0x5000 and fused.input_scale == 0x9000


def test_the_other_types_hand_the_epilogue_operands_as_before():
    plain = TensorSet(DeviceStandIn(0x1000), DeviceStandIn(0x2000), DeviceStandIn(0x3000))
    assert plain.epilogue_operands(Epilogue()) is None
    assert type(plain.epilogue_operands(Epilogue(activation=Activation.relu))) is EpilogueOperands


def test_only_e4m3_problems_draw_scales():
    rng = np.random.default_rng(0)
    assert random_operand_scales(STEM, rng) is None
    scales = random_operand_scales(replace(STEM, **dtype_fields("e4m3")), rng)
    assert 0.5 <= scales.input <= 2 and 0.5 <= scales.filter <= 2 and scales.alpha == scales.input * scales.filter
