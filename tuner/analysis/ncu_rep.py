"""An .ncu-rep file read through Nsight Compute's Python report interface (ncu_report), in a process of
its own: `python -m tuner.analysis.ncu_rep FILE` prints every launch's name and metrics as JSON.
ncu_report is a native library; the one shipped with Nsight Compute 2025.3 ended the process with a
segmentation fault on the H100's reports, so the parent (tuner.analysis.ncu_file.read_ncu_rep) runs this and turns
a crash into one line. Needs only the standard library and ncu_report on the path."""
from __future__ import annotations

import json
import sys


def metric_text(metric) -> str | None:
    """A metric's value as text, whatever its kind: value() where the interface has it (it picks the
    accessor by kind; as_string() gives None for a number), else as_string()."""
    value = metric.value() if hasattr(metric, "value") else metric.as_string()
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def launches(path: str) -> list[dict]:
    import ncu_report

    context = ncu_report.load_report(path)
    # The context and every range stay referenced while their actions are read: ncu_report's objects
    # do not keep their parents alive.
    ranges = [context.range_by_idx(r) for r in range(context.num_ranges())]
    found = []
    for span in ranges:
        for index in range(span.num_actions()):
            action = span.action_by_idx(index)
            metrics = {}
            for name in sorted(action.metric_names()):
                metric = action.metric_by_name(name)
                text = None if metric is None else metric_text(metric)
                if text is not None:
                    metrics[name] = [metric.unit() or "", text]
            found.append({"name": action.name(), "metrics": metrics})
    return found


if __name__ == "__main__":
    json.dump(launches(sys.argv[1]), sys.stdout)
