"""The records of results/<gpu>/, one type a file: best.yaml (BestHeader, and a BestEntry a layer), a
landscape's rows (LandscapeRow, each with what was Recorded) and history.jsonl's events (HistoryEvent).
A file is read through its records, which check every key it may hold and refuse the rest in one line,
and written from them, key for key in the order the tuner has always written: a file read and written
again is the same, byte for byte (tuner/store/records.py reads and writes them; records.VERSION is the
version of these formats)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuner.core.errors import ProblemError
from tuner.core.layers import layer_name_problem
from tuner.core.problem import ConvProblem, problem_from_dict, problem_to_dict
from tuner.core.status import Status
from tuner.core.yamlfile import brief
from tuner.store.records import (Record, SchemaError, count, date_text, key, listing, mapping, measure, nested,
                                 number, pairs_as_dict, positive, records_as_list, text, truth, unversioned)

Scalar = str | int | float | bool
FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def family_name(name: str, value: object) -> str:
    if not isinstance(value, str) or not FAMILY_NAME.fullmatch(value):
        raise SchemaError(f"{name} {brief(value)} is not a family name")
    return value


def knob_values(name: str, value: object) -> tuple[tuple[str, Scalar], ...]:
    """A kernel's knobs, knob name -> value, in the file's order."""
    if (not isinstance(value, dict) or not value or not all(isinstance(knob, str) for knob in value)
            or not all(isinstance(setting, (str, int, float)) for setting in value.values())):
        raise SchemaError(f"{name} is not a mapping of knob names to values")
    return tuple(value.items())


def conv_problem(name: str, value: object) -> ConvProblem:
    if not isinstance(value, dict):
        raise SchemaError(f"{name} is not a mapping")
    try:
        return problem_from_dict(value)
    except ProblemError as error:
        raise SchemaError(str(error)) from None


# --- best.yaml --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceHeader(Record):
    """best.yaml's `device`: the GPU its entries were measured on."""

    name: str | None = key(text("a GPU name"), default=None)
    slug: str | None = key(text("a results folder name"), default=None)
    compute_capability: str | None = key(text("a compute capability"), default=None)
    sm_count: int | None = key(count, default=None)
    l2_bytes: int | None = key(count, default=None)


@dataclass(frozen=True)
class Toolchain(Record):
    """best.yaml's `toolchain`: what built and ran its kernels."""

    nvcc: str | None = key(text("an nvcc version"), default=None)
    cutlass: str | None = key(text("a CUTLASS version"), default=None)
    driver: str | None = key(text("a driver version"), default=None)
    cuda_runtime: str | None = key(text("a CUDA runtime version"), default=None)


@dataclass(frozen=True)
class BestHeader(Record):
    """What best.yaml says above its layers."""

    device: DeviceHeader | None = key(nested(DeviceHeader), Record.as_dict, nullable=True, default=None)
    toolchain: Toolchain | None = key(nested(Toolchain), Record.as_dict, nullable=True, default=None)
    nulls: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def parse(cls, values: dict) -> BestHeader:
        """best.yaml's keys but its layers and their count."""
        return cls.read(unversioned(values, "best.yaml"), "best.yaml")


@dataclass(frozen=True)
class StudyRef(Record):
    """The study that found an entry's kernel."""

    name: str | None = key(text("a study name"), default=None)
    trials: int | None = key(count, default=None)
    measured_this_run: int | None = key(count, default=None)


@dataclass(frozen=True)
class Occupancy(Record):
    blocks_per_sm: int = key(count, required=True)
    limited_by: tuple[str, ...] = key(listing(text("a limit")), list, required=True)
    theoretical_pct: float = key(measure, required=True)


@dataclass(frozen=True)
class WasteNote(Record):
    """One waste flag of the static diagnosis."""

    code: str = key(text("a waste code"), required=True)
    value: float = key(number, required=True)
    message: str = key(text("a message"), required=True)


@dataclass(frozen=True)
class ReferenceRun(Record):
    """The reference configuration, re-measured beside the winner."""

    params: tuple[tuple[str, Scalar], ...] = key(knob_values, pairs_as_dict, required=True)
    runtime_us: float = key(positive, required=True)
    grid_blocks: int = key(count, required=True)
    speedup: float = key(positive, required=True)


@dataclass(frozen=True)
class PreviousBest(Record):
    """The entry an entry replaced, from another run."""

    runtime_us: float = key(positive, required=True)
    kernel: str = key(text("a kernel name"), required=True)
    run: str | None = key(text("a run id"), required=True, nullable=True, default=None)
    date: str = key(date_text, required=True, default="")
    nulls: frozenset[str] = field(default=frozenset(), repr=False, compare=False)


NCU_AGREEMENT = "agrees_with_static"


def ncu_report(name: str, value: object) -> tuple[tuple[str, object], ...]:
    """ncu's figures of the winner's launch (tuner/analysis/ncu.py's LaunchStats, those it had), then
    which facts of the static diagnosis they agree with."""
    if not isinstance(value, dict):
        raise SchemaError(f"{name} is not a mapping")
    agreement = mapping(text("a fact"), truth)
    return tuple((text("a figure's name")(f"{name} key", each),
                  (agreement if each == NCU_AGREEMENT else number)(f"{name}.{each}", held))
                 for each, held in value.items())


def ncu_as_dict(report: tuple[tuple[str, object], ...]) -> dict:
    return {each: dict(held) if each == NCU_AGREEMENT else held for each, held in report}


@dataclass(frozen=True)
class BestEntry(Record):
    """A layer's tuned kernel in best.yaml and how it measured. problem, family, params, kernel and
    runtime_us are always there; the rest is the tuner's measurement detail (a hand-made entry may leave
    it out). spill_bytes is null where ptxas reported nothing."""

    problem: ConvProblem = key(conv_problem, problem_to_dict, required=True)
    family: str = key(family_name, required=True)
    params: tuple[tuple[str, Scalar], ...] = key(knob_values, pairs_as_dict, required=True)
    kernel: str = key(text("a kernel name"), required=True)
    runtime_us: float = key(positive, required=True)
    spread: float | None = key(measure, default=None)
    p10_us: float | None = key(measure, default=None)
    p90_us: float | None = key(measure, default=None)
    tflops: float | None = key(measure, default=None)
    gbps: float | None = key(measure, default=None)
    rel_l2_error: float | None = key(measure, default=None)
    grid_blocks: int | None = key(count, default=None)
    cluster: tuple[int, ...] | None = key(listing(count), list, default=None)
    waves: float | None = key(measure, default=None)
    registers_per_thread: int | None = key(count, default=None)
    spill_bytes: int | None = key(count, nullable=True, default=None)
    smem_bytes: int | None = key(count, default=None)
    study: StudyRef | None = key(nested(StudyRef), Record.as_dict, default=None)
    family_best_us: tuple[tuple[str, float], ...] | None = key(mapping(family_name, positive), pairs_as_dict,
                                                                default=None)
    run: str | None = key(text("a run id"), default=None)  # the run that wrote it (a resumed run skips the layer)
    date: str = key(date_text, nullable=True, default="")
    occupancy: Occupancy | None = key(nested(Occupancy), Record.as_dict, default=None)
    waste: tuple[WasteNote, ...] | None = key(listing(nested(WasteNote)), records_as_list, default=None)
    ncu: tuple[tuple[str, object], ...] | None = key(ncu_report, ncu_as_dict, default=None)
    reference: ReferenceRun | None = key(nested(ReferenceRun), Record.as_dict, default=None)
    previous: PreviousBest | None = key(nested(PreviousBest), Record.as_dict, default=None)
    nulls: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def parse(cls, layer: str, values: object) -> BestEntry:
        if (problem_text := layer_name_problem(layer)):
            raise SchemaError(f"best.yaml layer {brief(layer)}: {problem_text}")
        try:
            return cls.read(values, "entry")
        except SchemaError as error:
            raise SchemaError(f"best.yaml layer {layer!r}: {error}") from None

    @property
    def knobs(self) -> dict[str, Scalar]:
        return dict(self.params)

    @property
    def study_name(self) -> str | None:
        """The entry's study in the storage."""
        return self.study.name if self.study else None

    @property
    def previous_us(self) -> float | None:
        """The runtime of the entry it replaced, from another run."""
        return self.previous.runtime_us if self.previous else None


# --- history.jsonl ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryEvent(Record):
    """One finished layer run, a line of history.jsonl; `at` is stamped when it is appended."""

    layer: str = key(text("a layer name"), required=True)
    kernel: str = key(text("a kernel name"), required=True)
    runtime_us: float = key(positive, required=True)
    measured: int = key(count, required=True)
    study: str = key(text("a study name"), required=True)
    run: str = key(text("a run id"), required=True)
    at: str = key(text("a time"), required=True, default="")

    @classmethod
    def parse(cls, values: object) -> HistoryEvent:
        return cls.read(unversioned(values, "the event"), "the event")


# --- landscape/<family>/<layer>.csv -----------------------------------------------------------------------------

OUTCOME_FIELDS = ("status", "median_us", "p10_us", "p90_us", "error", "grid_blocks", "blocks_per_sm")


@dataclass(frozen=True)
class Recorded:
    """What one candidate measured: its outcome, its time, the spread of its time and its error."""

    status: Status
    median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    error: float | None = None


def _cell_number(text: str) -> float | None:
    return float(text) if text not in ("", "None") else None


def _cell_count(text: str) -> int | None:
    return int(text) if text not in ("", "None") else None


@dataclass(frozen=True)
class LandscapeRow:
    """One candidate of a layer's landscape: its knobs (as text where read from the file) and what it measured."""

    knobs: tuple[tuple[str, Scalar], ...]
    recorded: Recorded
    grid_blocks: int | None = None
    blocks_per_sm: int | None = None

    @classmethod
    def parse(cls, cells: dict[str, str], knobs: tuple[str, ...]) -> LandscapeRow:
        """A CSV row (column -> text, every one there); ValueError says what does not fit."""
        if None in cells or None in cells.values():
            raise ValueError("fields missing or extra")
        recorded = Recorded(Status(cells["status"]), *(_cell_number(cells[name]) for name in OUTCOME_FIELDS[1:5]))
        return cls(tuple((knob, cells[knob]) for knob in knobs), recorded, _cell_count(cells["grid_blocks"]),
                   _cell_count(cells["blocks_per_sm"]))

    def cells(self) -> dict[str, Scalar | None]:
        """The row as csv.DictWriter writes it (None as an empty cell)."""
        recorded = self.recorded
        return {**dict(self.knobs), "status": recorded.status.value, "median_us": recorded.median_us,
                "p10_us": recorded.p10_us, "p90_us": recorded.p90_us, "error": recorded.error,
                "grid_blocks": self.grid_blocks, "blocks_per_sm": self.blocks_per_sm}


@dataclass(frozen=True)
class Landscape:
    """One family's landscape of one layer: every candidate measured, under a comment that says how. `knobs`
    are the file's knob columns (one written before a knob existed lacks it: the family reads its default)."""

    family: str
    knobs: tuple[str, ...]
    rows: tuple[LandscapeRow, ...]
    comment: str = ""

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.knobs, *OUTCOME_FIELDS)
