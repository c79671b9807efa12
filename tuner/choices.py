"""What a user chose on a command line, checked: layer names and patterns, kernel families and their
space files, counts. Shared by tune.py's commands (tuner/cli.py, tuner/bench.py), so neither imports
the other."""
from __future__ import annotations

import argparse
import fnmatch
from pathlib import Path

from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.problem import Layer, find_layer
from tuner.space import default_space_file, load_space


class UsageError(Exception):
    """Bad input: one line, exit code 2, nothing written."""


class UsageParser(argparse.ArgumentParser):
    """Bad flags are a one-line usage error (exit 2 through tune.py's main), not argparse's usage dump."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def positive(name: str, value: int) -> int:
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")
    return value


def chosen_spaces(family_text: str | None, space_files: list[Path] | None) -> tuple[SearchSpace, ...]:
    """The spaces to search: the named families (default every known one), each from its
    --space-file if one was given, else from search_spaces/<family>.yaml."""
    if family_text is not None:
        names = [name.strip() for name in family_text.split(",") if name.strip()]
        unknown = [name for name in names if name not in registry.names()]
        if unknown or not names:
            raise UsageError(f"--family {family_text!r}: unknown family {', '.join(unknown) or '(none given)'}; "
                             f"choose from {', '.join(registry.names())}")
        if len(set(names)) != len(names):
            raise UsageError(f"--family {family_text!r} names a family twice; name each once")
    else:
        names = list(registry.names())
    given = {}
    for path in space_files or []:
        space = load_space(path)
        if space.family in given:
            raise UsageError(f"--space-file: two files for family {space.family} ({given[space.family][0]} and {path})")
        given[space.family] = (path, space)
    stray = [family for family in given if family not in names]
    if stray:
        raise UsageError(f"--space-file for {', '.join(stray)}, which --family leaves out; add it to --family")
    return tuple(given[name][1] if name in given else load_space(default_space_file(name)) for name in names)


def matching_layers(layers: dict[str, Layer], pattern: str) -> list[Layer]:
    """A layer name, or a shell-style pattern such as 'r50_*_b32'."""
    if not any(char in pattern for char in "*?["):
        return [find_layer(layers, pattern)]
    matches = [layer for name, layer in layers.items() if fnmatch.fnmatchcase(name, pattern)]
    if not matches:
        raise UsageError(f"--layers pattern {pattern!r} matches no layer; see --list-layers")
    return matches
