"""The errors every stage may raise for bad input from a user."""
from __future__ import annotations


class UsageError(Exception):
    """Bad input: one line, exit code 2, nothing written."""


class ProblemError(ValueError):
    """A layer table, layer name or shape that cannot describe a convolution."""
