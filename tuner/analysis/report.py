"""What a tuning run found about a layer, as data: its finalists re-measured side by side, why each is as fast
as it is (occupancy, the static diagnosis, ncu's word where it ran), the candidates that did not count, and
the study's own evidence for a grid smaller than the SM count. tuner/cli/tuning_view.py draws them."""
from __future__ import annotations

from dataclasses import dataclass

from tuner.analysis.profile import Agreement, ProfilerUnavailable, agreement, profile_candidate
from tuner.build.compile import CompileResult
from tuner.core.device import DeviceFacts, volume
from tuner.analysis.diagnose import LaunchFacts, Occupancy, WasteFlag, diagnose, kernel_facts, occupancy
from tuner.measure.timing import Measurement
from tuner.analysis.ncu import LaunchStats
from tuner.core.problem import ConvProblem
from tuner.families.base import KernelConfig
from tuner.families.candidate import Candidate
from tuner.measure.run import KernelAttributes
from tuner.search.trials import TrialRecord

# ncu's figures of a finalist's launch, and each fact as the static diagnosis and ncu state it.
Profile = tuple[LaunchStats, tuple[Agreement, ...]]


@dataclass(frozen=True)
class Confirmed:
    """A configuration re-measured side by side with the others after the study."""

    label: str
    config: KernelConfig
    measurement: Measurement
    error: float
    grid_blocks: int
    attributes: KernelAttributes
    spill_bytes: int | None
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def smem_bytes(self) -> int:
        return self.attributes.dynamic_smem_bytes + self.attributes.static_smem_bytes


@dataclass(frozen=True)
class FinalistWaste:
    """Why a finalist is as fast as it is: its occupancy and waste flags, and ncu's word where it ran."""

    finalist: Confirmed
    occupancy: Occupancy
    flags: tuple[WasteFlag, ...]
    profile: Profile | None = None


def finalist_waste(finalist: Confirmed, facts: LaunchFacts, profile: Profile | None = None) -> FinalistWaste:
    return FinalistWaste(finalist, occupancy(facts), tuple(diagnose(facts)), profile)


def explain_finalists(rows: list[Confirmed], compiled: dict[KernelConfig, CompileResult], problem: ConvProblem,
                      device: DeviceFacts, profile_top: int) -> tuple[dict[str, FinalistWaste], str | None]:
    """Each finalist's waste (by label) from its static facts, with ncu's word on the fastest `profile_top`; and,
    where ncu cannot run, why (the waste is then the static diagnosis alone)."""
    facts = {r.label: kernel_facts(r.config, problem, device, r.grid_blocks, r.attributes, r.spill_bytes) for r in rows}
    profiles: dict[str, Profile] = {}
    unavailable = None
    for row in sorted(rows, key=lambda r: r.measurement.median_us)[:profile_top]:
        try:
            stats = profile_candidate(compiled[row.config.compiled].binary, problem,
                                      Candidate.of(row.config, problem).launch)
        except ProfilerUnavailable as error:
            unavailable = str(error)
            break
        profiles[row.label] = (stats, tuple(agreement(facts[row.label], stats)))
    return {r.label: finalist_waste(r, facts[r.label], profiles.get(r.label)) for r in rows}, unavailable


def outcome_name(record: TrialRecord) -> str:
    """A trial's outcome as a run counts it: its status, "(recorded)" where the study answered it from the record."""
    return record.status.value + (" (recorded)" if "from_record" in record.attrs else "")


def reason_line(record: TrialRecord) -> str:
    """The first line of why a trial did not count, at most 160 characters."""
    return (record.reason or "").splitlines()[0][:160] if record.reason else ""


def first_failures(records: list[TrialRecord], limit: int = 8) -> list[TrialRecord]:
    """The candidates that did not count (neither ok nor invalid), the first of each reason, `limit` reasons at most."""
    seen: set[str] = set()
    failures = []
    for record in records:
        reason = reason_line(record)
        if record.status.value in ("ok", "invalid") or reason in seen or len(seen) >= limit:
            continue
        seen.add(reason)
        failures.append(record)
    return failures


def blocks_of(record: TrialRecord) -> int:
    return volume(record.attrs.get("grid") or (0, 0, 0))


def fastest_wider(winner: Confirmed, measured: list[TrialRecord]) -> TrialRecord | None:
    """The study's own evidence for the winner's grid: the fastest measured candidate that launched more blocks."""
    wider = [r for r in measured if blocks_of(r) > winner.grid_blocks]
    return min(wider, key=lambda r: r.median_us) if wider else None
