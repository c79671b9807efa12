"""The error every stage may raise for bad input from a user."""
from __future__ import annotations


class UsageError(Exception):
    """Bad input: one line, exit code 2, nothing written."""
