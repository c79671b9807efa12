"""Which convolutions of a network a tuned kernel replaces, and why the others fall back to PyTorch: one
decision per conv node, from its imported problem and best.yaml alone (no torch, no GPU). `optimize` acts on
these decisions; `tune.py report` prints the same list for a network imported without running it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from tuner.families import registry
from tuner.importers.network import Network
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem, canonical_problem
from tuner.store.best import names_by_problem
from tuner.store.results import ResultsError
from tuner.store.schema import BestEntry
from tuner.search.space import entry_config


class Fallback(enum.Enum):
    """Why a convolution stays PyTorch's."""

    unsupported = "no family runs it"
    not_tuned = "not tuned"
    other_shape = "a shape other than the tuned one"
    wrong_dtype = "wrong dtype"
    training = "training mode"
    not_replaceable = "not replaceable"   # a functional conv, a batch norm without running statistics
    kernel_failed = "kernel failed"       # not built, not loaded, or refused the problem
    wrong_result = "wrong result"         # the kernel disagreed with eager on the example input


@dataclass(frozen=True)
class Decision:
    """One conv node: the best.yaml layer whose kernel replaces it, or why it falls back. `note`: what the
    replacement costs or changes (padded channels, a folded scale), or the fallback's detail."""

    node: str
    problem: ConvProblem | None
    entry: str | None = None
    fallback: Fallback | None = None
    note: str = ""

    @property
    def replaced(self) -> bool:
        return self.fallback is None

    @property
    def text(self) -> str:
        if self.replaced:
            return f"replaced by {self.entry}" + (f" ({self.note})" if self.note else "")
        return f"{self.fallback.value}" + (f": {self.note}" if self.note else "")

    def falls_back(self, why: Fallback, note: str) -> "Decision":
        return replace(self, entry=None, fallback=why, note=note)


class TunedIndex:
    """best.yaml's entries by problem in the canonical fused form: the fastest entry of a problem, and the
    batches and dtypes it was tuned at otherwise (for the fallback's reason)."""

    def __init__(self, entries: dict[str, BestEntry]):
        self.entries = entries
        self.fastest = names_by_problem(entries)
        self.batches: dict[ConvProblem, set[int]] = {}
        for entry in entries.values():
            self.batches.setdefault(_any_batch(entry.problem), set()).add(entry.problem.n)

    def entry_for(self, problem: ConvProblem) -> str | None:
        return self.fastest.get(problem)

    def why_not(self, problem: ConvProblem) -> tuple[Fallback, str]:
        """Why no entry holds the problem: tuned at another batch, at another dtype, or not at all."""
        batches = self.batches.get(_any_batch(problem))
        if batches:
            return Fallback.other_shape, f"tuned at batch {', '.join(map(str, sorted(batches)))}, not {problem.n}"
        for dtype in DataType:
            other = with_dtype(problem, dtype)
            if other != problem and self.entry_for(other) is not None:
                return (Fallback.wrong_dtype, f"the model runs {problem.input_type.value}; tuned for {dtype.value} "
                                              f"as {self.entry_for(other)}")
        return Fallback.not_tuned, f"{problem.shape_text} {problem.epilogue.key}: tune it (tune.py --shape " \
                                   f"{problem.shape_arg} --epilogue {problem.epilogue.key})"


def _any_batch(problem: ConvProblem) -> ConvProblem:
    return canonical_problem(replace(problem, n=1))


def with_dtype(problem: ConvProblem, dtype: DataType) -> ConvProblem:
    """The problem with its tensors in `dtype` (the accumulator stays f32; tf32 inputs write f32, e4m3 f16)."""
    outputs = {DataType.tf32: DataType.f32, DataType.e4m3: DataType.f16}
    return replace(problem, input_type=dtype, filter_type=dtype, output_type=outputs.get(dtype, dtype))


def decide(node: str, problem: ConvProblem | str, index: TunedIndex) -> Decision:
    """The decision for one conv node, whose problem the importer gave (or the reason no family runs it)."""
    if isinstance(problem, str):
        return Decision(node, None, fallback=Fallback.unsupported, note=problem)
    if problem.transposed:
        return Decision(node, problem, fallback=Fallback.not_replaceable,
                        note="a ConvTranspose2d: the PyTorch op runs Conv2d kernels only (its tuned kernel is in "
                             "best_configs.h)")
    name = index.entry_for(problem)
    if name is None:
        why, note = index.why_not(problem)
        return Decision(node, problem, fallback=why, note=note)
    return Decision(node, problem, name, note=replacement_note(problem, name, index.entries[name]))


def replacement_note(problem: ConvProblem, name: str, entry: BestEntry) -> str:
    """What running the layer on this entry's kernel changes: the channels padded on every call, and the
    batch norm's scale folded into the filter or passed as ones (the two fused forms share one kernel)."""
    try:
        config = entry_config(entry, name, entry.problem)
    except ResultsError as error:
        return str(error)
    family = registry.family_of(config)
    notes = [family.name]
    channels = family.rules.launch_args(config, entry.problem).kernel_channels
    if channels != problem.c:
        notes.append(f"input padded from {problem.c} to {channels} channels on every call (a copy)")
    if problem.epilogue.scale and not config.fusion.scale:
        notes.append("batch-norm scale folded into the filter")
    elif config.fusion.scale and not problem.epilogue.scale:
        notes.append("scale of ones")
    return ", ".join(notes)


def network_decisions(network: Network, entries: dict[str, BestEntry]) -> list[Decision]:
    """Every conv node of an imported network, in the model's dtype (the importers' f16) and eval mode:
    what `optimize` would do with it."""
    index = TunedIndex(entries)
    decisions = [decide(node, layer.problem, index) for layer in network.layers for node in layer.nodes]
    return decisions + [decide(item.node, item.reason, index) for item in network.unsupported]


def summary(decisions: list[Decision]) -> str:
    replaced = sum(d.replaced for d in decisions)
    counts: dict[str, int] = {}
    for decision in decisions:
        if not decision.replaced:
            counts[decision.fallback.value] = counts.get(decision.fallback.value, 0) + 1
    fallen = ", ".join(f"{count} {why}" for why, count in counts.items())
    return f"{replaced} of {len(decisions)} convolutions replaced by tuned kernels" + \
        (f"; falling back to PyTorch: {fallen}" if fallen else "")
