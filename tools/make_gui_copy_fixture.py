"""Write an ncu text report's first launch in the layout of the Nsight Compute GUI's Details page
copied as text (the result row under `Result  Size  Time ...`, section titles, `Name [unit]<TAB>value`
pairs two a line, rule descriptions between them): a fixture for the GUI-form parser, made from a
recorded report's own figures.

usage: python tools/make_gui_copy_fixture.py REPORT.txt GPU_NAME OUT.txt"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import repository  # noqa: F401 - puts the repository on sys.path

from tuner.analysis.ncu import NcuReportError
from tuner.analysis.ncu_text import parse_text_report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="an ncu text report (ncu --page details); its first launch is used")
    parser.add_argument("gpu_name", help="the GPU name the copied page shows, e.g. 'NVIDIA GeForce RTX 3060'")
    parser.add_argument("out", type=Path, help="the fixture to write")
    args = parser.parse_args()
    report, gpu_name, out = args.report, args.gpu_name, args.out
    try:
        launch = parse_text_report(report.read_text())[0]
    except (OSError, NcuReportError) as error:
        parser.error(f"{report}: {error}")
    duration = launch.metric("Duration")
    cycles = launch.metric("Elapsed Cycles")
    frequency = launch.metric("SM Frequency")
    size = f"({', '.join(map(str, launch.grid))})x({', '.join(map(str, launch.block))})" if launch.grid else ""
    lines = ["\t".join(("Result", "Size", "Time", "Cycles", "GPU", "SM Frequency", "Process", "Attributes")),
             "\t".join((f"0 - 0 - {launch.kernel_name}", size, f"{duration.value} {duration.unit}",
                        f"{cycles.value:,.0f}", f"0 - {gpu_name}", f"{frequency.value} {frequency.unit}",
                        "[27316] program", ""))]
    sections: dict[str, list] = {}
    for metric in launch.metrics:
        sections.setdefault(metric.section, []).append(metric)
    for section, metrics in sections.items():
        lines.append(section)
        cells = [(f"{m.name} [{m.unit}]" if m.unit and not m.name.endswith("]") else m.name,
                  f"{m.value:g}" if isinstance(m.value, float) else str(m.value)) for m in metrics]
        for first in range(0, len(cells), 2):
            lines.append("\t".join(part for cell in cells[first:first + 2] for part in cell))
    for rule in launch.rules:  # each rule's description once (the report does not say under which section)
        lines.append(rule.text)
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
