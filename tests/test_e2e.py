"""`tune.py e2e`: its arguments, its refusal without a GPU, and the figures it derives from the timings
(speed-ups against eager and the faster torch.compile mode, the convolutions' share), from timings given here."""
from __future__ import annotations

import pytest

from conftest import tune_in_process
from tuner.cli.e2e import checked_arguments, result_table, summary_lines
from tuner.torch_ops.e2e import AUTOTUNED, COMPILED, EAGER, OPTIMIZED, OPTIMIZED_COMPILED, NetworkResult, VariantResult
from tuner.core.errors import UsageError


def result(**latencies) -> NetworkResult:
    names = {"eager": EAGER, "compiled": COMPILED, "autotuned": AUTOTUNED, "optimized": OPTIMIZED,
             "optimized_compiled": OPTIMIZED_COMPILED}
    variants = tuple(VariantResult(names[key], ms, ms, ms, 1e-3, key != "optimized_compiled" or ms > 0)
                     for key, ms in latencies.items())
    return NetworkResult("resnet50", 32, variants, conv_ms=2.0, replaced="53 of 53 convolutions replaced")


def test_speedups_are_against_eager_and_the_faster_compile_mode():
    figures = result(eager=10.0, compiled=8.0, autotuned=7.0, optimized=6.0, optimized_compiled=5.6)
    assert figures.best_compiled == AUTOTUNED
    assert figures.ratio(OPTIMIZED_COMPILED, figures.best_compiled) == pytest.approx(0.8)
    assert figures.conv_share == pytest.approx(2.0 / 6.0)
    lines = summary_lines(figures)
    assert lines[0] == "resnet50 batch 32: 53 of 53 convolutions replaced"
    assert lines[2] == f"  {OPTIMIZED_COMPILED} / eager 0.560, / {AUTOTUNED} (the faster mode) 0.800"
    assert lines[3] == "  convolutions, each timed alone: 2.000 ms, 33 % of the optimized forward's 6.000 ms"
    assert lines[-1] == "  outputs: every variant within tolerance of eager"


def test_the_time_optimize_took_is_told_where_it_was_measured():
    from dataclasses import replace

    timed = replace(result(eager=10.0, optimized=6.0), optimize_s=3.456)
    assert summary_lines(timed)[1] == "  optimize (trace, fold, load the kernels, check each against eager): 3.46 s"
    assert not any("optimize (" in line for line in summary_lines(result(eager=10.0, optimized=6.0)))


def test_a_subset_of_variants_gives_only_the_figures_it_has():
    figures = result(eager=10.0, optimized=6.0)
    assert figures.best_compiled is None and figures.ratio(OPTIMIZED, None) is None
    assert summary_lines(figures)[1] == f"  {OPTIMIZED} / eager 0.600"
    assert result_table(figures).row_count == 2


@pytest.mark.parametrize("argv, says", [
    (["--torchvision", "resnet50", "--batch", "1,x"], "--batch '1,x': give batch sizes as whole numbers"),
    (["--torchvision", "resnet50", "--batch", "0"], "every batch size must be at least 1"),
    (["--torchvision", "resnet50", "--variants", "eager,fast"], "--variants: unknown 'fast'"),
    (["--torchvision", "resnet50", "--repeats", "0"], "--repeats must be at least 1"),
])
def test_bad_arguments_are_refused(argv, says):
    with pytest.raises(UsageError) as caught:
        checked_arguments(argv)
    assert says in str(caught.value)


def test_batches_are_read_once_each_in_order():
    assert checked_arguments(["--torchvision", "resnet50", "--batch", "32,1,32"]).batches == [32, 1]


@pytest.mark.parametrize("argv, says", [
    (["e2e", "--torchvision", "resnet50", "--batch", "1,32"], "this command needs an NVIDIA GPU"),
    (["e2e", "--batch", "1"], "one of the arguments --torchvision --onnx is required"),
])
def test_on_the_command_line_without_a_gpu_it_says_so_in_one_line(argv, says):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    done = tune_in_process(*argv)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr


def test_the_convolutions_inputs_are_recorded_without_changing_the_forward():
    """Each convolution's arguments are kept for timing it alone; the hook must hand the forward back untouched
    (a pre-hook that returned its record replaced the module's arguments: the H100 run failed in its first conv)."""
    torch = pytest.importorskip("torch")
    from tuner.torch_ops.e2e import conv_inputs

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
        seen = conv_inputs(model, x)
        assert torch.equal(model(x), expected)  # the hooks are gone and changed nothing
    assert list(seen) == ["0", "2"]
    assert seen["0"][0] is model[0] and torch.equal(seen["0"][1][0], x)
    assert seen["2"][1][0].shape == (2, 8, 8, 8)


def test_the_variants_without_pdl_are_asked_for_by_name_and_summarised_like_the_others():
    from tuner.torch_ops.e2e import DEFAULT_VARIANTS, OPTIMIZED_NO_PDL, OPTIMIZED_NO_PDL_COMPILED

    assert OPTIMIZED_NO_PDL not in checked_arguments(["--torchvision", "resnet50"]).variants
    assert checked_arguments(["--torchvision", "resnet50", "--variants", f"eager,{OPTIMIZED_NO_PDL_COMPILED}"]
                             ).variants == [EAGER, OPTIMIZED_NO_PDL_COMPILED]
    assert list(checked_arguments(["--torchvision", "resnet50"]).variants) == list(DEFAULT_VARIANTS)
    figures = NetworkResult("densenet121", 1, tuple(VariantResult(v, ms, ms, ms, 1e-3, True) for v, ms in (
        (EAGER, 2.0), (COMPILED, 1.0), (OPTIMIZED_COMPILED, 0.69), (OPTIMIZED_NO_PDL_COMPILED, 0.73))),
        conv_ms=None, replaced="120 of 120 convolutions replaced")
    assert f"  {OPTIMIZED_NO_PDL_COMPILED} / eager 0.365, / {COMPILED} (the faster mode) 0.730" in summary_lines(figures)


def deep_random_model(torch):
    """Twenty conv + batch norm + ReLU blocks whose random weights grow the activations at each block while batch
    norm keeps its initial statistics: past f16's 65504 well before the end, as torchvision's ResNet-101."""
    torch.manual_seed(0)
    blocks = []
    for channels in [3] + [8] * 19:
        conv = torch.nn.Conv2d(channels, 8, 3, padding=1)
        with torch.no_grad():
            conv.weight.mul_(5.0)
        blocks += [conv, torch.nn.BatchNorm2d(8, momentum=0.3), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks).eval()


def test_calibrated_batch_norms_keep_a_deep_random_network_in_f16s_range():
    torch = pytest.importorskip("torch")
    from tuner.torch_ops.e2e import BETA_RANGE, GAMMA_RANGE, calibrate_batch_norms

    model, x = deep_random_model(torch), torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        assert model(x).abs().max() > 65504  # as it would run: inf in f16
        calibrate_batch_norms(model, x)
        y = model(x)
    norms = [m for m in model if isinstance(m, torch.nn.BatchNorm2d)]
    assert not model.training and all(m.momentum == 0.3 for m in norms)
    assert y.abs().max() < 100
    first = norms[0]  # divides the first convolution's output by its root mean square on this batch
    with torch.no_grad():
        out = model[0](x)
    assert torch.equal(first.running_mean, torch.zeros(8))
    assert torch.allclose(first.running_var, out.pow(2).mean().expand(8), rtol=1e-5)
    for norm in norms:  # a per-channel scale and shift, different channel to channel
        assert GAMMA_RANGE[0] <= norm.weight.min() and norm.weight.max() <= GAMMA_RANGE[1]
        assert BETA_RANGE[0] <= norm.bias.min() and norm.bias.max() <= BETA_RANGE[1]
        assert norm.weight.std() > 0.05 and norm.bias.std() > 0.005


def test_a_model_without_batch_norm_is_left_as_it_was():
    torch = pytest.importorskip("torch")
    from tuner.torch_ops.e2e import calibrate_batch_norms

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calibrate_batch_norms(model, torch.randn(2, 3, 8, 8))
    assert not model.training and all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
