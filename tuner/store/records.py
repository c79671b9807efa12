"""How a record reads a mapping of a results file and writes it back: a frozen dataclass whose key()
fields are the mapping's keys, each read through a function that checks its value and says in one line
why one does not fit, and written back key for key in the file's order (tuner/store/schema.py declares
the records of each file)."""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import field
from typing import Callable

from tuner.core.yamlfile import brief
from tuner.store.results import ResultsError

# The records' version. The files carry none; one that states another (`schema: N`) is refused.
VERSION = 1
VERSION_KEY = "schema"


class SchemaError(ResultsError):
    """A value that does not fit its record, in one line that names its key."""


Read = Callable[[str, object], object]  # (key, value in the file) -> what the record holds, or SchemaError


def key(read: Read, write: Callable[[object], object] = lambda held: held, *, required: bool = False,
        nullable: bool = False, **default) -> dataclasses.Field:
    """A record field that is the file's key of the same name: `read` checks its value and makes what the
    record holds, `write` makes the value back. A field that is not `required` is left out of the file
    while it holds its default; a `nullable` one the tuner writes as null where it has no value."""
    return field(metadata={"read": read, "write": write, "required": required, "nullable": nullable}, **default)


class Record:
    """A frozen dataclass whose key() fields are a mapping's keys, in the order the file gives them.
    `nulls`, where a record has it, names the keys the file gives as null."""

    @classmethod
    def keys(cls) -> tuple[dataclasses.Field, ...]:
        return tuple(f for f in dataclasses.fields(cls) if "read" in f.metadata)

    @classmethod
    def read(cls, values: object, what: str):
        if not isinstance(values, dict):
            raise SchemaError(f"{what} is {type(values).__name__}, not a mapping")
        keys = cls.keys()
        missing = [f.name for f in keys if f.metadata["required"] and f.name not in values]
        if missing:
            raise SchemaError(f"missing {', '.join(missing)}")
        known = {f.name for f in keys}
        unknown = [name for name in values if name not in known]
        if unknown:
            raise SchemaError(f"unknown key {brief(unknown[0])} (a newer tuner's, or an edit)")
        held, nulls = {}, set()
        for f in keys:
            if f.name not in values:
                continue
            if values[f.name] is None and f.metadata["nullable"]:
                nulls.add(f.name)
            else:
                held[f.name] = f.metadata["read"](f.name, values[f.name])
        return cls(**held, **({"nulls": frozenset(nulls)} if nulls else {}))

    def as_dict(self) -> dict:
        written = {}
        for f in self.keys():
            held = getattr(self, f.name)
            if f.name in getattr(self, "nulls", ()):
                written[f.name] = None
            elif f.metadata["required"] or held != f.default:
                written[f.name] = f.metadata["write"](held)
        return written


def unversioned(values: object, what: str) -> object:
    """The mapping without its version, once the version is this tuner's."""
    if not isinstance(values, dict) or VERSION_KEY not in values:
        return values
    if values[VERSION_KEY] != VERSION:
        raise SchemaError(f"{what} states {VERSION_KEY} {brief(values[VERSION_KEY])}: another version of the tuner "
                          f"wrote it (this one reads {VERSION_KEY} {VERSION})")
    return {name: held for name, held in values.items() if name != VERSION_KEY}


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(name: str, value: object) -> float:
    if not _is_number(value):
        raise SchemaError(f"{name} {brief(value)} is not a number")
    return value


def positive(name: str, value: object) -> float:
    if not _is_number(value) or value <= 0:
        raise SchemaError(f"{name} {brief(value)} is not a positive number")
    return value


def measure(name: str, value: object) -> float:
    if not _is_number(value) or value < 0:
        raise SchemaError(f"{name} {brief(value)} is not a number of 0 or more")
    return value


def count(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SchemaError(f"{name} {brief(value)} is not a whole number of 0 or more")
    return value


def text(what: str) -> Read:
    def read(name: str, value: object) -> str:
        if not isinstance(value, str) or not value:
            raise SchemaError(f"{name} {brief(value)} is not {what}")
        if "\0" in value:
            raise SchemaError(f"{name} holds a NUL character")
        return value
    return read


def date_text(name: str, value: object) -> str:
    """A date or time as text (an unquoted one, which YAML reads as a date, in its ISO form)."""
    if not isinstance(value, (str, dt.date)):
        raise SchemaError(f"{name} {brief(value)} is not a date")
    if "\0" in str(value):
        raise SchemaError(f"{name} holds a NUL character")
    return str(value)


def listing(item: Read) -> Read:
    def read(name: str, value: object) -> tuple:
        if not isinstance(value, list):
            raise SchemaError(f"{name} {brief(value)} is not a list")
        return tuple(item(f"{name}[{index}]", each) for index, each in enumerate(value))
    return read


def mapping(label: Read, item: Read) -> Read:
    """A mapping read into (key, value) pairs, each key checked with `label`, each value with `item`."""
    def read(name: str, value: object) -> tuple:
        if not isinstance(value, dict):
            raise SchemaError(f"{name} {brief(value)} is not a mapping")
        return tuple((label(f"{name} key", each), item(f"{name}.{each}", setting)) for each, setting in value.items())
    return read


def nested(record: type[Record]) -> Read:
    def read(name: str, value: object) -> Record:
        if not isinstance(value, dict):
            raise SchemaError(f"{name} is not a mapping")
        try:
            return record.read(value, name)
        except SchemaError as error:
            raise SchemaError(f"{name}: {error}") from None
    return read


def truth(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"{name} {brief(value)} is not true or false")
    return value


def pairs_as_dict(pairs: tuple) -> dict:
    return dict(pairs)


def records_as_list(records: tuple[Record, ...]) -> list[dict]:
    return [record.as_dict() for record in records]
