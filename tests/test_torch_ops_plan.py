"""Which convolutions a tuned kernel replaces and why the others fall back, from best.yaml alone: the list
optimize acts on and `tune.py report` prints."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from tuner.core.epilogue import parse_epilogue
from tuner.importers.network import ImportedLayer, Network, Unsupported
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.store.best import best_entries
from tuner.store.schema import BestEntry
from tuner.importers.plan import Fallback, TunedIndex, decide, network_decisions, summary

REPO = Path(__file__).resolve().parents[1]
H100 = REPO / "results" / "nvidia-h100-80gb-hbm3"
SM80 = (("iterator", "optimized"), ("split_k", 1), ("stages", 3), ("swizzle", 1), ("tile", "64x64x32"),
        ("warps", "2x2x1"))


def entry(problem: ConvProblem, runtime: float = 1.0) -> BestEntry:
    return BestEntry(problem, "sm80", SM80, "k", runtime)


NORM = ConvProblem(n=32, h=56, w=56, c=64, k=64, r=3, s=3, pad=1, epilogue=parse_epilogue("scale+bias+relu"))
FOLDED = dataclasses.replace(NORM, epilogue=parse_epilogue("bias+relu"))


def test_the_fastest_entry_of_the_canonical_problem_replaces_the_conv():
    index = TunedIndex({"slow": entry(NORM, 9.0), "fast": entry(FOLDED, 3.0)})
    for problem in (NORM, FOLDED):
        decision = decide("conv1", problem, index)
        assert decision.replaced and decision.entry == "fast"
    assert "batch-norm scale folded into the filter" in decide("conv1", NORM, index).note
    assert "scale of ones" in decide("conv1", FOLDED, TunedIndex({"norm": entry(NORM)})).note


def test_fallback_reasons():
    index = TunedIndex({"b32": entry(NORM)})
    assert decide("c", dataclasses.replace(NORM, n=8), index).text == "a shape other than the tuned one: tuned at " \
                                                                      "batch 32, not 8"
    bf16 = dataclasses.replace(NORM, input_type=DataType.bf16, filter_type=DataType.bf16, output_type=DataType.bf16)
    wrong = decide("c", bf16, index)
    assert wrong.fallback is Fallback.wrong_dtype and "runs bf16; tuned for f16 as b32" in wrong.note
    other = decide("c", dataclasses.replace(NORM, k=128), index)
    assert other.fallback is Fallback.not_tuned and "--epilogue scale+bias+relu" in other.note
    assert decide("dw", "depthwise convolution", index).text == "no family runs it: depthwise convolution"


def test_the_committed_resnet50_table_replaces_every_conv_of_the_torchvision_import():
    """The r50f_* layers tuned from the layer table answer the torchvision ResNet-50's nodes at batch 32 and 1,
    and the same network exported with its batch norms folded."""
    entries = best_entries(H100)
    fused = [(name, e.problem) for name, e in entries.items() if name.startswith("r50f_") and name.endswith("_b32")]
    layers = tuple(ImportedLayer(f"l{i}", problem, (f"node{i}",)) for i, (_, problem) in enumerate(fused))
    folded = tuple(dataclasses.replace(layer, problem=dataclasses.replace(
        layer.problem, epilogue=layer.problem.epilogue.canonical)) for layer in layers)
    for imported in (layers, folded):
        decisions = network_decisions(Network(imported, (Unsupported("fc", "not a conv"),), ()), entries)
        assert sum(d.replaced for d in decisions) == len(layers)
        assert summary(decisions) == f"{len(layers)} of {len(layers) + 1} convolutions replaced by tuned kernels; " \
                                     "falling back to PyTorch: 1 no family runs it"


def test_with_dtype_keeps_tf32_an_input_type():
    from tuner.importers.plan import with_dtype

    problem = ConvProblem(n=2, h=8, w=8, c=16, k=32, r=3, s=3, pad=1)
    assert with_dtype(problem, DataType.tf32).dtype_key == "tf32_tf32_f32_f32"
    assert with_dtype(problem, DataType.bf16).dtype_key == "bf16_bf16_bf16_f32"
    assert with_dtype(problem, DataType.e4m3).dtype_key == "e4m3_e4m3_f16_f32"
