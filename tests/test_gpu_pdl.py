"""Programmatic dependent launch on the GPU (`pytest -m gpu tests/test_gpu_pdl.py`, an sm_90 GPU with CUDA torch and
the DSL): a chain of sm90_dsl kernels built for PDL (optimize(pdl=True)), each one's output the next one's input,
gives the same bits as the same kernels launched plainly, eagerly, under CUDA graph replay on new inputs and under
torch.compile: each kernel waits for the one before it before it reads."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU for torch", allow_module_level=True)

from torch import nn  # noqa: E402

from torch_standins import SLUG, captured, write_best  # noqa: E402
from tuner.families.dsl_common.toolchain import dsl_version  # noqa: E402
from tuner.torch_ops.eager_check import relative_l2  # noqa: E402
from tuner.torch_ops.optimize import TunedConv2d, optimize  # noqa: E402

if dsl_version() is None or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("sm90_dsl builds need nvidia-cutlass-dsl and an sm_90 GPU", allow_module_level=True)

SHAPE = (8, 64, 28, 28)
DSL_PARAMS = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
              "swizzle": 1, "tile_q": 0, "split_k": 1}


class Chain(nn.Module):
    """Three convolutions back to back, the ReLUs fused into their kernels: nothing runs between the kernels."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(64, 64, 3, padding=1)
        self.b = nn.Conv2d(64, 64, 3, padding=1)
        self.c = nn.Conv2d(64, 64, 1)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    root = tmp_path_factory.mktemp("pdl")
    torch.manual_seed(0)
    model = Chain().eval().half().cuda().to(memory_format=torch.channels_last)
    write_best(root / "results", Chain().eval().half(), SHAPE, dense=("sm90_dsl", DSL_PARAMS))
    x = torch.randn(*SHAPE, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    plain, chained = (optimize(model, x, gpu=SLUG, results_dir=root / "results", cache_dir=root / "cache", pdl=pdl)
                      for pdl in (False, True))
    return model, x, plain, chained


def test_every_convolution_is_replaced_and_matches_eager_and_the_plain_kernels_bit_for_bit(chains):
    model, x, plain, chained = chains
    assert sum(isinstance(m, TunedConv2d) for m in chained.modules()) == 3, chained.tuner_report.lines()
    with torch.no_grad():
        assert relative_l2(chained(x), model(x)) < 1e-2
        assert torch.equal(chained(x), plain(x))


def test_a_chain_replayed_in_a_cuda_graph_on_new_inputs_gives_the_plain_kernels_bits(chains):
    model, x, plain, chained = chains
    static = x.clone()
    graph, out = captured(chained, static)
    with torch.no_grad():
        for seed in range(3, 8):
            torch.manual_seed(seed)
            static.copy_(torch.randn_like(static))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, plain(static)), seed


def test_a_chain_runs_under_torch_compile(chains):
    model, x, plain, chained = chains
    torch._dynamo.reset()
    compiled = torch.compile(chained, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(x), plain(x))
