import math

import pytest

from tuner.measure.timing import (
    L2_MULTIPLE,
    MAX_COPIES,
    MIN_LAUNCHES_PER_REPLAY,
    Measurement,
    launches_per_replay,
    percentile,
    rotation_copies,
    summarize,
)

H100_L2 = 52428800
GIB = 1 << 30


def test_percentile_interpolates():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 5.0
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.1) == pytest.approx(1.4)
    assert percentile(values, 0.9) == pytest.approx(4.6)
    assert percentile([10.0, 20.0], 0.25) == pytest.approx(12.5)
    assert percentile([7.0], 0.9) == 7.0


def test_summarize():
    per_launch = [5.0, 4.0, 4.5, 10.0, 4.2, 4.1, 4.3, 4.4, 4.6, 4.0]  # one slow outlier, unsorted
    m = summarize(per_launch, launches=732, copies=732)
    assert m.median_us == pytest.approx(4.35)
    assert m.p10_us == pytest.approx(4.0)                 # position 0.9 between 4.0 and 4.0
    assert m.p90_us == pytest.approx(5.5)                 # position 8.1 between 5.0 and 10.0
    assert (m.repeats, m.launches_per_replay, m.copies) == (10, 732, 732)
    assert m.spread == pytest.approx((5.5 - 4.0) / 4.35)


def test_summarize_even_and_odd_counts():
    assert summarize([3.0, 1.0, 2.0], 64, 2).median_us == 2.0
    assert summarize([4.0, 1.0, 2.0, 3.0], 64, 2).median_us == 2.5


def test_spread_of_a_zero_median_is_infinite():
    assert math.isinf(Measurement(0.0, 0.0, 0.0, 1, 64, 2).spread)


@pytest.mark.parametrize("bytes_per_set", [215_040, 1 << 20, 7_000_001, 50 << 20])
def test_rotation_copies_cover_three_l2(bytes_per_set):
    copies = rotation_copies(bytes_per_set, H100_L2, free_bytes=80 * GIB)
    assert copies * bytes_per_set >= L2_MULTIPLE * H100_L2
    assert (copies - 1) * bytes_per_set < L2_MULTIPLE * H100_L2 or copies == 2  # no more than needed


def test_rotation_copies_of_conv_1():
    # x 64 KiB + w 18 KiB + y 128 KiB = 215040 bytes a set; 3 x 50 MiB / 215040 = 731.4
    assert rotation_copies(215_040, H100_L2, 80 * GIB) == 732


def test_rotation_copies_at_least_two():
    assert rotation_copies(1 << 30, H100_L2, 80 * GIB) == 2    # one set is already 20x the L2
    assert rotation_copies(1 << 30, H100_L2, 1 << 20) == 2     # even when memory is short


def test_rotation_copies_capped_by_half_the_free_memory():
    # 150 sets of 1 MiB would be wanted; half of 10 MiB free holds 5
    assert rotation_copies(1 << 20, H100_L2, 10 << 20) == 5
    assert rotation_copies(1 << 20, H100_L2, 301 << 20) == 150


def test_rotation_copies_capped_by_max_copies():
    assert MAX_COPIES == 2048
    assert rotation_copies(1024, H100_L2, 80 * GIB) == MAX_COPIES
    assert rotation_copies(0, H100_L2, 80 * GIB) == MAX_COPIES


@pytest.mark.parametrize("copies, expected", [(1, 64), (2, 64), (3, 66), (7, 70), (64, 64), (65, 65), (100, 100),
                                              (732, 732), (2048, 2048)])
def test_launches_per_replay(copies, expected):
    launches = launches_per_replay(copies)
    assert launches == expected
    assert launches >= MIN_LAUNCHES_PER_REPLAY
    assert launches % copies == 0


@pytest.mark.parametrize("copies, round_us, expected", [
    (3, 519.0, 12),     # a 173 µs kernel over 3 copies: 4 rounds make the 2 ms replay, not 22 (66 launches)
    (2, 20.0, 64),      # a 10 µs kernel: the 64 launches are shorter than the target anyway
    (4, 5000.0, 4),     # one round already longer than the target: one round
    (732, 3000.0, 732), # never less than one round over every copy (L2 stays cold)
])
def test_launches_per_replay_shortened_for_long_kernels(copies, round_us, expected):
    from tuner.measure.timing import REPLAY_TARGET_US

    launches = launches_per_replay(copies, round_us)
    assert launches == expected and launches % copies == 0
    assert launches * round_us / copies >= min(REPLAY_TARGET_US, MIN_LAUNCHES_PER_REPLAY * round_us / copies)


def test_measurement_rates_of_conv_1(conv_1):
    # the reference config on the H100: 9.1 us
    m = Measurement(median_us=9.1, p10_us=9.0, p90_us=9.3, repeats=30, launches_per_replay=732, copies=732)
    assert m.tflops(conv_1) == pytest.approx(18_874_368 / 9.1e-6 / 1e12)
    assert m.tflops(conv_1) == pytest.approx(2.0741, abs=1e-4)
    assert m.gbps(conv_1) == pytest.approx(215_040 / 9.1e-6 / 1e9)
    assert m.gbps(conv_1) == pytest.approx(23.631, abs=1e-3)
    assert m.spread == pytest.approx(0.3 / 9.1)
    best = Measurement(4.2, 4.1, 4.4, 30, 732, 732)
    assert best.tflops(conv_1) / m.tflops(conv_1) == pytest.approx(9.1 / 4.2)


def test_measurement_is_frozen_and_hashable():
    m = Measurement(1.0, 0.9, 1.1, 30, 64, 2)
    assert hash(m) == hash(Measurement(1.0, 0.9, 1.1, 30, 64, 2))
    with pytest.raises(AttributeError):
        m.median_us = 2.0


def test_one_timing_loop_warms_up_then_times_each_replay_per_launch():
    from tuner.measure.timing import WARMUP_REPLAYS, time_replays

    calls, timings = [], iter([2.0, 4.0, 3.0])

    def replay():
        calls.append("replay")

    def timed_ms(run):
        run()
        return next(timings)

    measurement = time_replays(replay, timed_ms, launches=10, copies=4, repeats=3)
    assert len(calls) == WARMUP_REPLAYS + 3
    assert measurement.median_us == 300.0 and measurement.repeats == 3  # 3 ms over 10 launches
    assert (measurement.launches_per_replay, measurement.copies) == (10, 4)
