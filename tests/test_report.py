"""The tables a tuning run prints: the side-by-side re-measurement, the candidates that did not count,
the waste of the finalists."""
from __future__ import annotations

from collections import Counter

from rich.console import Console

from tuner.analysis.diagnose import kernel_facts
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.measure.timing import Measurement
from tuner.analysis.report import Confirmed, confirmed_table, failures_table, outcome_line, waste_table
from tuner.measure.run import KernelAttributes
from tuner.core.status import Status
from tuner.search.trials import TrialRecord

ATTRIBUTES = KernelAttributes(registers_per_thread=128, static_smem_bytes=0, dynamic_smem_bytes=98304,
                              local_bytes_per_thread=0, threads_per_block=128, max_active_blocks_per_sm=2)


def text(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return " ".join(console.export_text().split())


def confirmed(label: str, config, median: float, grid: int = 8) -> Confirmed:
    return Confirmed(label, config, Measurement(median, median * 0.99, median * 1.01, 30, 10, 4), 2e-4, grid,
                     ATTRIBUTES, 0)


def test_outcomes_are_counted_in_name_order():
    assert outcome_line(Counter({"ok": 12, "invalid": 3, "compile_failed": 1})) == \
        "1 compile_failed, 3 invalid, 12 ok"


def test_the_side_by_side_table_ranks_against_the_fastest_and_marks_a_grid_under_the_sms(conv_1, h100):
    reference = make_config(conv_1, REFERENCE_PARAMS)
    out = text(confirmed_table([confirmed("#1", reference, 4.0, grid=264), confirmed("reference", reference, 9.0)],
                               conv_1, h100))
    assert "1.00x" in out and "2.25x" in out
    assert "8 <SMs" in out and "264 <SMs" not in out  # 8 blocks on 132 SMs is flagged, 264 is not
    assert "96" in out  # shared memory in KB


def test_failures_show_the_first_of_each_reason_and_never_ok_or_invalid(conv_1):
    config = make_config(conv_1, REFERENCE_PARAMS)
    records = [TrialRecord(0, config, Status.ok, 4.0, {}),
               TrialRecord(1, config, Status.invalid, None, {"reason": "smem over the limit"}),
               TrialRecord(2, config, Status.compile_failed, None, {"reason": "error: no instance\nmore"}),
               TrialRecord(3, config, Status.compile_failed, None, {"reason": "error: no instance\nmore"}),
               TrialRecord(4, config, Status.wrong_result, None, {"reason": "relative L2 error 0.3"})]
    out = text(failures_table(records))
    assert out.count("compile_failed") == 1 and "wrong_result" in out and "relative L2 error 0.3" in out
    assert "smem over the limit" not in out and "more" not in out


def test_the_waste_table_names_the_small_grid_of_the_reference_on_conv_1(conv_1, h100):
    reference = make_config(conv_1, REFERENCE_PARAMS)
    facts = kernel_facts(reference, conv_1, h100, 8, ATTRIBUTES, 0)
    out = text(waste_table([(confirmed("reference", reference, 9.0), facts)], {}))
    assert "small_grid: 8 blocks on 132 SMs" in out and "not profiled" in out
