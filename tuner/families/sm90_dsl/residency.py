"""How many thread block clusters a 132-SM Hopper (the H100 SXM, the H200) is sure to run at once, in plain Python (no
DSL import): the persistent grid launches no more (kernel.py, geometry.Geometry.grid), and the cost model counts a
second wave past them. These parts have 66 of the GH100's 72 TPCs (2 SMs each) in 8 GPCs of at most 9, which 6 are
disabled varies by chip, and a cluster's CTAs run on one GPC. With one CTA an SM (this family's shared memory), a GPC
of t TPCs holds floor(2t / s) clusters of s CTAs, and a chip the fewest over the ways its TPCs may be spread: 66
clusters of 2, 29 of 4, 13 of 8. A persistent grid of more leaves the rest waiting for a resident cluster to finish
all of its tiles: the grid once launched 132 / s clusters, 33 of 4, where ncu's occupancy section on an H200
(2026-11-29) reported at most 30 clusters of 4 and 15 of 8 (and 66 of 2); cuDNN's 4-CTA kernel launched 28 there and
nvjet's 8-CTA one 8. On that H200, on ResNet-50's 7x7 batch-1 1x1, 64x16 tiles split 4 ways in 1x4 clusters ran
7.23 us (32 clusters) where 64x32 tiles split alike ran 4.49 (16; twice the columns a CTA), and 64x32 split 8 ways
8.67 (16 clusters of 8). There the chip's own count (cudaOccupancyMaxActiveClusters) was 1 cluster of 4 and 2 of 8
above these."""
from __future__ import annotations

import functools

GPCS = 8
TPCS = 66  # enabled: the 132 SMs
MAX_TPCS_PER_GPC = 9
SMS_PER_TPC = 2


@functools.lru_cache(maxsize=16)
def resident_clusters(cluster_size: int) -> int:
    """The fewest clusters of `cluster_size` CTAs (one an SM) that any chip of this make holds at once."""
    if cluster_size <= 1:
        return TPCS * SMS_PER_TPC
    fewest = {0: 0}  # TPCs placed in the GPCs so far -> the fewest clusters they hold
    for _ in range(GPCS):
        fewest = _spread(fewest, cluster_size)
    return fewest[TPCS]


def _spread(fewest: dict[int, int], cluster_size: int) -> dict[int, int]:
    """One more GPC: for each count of TPCs placed, the fewest clusters they hold."""
    out: dict[int, int] = {}
    for placed, held in fewest.items():
        for t in range(MAX_TPCS_PER_GPC + 1):
            total = placed + t
            if total <= TPCS:
                out[total] = min(out.get(total, 1 << 30), held + SMS_PER_TPC * t // cluster_size)
    return out
