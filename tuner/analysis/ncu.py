"""What an Nsight Compute (ncu) report holds: its kernel launches with their metrics and rule advice, what
every reader of its forms shares (units, values, dimensions), the figures of a launch the diagnosis uses, and
launches grouped by kernel and shape. The readers: ncu_text (details text, the GUI's copy), ncu_csv (details
and raw CSV), ncu_file (a report file in any form, an .ncu-rep included)."""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

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

SPEED_OF_LIGHT = "GPU Speed Of Light Throughput"
LAUNCH_STATISTICS = "Launch Statistics"


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


def parse_metric(section: str, name: str, unit: str, value: str) -> NcuMetric:
    return NcuMetric(section, name.strip(), normalise_unit(unit.strip()), parse_value(value.strip()))


REPORT_HINT = ("expected the output of `ncu --page details` (text), `ncu --csv --page details`, `ncu --csv "
               "--page raw`, or the Nsight Compute GUI's Details page copied as text")
BINARY_REPORT = "the report is binary (an .ncu-rep?); export it with `ncu --import FILE --page details`"


def require_text(text: str) -> None:
    if not text.strip():
        raise NcuReportError("the report is empty")
    if "\0" in text:
        raise NcuReportError(BINARY_REPORT)


def require_launches(launches: list[NcuLaunch]) -> list[NcuLaunch]:
    if not launches:
        raise NcuReportError(f"no kernel launches found; {REPORT_HINT}")
    return launches


_SPEEDUP = re.compile(r"^Est\. (?:Local |Global )?Speedup: (?P<pct>[\d.]+)%\s*(?P<rest>.*)$")


def parse_dims(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    x, y, z = (int(part) for part in text.split(","))
    return x, y, z


def parse_rule(kind: str, text: str) -> NcuRule:
    text = " ".join(text.split())
    speedup = _SPEEDUP.match(text)
    if speedup:
        return NcuRule(kind, speedup["rest"], float(speedup["pct"]))
    return NcuRule(kind, text)


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
    metric = launch.metric(name, SPEED_OF_LIGHT) or launch.metric(name)
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
        grid_size = _count(_number(launch, ("Grid Size",), LAUNCH_STATISTICS))
        block_size = _count(_number(launch, ("Block Size",), LAUNCH_STATISTICS))
        return cls(
            duration_us=_microseconds(launch, "Duration"),
            # old text names the percentages in the name; the GUI's copy puts "[%]" as the unit
            sm_throughput_pct=_number(launch, ("Compute (SM) Throughput", "Compute (SM) [%]", "Compute (SM)"),
                                      SPEED_OF_LIGHT),
            memory_throughput_pct=_number(launch, ("Memory Throughput", "Memory [%]", "Memory"), SPEED_OF_LIGHT),
            dram_throughput_pct=_number(launch, ("DRAM Throughput",), SPEED_OF_LIGHT),
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
