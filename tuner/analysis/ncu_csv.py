"""Read ncu's CSV forms: `--csv --page details` (a row per metric) and `--csv --page raw` (a column per
metric)."""
from __future__ import annotations

import csv
import io
import re

from tuner.analysis.ncu import (LAUNCH_STATISTICS, REPORT_HINT, SPEED_OF_LIGHT, NcuLaunch, NcuMetric, NcuReportError,
                                NcuRule, parse_dims, parse_metric, parse_rule, parse_value, require_launches,
                                require_text)

# --- the details page: one row per metric -------------------------------------------------------

CSV_HEADER = re.compile(r'^"ID","Process ID",', re.MULTILINE)


def _csv_dims(text: str | None) -> tuple[int, int, int] | None:
    return parse_dims(text.strip().strip("()")) if text else None


def _csv_metric(row: dict[str, str | None]) -> NcuMetric:
    return parse_metric(
        row.get("Section Name") or "", row["Metric Name"], row.get("Metric Unit") or "", row.get("Metric Value") or ""
    )


def _csv_rule(row: dict[str, str | None]) -> NcuRule:
    speedup = parse_value((row.get("Estimated Speedup") or "").strip())
    rule = parse_rule((row.get("Rule Type") or "").strip(), row.get("Rule Description") or "")
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
    require_text(text)
    header = CSV_HEADER.search(text)
    if header is None:
        raise NcuReportError(f"no CSV header row (\"ID\",\"Process ID\",...) found; {REPORT_HINT}")
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
    return require_launches(launches)


# --- raw page: one column per metric ------------------------------------------------------------

_OCCUPANCY = "Occupancy"
# Raw metric names and the details-page names (and sections) the diagnosis reads them under.
RAW_METRICS = {
    "gpu__time_duration.sum": (SPEED_OF_LIGHT, "Duration"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": (SPEED_OF_LIGHT, "Compute (SM) Throughput"),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": (SPEED_OF_LIGHT, "Memory Throughput"),
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": (SPEED_OF_LIGHT, "DRAM Throughput"),
    "l1tex__throughput.avg.pct_of_peak_sustained_active": (SPEED_OF_LIGHT, "L1/TEX Cache Throughput"),
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": (SPEED_OF_LIGHT, "L2 Cache Throughput"),
    "launch__block_size": (LAUNCH_STATISTICS, "Block Size"),
    "launch__grid_size": (LAUNCH_STATISTICS, "Grid Size"),
    "launch__registers_per_thread": (LAUNCH_STATISTICS, "Registers Per Thread"),
    "launch__shared_mem_per_block_dynamic": (LAUNCH_STATISTICS, "Dynamic Shared Memory Per Block"),
    "launch__shared_mem_per_block_static": (LAUNCH_STATISTICS, "Static Shared Memory Per Block"),
    "launch__shared_mem_per_block_driver": (LAUNCH_STATISTICS, "Driver Shared Memory Per Block"),
    "launch__waves_per_multiprocessor": (LAUNCH_STATISTICS, "Waves Per SM"),
    "launch__cluster_size": (LAUNCH_STATISTICS, "Cluster Size"),
    "device__attribute_multiprocessor_count": (LAUNCH_STATISTICS, "# SMs"),
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
    metrics = [parse_metric("raw", name, unit, value) for name, (unit, value) in values.items()]
    metrics += [parse_metric(section, shown, *values[name]) for name, (section, shown) in RAW_METRICS.items()
                if name in values]
    return tuple(metrics)


def parse_raw_csv_report(text: str) -> list[NcuLaunch]:
    """Parse `ncu --csv --page raw`: a header row of metric names, a row of units, a row per launch."""
    require_text(text)
    header = CSV_HEADER.search(text)
    if header is None:
        raise NcuReportError(f"no CSV header row (\"ID\",\"Process ID\",...) found; {REPORT_HINT}")
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
    return require_launches(launches)


def is_raw_csv(text: str) -> bool:
    header = CSV_HEADER.search(text)
    first = text[header.start():text.find("\n", header.start())] if header else ""
    return bool(header) and '"Metric Name"' not in first and "__" in first
