"""results/<gpu>/history.jsonl: a line a finished layer run (HistoryEvent), appended, never rewritten."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

from tuner.core.yamlfile import brief
from tuner.store.records import SchemaError
from tuner.store.results import HISTORY_FILE, ResultsError, drop_cut_last_line, locked
from tuner.store.schema import HistoryEvent


def append_history(folder: Path, event: HistoryEvent) -> None:
    """One JSON line per finished layer run, stamped with the time it is appended; appends of a line are
    atomic enough on local disks."""
    folder.mkdir(parents=True, exist_ok=True)
    stamped = replace(event, at=event.at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    with locked(folder):
        drop_cut_last_line(folder / HISTORY_FILE)
        with open(folder / HISTORY_FILE, "a") as handle:
            handle.write(json.dumps(stamped.as_dict(), sort_keys=True) + "\n")


def read_history(folder: Path) -> list[HistoryEvent]:
    """history.jsonl's events, each checked; a last line still being written (no newline yet) is left out."""
    path = folder / HISTORY_FILE
    if not path.is_file():
        return []
    events = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                break
            try:
                events.append(HistoryEvent.parse(json.loads(line)))
            except (ValueError, SchemaError) as error:
                raise ResultsError(f"{path} line {number} is not a history event ({brief(error, 200)})") from None
    return events
