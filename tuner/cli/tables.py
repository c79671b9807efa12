"""Tables that fit the output's width, and the machine-readable forms (JSON, CSV) of what they show.

The width is COLUMNS when set, else the terminal's (of stdout, stderr or stdin: `tune.py ... | less` in a
terminal still has one), else DEFAULT_WIDTH. A table wider than that is drawn compact: figures keep their
full width (their headers wrap at spaces) and names fold; where even that does not fit, the columns are
split over several tables, each led by the first (naming) column. No figure is ever cut short."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import os
import sys
from collections.abc import Collection, Mapping, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

DEFAULT_WIDTH = 120
UNBOUNDED = 100_000
NAME_MIN_WIDTH = 6  # a name column folded narrower than this reads worse than a split table


def output_width() -> int:
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for stream in (sys.stdout, sys.stderr, sys.stdin):
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            continue
    return DEFAULT_WIDTH


def output_console(stderr: bool = False) -> Console:
    """The console of a command: `stderr` for one whose stdout carries a JSON or CSV document."""
    return Console(width=output_width(), file=sys.stderr if stderr else None)


def _unbounded(console: Console):
    return console.options.update_width(UNBOUNDED)


def _min_width(console: Console, column, header: str) -> int:
    cells = [header, *column.cells]
    return max(Measurement.get(console, _unbounded(console), cell).minimum for cell in cells)


def _floor(console: Console, column) -> int:
    """The narrowest a folded column goes: NAME_MIN_WIDTH, or less where all it holds is narrower, and
    never under its header's longest word (a header wraps, it is not cut)."""
    header = str(column.header)
    return max(min(NAME_MIN_WIDTH, _max_width(console, column, header)),
               max((len(word) for word in header.split()), default=0))


def _fixed_width(console: Console, table: Table, numbers: Collection[str]) -> int:
    """The width the table needs with its figures whole and each other column NAME_MIN_WIDTH wide."""
    widths = [_min_width(console, c, str(c.header)) if str(c.header) in numbers
              else _floor(console, c) for c in table.columns]
    return sum(widths) + 2 * len(widths) + 1  # a space of padding and a rule per column, collapsed


def _max_width(console: Console, column, header: str) -> int:
    return max(Measurement.get(console, _unbounded(console), cell).maximum for cell in [header, *column.cells])


def _compact(console: Console, table: Table, numbers: Collection[str]) -> Table:
    """Figures at their narrowest whole width; the other columns share what is left, each at least
    NAME_MIN_WIDTH (or its natural width, if less) and folded to fit."""
    table.collapse_padding, table.pad_edge = True, False
    columns = table.columns
    fixed = {i: _min_width(console, c, str(c.header)) for i, c in enumerate(columns) if str(c.header) in numbers}
    natural = {i: _max_width(console, c, str(c.header)) for i, c in enumerate(columns) if i not in fixed}
    floor = {i: _floor(console, columns[i]) for i in natural}
    spare = max(0, console.width - _fixed_width(console, table, numbers))
    wanted = sum(natural[i] - floor[i] for i in natural) or 1
    for index, column in enumerate(columns):
        column.no_wrap = False
        if index in fixed:
            column.width = fixed[index]
        else:
            column.overflow = "fold"
            column.width = floor[index] + min(natural[index] - floor[index],
                                              spare * (natural[index] - floor[index]) // wanted)
    return table


def _split(console: Console, table: Table, numbers: Collection[str]) -> list[Table]:
    """The table's columns over several tables that each fit, the first column repeated in each."""
    key, rest = table.columns[0], table.columns[1:]
    parts: list[list] = [[]]
    for column in rest:
        trial = _with_columns(table, [key, *parts[-1], column])
        if parts[-1] and _fixed_width(console, trial, numbers) > console.width:
            parts.append([])
        parts[-1].append(column)
    return [_with_columns(table, [key, *columns], title=f"{table.title} ({index} of {len(parts)})" if table.title
                          else None) for index, columns in enumerate(parts, start=1)]


def _with_columns(table: Table, columns: list, title: str | None = None) -> Table:
    part = Table(title=title if title is not None else table.title, show_lines=table.show_lines)
    part.columns = [dataclasses.replace(column, _index=index) for index, column in enumerate(columns)]
    part.rows = list(table.rows)
    return part


def print_table(console: Console, table: Table, numbers: Collection[str]) -> None:
    """Print `table` within the console's width; `numbers` names the columns (by header) of figures,
    which are never cut."""
    if console.measure(table, options=_unbounded(console)).maximum <= console.width:
        console.print(table)
        return
    tables = [table] if _fixed_width(console, table, numbers) <= console.width else _split(console, table, numbers)
    for part in tables:
        console.print(_compact(console, part, numbers))


def add_output_arguments(parser: argparse.ArgumentParser, csv: bool = True, json_help: str | None = None,
                         csv_help: str | None = None) -> None:
    """--json and (`csv`) --csv, one or the other; the helps say what the command's documents hold."""
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help=json_help or "print one JSON document on stdout in place "
                                                                       "of the tables (messages go to stderr)")
    if csv:
        form.add_argument("--csv", action="store_true", help=csv_help or "print the table as CSV on stdout "
                                                                         "(messages go to stderr)")


def json_document(document: Mapping) -> str:
    """One JSON document; NaN and infinity, which JSON cannot hold, become null."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, Mapping):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    return json.dumps(clean(document), indent=2, ensure_ascii=False)


def csv_document(rows: Sequence[Mapping]) -> str:
    """Rows of one table as CSV, a header line first; lists joined with ';'."""
    out = io.StringIO()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ";".join(map(str, value)) if isinstance(value, (list, tuple)) else
                         "" if value is None or (isinstance(value, float) and not math.isfinite(value)) else value
                         for key, value in row.items()})
    return out.getvalue()
