"""Whole runs: tuning layers and networks, the nightly, bench, export to C++."""
