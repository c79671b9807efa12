"""What a tuning run finds about a layer, as data: the candidates that did not count, each finalist's waste, the
study's evidence for a small grid. tests/test_tuning_view.py draws them."""
from __future__ import annotations

from tuner.analysis.diagnose import kernel_facts
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.measure.timing import Measurement
from tuner.analysis.report import (Confirmed, explain_finalists, fastest_wider, finalist_waste, first_failures,
                                   outcome_name, reason_line)
from tuner.measure.run import KernelAttributes
from tuner.core.status import Status
from tuner.search.trials import TrialRecord

ATTRIBUTES = KernelAttributes(registers_per_thread=128, static_smem_bytes=0, dynamic_smem_bytes=98304,
                              local_bytes_per_thread=0, threads_per_block=128, max_active_blocks_per_sm=2)


def confirmed(label: str, config, median: float, grid: int = 8) -> Confirmed:
    return Confirmed(label, config, Measurement(median, median * 0.99, median * 1.01, 30, 10, 4), 2e-4, grid,
                     ATTRIBUTES, 0)


def test_an_outcome_answered_from_the_record_is_named_apart(conv_1):
    config = make_config(conv_1, REFERENCE_PARAMS)
    assert outcome_name(TrialRecord(0, config, Status.ok, 4.0, {})) == "ok"
    assert outcome_name(TrialRecord(1, config, Status.ok, 4.0, {"from_record": True})) == "ok (recorded)"


def test_failures_are_the_first_of_each_reason_and_never_ok_or_invalid(conv_1):
    config = make_config(conv_1, REFERENCE_PARAMS)
    records = [TrialRecord(0, config, Status.ok, 4.0, {}),
               TrialRecord(1, config, Status.invalid, None, {"reason": "smem over the limit"}),
               TrialRecord(2, config, Status.compile_failed, None, {"reason": "error: no instance\nmore"}),
               TrialRecord(3, config, Status.compile_failed, None, {"reason": "error: no instance\nmore"}),
               TrialRecord(4, config, Status.wrong_result, None, {"reason": "relative L2 error 0.3"})]
    assert [r.number for r in first_failures(records)] == [2, 4]
    assert [r.number for r in first_failures(records, limit=1)] == [2]
    assert reason_line(records[2]) == "error: no instance" and reason_line(records[0]) == ""


def test_the_waste_of_the_reference_on_conv_1_is_its_small_grid(conv_1, h100):
    reference = make_config(conv_1, REFERENCE_PARAMS)
    facts = kernel_facts(reference, conv_1, h100, 8, ATTRIBUTES, 0)
    waste = finalist_waste(confirmed("reference", reference, 9.0), facts)
    assert any(f.code == "small_grid" and f.message.startswith("8 blocks on 132 SMs") for f in waste.flags)
    assert waste.occupancy.blocks_per_sm == 2 and waste.profile is None


def test_the_evidence_for_a_small_grid_is_the_fastest_candidate_that_launched_more_blocks(conv_1):
    config = make_config(conv_1, REFERENCE_PARAMS)
    winner = confirmed("#1", config, 4.0, grid=8)
    records = [TrialRecord(0, config, Status.ok, 4.0, {"grid": [8, 1, 1]}),
               TrialRecord(1, config, Status.ok, 6.0, {"grid": [4, 4, 1]}),
               TrialRecord(2, config, Status.ok, 5.0, {"grid": [16, 2, 1]}),
               TrialRecord(3, config, Status.ok, 3.0, {})]
    assert fastest_wider(winner, records).number == 2
    assert fastest_wider(winner, records[:1]) is None


def test_the_finalists_are_explained_statically_where_ncu_cannot_run(conv_1, h100, tmp_path, monkeypatch):
    from pathlib import Path

    from tuner.build.compile import CompileResult

    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu
    reference = make_config(conv_1, REFERENCE_PARAMS)
    rows = [confirmed("#1", reference, 4.0), confirmed("reference", reference, 9.0)]
    compiled = {reference.compiled: CompileResult(reference, "key", Path("candidate.so"), 0.0, True, None, None)}
    wastes, ncu_missing = explain_finalists(rows, compiled, conv_1, h100, profile_top=1)
    assert "ncu not found" in ncu_missing
    assert list(wastes) == ["#1", "reference"] and all(w.profile is None and w.flags for w in wastes.values())
    assert wastes["#1"] == finalist_waste(rows[0], kernel_facts(reference, conv_1, h100, 8, ATTRIBUTES, 0))
    assert explain_finalists(rows, compiled, conv_1, h100, profile_top=0)[1] is None  # --no-ncu: nothing to say
