"""The baselines' data types (the timings themselves need a GPU: tests/test_gpu.py)."""
import dataclasses

import pytest

from tuner.baseline import torch_dtype
from tuner.problem import ConvProblem, dtype_fields

LAYER = ConvProblem(n=1, h=14, w=14, c=64, k=64, r=3, s=3, pad=1)


@pytest.mark.parametrize("name, expected, tf32", [("f16", "float16", False), ("bf16", "bfloat16", False),
                                                  ("tf32", "float32", True)])
def test_the_baselines_run_the_problems_type(name, expected, tf32):
    torch = pytest.importorskip("torch")
    problem = dataclasses.replace(LAYER, **dtype_fields(name))
    assert torch_dtype(torch, problem) is getattr(torch, expected)
    assert torch.backends.cudnn.allow_tf32 is tf32 and torch.backends.cuda.matmul.allow_tf32 is tf32
