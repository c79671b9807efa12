"""Read Nsight Compute (ncu) reports: `--page details` text (old and new layouts), `--csv --page details`,
`--csv --page raw`, and the GUI's Details page copied as text."""
from __future__ import annotations

import math
import csv
import io
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from tuner.core.device import volume


class NcuReportError(Exception):
    """A report that holds no kernel launch ncu could have written."""


@dataclass(frozen=True)
class NcuMetric:
    section: str
    name: str
    unit: str
    value: float | str


@dataclass(frozen=True)
class NcuRule:
    """One of ncu's rule results: its advice under a section (OPT, WRN, INF or ERR), as one line of text."""

    kind: str
    text: str
    speedup_pct: float | None = None  # ncu's estimated speedup, where it gives one


@dataclass(frozen=True)
class NcuLaunch:
    kernel_name: str
    grid: tuple[int, int, int] | None  # None where the report does not print it (older ncu text)
    block: tuple[int, int, int] | None
    device: int | None
    cc: str | None
    metrics: tuple[NcuMetric, ...]
    rules: tuple[NcuRule, ...] = ()

    def metric(self, name: str, section: str | None = None) -> NcuMetric | None:
        for metric in self.metrics:
            if metric.name == name and (section is None or metric.section == section):
                return metric
        return None


# Older ncu spells time units out and writes clock rates as cycles per nanosecond.
_UNIT_SPELLINGS = (
    ("cycle/nsecond", "Ghz"),
    ("cycle/usecond", "Mhz"),
    ("msecond", "ms"),
    ("usecond", "us"),
    ("nsecond", "ns"),
    ("second", "s"),
)
_MICROSECONDS_PER_UNIT = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}
# ncu's Kbyte is 1000 bytes (98.30 Kbyte is a 98,304-byte allocation, rounded).
_BYTES_PER_UNIT = {"byte": 1, "Kbyte": 1000, "Mbyte": 1000**2, "Gbyte": 1000**3, "Kibyte": 1024, "Mibyte": 1024**2}

_SOL = "GPU Speed Of Light Throughput"
_LAUNCH = "Launch Statistics"


def normalise_unit(unit: str) -> str:
    for spelled, short in _UNIT_SPELLINGS:
        unit = unit.replace(spelled, short)
    return unit


def parse_value(text: str) -> float | str:
    """'20,977' -> 20977.0; text that is not a finite number ('PolicySpread', 'all', 'nan') stays text."""
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _metric(section: str, name: str, unit: str, value: str) -> NcuMetric:
    return NcuMetric(section, name.strip(), normalise_unit(unit.strip()), parse_value(value.strip()))


_REPORT_HINT = ("expected the output of `ncu --page details` (text), `ncu --csv --page details`, `ncu --csv "
                "--page raw`, or the Nsight Compute GUI's Details page copied as text")
_BINARY = "the report is binary (an .ncu-rep?); export it with `ncu --import FILE --page details`"


def _require_text(text: str) -> None:
    if not text.strip():
        raise NcuReportError("the report is empty")
    if "\0" in text:
        raise NcuReportError(_BINARY)


def _require_launches(launches: list[NcuLaunch]) -> list[NcuLaunch]:
    if not launches:
        raise NcuReportError(f"no kernel launches found; {_REPORT_HINT}")
    return launches


# --- text report -------------------------------------------------------------------------------

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
_SPEEDUP = re.compile(r"^Est\. (?:Local |Global )?Speedup: (?P<pct>[\d.]+)%\s*(?P<rest>.*)$")


def _dims(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    x, y, z = (int(part) for part in text.split(","))
    return x, y, z


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
    return _metric(section, name, unit, value)


def _rule(kind: str, text: str) -> NcuRule:
    text = " ".join(text.split())
    speedup = _SPEEDUP.match(text)
    if speedup:
        return NcuRule(kind, speedup["rest"], float(speedup["pct"]))
    return NcuRule(kind, text)


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
            grid=_dims(self.header["grid"]),
            block=_dims(self.header["block"]),
            device=int(device[1]) if device else None,
            cc=cc[1] if cc else None,
            metrics=tuple(self.metrics),
            rules=tuple(_rule(kind, " ".join(lines)) for kind, lines in self.rules),
        )


def parse_text_report(text: str) -> list[NcuLaunch]:
    """Parse `ncu --page details` text; program output, ==PROF== lines and rule advice are skipped."""
    _require_text(text)
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
    return _require_launches([builder.build() for builder in builders])


# --- CSV report ----------------------------------------------------------------------------------

_CSV_HEADER = re.compile(r'^"ID","Process ID",', re.MULTILINE)


def _csv_dims(text: str | None) -> tuple[int, int, int] | None:
    return _dims(text.strip().strip("()")) if text else None


def _csv_metric(row: dict[str, str | None]) -> NcuMetric:
    return _metric(
        row.get("Section Name") or "", row["Metric Name"], row.get("Metric Unit") or "", row.get("Metric Value") or ""
    )


def _csv_rule(row: dict[str, str | None]) -> NcuRule:
    speedup = parse_value((row.get("Estimated Speedup") or "").strip())
    rule = _rule((row.get("Rule Type") or "").strip(), row.get("Rule Description") or "")
    return NcuRule(rule.kind, rule.text, speedup if isinstance(speedup, float) else rule.speedup_pct)


def _csv_launch(rows: list[dict[str, str | None]]) -> NcuLaunch:
    first = rows[0]
    device = (first.get("Device") or "").strip()
    return NcuLaunch(
        kernel_name=first.get("Kernel Name") or "",
        grid=_csv_dims(first.get("Grid Size")),
        block=_csv_dims(first.get("Block Size")),
        device=int(device) if device.isdigit() else None,
        cc=(first.get("CC") or "").strip() or None,
        metrics=tuple(_csv_metric(row) for row in rows if row.get("Metric Name")),
        rules=tuple(_csv_rule(row) for row in rows if not row.get("Metric Name") and row.get("Rule Description")),
    )


def parse_csv_report(text: str) -> list[NcuLaunch]:
    """Parse `ncu --csv --page details`: one row per metric, launches told apart by the ID column."""
    _require_text(text)
    header = _CSV_HEADER.search(text)
    if header is None:
        raise NcuReportError(f"no CSV header row (\"ID\",\"Process ID\",...) found; {_REPORT_HINT}")
    reader = csv.DictReader(io.StringIO(text[header.start() :]))
    if "Metric Name" not in (reader.fieldnames or []):
        raise NcuReportError("ncu CSV has no 'Metric Name' column: export it with `--csv --page details`")
    rows_by_id: dict[str, list[dict[str, str | None]]] = {}
    for row in reader:
        # ==PROF== messages and program output interleaved with the table have no launch ID; rule rows
        # (newer ncu) have no metric name. Metric rows may stop short of the trailing rule columns.
        if not (row["ID"] or "").isdigit() or not (row.get("Metric Name") or row.get("Rule Description")):
            continue
        rows_by_id.setdefault(row["ID"], []).append(row)
    # A launch known only by its rule rows is no launch.
    launches = [_csv_launch(rows) for rows in rows_by_id.values() if any(row.get("Metric Name") for row in rows)]
    return _require_launches(launches)


# --- raw page: one column per metric ------------------------------------------------------------

_LAUNCH, _OCCUPANCY = "Launch Statistics", "Occupancy"
# Raw metric names and the details-page names (and sections) the diagnosis reads them under.
RAW_METRICS = {
    "gpu__time_duration.sum": (_SOL, "Duration"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": (_SOL, "Compute (SM) Throughput"),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": (_SOL, "Memory Throughput"),
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": (_SOL, "DRAM Throughput"),
    "l1tex__throughput.avg.pct_of_peak_sustained_active": (_SOL, "L1/TEX Cache Throughput"),
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": (_SOL, "L2 Cache Throughput"),
    "launch__block_size": (_LAUNCH, "Block Size"),
    "launch__grid_size": (_LAUNCH, "Grid Size"),
    "launch__registers_per_thread": (_LAUNCH, "Registers Per Thread"),
    "launch__shared_mem_per_block_dynamic": (_LAUNCH, "Dynamic Shared Memory Per Block"),
    "launch__shared_mem_per_block_static": (_LAUNCH, "Static Shared Memory Per Block"),
    "launch__shared_mem_per_block_driver": (_LAUNCH, "Driver Shared Memory Per Block"),
    "launch__waves_per_multiprocessor": (_LAUNCH, "Waves Per SM"),
    "launch__cluster_size": (_LAUNCH, "Cluster Size"),
    "device__attribute_multiprocessor_count": (_LAUNCH, "# SMs"),
    "launch__occupancy_limit_registers": (_OCCUPANCY, "Block Limit Registers"),
    "launch__occupancy_limit_shared_mem": (_OCCUPANCY, "Block Limit Shared Mem"),
    "launch__occupancy_limit_warps": (_OCCUPANCY, "Block Limit Warps"),
    "launch__occupancy_limit_blocks": (_OCCUPANCY, "Block Limit SM"),
    "sm__maximum_warps_per_active_cycle_pct": (_OCCUPANCY, "Theoretical Occupancy"),
    "sm__warps_active.avg.pct_of_peak_sustained_active": (_OCCUPANCY, "Achieved Occupancy"),
}
_RAW_FIXED = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC")


def raw_metrics(values: dict[str, tuple[str, str]]) -> tuple[NcuMetric, ...]:
    """Metrics from raw name -> (unit, value): each raw metric under section "raw", and those RAW_METRICS
    names again under their details-page name, so one reader serves both pages."""
    metrics = [_metric("raw", name, unit, value) for name, (unit, value) in values.items()]
    metrics += [_metric(section, shown, *values[name]) for name, (section, shown) in RAW_METRICS.items()
                if name in values]
    return tuple(metrics)


def parse_raw_csv_report(text: str) -> list[NcuLaunch]:
    """Parse `ncu --csv --page raw`: a header row of metric names, a row of units, a row per launch."""
    _require_text(text)
    header = _CSV_HEADER.search(text)
    if header is None:
        raise NcuReportError(f"no CSV header row (\"ID\",\"Process ID\",...) found; {_REPORT_HINT}")
    rows = [row for row in csv.reader(io.StringIO(text[header.start():])) if row]
    names, launches = rows[0], []
    units = rows[1] if len(rows) > 1 and not (rows[1][0] or "").strip().isdigit() else [""] * len(names)
    for row in rows[1:]:
        if not row[0].strip().isdigit() or len(row) != len(names):
            continue  # the units row, ==PROF== lines, a row cut short
        cells = dict(zip(names, row))
        values = {name: (unit, value) for name, unit, value in zip(names, units, row)
                  if name not in _RAW_FIXED and value.strip()}
        device = cells.get("Device", "").strip()
        launches.append(NcuLaunch(cells.get("Kernel Name", ""), _csv_dims(cells.get("Grid Size")),
                                  _csv_dims(cells.get("Block Size")), int(device) if device.isdigit() else None,
                                  cells.get("CC", "").strip() or None, raw_metrics(values)))
    return _require_launches(launches)


def _is_raw_csv(text: str) -> bool:
    header = _CSV_HEADER.search(text)
    first = text[header.start():text.find("\n", header.start())] if header else ""
    return bool(header) and '"Metric Name"' not in first and "__" in first


# --- the GUI's Details page copied as text ---------------------------------------------------------

# The result table's header row, its cells tab- (or, pasted through an editor, space-) separated.
_GUI_HEADER = re.compile(r"^\s*Result\s+Size\s+Time\s+Cycles\s+GPU\s+SM Frequency\s+Process\s+Attributes\s*$",
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
    _require_text(text)
    launches = []
    headers = list(_GUI_HEADER.finditer(text))
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
                        rules.append(_rule("", previous_text))
                    previous_text = line.strip()
                continue
            if previous_text is not None:  # the text line right above metric pairs is their section
                section, previous_text = previous_text, None
            for label, value in pairs:
                parts = _GUI_METRIC.match(label)
                metrics.append(_metric(section, parts["name"], parts["unit"] or "", value))
        if previous_text is not None:
            rules.append(_rule("", previous_text))
        if name and metrics:
            launches.append(NcuLaunch(name, _dims(size[1]) if size else None, _dims(size[2]) if size else None,
                                      int(device[1]) if device else None, None, tuple(metrics), tuple(rules)))
    return _require_launches(launches)


# --- reading a file ------------------------------------------------------------------------------


def parse_report(text: str) -> list[NcuLaunch]:
    """Parse a report in whichever form `text` is: CLI details text, `--csv --page details`, or the
    GUI's Details page copied as text."""
    if _is_raw_csv(text):
        return parse_raw_csv_report(text)
    if _CSV_HEADER.search(text):
        return parse_csv_report(text)
    if _GUI_HEADER.search(text):
        return parse_gui_report(text)
    return parse_text_report(text)


# Text reports run some 20 KB per launch: 64 MiB is thousands of launches, and parses in a few seconds.
MAX_REPORT_BYTES = 64 * 1024 * 1024
# A text report has no NUL byte; an .ncu-rep or other binary file has them near its start.
_BINARY_PROBE_BYTES = 64 * 1024


def read_report_text(path: Path) -> str:
    """A report file's text: refused when it is not a file, larger than MAX_REPORT_BYTES, empty or binary."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise NcuReportError(f"ncu report {path} is not a file")
        if size > MAX_REPORT_BYTES:
            raise NcuReportError(f"ncu report {path} is {size / 1e6:.1f} MB, more than the "
                                 f"{MAX_REPORT_BYTES // (1024 * 1024)} MiB this reads: export fewer launches "
                                 "(ncu --import FILE --kernel-name NAME --launch-count N)")
        with path.open("rb") as stream:
            data = stream.read(MAX_REPORT_BYTES + 1)
    except OSError as error:
        raise NcuReportError(f"cannot read ncu report {path}: {error.strerror or error}") from None
    if b"\0" in data[:_BINARY_PROBE_BYTES]:
        raise NcuReportError(f"ncu report {path}: {_BINARY}")
    return data.decode("utf-8", errors="replace")


def ncu_report_folder() -> Path | None:
    """Where Nsight Compute's Python report interface (ncu_report) lives: on the path as it is (the
    ncu-report package, or PYTHONPATH), else the extras/python folder of the Nsight Compute that `ncu` on
    PATH belongs to. Found without importing it: the native library is loaded only in the child that
    reads a report (read_ncu_rep)."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("ncu_report")
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        return origin.parent.parent if origin.name == "__init__.py" else origin.parent
    ncu = shutil.which("ncu")
    folders = []
    if ncu:
        base = Path(ncu).resolve().parent
        folders += [base / "extras" / "python", base.parent / "extras" / "python",
                    *base.parent.glob("nsight-compute*/extras/python")]
    # The CUDA toolkit's and the standalone installers' usual places.
    for root in (Path("/usr/local"), Path("/opt/nvidia")):
        folders += [*root.glob("cuda*/nsight-compute*/extras/python"), *root.glob("nsight-compute*/*/extras/python"),
                    *root.glob("nsight-compute*/extras/python")]
    return next((folder for folder in folders if (folder / "ncu_report.py").is_file()), None)


def _raw_dims(values: dict[str, tuple[str, str]], prefix: str) -> tuple[int, int, int] | None:
    """x, y, z of `<prefix>_x/_y/_z` raw metrics (unit, value text), or None where one is missing."""
    texts = [values.get(f"{prefix}_{axis}", ("", ""))[1].replace(",", "") for axis in "xyz"]
    return tuple(int(text) for text in texts) if all(text.isdigit() for text in texts) else None


NCU_REP_TIMEOUT_S = 120


def read_ncu_rep(path: Path) -> list[NcuLaunch]:
    """An .ncu-rep file through ncu_report, in a child process (tuner/analysis/ncu_rep.py: the native library
    can crash the process that loads it): every metric of every launch, as the raw page gives them."""
    import json
    import os
    import subprocess
    import sys

    folder = ncu_report_folder()
    export = f"or export it with `ncu --import {path.name} --csv --page raw > {path.stem}.csv` and read that"
    if folder is None:
        raise NcuReportError(f"{path} is an .ncu-rep: reading it needs Nsight Compute's Python report interface, "
                             f"ncu_report (pip install ncu-report, or ncu on PATH); {export}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(Path(__file__).resolve().parents[2]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    try:
        child = subprocess.run([sys.executable, "-m", "tuner.analysis.ncu_rep", str(path)], capture_output=True, text=True,
                               env=env, timeout=NCU_REP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NcuReportError(f"{path}: ncu_report took more than {NCU_REP_TIMEOUT_S} s; {export}") from None
    if child.returncode != 0:
        how = f"crashed (signal {-child.returncode})" if child.returncode < 0 else "cannot read it"
        last = (child.stderr.strip().splitlines() or [""])[-1][:200]
        raise NcuReportError(f"{path}: ncu_report {how}{f' ({last})' if last else ''}; {export}")
    try:
        found = json.loads(child.stdout)
    except ValueError:
        raise NcuReportError(f"{path}: ncu_report gave no readable answer; {export}") from None
    launches = []
    for action in found:
        values = {name: (unit, text) for name, (unit, text) in action["metrics"].items()}
        launches.append(NcuLaunch(action["name"], _raw_dims(values, "launch__grid_dim"),
                                  _raw_dims(values, "launch__block_dim"), None, None, raw_metrics(values)))
    return _require_launches(launches)


def load_report(path: Path) -> tuple[list[NcuLaunch], str]:
    """A report file's launches and the text they were read from (of an .ncu-rep, the device names it
    records), in whichever form it is; NcuReportError names the file and says in one line what is wrong."""
    if path.suffix == ".ncu-rep" and path.is_file():
        launches = read_ncu_rep(path)
        names = {str(metric.value) for launch in launches
                 if (metric := launch.metric("device__attribute_display_name", "raw")) is not None}
        return launches, "\n".join(sorted(names))
    text = read_report_text(path)
    try:
        return parse_report(text), text
    except NcuReportError as error:
        raise NcuReportError(f"ncu report {path}: {error}") from None


def read_report(path: Path) -> list[NcuLaunch]:
    return load_report(path)[0]


# --- typed figures -------------------------------------------------------------------------------


def _number(launch: NcuLaunch, names: tuple[str, ...], section: str | None = None) -> float | None:
    for name in names:
        metric = launch.metric(name, section)
        if metric is not None and isinstance(metric.value, float):
            return metric.value
    return None


def metric_number(launch: NcuLaunch, *names: str, section: str | None = None) -> float | None:
    """The first of `names` the launch has as a number (in that section, where given), else None."""
    return _number(launch, names, section)


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def _count(value: float | None) -> int | None:
    """A count that must be at least 1 (SMs, blocks, threads, registers); anything else is unknown."""
    whole = _whole(value)
    return whole if whole is not None and whole >= 1 else None


def _microseconds(launch: NcuLaunch, name: str) -> float | None:
    metric = launch.metric(name, _SOL) or launch.metric(name)
    if metric is None or not isinstance(metric.value, float):
        return None
    scale = _MICROSECONDS_PER_UNIT.get(metric.unit)
    return None if scale is None else metric.value * scale


def _bytes(launch: NcuLaunch, name: str) -> int | None:
    metric = launch.metric(name)
    if metric is None or not isinstance(metric.value, float):
        return None
    scale = _BYTES_PER_UNIT.get(metric.unit.split("/")[0])  # 'Kbyte/block' -> 'Kbyte'
    return None if scale is None else round(metric.value * scale)


def _volume(dims: tuple[int, int, int] | None) -> int | None:
    return None if dims is None else volume(dims)


@dataclass(frozen=True)
class LaunchStats:
    """The figures of one launch the diagnosis uses; None where the report lacks them."""

    duration_us: float | None
    sm_throughput_pct: float | None
    memory_throughput_pct: float | None
    dram_throughput_pct: float | None
    grid_blocks: int | None
    block_threads: int | None
    registers_per_thread: int | None
    dynamic_smem_per_block_bytes: int | None
    static_smem_per_block_bytes: int | None
    driver_smem_per_block_bytes: int | None
    sm_count: int | None
    waves_per_sm: float | None
    block_limit_registers: int | None
    block_limit_shared_mem: int | None
    block_limit_warps: int | None
    block_limit_sm: int | None
    theoretical_active_warps_per_sm: float | None
    theoretical_occupancy_pct: float | None
    achieved_occupancy_pct: float | None
    cluster_size: int | None = None  # CTAs per thread block cluster (sm90); None: no clusters (ncu says 0)

    @classmethod
    def from_launch(cls, launch: NcuLaunch) -> LaunchStats:
        grid_size = _count(_number(launch, ("Grid Size",), _LAUNCH))
        block_size = _count(_number(launch, ("Block Size",), _LAUNCH))
        return cls(
            duration_us=_microseconds(launch, "Duration"),
            # old text names the percentages in the name; the GUI's copy puts "[%]" as the unit
            sm_throughput_pct=_number(launch, ("Compute (SM) Throughput", "Compute (SM) [%]", "Compute (SM)"), _SOL),
            memory_throughput_pct=_number(launch, ("Memory Throughput", "Memory [%]", "Memory"), _SOL),
            dram_throughput_pct=_number(launch, ("DRAM Throughput",), _SOL),
            grid_blocks=grid_size if grid_size is not None else _volume(launch.grid),
            block_threads=block_size if block_size is not None else _volume(launch.block),
            registers_per_thread=_count(_number(launch, ("Registers Per Thread",))),
            dynamic_smem_per_block_bytes=_bytes(launch, "Dynamic Shared Memory Per Block"),
            static_smem_per_block_bytes=_bytes(launch, "Static Shared Memory Per Block"),
            driver_smem_per_block_bytes=_bytes(launch, "Driver Shared Memory Per Block"),
            sm_count=_count(_number(launch, ("# SMs",))),
            waves_per_sm=_number(launch, ("Waves Per SM",)),
            block_limit_registers=_whole(_number(launch, ("Block Limit Registers",))),
            block_limit_shared_mem=_whole(_number(launch, ("Block Limit Shared Mem",))),
            block_limit_warps=_whole(_number(launch, ("Block Limit Warps",))),
            block_limit_sm=_whole(_number(launch, ("Block Limit SM",))),
            theoretical_active_warps_per_sm=_number(launch, ("Theoretical Active Warps per SM",)),
            theoretical_occupancy_pct=_number(launch, ("Theoretical Occupancy",)),
            achieved_occupancy_pct=_number(launch, ("Achieved Occupancy",)),
            cluster_size=_whole(_number(launch, ("Cluster Size",))) or None,
        )


# --- grouping ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchGroup:
    """Launches of one kernel with one launch shape (e.g. the same kernel timed 21 times)."""

    kernel_name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    launches: tuple[NcuLaunch, ...]

    @property
    def count(self) -> int:
        return len(self.launches)

    @property
    def stats(self) -> LaunchStats:
        return LaunchStats.from_launch(self.launches[0])

    @property
    def median_duration_us(self) -> float | None:
        durations = [LaunchStats.from_launch(launch).duration_us for launch in self.launches]
        known = [duration for duration in durations if duration is not None]
        return statistics.median(known) if known else None


def _group_key(launch: NcuLaunch) -> tuple:
    # Older text reports print no grid or block dimensions: their Launch Statistics totals tell shapes apart.
    stats = LaunchStats.from_launch(launch)
    return launch.kernel_name, launch.grid, launch.block, stats.grid_blocks, stats.block_threads


def group_launches(launches: list[NcuLaunch]) -> list[LaunchGroup]:
    """Group launches by kernel name and launch shape, in order of first appearance."""
    grouped: dict[tuple, list[NcuLaunch]] = {}
    for launch in launches:
        grouped.setdefault(_group_key(launch), []).append(launch)
    return [
        LaunchGroup(members[0].kernel_name, members[0].grid, members[0].block, tuple(members))
        for members in grouped.values()
    ]
