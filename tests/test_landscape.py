"""Landscapes: every candidate of a family timed on a layer, read through their rows' records and written back
byte for byte; a damaged row is named by its line."""
from __future__ import annotations

from pathlib import Path

import pytest

from tuner.families import registry
from tuner.store.landscape import read_landscape, recorded_rows, write_landscape
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "data" / "h100_conv_1_record.csv"
COMMITTED = sorted(REPO.glob("results/*/landscape/*/*.csv")) + [RECORD]


def test_every_committed_landscape_reads_back_and_writes_out_unchanged(tmp_path):
    assert len(COMMITTED) > 100
    for path in COMMITTED:
        family = "sm80" if path == RECORD else path.parent.name
        landscape = read_landscape(path, family)
        assert landscape.rows and set(landscape.knobs) <= set(registry.get(family).knobs)
        write_landscape(tmp_path / "again.csv", landscape)
        assert (tmp_path / "again.csv").read_bytes() == path.read_bytes(), path


def test_a_damaged_record_row_is_named_by_its_line(tmp_path, conv_1):
    text = RECORD.read_text()
    truncated = tmp_path / "conv_1.csv"
    truncated.write_text(text[: len(text) // 2].rsplit(",", 1)[0] + "\n")  # a row cut short
    line = truncated.read_text().count("\n")
    for read in (lambda: read_landscape(truncated, "sm80"), lambda: recorded_rows(truncated, conv_1, "sm80")):
        with pytest.raises(ResultsError, match=f"line {line} is not a sm80 record row"):
            read()
    edited = tmp_path / "edited.csv"
    edited.write_text(text.replace(",ok,", ",fine,", 1))
    with pytest.raises(ResultsError, match="is not a sm80 record row .*'fine'"):
        recorded_rows(edited, conv_1, "sm80")


@pytest.mark.parametrize("edit", [
    lambda header: header.replace("status,", ""),            # an outcome column missing
    lambda header: header.replace("tile,", "tile,unroll,"),  # a knob the family does not have
    lambda header: "",                                       # no header at all
])
def test_columns_that_are_not_the_familys_are_refused(tmp_path, edit):
    lines = RECORD.read_text().splitlines(keepends=True)
    header = next(index for index, line in enumerate(lines) if not line.startswith("#"))
    damaged = tmp_path / "damaged.csv"
    damaged.write_text("".join(lines[:header] + [edit(lines[header])] + (lines[header + 1:] if edit("x") else [])))
    with pytest.raises(ResultsError, match="are not a sm80 landscape's"):
        read_landscape(damaged, "sm80")
