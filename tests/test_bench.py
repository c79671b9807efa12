"""The search on the recorded H100 landscapes (results/nvidia-h100-80gb-hbm3/landscape/, all 47 layers
measured by `python tune.py bench` on the H100): with the cost model's prior, TPE gets within 3 %
of the exhaustive best in 32 trials on at least 90 % of the layers (46 of 47 when recorded), and
within 2 % at the median over the layers."""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tuner.cli import bench as bench_command
from tuner.cli.bench_tables import fused_table, one_run_lines, print_event, ratio_line
from tuner.pipeline import bench
from tuner.pipeline.bench_summary import name_batch, named_ratio_stats
from tuner.pipeline.landscape import exhaustive_best
from tuner.pipeline.one_run import measure_tuned
from tuner.pipeline.replayed_search import replay_search
from tuner.search.costmodel import PRIOR_PICKS, Ceilings, joint_prior_picks
from tuner.search.replay import read_record
from tuner.search.space import JointSpace, load_space
from tuner.core.status import Status
from tuner.store.bench_record import BenchRecord, OneRunLayer, read_bench
from tuner.store.landscape import landscape_path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "nvidia-h100-80gb-hbm3"
WITHIN = 1.03
SHARE_OF_LAYERS_WITHIN = 0.9
MEDIAN_WITHIN = 1.02


def recorded_layers(family: str = "sm80") -> list[str]:
    return sorted(p.stem for p in (RESULTS / "landscape" / family).glob("*.csv"))


def sm80_record(name: str, problem):
    return read_record(landscape_path(RESULTS, "sm80", name), problem, "sm80")


@pytest.fixture(scope="module")
def measured():
    return read_bench(RESULTS)


@pytest.fixture(scope="module")
def landscape_space():
    return load_space(bench_command.REPO / "search_spaces" / "sm80_landscape.yaml")


def ratios_at_32(layer, space, device, ceilings) -> list[float]:
    record = sm80_record(layer.name, layer.problem)
    exhaustive = exhaustive_best(record)
    joint = JointSpace((space,))
    prior = joint_prior_picks(joint, layer.problem, device, PRIOR_PICKS, ceilings)
    return [replay_search(layer.problem, joint, device, record, 32, seed, prior)[0] / exhaustive
            for seed in (0, 1, 2)]


@pytest.mark.slow
def test_tpe_with_prior_reaches_the_exhaustive_best(layers, measured, landscape_space):
    device = measured.device
    ceilings = bench.bench_ceilings(measured)
    names = recorded_layers()
    assert set(bench.SUITE) <= set(names)
    medians = {name: statistics.median(ratios_at_32(layers[name], landscape_space, device, ceilings))
               for name in names}
    assert sum(ratio <= WITHIN for ratio in medians.values()) >= SHARE_OF_LAYERS_WITHIN * len(names), medians
    assert statistics.median(medians.values()) <= MEDIAN_WITHIN, medians


def test_landscape_is_complete_for_the_suite(layers, measured, landscape_space):
    from tuner.search.space import valid_configs

    device = measured.device
    for name in recorded_layers():
        record = sm80_record(name, layers[name].problem)
        valid = {c.name for c in valid_configs(landscape_space, layers[name].problem, device)}
        assert valid <= set(record)
        # what the static rules learned from this landscape excludes only candidates that failed
        assert all(record[n].status is not Status.ok for n in set(record) - valid)
        assert sum(record[n].status is Status.ok for n in valid) >= 50


@pytest.mark.slow
def test_replayed_bench_prints_the_table(capsys):
    console = Console(width=220, force_terminal=False)
    assert bench_command.main(["--replay-only", "--seeds", "1", "--layers", "conv_1,r50_s4_3x3_b32"], console) == 0
    printed = capsys.readouterr().out
    assert "cuDNN" in printed and "r50_s4_3x3_b32" in printed and "geometric mean" in printed


def test_product_search_seeds_like_tune_py_and_counts_kernels(layers, measured, landscape_space):
    """The 'search' step's plumbing, on the CPU: replayed compiles and timings of conv_1's landscape."""
    from tuner.search.replay import ReplayCompiler, ReplayEvaluator

    device = measured.device
    record = sm80_record("conv_1", layers["conv_1"].problem)
    caches, compiler = [], ReplayCompiler()

    def make_compiler(cache):
        caches.append(cache)
        assert cache.is_dir() and not any(cache.iterdir())
        return compiler

    evaluator = ReplayEvaluator(record)
    found = bench.product_search(layers["conv_1"], JointSpace((landscape_space,)), device, make_compiler, evaluator,
                                 Ceilings(), 12)
    assert len(caches) == 1 and not caches[0].exists()  # the cold cache is removed afterwards
    assert found.kernels_compiled == len(compiler.kernels) <= 12
    exhaustive = exhaustive_best(record)
    assert found.best_us == min(record[name].median_us for name in evaluator.evaluated
                                if record[name].status is Status.ok) >= exhaustive
    assert found.wall_s >= 0


def test_unknown_bench_step_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        bench_command.build_parser().parse_args(["--steps", "landscape,everything"])
    assert stop.value.code == 2
    assert "unknown step" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--seeds", "--product-trials", "--jobs"])
def test_whole_number_options_below_one_are_usage_errors(option):
    from tuner.cli.main import UsageError

    with pytest.raises(UsageError, match=f"{option} must be at least 1"):
        bench_command.main(["--replay-only", option, "0"], Console())


def test_tuned_step_times_best_yaml_kernels_beside_cudnn(tmp_path, layers, landscape_space, measured):
    """The 'tuned' step on the CPU: best.yaml's kernel of each layer is compiled once and timed, and cuDNN
    (cuBLAS on a GEMM layer) right after it; the one-run summary judges the ratios."""
    from tuner.search.replay import ReplayCompiler, ReplayEvaluator
    from tuner.store.results import atomic_write
    from tuner.core.problem import problem_to_dict
    from tuner.search.space import all_configs

    device = measured.device
    layer = layers["conv_1"]
    record = sm80_record("conv_1", layer.problem)
    config = next(c for c in all_configs(landscape_space, layer.problem) if c.name in record
                  and record[c.name].status is Status.ok)
    atomic_write(tmp_path / "best.yaml", yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": {
        "problem": problem_to_dict(layer.problem), "family": "sm80", "params": config.search_params,
        "kernel": config.name, "runtime_us": 1.0}}}))

    class Evaluator(ReplayEvaluator):
        def evaluate(self, binary, problem, launch, seed=0):
            return super().evaluate(binary, problem, launch)

    class Worker:
        def request(self, payload):
            return {"cudnn_us": record[config.name].median_us / 2, "cudnn_version": 91900}

    saves, events = [], []
    timed = measure_tuned([layer, layers["r50_s4_3x3_b32"]], tmp_path, device, ReplayCompiler(), Evaluator(record),
                          Worker(), BenchRecord(), events.append, saves.append)
    row = timed.one_run["conv_1"]
    assert row.tuned_us == round(record[config.name].median_us, 3) and row.kernel == config.name
    assert timed.cudnn["conv_1"] == row.cudnn_us == record[config.name].median_us / 2
    assert timed.cudnn_version == 91900
    assert "r50_s4_3x3_b32" not in timed.one_run and saves == [timed]  # no entry: not timed
    assert [type(event).__name__ for event in events] == ["NoBestEntry", "TunedStarted", "TunedTimed"]
    [line] = one_run_lines(timed)
    assert "geometric mean 2.000 over 1 layers" in line and "above 1.25: 1 (conv_1 2.00)" in line


def test_a_kernel_that_fails_in_the_tuned_step_keeps_its_status_and_reason(tmp_path, layers, landscape_space, measured):
    """A best.yaml kernel that fails to launch in the one run has no figure, and its row, bench.yaml and the console
    say why: the run's reason, on one line."""
    from tuner.measure.evaluate import Evaluation
    from tuner.search.replay import ReplayCompiler
    from tuner.store.bench_record import read_bench, write_bench
    from tuner.store.results import atomic_write
    from tuner.core.problem import problem_to_dict
    from tuner.search.space import all_configs

    layer = layers["conv_1"]
    config = next(iter(all_configs(landscape_space, layer.problem)))
    atomic_write(tmp_path / "best.yaml", yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": {
        "problem": problem_to_dict(layer.problem), "family": "sm80", "params": config.search_params,
        "kernel": config.name, "runtime_us": 1.0}}}))

    class Failing:
        def evaluate(self, binary, problem, launch, seed=0):
            return Evaluation(Status.launch_failed, reason="CUDA error:\n  too many resources requested for launch")

    class Worker:
        def request(self, payload):
            return {"cudnn_us": 2.0, "cudnn_version": 91900}

    events = []
    timed = measure_tuned([layer], tmp_path, measured.device, ReplayCompiler(), Failing(), Worker(), BenchRecord(),
                          events.append, lambda record: None)
    row = timed.one_run["conv_1"]
    assert row.tuned_us is None and row.status == "launch_failed"
    assert row.reason == "CUDA error: too many resources requested for launch"
    write_bench(tmp_path, timed)
    assert read_bench(tmp_path).one_run["conv_1"] == row
    console = Console(width=250, record=True, file=open(os.devnull, "w"))
    print_event(events[-1], console)
    assert "launch_failed: CUDA error: too many resources requested for launch" in console.export_text()


@pytest.mark.parametrize("activation, twin", [("silu", True), ("gelu", True), ("relu", False)])
def test_a_silu_or_gelu_layer_also_times_its_kernel_with_relu(tmp_path, layers, landscape_space, measured,
                                                               activation, twin):
    """What the activation costs beyond ReLU on the same tile (issue 23's SiLU/GELU goal): the one run times
    a SiLU or GELU layer's kernel built with ReLU in the activation's place, on the ReLU problem, besides its
    bare twin; a ReLU layer has no such twin."""
    from tuner.core.epilogue import parse_epilogue
    from tuner.core.layers import Layer
    from tuner.core.problem import problem_to_dict
    from tuner.measure.evaluate import Evaluation
    from tuner.measure.timing import Measurement
    from tuner.search.replay import ReplayCompiler
    from tuner.search.space import all_configs
    from tuner.store.bench_record import write_bench
    from tuner.store.results import atomic_write
    import dataclasses

    problem = dataclasses.replace(layers["conv_1"].problem, epilogue=parse_epilogue(f"scale+bias+{activation}"))
    config = next(iter(all_configs(landscape_space, problem)))
    atomic_write(tmp_path / "best.yaml", yaml.safe_dump({"layer_count": 1, "layers": {"conv_1f": {
        "problem": problem_to_dict(problem), "family": "sm80", "params": config.search_params,
        "kernel": config.name, "runtime_us": 1.0}}}))
    us_by_epilogue = {f"scale+bias+{activation}": 11.0, "scale+bias+relu": 10.0, "none": 9.0}
    seen = []

    class Evaluator:
        def evaluate(self, binary, problem, launch, seed=0):
            seen.append((binary.path.name, problem.epilogue.key))
            return Evaluation(Status.ok, measurement=Measurement(us_by_epilogue[problem.epilogue.key], 0, 0, 0, 0, 0))

    class Worker:
        def request(self, payload):
            return {"cudnn_us": 20.0, "cudnn_version": 91900, "eager_us": 30.0, "compiled_us": 22.0}

    compiler = ReplayCompiler()
    timed = measure_tuned([Layer("conv_1f", problem)], tmp_path, measured.device, compiler, Evaluator(), Worker(),
                          BenchRecord(), lambda event: None, lambda record: None)
    row = timed.one_run["conv_1f"]
    assert (row.tuned_us, row.bare_kernel_us) == (us_by_epilogue[f"scale+bias+{activation}"], 9.0)
    if twin:
        # each kernel was timed on its own problem, and the twin is the same tile built with ReLU
        assert row.relu_kernel_us == 10.0 and len(compiler.kernels) == 3
        relu_kernel = next(name for name, key in seen if key == "scale+bias+relu")
        assert relu_kernel != config.name and "relu" in relu_kernel
        lines = one_run_lines(timed)
        assert any("/ the same kernel with ReLU for its activation" in line and "geometric mean 1.100" in line
                   for line in lines)
    else:
        assert row.relu_kernel_us is None and len(compiler.kernels) == 2
        assert not any("with ReLU" in line for line in one_run_lines(timed))
    write_bench(tmp_path, timed)
    assert read_bench(tmp_path).one_run["conv_1f"] == row


def test_fused_layers_are_judged_against_pytorch_and_their_bare_kernel_not_cudnn():
    measured = BenchRecord(one_run={
        "r50_s4_3x3_b32": OneRunLayer("k", "sm90_conv", tuned_us=15.0, cudnn_us=16.0),
        "r50f_s4_3x3_b32": OneRunLayer("kf", "sm90_conv", "scale+bias+relu", tuned_us=16.0, cudnn_us=8.0,
                                       eager_us=32.0, compiled_us=20.0, bare_kernel_us=15.0)})
    lines = one_run_lines(measured)
    by_baseline = {name: next(line for line in lines if f"/ {name}" in line)
                   for name in ("cuDNN", "PyTorch eager", "torch.compile", "the same kernel without its epilogue")}
    assert "geometric mean 0.938 over 1 layers" in by_baseline["cuDNN"]  # the bare layer only
    assert "geometric mean 0.500 over 1 layers (batch 32: 0.500 over 1);" in by_baseline["PyTorch eager"]
    assert not any("nan" in line for line in lines)  # no batch-1 layer: no batch-1 mean
    assert "geometric mean 0.800 over 1 layers" in by_baseline["torch.compile"]
    assert "geometric mean 1.067 over 1 layers" in by_baseline["the same kernel without its epilogue"]
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(fused_table(measured))
    text = console.export_text()
    assert "r50f_s4_3x3_b32" in text and "scale+bias+relu" in text and "r50_s4_3x3_b32 " not in text
    assert all(figure in text for figure in ("32.00", "20.00", "0.50", "0.80", "1.07"))
    assert fused_table(BenchRecord(one_run={"r50_s4_3x3_b32": measured.one_run["r50_s4_3x3_b32"]})) is None


def test_ratio_line_gives_every_batch_its_mean_largest_first():
    line = ratio_line("x", named_ratio_stats({"r50_s4_3x3_b32": 2.0, "vgg16_features_0_b8": 0.5,
                                              "vgg16_features_0_b1": 1.0, "conv_1": 1.0}))
    assert "over 4 layers (batch 32: 2.000 over 1; batch 8: 0.500 over 1; batch 1: 1.000 over 1);" in line
    assert name_batch("regnety400_trunk_output_block1_block1_0_f_a_0_b32") == 32
    assert name_batch("conv_1") is None and name_batch("vgg16_b32_features_0") is None


def test_bench_measures_every_layer_of_a_layers_file_without_the_landscape_suite():
    from tuner.core.layers import load_layers

    repo = Path(__file__).resolve().parents[1]
    assert bench_command.default_layers(load_layers(repo / "search_spaces" / "layers.yaml")) == list(bench.SUITE)
    suite = load_layers(repo / "search_spaces" / "suite.yaml")
    assert bench_command.default_layers(suite) == list(suite)


def test_one_run_summary_of_the_layers_of_this_call_leaves_earlier_rows_out():
    measured = BenchRecord(one_run={"r50_s4_3x3_b32": OneRunLayer(tuned_us=20.0, cudnn_us=10.0),
                                    "vgg16_features_2_b8": OneRunLayer(tuned_us=9.0, cudnn_us=10.0)})
    [everything] = one_run_lines(measured)
    assert everything.startswith("one run, best.yaml's kernels / cuDNN") and "over 2 layers" in everything
    [now] = one_run_lines(measured, {"vgg16_features_2_b8", "vgg16_features_0_b8"})
    assert now.startswith("one run (the 1 layers of this call), best.yaml's kernels / cuDNN")
    assert "geometric mean 0.900 over 1 layers (batch 8: 0.900 over 1)" in now


def test_the_gpu_steps_keep_earlier_layers_and_write_bench_yaml_from_the_record(tmp_path, monkeypatch, layers,
                                                                               measured):
    """The 'cudnn' step through a stand-in worker: bench.yaml keeps what earlier runs measured, takes this
    run's ceilings and figures, and is written after every layer."""
    import tuner.measure.evaluate as evaluate
    from tuner.store.bench_record import GpuTunerRun, write_bench

    device = measured.device
    folder = tmp_path / device.slug
    earlier = BenchRecord(device, measured.ceilings, {"conv_1": 9.0, "older": 8.0},
                          product_search={"older": GpuTunerRun(1.0, "k", 32, 30, 4.5)},
                          one_run={"older": OneRunLayer("k", "sm80", tuned_us=1.0)},
                          eager={"older_fused": 30.0}, compiled={"older_fused": 20.0})
    write_bench(folder, earlier)
    requests = []

    class Worker:
        def __init__(self, timeout_s):
            pass

        def request(self, payload):
            requests.append(payload["op"])
            if payload["op"] == "ceilings":
                return {"matmul_tflops": 600.0, "copy_gbps": 3000.0, "torch_version": "2.x"}
            return {"cudnn_us": 7.0, "cudnn_version": 91901}

    class Evaluator:
        def __init__(self, *args, **kwargs):
            pass

        def close(self):
            requests.append("closed")

    monkeypatch.setattr(evaluate, "WorkerProcess", Worker)
    monkeypatch.setattr(evaluate, "query_device_facts", lambda worker: device.to_dict())
    monkeypatch.setattr(evaluate, "GpuEvaluator", Evaluator)
    events = []
    found, record = bench.measure_on_gpu([layers["conv_1"], layers["r50_s4_3x3_b32"]], {}, (),
                                         bench.GpuSteps(("cudnn",), tmp_path, None, 1), events.append)
    assert found == device and requests == ["ceilings", "cudnn", "cudnn", "closed"] and events == []
    assert record == read_bench(folder)
    assert record.ceilings.matmul_tflops == 600.0 and record.cudnn_version == 91901
    assert record.cudnn == {"conv_1": 7.0, "older": 8.0, "r50_s4_3x3_b32": 7.0}
    assert record.product_search == earlier.product_search and record.one_run == earlier.one_run
    assert (record.eager, record.compiled) == (earlier.eager, earlier.compiled)  # PyTorch's figures are kept too


def test_an_e4m3_layers_cudnn_figure_says_it_is_f16s():
    """PyTorch reaches no fp8 conv of cuDNN's: an e4m3 layer's cuDNN figure is its f16 twin's, and the table and
    the tuned step's line say so; an f16 layer's say nothing of it."""
    import dataclasses

    from tuner.cli.bench_tables import bench_table
    from tuner.core.dtypes import dtype_fields
    from tuner.core.layers import Layer
    from tuner.core.problem import ConvProblem
    from tuner.pipeline.bench_summary import LayerFigures
    from tuner.pipeline.one_run import TunedTimed

    f16 = ConvProblem(n=8, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)
    layers = [Layer("conv_b8", f16), Layer("conv_e4m3_b8", dataclasses.replace(f16, **dtype_fields("e4m3")))]
    figures = [LayerFigures(layer, {"sm90_dsl": 10.0}, 10.0, (), None, float("inf"), 10.0, 20.0, None)
               for layer in layers]
    console = Console(width=250, record=True, file=open(os.devnull, "w"))
    console.print(bench_table(figures, Ceilings()))
    text = console.export_text()
    assert text.count("(f16)") == 2 and "an e4m3 layer's cuDNN figure" in text  # the e4m3 row's cell, the caption
    assert "not reachable from PyTorch" in text
    for library_dtype, says in ((None, False), ("f16", True)):
        console = Console(width=250, record=True, file=open(os.devnull, "w"))
        print_event(TunedTimed("conv_e4m3_b8", OneRunLayer("k", "sm90_dsl", tuned_us=5.0, cudnn_us=10.0), False,
                               library_dtype), console)
        assert ("f16: cuDNN's fp8 convolution is not reachable from PyTorch" in console.export_text()) is says
    only_f16 = Console(width=250, record=True, file=open(os.devnull, "w"))
    only_f16.print(bench_table(figures[:1], Ceilings()))
    assert "(f16)" not in only_f16.export_text()
