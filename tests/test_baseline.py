"""The baselines' data types (the timings themselves need a GPU: tests/test_gpu.py)."""
import dataclasses

import pytest

from tuner.measure.baseline import torch_dtype
from tuner.core.dtypes import dtype_fields
from tuner.core.problem import ConvProblem

LAYER = ConvProblem(n=1, h=14, w=14, c=64, k=64, r=3, s=3, pad=1)


@pytest.mark.parametrize("name, expected, tf32", [("f16", "float16", False), ("bf16", "bfloat16", False),
                                                  ("tf32", "float32", True)])
def test_the_baselines_run_the_problems_type(name, expected, tf32):
    torch = pytest.importorskip("torch")
    problem = dataclasses.replace(LAYER, **dtype_fields(name))
    assert torch_dtype(torch, problem) is getattr(torch, expected)
    assert torch.backends.cudnn.allow_tf32 is tf32 and torch.backends.cuda.matmul.allow_tf32 is tf32


@pytest.mark.parametrize("problem", [
    ConvProblem(n=2, h=6, w=5, c=8, k=4, r=2, s=2, stride=2, transposed=True),
    ConvProblem(n=1, h=6, w=5, c=8, k=4, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True),
    ConvProblem(n=1, h=6, w=5, c=8, k=4, r=3, s=3, pad=1, dilation=2),
], ids=lambda p: p.key)
def test_the_baseline_runs_the_problems_convolution_on_its_weight(problem):
    """What cuDNN is timed on (conv_transpose2d for a transposed problem) computes the reference's answer from
    the tuner's weight, permuted into torch's layout."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from tuner.measure.baseline import torch_conv, torch_weight_shape
    from tuner.measure.validate import reference_output

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, problem.input_shape)
    w = rng.uniform(-1, 1, problem.filter_shape)
    w_torch = torch.tensor(w).permute(0, 3, 1, 2)  # KRSC -> K,C,R,S; a transposed conv's CRSK -> C,K,R,S
    assert tuple(w_torch.shape) == torch_weight_shape(problem)
    y = torch_conv(torch, problem, torch.tensor(x).permute(0, 3, 1, 2), w_torch).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(y, reference_output(x, w, problem), rtol=1e-12, atol=1e-12)
