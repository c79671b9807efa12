"""results/<gpu>/bench.yaml as a typed record: read and checked, written back byte for byte as bench writes it."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.store.bench_record import BENCH_FILE, BenchRecord, GpuTunerRun, OneRunLayer, read_bench, write_bench
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[1]
H100 = REPO / "results" / "nvidia-h100-80gb-hbm3"


def test_the_committed_bench_yaml_is_written_back_unchanged(tmp_path):
    record = read_bench(H100)
    assert record.device.sm_count == 132 and record.ceilings.torch_version and record.cudnn_version == 91900
    fused = record.one_run["vgg16f_features_0_b32"]
    assert (fused.epilogue, fused.family) == ("bias+relu", "sm90_dsl") and fused.eager_us > fused.tuned_us
    assert record.product_search["conv_1"].searched_families == ("sm80",)  # recorded before there were families
    write_bench(tmp_path, record)
    assert (tmp_path / BENCH_FILE).read_text() == (H100 / BENCH_FILE).read_text()


def test_a_folder_without_bench_yaml_is_an_empty_record(tmp_path):
    assert read_bench(tmp_path) == BenchRecord()


def test_a_record_is_written_in_the_order_bench_has_always_written():
    record = BenchRecord(cudnn={"a": 2.0}, one_run={"a": OneRunLayer("k", "sm80", tuned_us=1.0, cudnn_us=2.0)},
                         product_search={"a": GpuTunerRun(1.0, "k", 32, 30, 4.5, "sm80", ("sm80", "sm90_conv"))},
                         cudnn_version=91900, compiled={"a": 3.0})
    document = record.to_document()
    assert list(document) == ["cudnn", "cublas", "product_search", "one_run", "cudnn_version", "compiled"]
    assert list(document["one_run"]["a"]) == ["kernel", "family", "tuned_us", "cudnn_us"]
    assert document["product_search"]["a"] == {"best_us": 1.0, "kernel": "k", "family": "sm80",
                                               "families": ["sm80", "sm90_conv"], "trials": 32,
                                               "kernels_compiled": 30, "wall_s": 4.5}


@pytest.mark.parametrize("document, says", [
    ([1, 2], "bench.yaml is not a mapping"),
    ({"version": 2}, "is bench.yaml version 2; this tuner reads version 1"),
    ({"one_run": {"conv_1": {"cudnn_us": "fast"}}}, "one_run conv_1 cudnn_us: 'fast' is not a positive number"),
    ({"one_run": {"conv_1": {"tuned_us": -1.0}}}, "one_run conv_1 tuned_us: -1.0 is not a positive number"),
    ({"one_run": {"conv_1": {"speed": 1.0}}}, "one_run conv_1 holds speed, which bench never writes"),
    ({"one_run": ["conv_1"]}, "one_run is not a mapping"),
    ({"cudnn": {"conv_1": True}}, "cudnn conv_1: True is not a positive number"),
    ({"ceilings": {"matmul_tflops": 600.0}}, "ceilings copy_gbps is missing"),
    ({"device": {"name": "x"}}, "device: "),
    ({"product_search": {"conv_1": {"best_us": 1.0}}}, "product_search conv_1 lacks kernel, trials"),
    ({"surprise": 1}, "the file holds surprise"),
])
def test_what_bench_never_writes_is_refused_in_one_line(tmp_path, document, says):
    (tmp_path / BENCH_FILE).write_text(yaml.safe_dump(document))
    with pytest.raises(ResultsError, match="restore it from version control") as refused:
        read_bench(tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)
