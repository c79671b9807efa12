"""Device time of a kernel: CUDA-graph replay over rotated inputs, median and spread."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

from tuner.problem import ConvProblem

# Inputs rotate over copies whose total is at least this many times the L2, so that no launch
# finds its operands left in L2 by the previous one.
L2_MULTIPLE = 3
MAX_COPIES = 2048
MIN_LAUNCHES_PER_REPLAY = 64
WARMUP_REPLAYS = 3
REPEATS = 30


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


def launches_per_replay(copies: int) -> int:
    rounds = max(1, math.ceil(MIN_LAUNCHES_PER_REPLAY / copies))
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
    with CUDA events. `launch(copy_index, stream_ptr)` enqueues one launch on the stream."""
    import cupy

    cupy.cuda.Device().synchronize()  # the copies' fills are done before the first replay
    launches = launches_per_replay(copies)
    with stream:
        stream.begin_capture()
        for index in range(launches):
            launch(index % copies, stream.ptr)
        graph = stream.end_capture()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()

        def timed_ms(replay: Callable[[], None]) -> float:
            start.record(stream)
            replay()
            stop.record(stream)
            stop.synchronize()
            return cupy.cuda.get_elapsed_time(start, stop)

        return time_replays(lambda: graph.launch(stream), timed_ms, launches, copies, repeats)
