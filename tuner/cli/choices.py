"""What a user chose on a command line, checked: bad flags and counts as one-line usage errors, shared by
tune.py's commands."""
from __future__ import annotations

import argparse

from tuner.core.errors import UsageError


class UsageParser(argparse.ArgumentParser):
    """Bad flags are a one-line usage error (exit 2 through tune.py's main), not argparse's usage dump."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def positive(name: str, value: int) -> int:
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")
    return value
