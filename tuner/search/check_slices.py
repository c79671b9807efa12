"""A child process of space._checked_in_parallel: reads (slices, problem, device) pickled on stdin and writes, pickled
on stdout, each slice's configurations that pass the static checks (space.checked_configs)."""
from __future__ import annotations

import pickle
import sys

from tuner.search.space import checked_configs


def main() -> int:
    slices, problem, device = pickle.load(sys.stdin.buffer)
    pickle.dump([checked_configs(space, problem, device) for space in slices], sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
