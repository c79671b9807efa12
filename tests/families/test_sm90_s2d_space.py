"""The sm90_s2d family's space: which layers it folds, the folded problem (checked numerically: the fold the
runner performs, written here in NumPy, turns the layer into the folded stride-1 conv exactly), its
configurations and the rules it shares with sm90_conv."""
import numpy as np
import pytest

from conftest import H100, REPO
from tuner.families import registry
from tuner.families.sm90_s2d.space import (
    MAX_FOLDED_CHANNELS,
    Sm90S2dConfig,
    folded_problem,
    launch_args,
    layer_problem,
    make_config,
    static_problems,
)
from tuner.core.problem import ConvProblem
from tuner.search.space import load_space, valid_configs
from tuner.measure.validate import reference_fprop

STEM = ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)
PARAMS = {"tile": "128x64x16", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"}


def fold(x: np.ndarray, stride: int, pads: tuple[int, int], rows: int, cols: int, channels: int) -> np.ndarray:
    """As templates/runner.h's fold kernel: out[n, i, j, (a, b, c)] = x[n, i*s + a - pad_h, j*s + b - pad_w, c]."""
    pad_h, pad_w = pads
    n, h, w, c = x.shape
    out = np.zeros((n, rows, cols, channels), dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            for a in range(stride):
                for b in range(stride):
                    y, xx = i * stride + a - pad_h, j * stride + b - pad_w
                    if 0 <= y < h and 0 <= xx < w:
                        start = (a * stride + b) * c
                        out[:, i, j, start:start + c] = x[:, y, xx, :]
    return out


@pytest.mark.parametrize("layer", [
    ConvProblem(n=2, h=23, w=20, c=3, k=8, r=7, s=7, pad=3, stride=2),
    ConvProblem(n=1, h=17, w=15, c=4, k=8, r=3, s=3, pad=1, stride=2),
    ConvProblem(n=1, h=16, w=16, c=2, k=8, r=5, s=4, pad=0, stride=3),
    ConvProblem(n=1, h=15, w=18, c=3, k=8, r=3, s=7, pad_h=1, pad_w=3, stride=2),  # per-axis padding
])
def test_the_fold_turns_the_layer_into_the_folded_conv(layer):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((layer.n, layer.h, layer.w, layer.c))
    w = rng.standard_normal((layer.k, layer.r, layer.s, layer.c))
    kernel = folded_problem(layer)
    assert (kernel.p, kernel.q, kernel.strides, kernel.pads) == (layer.p, layer.q, (1, 1), (0, 0))
    x2 = fold(x, layer.stride_h, layer.pads, kernel.h, kernel.w, kernel.c)
    w2 = fold(w, layer.stride_h, (0, 0), kernel.r, kernel.s, kernel.c)
    np.testing.assert_allclose(reference_fprop(x2, w2, kernel), reference_fprop(x, w, layer), rtol=1e-10, atol=1e-10)


def test_the_stem_folds_to_a_4x4_conv_over_16_channels():
    kernel = folded_problem(STEM)
    assert (kernel.h, kernel.w, kernel.c, kernel.r, kernel.s) == (115, 115, 16, 4, 4)
    assert kernel.gemm_mnk == (32 * 112 * 112, 64, 16 * 16)
    assert launch_args(make_config(STEM, PARAMS), STEM).kernel_channels == 3  # the fold reads C=3 itself


@pytest.mark.parametrize("layer, words", [
    (ConvProblem(n=1, h=56, w=56, c=64, k=64, r=3, s=3, pad=1), "stride 1 has nothing to fold"),
    (ConvProblem(n=1, h=56, w=56, c=256, k=512, r=1, s=1, stride=2), "mostly zero taps"),
    (ConvProblem(n=1, h=56, w=56, c=32, k=64, r=3, s=3, pad=1, stride=2), f"over {MAX_FOLDED_CHANNELS}"),
    (ConvProblem(n=1, h=56, w=56, c=3, k=64, r=3, s=3, pad=2, stride=2, dilation=2), "dilation 2:"),
    (ConvProblem(n=1, h=56, w=56, c=3, k=64, r=3, s=3, pad=1, stride_h=2, stride_w=1), "strides 2x1"),
    (ConvProblem(n=1, h=56, w=56, c=3, k=63, r=3, s=3, pad=1, stride=2, groups=3), "ungrouped convolutions only"),
    (ConvProblem(n=1, h=224, w=224, c=3, k=60, r=7, s=7, pad=3, stride=2), "pad K to 64"),
])
def test_layers_it_does_not_fold(layer, words):
    assert words in registry.get("sm90_s2d").problem_reason(layer)


def test_configs_carry_their_own_family_and_names():
    config = make_config(STEM, PARAMS)
    assert isinstance(config, Sm90S2dConfig) and config.family == "sm90_s2d"
    assert config.name.startswith("s2d_128x64x16_c1x1x1_sauto_tma") and config.compiled is config
    assert registry.family_of(config).describe(config).startswith("s2d 128x64x16")
    conv = registry.get("sm90_conv").rules.make_config(STEM, PARAMS)
    assert conv.name != config.name  # one cache entry each: the runner differs


def test_sm90_conv_rules_apply_to_the_folded_problem():
    assert static_problems(make_config(STEM, PARAMS), STEM, H100) == []
    assert any("tile M=96" in reason for reason in
               static_problems(make_config(STEM, {**PARAMS, "tile": "96x64x16"}), STEM, H100))
    one_by_one = ConvProblem(n=1, h=56, w=56, c=256, k=512, r=1, s=1, stride=2)
    assert static_problems(make_config(one_by_one, PARAMS), one_by_one, H100) == [layer_problem(one_by_one)]


def test_the_space_files_parse_and_keep_candidates_for_the_stem():
    for name in ("sm90_s2d.yaml", "sm90_s2d_landscape.yaml"):
        space = load_space(REPO / "search_spaces" / name)
        assert space.family == "sm90_s2d"
        assert len(valid_configs(space, STEM, H100)) >= 10


def test_the_family_costs_the_folded_problem():
    family = registry.get("sm90_s2d")
    config = make_config(STEM, PARAMS)
    terms = family.model.cost_terms(config, STEM, H100)
    assert terms.block_k_steps == 16  # 4x4 taps, 16 channels in one tile-K slice each
    shape = family.model.launch_shape(config, STEM, H100)
    assert shape.work_tiles == -(-32 * 112 * 112 // 128) and shape.filter_taps == 16
