"""What a user chose on a command line, checked: layer names and patterns, kernel families and their
space files, counts. Shared by tune.py's commands (tuner/cli/tune.py, tuner/pipeline/bench.py), so neither imports
the other."""
from __future__ import annotations

import argparse
import fnmatch

from tuner.core.problem import Layer, find_layer
from tuner.core.errors import UsageError


class UsageParser(argparse.ArgumentParser):
    """Bad flags are a one-line usage error (exit 2 through tune.py's main), not argparse's usage dump."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def positive(name: str, value: int) -> int:
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")
    return value


def matching_layers(layers: dict[str, Layer], pattern: str) -> list[Layer]:
    """A layer name, or a shell-style pattern such as 'r50_*_b32'."""
    if not any(char in pattern for char in "*?["):
        return [find_layer(layers, pattern)]
    matches = [layer for name, layer in layers.items() if fnmatch.fnmatchcase(name, pattern)]
    if not matches:
        raise UsageError(f"--layers pattern {pattern!r} matches no layer; see --list-layers")
    return matches
