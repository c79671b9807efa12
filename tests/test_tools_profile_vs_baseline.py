"""tools/profile_vs_baseline.py's library call: the layer's own type, as the bench times the library (no GPU needed:
the snippet is only read)."""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from tuner.core.dtypes import dtype_fields
from tuner.core.problem import ConvProblem

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def tool():
    sys.path.insert(0, str(TOOLS))  # the tool imports its neighbour, repository.py
    try:
        spec = importlib.util.spec_from_file_location("profile_vs_baseline", TOOLS / "profile_vs_baseline.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


def test_the_library_runs_in_the_layers_type_with_tf32_math_only_for_tf32():
    snippet = tool().baseline_snippet
    gemm = dict(n=2, h=7, w=7, c=64, k=32, r=1, s=1)
    for dtype, torch_type, tf32 in (("f16", "float16", False), ("bf16", "bfloat16", False),
                                    ("tf32", "float32", True), ("e4m3", "float16", False)):
        text = snippet(ConvProblem(**gemm, **dtype_fields(dtype)))
        ast.parse(text)
        assert f"dtype = torch.{torch_type}\n" in text and f"allow_tf32 = {tf32}\n" in text, dtype
        assert "torch.float16" not in text.replace("dtype = torch.float16", ""), dtype
        assert "True)  # pad" in text, dtype  # a 1x1 stride-1 layer: the GEMM through torch.matmul
    conv = snippet(ConvProblem(n=1, h=14, w=14, c=64, k=64, r=3, s=3, pad=1, **dtype_fields("bf16")))
    assert "False)  # pad" in conv  # a 3x3 is no GEMM: cuDNN's conv2d
    assert conv.count("dtype=dtype") == 4
