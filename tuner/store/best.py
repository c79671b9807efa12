"""results/<gpu>/best.yaml: a layer's tuned kernel and its measurements an entry, read through its records
(tuner/store/schema.py) and the layer count the file states, and written from them, one entry at a time."""
from __future__ import annotations

import functools
from pathlib import Path

from tuner.core.problem import ConvProblem, canonical_problem
from tuner.core.yamlfile import brief, dump_yaml
from tuner.store.records import SchemaError
from tuner.store.results import (BEST_FILE, MAX_BEST_BYTES, ResultsError, atomic_write, locked, parse_results_yaml,
                                 read_results_yaml, results_text)
from tuner.store.schema import BestEntry, BestHeader

# best.yaml's keys that are not its header
LAYER_KEYS = ("layer_count", "layers")


def read_best(folder: Path) -> dict:
    """best.yaml as a document, every key of it checked against its records (tuner/store/schema.py) and the
    layer count the file states (a file cut short at an entry's boundary still parses: the count tells)."""
    path = folder / BEST_FILE
    if not path.exists():
        return {"layers": {}}
    document = _best_document(path, read_results_yaml(path, MAX_BEST_BYTES))
    _best_records(path, document)
    return document


def best_records(folder: Path) -> tuple[BestHeader, dict[str, BestEntry]]:
    """best.yaml's header and its layers' entries, checked as read_best checks them."""
    path = folder / BEST_FILE
    if not path.exists():
        return BestHeader(), {}
    header, entries = _parsed_records(str(path), results_text(path, MAX_BEST_BYTES))
    return header, dict(entries)


# A layer's tune reads its GPU's best.yaml four times (its previous entry, the landscape and twin seeds, the update)
# and each sibling GPU's once: 0.7 s of parsing a read at 480 layers, against a few ms to read the text. Keyed by
# the text itself (a file's time stamp is too coarse to tell two quick writes apart), the caller getting its own dict.
@functools.lru_cache(maxsize=4)
def _parsed_records(path_text: str, text: str) -> tuple[BestHeader, dict[str, BestEntry]]:
    path = Path(path_text)
    return _best_records(path, _best_document(path, parse_results_yaml(text, path)))


def _best_document(path: Path, document: object) -> dict:
    """The parsed best.yaml, refused where its layers or their count are wrong."""
    document = document or {}
    if not isinstance(document, dict) or not isinstance(document.get("layers", {}), dict):
        raise ResultsError(f"{path} has no 'layers' mapping; restore it from version control")
    document.setdefault("layers", {})
    stated = document.get("layer_count")
    if stated is None and document["layers"]:
        raise ResultsError(f"{path} has no layer_count line (the tool always writes one): it was cut short or "
                           "edited; restore it from version control")
    if stated is not None and (isinstance(stated, bool) or stated != len(document["layers"])):
        raise ResultsError(f"{path} states {brief(stated)} layers but holds {len(document['layers'])}: it was cut "
                           "short or edited; restore it from version control")
    return document


def _best_records(path: Path, document: dict) -> tuple[BestHeader, dict[str, BestEntry]]:
    try:
        header = BestHeader.parse({key: value for key, value in document.items() if key not in LAYER_KEYS})
        return header, {str(layer): BestEntry.parse(str(layer), entry) for layer, entry in document["layers"].items()}
    except SchemaError as error:
        raise ResultsError(f"{path}: {error}; restore it from version control") from None


def best_entries(folder: Path) -> dict[str, BestEntry]:
    """best.yaml's layers as typed entries (checked as read_best checks them)."""
    return best_records(folder)[1]


class ByCanonicalProblem(dict):
    """A mapping whose keys are problems up to the canonical fused form (tuner/core/problem.py canonical_problem):
    a layer tuned as conv + BatchNorm (scale+bias) is found for the same conv with its BatchNorm folded
    (bias), and the other way round. Every lookup and store takes the problem as the caller has it."""

    def __getitem__(self, problem: ConvProblem):
        return super().__getitem__(canonical_problem(problem))

    def __setitem__(self, problem: ConvProblem, value) -> None:
        super().__setitem__(canonical_problem(problem), value)

    def __contains__(self, problem: object) -> bool:
        return isinstance(problem, ConvProblem) and super().__contains__(canonical_problem(problem))

    def get(self, problem: ConvProblem, default=None):
        return super().get(canonical_problem(problem), default)

    def setdefault(self, problem: ConvProblem, default=None):
        return super().setdefault(canonical_problem(problem), default)


def names_by_problem(entries: dict[str, BestEntry]) -> ByCanonicalProblem:
    """The layer that holds each problem (the fastest where several hold one: a network's layer tuned with
    fewer families must not stand for the problem where another layer's kernel is faster), found for any
    problem of the same canonical fused form."""
    named = ByCanonicalProblem()
    for name, entry in sorted(entries.items(), key=lambda item: item[1].runtime_us):
        named.setdefault(entry.problem, name)
    return named


def update_best(folder: Path, layer: str, entry: BestEntry, header: BestHeader) -> Path:
    """Put one layer's entry into best.yaml under `header`, keeping every other layer as it was; the entry
    is checked as the next read will check it, so nothing is written that the read would refuse."""
    BestEntry.parse(layer, entry.as_dict())
    with locked(folder):
        layers = dict(sorted({**best_records(folder)[1], layer: entry}.items()))
        document = {**header.as_dict(), "layer_count": len(layers),
                    "layers": {name: each.as_dict() for name, each in layers.items()}}
        atomic_write(folder / BEST_FILE, dump_yaml(document, width=110))
    return folder / BEST_FILE
