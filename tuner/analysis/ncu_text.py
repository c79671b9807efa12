"""Read ncu's `--page details` text (old and new layouts), and the Nsight Compute GUI's Details page copied
as text."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuner.analysis.ncu import (NcuLaunch, NcuMetric, NcuRule, parse_dims, parse_metric, parse_rule, require_launches,
                                require_text)

# --- the details page ----------------------------------------------------------------------------

# `  void Kernel<...>(Params) (8, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0` (new), or
# `  void cutlass::Kernel<...>(T1::Params), 2025-May-15 09:00:25, Context 1, Stream 7` (old).
_KERNEL_HEADER = re.compile(
    r"^ {0,3}(?P<name>\S.*?)"
    r"(?: \((?P<grid>\d+, \d+, \d+)\)x\((?P<block>\d+, \d+, \d+)\))?"
    r"(?:, \d{4}-\w{3}-\d{1,2} \d{1,2}:\d{2}:\d{2})?"
    r", Context \d+, Stream \d+(?P<rest>.*)$"
)
_DEVICE = re.compile(r"\bDevice (\d+)")
_CC = re.compile(r"\bCC (\d+\.\d+)")
_SECTION = re.compile(r"^ {4}Section: (?P<title>.+?)\s*$")
_TABLE_RULE = re.compile(r"^ {4}-+ -+ -+\s*$")
# `    OPT   Est. Speedup: 21.46%` or `    WRN   This kernel grid is too small...`, then lines indented by 10.
_RULE_START = re.compile(r"^ {4}(?P<kind>OPT|WRN|INF|ERR) {3}(?P<text>.*?)\s*$")
_RULE_MORE = re.compile(r"^ {10}\s*(?P<text>\S.*?)\s*$")


def _column_spans(rule: str) -> list[tuple[int, int]]:
    return [match.span() for match in re.finditer(r"-+", rule)]


def _table_row(section: str, line: str, spans: list[tuple[int, int]]) -> NcuMetric | None:
    """Cut a metric row at the columns its table's dash rule marks; the value may run past its rule."""
    (_, name_end), (unit_start, unit_end), (value_start, _) = spans
    name, unit, value = line[:name_end], line[unit_start:unit_end], line[value_start:]
    if not name.strip() or not value.strip():
        return None
    if name.strip() == "Metric Name" and unit.strip() == "Metric Unit":
        return None
    return parse_metric(section, name, unit, value)


@dataclass
class _LaunchBuilder:
    header: re.Match
    metrics: list[NcuMetric]
    rules: list[tuple[str, list[str]]] = field(default_factory=list)

    def build(self) -> NcuLaunch:
        rest = self.header["rest"]
        device, cc = _DEVICE.search(rest), _CC.search(rest)
        return NcuLaunch(
            kernel_name=self.header["name"],
            grid=parse_dims(self.header["grid"]),
            block=parse_dims(self.header["block"]),
            device=int(device[1]) if device else None,
            cc=cc[1] if cc else None,
            metrics=tuple(self.metrics),
            rules=tuple(parse_rule(kind, " ".join(lines)) for kind, lines in self.rules),
        )


def parse_text_report(text: str) -> list[NcuLaunch]:
    """Parse `ncu --page details` text; program output, ==PROF== lines and rule advice are skipped."""
    require_text(text)
    builders: list[_LaunchBuilder] = []
    section = ""
    spans: list[tuple[int, int]] | None = None  # set while inside a metric table
    rows_in_table = 0
    in_rule = False  # the last line was a rule's advice, which may go on on the next
    for line in text.splitlines():
        header = _KERNEL_HEADER.match(line)
        if header:
            builders.append(_LaunchBuilder(header, []))
            section, spans, in_rule = "", None, False
            continue
        if not builders:
            continue
        if not line.strip():
            spans, in_rule = None, False
            continue
        if spans is None:
            rule_start = _RULE_START.match(line)
            if rule_start:
                builders[-1].rules.append((rule_start["kind"], [rule_start["text"]]))
                in_rule = True
                continue
            more = _RULE_MORE.match(line) if in_rule else None
            if more:
                builders[-1].rules[-1][1].append(more["text"])
                continue
        in_rule = False
        section_match = _SECTION.match(line)
        if section_match:
            section, spans = section_match["title"], None
            continue
        if _TABLE_RULE.match(line):
            # New ncu rules off a `Metric Name` header row before the data rows; a rule after data ends the table.
            if spans is not None and rows_in_table:
                spans = None
            else:
                spans, rows_in_table = _column_spans(line), 0
            continue
        if spans is not None:
            metric = _table_row(section, line, spans)
            if metric is not None:
                builders[-1].metrics.append(metric)
                rows_in_table += 1
    return require_launches([builder.build() for builder in builders])


# --- the GUI's Details page copied as text ---------------------------------------------------------

# The result table's header row, its cells tab- (or, pasted through an editor, space-) separated.
GUI_HEADER = re.compile(r"^\s*Result\s+Size\s+Time\s+Cycles\s+GPU\s+SM Frequency\s+Process\s+Attributes\s*$",
                        re.MULTILINE)
_GUI_CELLS = re.compile(r"\t|\s{2,}")
_GUI_SIZE = re.compile(r"\((\d+, \d+, \d+)\)\s*x\s*\((\d+, \d+, \d+)\)")
_GUI_RESULT_ID = re.compile(r"^\s*(?:\d+\s+-\s+)+")  # "0 - 47 - " before the kernel's name
_GUI_DEVICE = re.compile(r"^\s*(\d+)\s+-\s+")
_GUI_METRIC = re.compile(r"^(?P<name>.+?)(?:\s*\[(?P<unit>[^\]]*)\])?$")


def _gui_pairs(line: str) -> list[tuple[str, str]] | None:
    """`Name [unit]<TAB>value` pairs (one or two a line), or None for a line that is not one."""
    cells = [cell.strip() for cell in line.split("\t")]
    while cells and not cells[-1]:
        cells.pop()
    if len(cells) < 2 or len(cells) % 2:
        return None
    return list(zip(cells[::2], cells[1::2]))


def parse_gui_report(text: str) -> list[NcuLaunch]:
    """Parse the Nsight Compute GUI's Details page copied as text: the result row under its header,
    then section titles, `Name [unit]<TAB>value` pairs and the rules' descriptions between them."""
    require_text(text)
    launches = []
    headers = list(GUI_HEADER.finditer(text))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        lines = text[header.end():end].strip("\n").splitlines()
        if not lines:
            continue
        cells = [cell.strip() for cell in _GUI_CELLS.split(lines[0].strip())]
        size = _GUI_SIZE.search(lines[0])
        device = next((_GUI_DEVICE.match(cell) for cell in cells[1:] if _GUI_DEVICE.match(cell)), None)
        name = _GUI_RESULT_ID.sub("", cells[0]) if cells else ""
        metrics: list[NcuMetric] = []
        rules: list[NcuRule] = []
        section, previous_text = "", None
        for line in lines[1:]:
            pairs = _gui_pairs(line)
            if pairs is None:
                if line.strip():
                    if previous_text is not None:  # two text lines in a row: the first was a rule
                        rules.append(parse_rule("", previous_text))
                    previous_text = line.strip()
                continue
            if previous_text is not None:  # the text line right above metric pairs is their section
                section, previous_text = previous_text, None
            for label, value in pairs:
                parts = _GUI_METRIC.match(label)
                metrics.append(parse_metric(section, parts["name"], parts["unit"] or "", value))
        if previous_text is not None:
            rules.append(parse_rule("", previous_text))
        if name and metrics:
            grid, block = (parse_dims(size[1]), parse_dims(size[2])) if size else (None, None)
            launches.append(NcuLaunch(name, grid, block,
                                      int(device[1]) if device else None, None, tuple(metrics), tuple(rules)))
    return require_launches(launches)
