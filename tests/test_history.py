"""history.jsonl: a line a finished layer run, appended and read back through HistoryEvent."""
import dataclasses
import json

import pytest

from tuner.store.history import append_history
from tuner.store.results import HISTORY_FILE
from tuner.store.schema import HistoryEvent


def test_append_history_appends_json_lines(tmp_path):
    folder = tmp_path / "gpu"
    append_history(folder, HistoryEvent("conv_1", "64x64x32_s4", 4.2, 16, "study-a", "run-1"))
    append_history(folder, HistoryEvent("r50_s4_3x3_b32", "128x128x32_s4", 23.3, 64, "study-b", "run-1"))
    lines = (folder / HISTORY_FILE).read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["layer"] == "conv_1" and first["runtime_us"] == 4.2
    assert (second["layer"], second["runtime_us"], second["measured"]) == ("r50_s4_3x3_b32", 23.3, 64)
    assert first["at"].endswith("+00:00") and len(first["at"]) == len("2026-01-01T00:00:00+00:00")


def test_the_events_read_back_as_they_were_written(tmp_path):
    from tuner.store.history import read_history

    events = [HistoryEvent("conv_1", "k1", 4.2, 16, "study-a", "run-1", at="2026-11-24T10:00:00+00:00"),
              HistoryEvent("conv_2", "k2", 5.0, 8, "study-b", "run-1")]
    for event in events:
        append_history(tmp_path, event)
    text = (tmp_path / HISTORY_FILE).read_text()
    read = read_history(tmp_path)
    assert read[0] == events[0] and read[1].at and read[1] == dataclasses.replace(events[1], at=read[1].at)
    assert "".join(json.dumps(event.as_dict(), sort_keys=True) + "\n" for event in read) == text


def test_a_damaged_or_newer_event_is_refused_with_its_line(tmp_path):
    from tuner.store.history import read_history
    from tuner.store.results import ResultsError

    append_history(tmp_path, HistoryEvent("conv_1", "k1", 4.2, 16, "study-a", "run-1"))
    path = tmp_path / HISTORY_FILE
    sound = path.read_text()
    for line, says in (('{"layer": "conv_2"}\n', "missing kernel"), ('{"schema": 2}\n', "schema 2"),
                       (sound.replace('"measured": 16', '"measured": "many"'), "measured 'many'")):
        path.write_text(sound + line)
        with pytest.raises(ResultsError, match=f"line 2 is not a history event .*{says}"):
            read_history(tmp_path)
    path.write_text(sound + sound[:-10])  # a line still being written
    assert len(read_history(tmp_path)) == 1
