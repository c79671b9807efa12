"""Stream-K's plan for the sm90 CuTe DSL kernel, in plain Python: how the k tiles of every output tile, laid end to
end, are shared among one wave of persistent clusters, and which units of a tile its fixup waits for. The kernel's
scheduler (stream_k.py) runs these methods on its device integers; the family's checks and the tests run them on
Python ints. No DSL import."""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class StreamKPlan:
    """Stream-K: the k tiles of every cluster tile, laid end to end (tile t's k tile j at t * k_tiles + j), cut
    into `clusters` equal contiguous shares, one a persistent cluster: cluster c sums [c*work//clusters,
    (c+1)*work//clusters), whole tiles and the ends of at most two others. A tile summed by several clusters has
    one unit each, in cluster order (slot 0 is the tile's first k tiles); every unit stores its partial, and the
    last to arrive sums them in slot order and stores the tile, as split-K's units do. Each CTA of a cluster does
    the same on its own tile of the cluster tile. The kernel (sm90_dsl/stream_k.py) computes the same integers."""

    cluster_tiles: int  # the scheduler's tiles of whole clusters (each CTA of a cluster holds one of its tiles)
    k_tiles: int
    clusters: int       # persistent clusters in the grid

    @property
    def work(self) -> int:
        return self.cluster_tiles * self.k_tiles

    def share(self, cluster: int) -> tuple[int, int]:
        """The k tiles [begin, end) of the end-to-end order that `cluster` sums."""
        return cluster * self.work // self.clusters, (cluster + 1) * self.work // self.clusters

    def owner(self, position: int) -> int:
        """The cluster whose share holds k tile `position` of the end-to-end order."""
        return ((position + 1) * self.clusters - 1) // self.work

    def units(self, tile: int) -> tuple[int, int]:
        """(the first cluster that sums part of `tile`, how many do)."""
        first = self.owner(tile * self.k_tiles)
        return first, self.owner(tile * self.k_tiles + self.k_tiles - 1) - first + 1

    # The walk of one share, position by position, as the kernel's scheduler takes it (stream_k.StreamKScheduler
    # calls these with its device integers and cutlass.min): a unit is the rest of the tile at `position`, up to
    # the share's `end`.
    def unit(self, position, end, minimum=min):
        """(tile, its k tiles [begin, end)) of the unit that starts at `position`."""
        tile = position // self.k_tiles
        start = tile * self.k_tiles
        return tile, position - start, minimum(self.k_tiles, end - start)

    def next_position(self, position, end, minimum=min):
        return minimum((position // self.k_tiles + 1) * self.k_tiles, end)

    def slot(self, position):
        """(the place of the unit at `position` among its tile's units, how many units the tile has)."""
        start = position // self.k_tiles * self.k_tiles
        first = self.owner(start)
        return self.owner(position) - first, self.owner(start + self.k_tiles - 1) - first + 1

    @functools.cached_property
    def slots(self) -> int:
        """Units of the tile that has the most: the workspace's partials a tile. A tile has one unit more than the
        shares that start inside it (not at its first k tile), so this walks the clusters' starts, not the tiles: the
        static checks ask it of every stream-K configuration, and a large layer has tens of thousands of tiles."""
        starts = (cluster * self.work // self.clusters for cluster in range(1, self.clusters))
        inside = Counter(start // self.k_tiles for start in starts if start % self.k_tiles)
        return 1 + max(inside.values(), default=0)

    @property
    def shortest_share(self) -> int:
        return self.work // self.clusters


def stream_k_problem(plan: StreamKPlan, schedule: str, gathers: bool) -> str | None:
    """Why stream-K cannot be built for `plan`, or None: the one statement of the rule, raised by geometry.geometry
    and reported by the family's static checks."""
    if schedule == "pingpong":
        return "stream-K is not built with the pingpong schedule (its groups skip each other's k tiles by count)"
    if gathers:
        return "a gathering kernel (C < 8) runs without split-K or stream-K"
    if plan.work * plan.clusters >= 1 << 31:
        return (f"stream-K over {plan.work} k tiles in {plan.clusters} shares overflows the kernel's 32-bit "
                "arithmetic (use split-K)")
    if plan.slots < 2:
        return (f"stream-K splits no tile here: {plan.cluster_tiles} tiles of {plan.k_tiles} k tiles share out whole "
                f"among {plan.clusters} clusters (split_k 1 is the same work without the workspace)")
    return None


def stream_k_plan(scheduled_tiles: int, cluster_size: int, k_tiles: int, clusters_at_once: int) -> StreamKPlan:
    """The plan a kernel is built with: one share a persistent cluster, as many clusters as the SMs hold and never
    more than the k tiles. `scheduled_tiles`: the tiles the scheduler hands out, whole clusters and swizzle groups."""
    cluster_tiles = scheduled_tiles // cluster_size
    return StreamKPlan(cluster_tiles, k_tiles, min(cluster_tiles * k_tiles, clusters_at_once))
