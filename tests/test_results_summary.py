"""tune.py bench --summary: the README's results lines and docs/results.md, generated from the committed
results/<gpu>/bench.yaml and best.yaml, never typed by hand."""
import io
import math
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tuner.cli import bench
from tuner.cli import results_doc
from tuner.pipeline import results_summary as summary
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[1]
H100 = "nvidia-h100-80gb-hbm3"


def committed_summaries() -> list[summary.GpuResults]:
    results = REPO / "results"
    return [summary.gpu_results(results, slug) for slug in summary.summary_slugs(results, None)]


def test_committed_docs_and_readme_hold_the_generated_summary():
    """A changed bench.yaml or best.yaml needs `python tune.py bench --summary` in the same commit."""
    gpus = committed_summaries()
    assert (REPO / "docs" / "results.md").read_text() == results_doc.document(gpus)
    readme = (REPO / "README.md").read_text()
    assert results_doc.with_readme_block(readme, results_doc.short_form(gpus)) == readme


def row(layer: str, batch: int, tuned: float, epilogue: str | None = None, **baselines: float) -> summary.OneRunRow:
    times = (("tuned_us", tuned), *((f"{key}_us", us) for key, us in baselines.items()))
    return summary.OneRunRow(layer, "sm90_conv", "k", batch, epilogue, times)


def test_ratios_geometric_means_by_batch_and_the_worst():
    rows = [row("r50_a_b32", 32, 2.0, cudnn=4.0), row("r50_b_b32", 32, 3.0, cudnn=2.0),
            row("r50_c_b1", 1, 1.0, cudnn=1.0), row("r50_d_b1", 1, 1.0)]  # no cuDNN figure: left out
    found = summary.ratio_summary(rows, "cudnn_us")
    assert found.layers == 3
    assert found.mean == pytest.approx(statistics.geometric_mean([0.5, 1.5, 1.0]))
    assert found.by_batch == ((32, pytest.approx(math.sqrt(0.75)), 2), (1, 1.0, 1))
    assert (found.worst_layer, found.worst, found.within) == ("r50_b_b32", 1.5, 2)
    assert found.above == (("r50_b_b32", 1.5),)
    assert summary.ratio_summary(rows, "cublas_us") is None


def test_summary_lines_group_fused_layers_by_name_and_compare_them_with_pytorch():
    rows = [row("conv_1", 1, 1.0, cudnn=2.0), row("r50_x_b32", 32, 1.0, cudnn=1.0, cublas=1.1),
            row("r50f_x_b32", 32, 1.2, "scale+bias+relu", cudnn=1.0, eager=2.4, compiled=1.2, bare_kernel=1.0),
            row("net_b32_conv", 32, 3.0, "bias+relu", eager=3.0)]
    lines = results_doc.summary_lines(rows)
    assert lines[0].startswith("- conv_1, r50_x_b32 (2 layers: 1 at batch 32, 1 at batch 1), the convolution alone")
    assert "**0.707**" in lines[0] and "worst r50_x_b32 1.00" in lines[0] and "0 slower than cuDNN" in lines[0]
    assert "1 of 1 within 5 % at batch 32 (worst r50_x_b32 0.909)" in lines[1]
    assert lines[2] == ("- net_b32_conv (1 layer, batch 32) with their epilogues, the fused kernel / PyTorch eager: "
                        "1.000 at batch 32")
    assert "r50f_x_b32 (1 layer, batch 32)" in lines[3] and "/ PyTorch eager: 0.500 at batch 32" in lines[3]
    assert "/ torch.compile: 1.000 at batch 32; / the same kernel without its epilogue: 1.200" in lines[3]
    # the fused layers of every group together against torch.compile (one group alone has no such line)
    assert lines[4] == ("- all 1 layers with their epilogues, the fused kernel / torch.compile: **1.000** (1.000 at "
                        "batch 32); 1 above 0.90 (worst r50f_x_b32 1.00)")
    assert len(results_doc.summary_lines(rows[:3])) == 3


def test_silu_and_gelu_layers_are_compared_with_their_kernel_built_with_relu():
    rows = [row("r50f_x_b32", 32, 1.0, "scale+bias+relu", compiled=2.0, bare_kernel=1.0),
            row("effnetf_y_b8", 8, 1.05, "scale+bias+silu", compiled=2.0, relu_kernel=1.0),
            row("effnetf_z_b8", 8, 1.02, "scale+bias+gelu", compiled=2.0, relu_kernel=1.0)]
    lines = results_doc.summary_lines(rows)
    assert lines[-1] == ("- the 2 SiLU and GELU layers, the fused kernel / the same kernel with ReLU for its activation: "
                         "**1.035**, worst effnetf_y_b8 1.050")
    assert "/ the same kernel with ReLU for its activation: 1.035 at batch 8" in lines[0]
    assert not any("with ReLU" in line for line in results_doc.summary_lines(rows[:1]))
    assert results_doc.layer_table(rows)[3].endswith("| - | - | 1.00 | 1.050 |")  # bare kernel, then ReLU kernel


def copy_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(REPO / "results" / H100, results / H100,
                    ignore=shutil.ignore_patterns("landscape", "best_configs.h", "bench_table.txt"))
    return results


@pytest.mark.slow
def test_bench_summary_writes_the_document_and_the_readme_block(tmp_path):
    results = copy_results(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{results_doc.README_BEGIN}\nold figures\n{results_doc.README_END}\n\n## Test\n")
    out = io.StringIO()
    assert bench.main(["--summary", "--results-dir", str(results), "--summary-file", str(tmp_path / "r.md"),
                       "--readme", str(readme)], Console(file=out, width=100)) == 0
    document = (tmp_path / "r.md").read_text()
    assert document.startswith("# Results") and "| r50_s4_3x3_b32 | " in document
    text = readme.read_text()
    assert "old figures" not in text and text.endswith(f"{results_doc.README_END}\n\n## Test\n")
    assert "tuned / cuDNN: **" in text and "tuned / cuDNN: **" in out.getvalue()
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers\n")
    bench.main(["--summary", "--results-dir", str(results), "--summary-file", str(tmp_path / "r.md"),
                "--readme", str(plain)], Console(file=io.StringIO()))
    assert plain.read_text() == "no markers\n"


def test_bench_summary_refuses_bad_input_in_one_line(tmp_path):
    results = copy_results(tmp_path)
    args = ["--summary", "--results-dir", str(results), "--summary-file", str(tmp_path / "r.md"),
            "--readme", str(tmp_path / "none.md")]
    with pytest.raises(ResultsError, match="no .*nvidia-h200/best.yaml"):
        bench.main([*args, "--gpu", "nvidia-h200"], Console(file=io.StringIO()))
    measured = yaml.safe_load((results / H100 / "bench.yaml").read_text())
    measured["one_run"]["conv_1"]["cudnn_us"] = "fast"
    (results / H100 / "bench.yaml").write_text(yaml.safe_dump(measured))
    with pytest.raises(ResultsError, match="one_run conv_1 cudnn_us: 'fast' is not a positive number"):
        bench.main(args, Console(file=io.StringIO()))
    assert not (tmp_path / "r.md").exists()
