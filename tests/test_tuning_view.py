"""What a tuning run prints: its events drawn with rich, the side-by-side re-measurement, the candidates that did
not count, the waste of the finalists, and the regression table."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tuner.analysis.diagnose import kernel_facts
from tuner.analysis.report import Confirmed, finalist_waste
from tuner.cli.tuning_view import (TuningView, confirmed_table, failures_table, outcome_line, regression_table,
                                   run_summary, waste_table)
from tuner.core.status import Status
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.measure.run import KernelAttributes
from tuner.measure.timing import Measurement
from tuner.pipeline.events import (BestWritten, FamilySkipped, FamilySpace, LayerFinishedEarlier, LayerStarted,
                                   LayerTunedAs, StudyEnded, WinnerChosen)
from tuner.pipeline.tuning import LayerOutcome
from tuner.search.study import StudyClock
from tuner.search.trials import TrialRecord

ATTRIBUTES = KernelAttributes(registers_per_thread=128, static_smem_bytes=0, dynamic_smem_bytes=98304,
                              local_bytes_per_thread=0, threads_per_block=128, max_active_blocks_per_sm=2)
OUTCOMES = [LayerOutcome("slower", 10.5, 10.0, "k1", 32), LayerOutcome("faster", 9.0, 10.0, "k2", 32),
            LayerOutcome("same", 10.2, 10.0, "k3", 32), LayerOutcome("new", 5.0, None, "k4", 32),
            LayerOutcome("failed", None, 7.0, None, 32)]


def text(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return " ".join(console.export_text().split())


def shown(*events) -> list[str]:
    """The lines a TuningView prints for `events`."""
    console = Console(width=250, record=True)
    with TuningView(console) as view:
        for event in events:
            view.emit(event)
    return console.export_text().splitlines()


def confirmed(label: str, config, median: float, grid: int = 8) -> Confirmed:
    return Confirmed(label, config, Measurement(median, median * 0.99, median * 1.01, 30, 10, 4), 2e-4, grid,
                     ATTRIBUTES, 0)


def test_outcomes_are_shown_in_the_order_given():
    assert outcome_line((("compile_failed", 1), ("invalid", 3), ("ok", 12))) == "1 compile_failed, 3 invalid, 12 ok"


def test_the_side_by_side_table_ranks_against_the_fastest_and_marks_a_grid_under_the_sms(conv_1, h100):
    reference = make_config(conv_1, REFERENCE_PARAMS)
    out = text(confirmed_table((confirmed("#1", reference, 4.0, grid=264), confirmed("reference", reference, 9.0)),
                               conv_1, h100))
    assert "1.00x" in out and "2.25x" in out
    assert "8 <SMs" in out and "264 <SMs" not in out  # 8 blocks on 132 SMs is flagged, 264 is not
    assert "96" in out  # shared memory in KB


def test_failures_show_the_first_line_of_each_reason(conv_1):
    config = make_config(conv_1, REFERENCE_PARAMS)
    failures = (TrialRecord(2, config, Status.compile_failed, None, {"reason": "error: no instance\nmore"}),
                TrialRecord(4, config, Status.wrong_result, None, {"reason": "relative L2 error 0.3"}))
    out = text(failures_table(failures))
    assert out.count("compile_failed") == 1 and "wrong_result" in out and "relative L2 error 0.3" in out
    assert "error: no instance" in out and "more" not in out


def test_the_waste_table_names_the_small_grid_of_the_reference_on_conv_1(conv_1, h100):
    reference = make_config(conv_1, REFERENCE_PARAMS)
    facts = kernel_facts(reference, conv_1, h100, 8, ATTRIBUTES, 0)
    out = text(waste_table((finalist_waste(confirmed("reference", reference, 9.0), facts),)))
    assert "small_grid: 8 blocks on 132 SMs" in out and "not profiled" in out


def test_the_regression_table_says_what_changed_per_layer():
    console = Console(width=200, record=True)
    console.print(regression_table(OUTCOMES))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 3}
    assert "+5.0%" in rows["slower"] and "REGRESSION" in rows["slower"]
    assert "-10.0%" in rows["faster"] and "faster" in rows["faster"]
    assert "+2.0%" in rows["same"] and "same" in rows["same"]
    assert "new" in rows["new"] and "none passed" in rows["failed"]


def test_the_run_ends_with_one_line_of_its_layers_and_time():
    skipped = LayerOutcome("earlier", 3.0, None, "k", 0, skipped=True)
    assert run_summary([*OUTCOMES, skipped], 123.4) == (f"{len(OUTCOMES) + 1} layers in 123 s: {len(OUTCOMES) - 1} "
                                                         "tuned, 1 tuned earlier or under another name, 1 with no "
                                                         "kernel that passed")
    assert run_summary(OUTCOMES[:1], 9.6) == "1 layer in 10 s: 1 tuned"


def test_a_layer_skipped_or_started_is_one_line_each_and_its_space_one_per_family(conv_1):
    spaces = (FamilySpace("sm90_dsl", 400, 120, 60),)
    assert shown(LayerTunedAs("net_conv", "conv_1"), LayerFinishedEarlier("conv_1", "nightly-x"),
                 FamilySkipped("sm90_dsl", "pip install '.[dsl]'"),
                 LayerStarted("conv_1", conv_1, spaces, left_out=("sm90_conv", "sm90_gemm"))) == [
        "net_conv: the same problem is tuned as conv_1; skipped (tune it with --layer conv_1)",
        "conv_1: finished earlier in run nightly-x",
        "sm90_dsl skipped: pip install '.[dsl]'",
        "sm90_conv, sm90_gemm left out: sm90_dsl builds this layer's kernels in a second and matched or beat them "
        "where measured (--family names them to search them)",
        f"conv_1: {conv_1.shape_text} (f16_f16_f32_f32); implicit GEMM 1024x32x288, 0.019 GFLOP",
        "sm90_dsl space: 400 candidates, 120 pass the static checks (60 distinct kernels to compile)"]


def test_the_study_end_the_winner_and_the_file_written_are_lines(conv_1, h100):
    config = make_config(conv_1, REFERENCE_PARAMS)
    clock = StudyClock(asking=0.5, waiting_for_compiles=2.0, on_gpu=1.0)
    wider = TrialRecord(7, config, Status.ok, 6.0, {"grid": [16, 1, 1]})
    lines = shown(StudyEnded("gpu/conv_1", 40, (("invalid", 2), ("ok", 8)), clock, 4.0),
                  WinnerChosen(confirmed("#1", config, 4.0), confirmed("reference", config, 9.0), h100.sm_count,
                               wider),
                  WinnerChosen(confirmed("#1", config, 4.0, grid=264), None, h100.sm_count, None),
                  BestWritten("conv_1", Path("results/gpu/best.yaml")))
    assert lines[0] == ("study gpu/conv_1: 40 trials in all; this run: 2 invalid, 8 ok; 4.0 s: 2.0 s waiting for "
                        "compiles, 1.0 s validating and timing, 0.5 s asking the sampler")
    assert lines[1] == "winner 4.00 µs vs reference 9.00 µs: 2.25x faster; grid 8 blocks vs 8 on 132 SMs"
    assert lines[2].startswith("the winner launches 8 blocks (128x128 tiles, sm80 ")
    assert lines[2].endswith("took 6.00 µs in the study, 1.50x the winner") and "more blocks (16: sm80 " in lines[2]
    assert lines[3:] == ["reference configuration (128x128x64, 3 stages) cannot run this problem here",
                         "wrote results/gpu/best.yaml"]


def test_the_builds_for_the_pytorch_path_are_one_line_and_each_failure_another():
    from tuner.pipeline.events import ChainedBuilt

    assert shown(ChainedBuilt(23, (), 2.46), ChainedBuilt(0, ("dsl_x_pdl: error: no",), 0.5)) == [
        "built 23 kept kernels for programmatic dependent launch, as the PyTorch path launches them, in 2.5 s",
        "built 0 kept kernels for programmatic dependent launch, as the PyTorch path launches them, in 0.5 s",
        "not built for programmatic dependent launch: dsl_x_pdl: error: no (optimize launches the build the tuner "
        "timed)"]
