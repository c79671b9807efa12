"""Running a compiled kernel in a worker process: launch, validation against float64, timing, baselines."""
