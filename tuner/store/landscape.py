"""results/<gpu>/landscape/<family>/<layer>.csv: every candidate of a family's landscape space timed on one
layer (`tune.py bench --steps landscape`), read through its rows' records (tuner/store/schema.py) and
written from them: comment lines, then the family's knobs and the outcome as columns."""
from __future__ import annotations

import csv
from pathlib import Path

from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig
from tuner.store.results import ResultsError, layer_file_stem
from tuner.store.schema import OUTCOME_FIELDS, Landscape, LandscapeRow, Recorded

LANDSCAPE_DIR = "landscape"
RECORD_AGAIN = "record the landscape again with `tune.py bench --steps landscape`"


def landscape_path(folder: Path, family: str, layer: str) -> Path:
    return folder / LANDSCAPE_DIR / family / f"{layer_file_stem(layer)}.csv"


def read_landscape(path: Path, family: str) -> Landscape:
    """A landscape file as its records; a damaged row (a truncated file, an edit) is refused with its line number."""
    knobs, comment, rows = _read(path, family)
    return Landscape(family, knobs, tuple(row for _, row in rows), comment)


def recorded_rows(path: Path, problem: ConvProblem, family: str) -> list[tuple[KernelConfig, Recorded]]:
    """Each row of a landscape as its configuration on `problem` and what it measured."""
    _, _, rows = _read(path, family)
    measured = []
    for number, row in rows:
        try:  # a knob added after the record was written is absent: the family reads its default
            measured.append((registry.get(family).make_config(problem, dict(row.knobs)), row.recorded))
        except (KeyError, TypeError, ValueError) as error:
            raise ResultsError(_bad_row(path, number, family, error)) from None
    return measured


def write_landscape(path: Path, landscape: Landscape) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        for line in landscape.comment.splitlines():
            handle.write(f"# {line}\n")
        writer = csv.DictWriter(handle, fieldnames=landscape.columns)
        writer.writeheader()
        writer.writerows(row.cells() for row in landscape.rows)


def _read(path: Path, family: str) -> tuple[tuple[str, ...], str, list[tuple[int, LandscapeRow]]]:
    """The file's knob columns, its comment, and each row with its line number."""
    try:
        with open(path, newline="") as handle:
            lines = list(enumerate(handle, start=1))
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{path} cannot be read ({type(error).__name__})") from None
    comment = "\n".join(line.rstrip("\r\n")[2:] for _, line in lines if line.startswith("#"))
    data = [(number, line) for number, line in lines if not line.startswith("#")]
    table = csv.DictReader(line for _, line in data)
    columns = tuple(table.fieldnames or ())
    knobs = columns[:len(columns) - len(OUTCOME_FIELDS)]
    known = registry.get(family).knobs
    if columns[len(knobs):] != OUTCOME_FIELDS or len(set(knobs)) != len(knobs) or not set(knobs) <= set(known):
        raise ResultsError(f"{path}: columns {', '.join(columns) or '(none)'} are not a {family} landscape's (its "
                           f"knobs, then {', '.join(OUTCOME_FIELDS)}); {RECORD_AGAIN}")
    rows = []
    for cells in table:
        number = data[table.line_num - 1][0] if table.line_num <= len(data) else len(data)
        try:
            rows.append((number, LandscapeRow.parse(cells, knobs)))
        except (KeyError, TypeError, ValueError) as error:
            raise ResultsError(_bad_row(path, number, family, error)) from None
    return knobs, comment, rows


def _bad_row(path: Path, number: int, family: str, error: Exception) -> str:
    return f"{path} line {number} is not a {family} record row ({error}); {RECORD_AGAIN}"
