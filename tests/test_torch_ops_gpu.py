"""The PyTorch op on the GPU: `pytest -m gpu tests/test_torch_ops_gpu.py` on a machine with an NVIDIA GPU,
CUDA torch and nvcc. The real kernels (sm80, compiled once for the module; dsl_direct's for the grouped conv
where the DSL and an sm_90 GPU are here) against F.conv2d + BatchNorm + ReLU in f16, eagerly, on a side
stream, under CUDA graph replay and under torch.compile; a planted wrong kernel is caught by optimize's check
against eager."""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU for torch", allow_module_level=True)

from torch_standins import SLUG, captured, net, write_best  # noqa: E402
from tuner.core.epilogue import Activation  # noqa: E402
from tuner.families.dsl_common.toolchain import dsl_version  # noqa: E402
from tuner.search.space import make_config  # noqa: E402
from tuner.torch_ops.eager_check import relative_l2  # noqa: E402
from tuner.torch_ops.optimize import CompiledKernels, TunedConv2d, optimize  # noqa: E402
from tuner.importers.plan import Fallback  # noqa: E402

SHAPE = (4, 3, 16, 16)
TOLERANCE = 1e-2
# The grouped conv's entry is dsl_direct's (tests/torch_standins.py): built where the DSL and an sm_90 GPU are.
GROUPED_RUNS = dsl_version() is not None and torch.cuda.get_device_capability() == (9, 0)
REPLACED = ["stem", "conv", "head"] + (["grouped"] if GROUPED_RUNS else [])


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """The network on the GPU in f16, its best.yaml (an sm80 kernel per layer) and a compile cache that the
    first optimize fills."""
    root = tmp_path_factory.mktemp("torch_op")
    model = net().cuda().to(memory_format=torch.channels_last)
    write_best(root / "results", net(), SHAPE)
    torch.manual_seed(2)
    x = torch.randn(*SHAPE, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    return model, x, root / "results", root / "cache"


@pytest.fixture(scope="module")
def optimized(setting):
    model, x, results, cache = setting
    return optimize(model, x, gpu=SLUG, results_dir=results, cache_dir=cache)


def test_every_tuned_layer_is_replaced_and_matches_eager(setting, optimized):
    model, x, _, _ = setting
    decisions = {d.node: d for d in optimized.tuner_report.decisions}
    assert [n for n, d in decisions.items() if d.replaced] == REPLACED, optimized.tuner_report.lines()
    assert sum(isinstance(m, TunedConv2d) for m in optimized.modules()) == len(REPLACED)
    with torch.no_grad():
        assert relative_l2(optimized(x), model(x)) < TOLERANCE
    assert optimized.tuner_report.network_error < TOLERANCE


def test_a_network_one_module_down_has_its_batch_norms_folded(setting):
    """As torchvision's blocks nest them: the norms' graph nodes (_0_bn0) are no module paths (0.bn0). Its
    batch norms' statistics are far from (0, 1), so a norm left out of its kernel's scale and bias fails."""
    model, x, results, cache = setting
    nested = torch.nn.Sequential(model).eval()
    optimized = optimize(nested, x, gpu=SLUG, results_dir=results, cache_dir=cache)
    decisions = {d.node: d for d in optimized.tuner_report.decisions}
    assert [n for n, d in decisions.items() if d.replaced] == [f"0.{n}" for n in REPLACED], \
        optimized.tuner_report.lines()
    with torch.no_grad():
        assert relative_l2(optimized(x), nested(x)) < TOLERANCE


def test_the_op_matches_conv_batch_norm_relu_in_f16(setting, optimized):
    """The stem alone: the kernel's output against F.conv2d, BatchNorm2d (eval) and ReLU."""
    model, x, _, _ = setting
    with torch.no_grad():
        expected = torch.relu(model.bn0(model.stem(x)))
        assert relative_l2(optimized.tuned_stem(x), expected) < TOLERANCE


@pytest.mark.skipif(not GROUPED_RUNS, reason="dsl_direct builds need nvidia-cutlass-dsl and an sm_90 GPU")
def test_the_grouped_op_matches_a_grouped_conv2d(setting, optimized):
    """4 groups of 8 channels with their bias: the K x C/groups x R x S filter bound as it is, not padded."""
    model, _, _, _ = setting
    torch.manual_seed(5)
    z = torch.randn(SHAPE[0], 32, SHAPE[2], SHAPE[3], device="cuda", dtype=torch.float16).to(
        memory_format=torch.channels_last)
    with torch.no_grad():
        assert relative_l2(optimized.tuned_grouped(z), model.grouped(z)) < TOLERANCE


def test_it_runs_on_the_callers_stream(setting, optimized):
    model, x, _, _ = setting
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        got = optimized(x)
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        assert relative_l2(got, model(x)) < TOLERANCE


def test_it_replays_in_a_cuda_graph_on_new_inputs(setting, optimized):
    model, x, _, _ = setting
    static = x.clone()
    graph, out = captured(optimized, static)
    with torch.no_grad():
        for seed in (3, 4):
            torch.manual_seed(seed)
            static.copy_(torch.randn_like(static))
            graph.replay()
            torch.cuda.synchronize()
            assert relative_l2(out, model(static)) < TOLERANCE


@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs"])
def test_it_runs_under_torch_compile(setting, optimized, mode):
    model, x, _, _ = setting
    torch._dynamo.reset()
    compiled = torch.compile(optimized, mode=mode, fullgraph=True)
    with torch.no_grad():
        assert relative_l2(compiled(x), model(x)) < TOLERANCE


class PlantedKernels(CompiledKernels):
    """The stem's kernel built with GELU where the layer has ReLU: same operands, wrong result."""

    def tuned_config(self, name, entry):
        if "stem" not in name:
            return super().tuned_config(name, entry)
        problem = entry.problem
        wrong = dataclasses.replace(problem, epilogue=dataclasses.replace(problem.epilogue,
                                                                          activation=Activation.gelu))
        return make_config(wrong, entry.family, entry.knobs)


def test_a_planted_wrong_kernel_is_caught_by_the_check_against_eager(setting):
    model, x, results, cache = setting
    optimized = optimize(model, x, gpu=SLUG, results_dir=results, cache_dir=cache,
                         kernel_source=PlantedKernels(results / SLUG, cache))
    decisions = {d.node: d for d in optimized.tuner_report.decisions}
    assert decisions["stem"].fallback is Fallback.wrong_result, decisions["stem"].text
    assert decisions["conv"].replaced and decisions["head"].replaced
    with torch.no_grad():
        assert relative_l2(optimized(x), model(x)) < TOLERANCE
