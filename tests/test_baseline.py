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


# --- e4m3: no cuDNN fp8 conv in PyTorch; cuBLASLt's fp8 GEMM for a 1x1 layer ----------------------------------

E4M3_GEMM = ConvProblem(n=2, h=4, w=4, c=64, k=48, r=1, s=1, **dtype_fields("e4m3"))


def test_cudnn_and_pytorch_time_an_e4m3_layers_f16_twin_and_say_so():
    from tuner.measure.baseline import CUDNN_FP8_ABSENT, fp8_absence, torch_problem

    problem = dataclasses.replace(LAYER, **dtype_fields("e4m3"))
    assert torch_problem(problem) == LAYER and torch_problem(LAYER) is LAYER
    assert fp8_absence(problem) == {"timed_dtype": "f16", "note": CUDNN_FP8_ABSENT} and fp8_absence(LAYER) == {}
    assert "not reachable from PyTorch" in CUDNN_FP8_ABSENT


def test_scaled_mm_takes_k_and_n_in_multiples_of_16():
    from tuner.measure.baseline import scaled_mm_problem

    assert scaled_mm_problem(E4M3_GEMM) is None
    assert "multiples of 16" in scaled_mm_problem(dataclasses.replace(E4M3_GEMM, k=40))
    assert "C=24" in scaled_mm_problem(dataclasses.replace(E4M3_GEMM, c=24))


def test_the_fp8_gemm_baseline_computes_the_scaled_1x1_conv():
    """What cuBLASLt is timed on (torch._scaled_mm, on the CPU here) is the e4m3 layer's answer: the reference of
    the 1x1 conv of the same codes, times the two scales, within the layer's tolerance."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from tuner.core.elements import OperandScales, encode
    from tuner.measure.baseline import scaled_gemm
    from tuner.measure.validate import check_output, reference_output

    problem = E4M3_GEMM
    rng = np.random.default_rng(0)
    x = encode(rng.uniform(-1, 1, problem.input_shape).astype(np.float32), problem.input_type)
    w = encode(rng.uniform(-1, 1, problem.filter_shape).astype(np.float32), problem.filter_type)
    m, n, k = problem.gemm_mnk
    a = torch.from_numpy(x.reshape(m, k)).view(torch.float8_e4m3fn)
    b = torch.from_numpy(w.reshape(n, k)).view(torch.float8_e4m3fn)
    out = torch.empty(m, n, dtype=torch.float16)
    scales = OperandScales(0.75, 1.5)
    scaled_gemm(torch, a, b, torch.tensor(scales.input), torch.tensor(scales.filter), out)
    y = out.numpy().reshape(problem.output_shape)
    assert check_output(y, reference_output(x, w, problem, scales), problem).passed
    assert not check_output(y, reference_output(x, w, problem), problem).passed  # the scales are in it
