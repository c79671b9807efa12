"""tuner/measure/run.py without a GPU: the problem array the entry points read and the filter the kernel is handed."""
from __future__ import annotations

import pytest

from tuner.core.problem import ConvProblem
from tuner.measure.run import LaunchError, padded_filter_channels

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
