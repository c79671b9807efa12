"""Device time of a kernel: CUDA-graph replay over rotated inputs, median and spread."""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Callable

from tuner.core.problem import ConvProblem

# Inputs rotate over copies whose total is at least this many times the L2, so that no launch
# finds its operands left in L2 by the previous one.
L2_MULTIPLE = 3
MAX_COPIES = 2048
MIN_LAUNCHES_PER_REPLAY = 64
# A replay this long already hides the graph launch's few microseconds and the event resolution: a long
# kernel (tens to hundreds of µs) takes fewer rounds than MIN_LAUNCHES_PER_REPLAY asks, which cut its
# timing from seconds to a fraction of one in a study.
REPLAY_TARGET_US = 2000.0
WARMUP_REPLAYS = 3
REPEATS = 30
# Set in the processes Nsight Compute and Nsight Systems launch (their CUDA injection library). Under ncu each launch
# is replayed and serialised: a bench run under it wrote 93 µs for a 13.5 µs kernel into bench.yaml (H100).
PROFILER_VARIABLES = ("CUDA_INJECTION64_PATH",)


class ProfilerAttached(RuntimeError):
    """The process runs under a CUDA profiler: any time it took would be the profiler's."""


def refuse_under_profiler() -> None:
    """Raise ProfilerAttached where a profiler injected itself into this process (before anything is timed)."""
    for variable in PROFILER_VARIABLES:
        if os.environ.get(variable):
            raise ProfilerAttached(
                f"a CUDA profiler is attached ({variable} is set): times taken under it are the profiler's and would "
                "be written to results/; run without ncu or nsys (tune.py profiles its finalists with ncu itself, "
                "--ncu-top)")


@dataclass(frozen=True)
class Measurement:
    median_us: float
    p10_us: float
    p90_us: float
    repeats: int
    launches_per_replay: int
    copies: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median over the repeats."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us else math.inf

    def tflops(self, problem: ConvProblem) -> float:
        return problem.flops / (self.median_us * 1e-6) / 1e12

    def gbps(self, problem: ConvProblem) -> float:
        return problem.bytes_moved / (self.median_us * 1e-6) / 1e9


def rotation_copies(bytes_per_set: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input/output sets to cycle through so that their total exceeds 3x L2."""
    wanted = max(2, math.ceil(L2_MULTIPLE * l2_bytes / max(1, bytes_per_set)))
    affordable = max(2, int(0.5 * free_bytes) // max(1, bytes_per_set))
    return min(wanted, affordable, MAX_COPIES)


def launches_per_replay(copies: int, round_us: float = 0.0) -> int:
    """Whole rounds over the copies: MIN_LAUNCHES_PER_REPLAY launches, or fewer rounds when one round over
    the copies (measured: `round_us`) already takes a good part of REPLAY_TARGET_US."""
    rounds = max(1, math.ceil(MIN_LAUNCHES_PER_REPLAY / copies))
    if round_us > 0:
        rounds = min(rounds, max(1, math.ceil(REPLAY_TARGET_US / round_us)))
    return copies * rounds


def percentile(sorted_values: list[float], fraction: float) -> float:
    position = fraction * (len(sorted_values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(per_launch_us: list[float], launches: int, copies: int) -> Measurement:
    ordered = sorted(per_launch_us)
    return Measurement(
        median_us=statistics.median(ordered),
        p10_us=percentile(ordered, 0.1),
        p90_us=percentile(ordered, 0.9),
        repeats=len(ordered),
        launches_per_replay=launches,
        copies=copies,
    )


def time_replays(replay: Callable[[], None], timed_ms: Callable[[Callable[[], None]], float], launches: int,
                 copies: int, repeats: int = REPEATS) -> Measurement:
    """The one timing loop, whatever captured the graph (CuPy here, PyTorch for the baselines): replay it
    WARMUP_REPLAYS times, then `repeats` replays each timed by `timed_ms(replay)` (CUDA events around
    it), per launch."""
    for _ in range(WARMUP_REPLAYS):
        replay()
    return summarize([timed_ms(replay) * 1e3 / launches for _ in range(repeats)], launches, copies)


def time_graph(launch: Callable[[int, int], None], copies: int, stream, repeats: int = REPEATS) -> Measurement:
    """Capture one graph of `launches` launches cycling over the copies, replay it, time each replay
    with CUDA events. `launch(copy_index, stream_ptr)` enqueues one launch on the stream. One round over
    the copies is captured and timed first, to size the replay (launches_per_replay)."""
    import cupy

    cupy.cuda.Device().synchronize()  # the copies' fills are done before the first replay

    def capture(launches: int):
        stream.begin_capture()
        for index in range(launches):
            launch(index % copies, stream.ptr)
        return stream.end_capture()

    with stream:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()

        def timed_ms(replay: Callable[[], None]) -> float:
            start.record(stream)
            replay()
            stop.record(stream)
            stop.synchronize()
            return cupy.cuda.get_elapsed_time(start, stop)

        one_round = capture(copies)
        one_round.launch(stream)
        launches = launches_per_replay(copies, timed_ms(lambda: one_round.launch(stream)) * 1e3)
        graph = one_round if launches == copies else capture(launches)
        return time_replays(lambda: graph.launch(stream), timed_ms, launches, copies, repeats)
