"""Split-K reduced within a cluster, for the sm90 CuTe DSL kernel: the scheduler that hands each CTA of a 1 x S
cluster one split of the same tile, and the exchange in which split 0 sums the others' f32 partials in its shared
memory (distributed shared memory: `st.async` stores that complete bytes on split 0's mbarrier), where split-K's
workspace path writes them to global memory, fences at gpu scope and counts arrivals with an atomic.

The DSL's scheduler refuses a cluster K extent above 1, so the splits lie along the cluster's N axis: the scheduler
sees n_tiles x S tiles along N in clusters of 1 x S, and scheduler tile n is (n tile n // S, split n % S), which is
the CTA's rank in the cluster. Every CTA of a cluster walks the same cluster tiles in the same order, so the k-th
tile of each is the same tile, and the exchange's mbarrier phases count tiles."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass.utils.static_persistent_tile_scheduler import WorkTileInfo


class ClusterSplitScheduler(utils.StaticPersistentTileScheduler):
    """StaticPersistentTileScheduler over (m tiles, n tiles x S) in 1 x S clusters, whose work tiles come out as
    (m tile, n tile, split): the form split-K's tiles take, so the producer, the consumers and the residual's load
    warp walk them with their split-K code."""

    def __init__(self, params, num_persistent_clusters, current_work_linear_idx, cta_id_in_cluster,
                 num_tiles_executed, splits: int):
        super().__init__(params, num_persistent_clusters, current_work_linear_idx, cta_id_in_cluster,
                         num_tiles_executed)
        self.splits = splits

    def __new_from_mlir_values__(self, values):
        base = super().__new_from_mlir_values__(values)
        return ClusterSplitScheduler(base.params, base.num_persistent_clusters, base._current_work_linear_idx,
                                     base.cta_id_in_cluster, base._num_tiles_executed, self.splits)

    @staticmethod
    def create_for(params: utils.PersistentTileSchedulerParams, block_idx, grid_dim, splits: int):
        base = utils.StaticPersistentTileScheduler.create(params, block_idx, grid_dim)
        return ClusterSplitScheduler(base.params, base.num_persistent_clusters, base._current_work_linear_idx,
                                     base.cta_id_in_cluster, base._num_tiles_executed, splits)

    def get_current_work(self, *, loc=None, ip=None) -> WorkTileInfo:
        work = self._get_current_work_for_linear_idx(self._current_work_linear_idx, loc=loc, ip=ip)
        m, n, _ = work.tile_idx
        return WorkTileInfo((m, n // self.splits, n % self.splits), work.is_valid_tile)

    def initial_work_tile_info(self, *, loc=None, ip=None) -> WorkTileInfo:
        return self.get_current_work(loc=loc, ip=ip)


class ClusterExchange:
    """A mixin of kernel.ConvKernel: the consumers' side of the exchange (self.g is its geometry.Geometry)."""

    @cute.jit
    def reduce_in_cluster(self, acc: cute.Tensor, sExchange: cute.Tensor, exchange_full, split, rounds, wtid,
                          group_threads: cutlass.Constexpr, epi_barrier):
        """Split `split` of a tile, its `rounds`-th (counted from 0). Splits 1 .. S-1 wait until split 0 has read
        their previous partial (its `free` mbarrier, which split 0 arrives on remotely), then store their f32
        accumulators into slot split - 1 of split 0's exchange buffer, 16 bytes a store, element-major across the
        consumer threads (each 128-bit store of a warp lands in 512 contiguous bytes: no bank conflict), as bits
        (st.async moves 32-bit integers). Split 0 expects the bytes on its `full` mbarrier, adds the slots in
        order to its own accumulators, and once every consumer thread has read them frees each peer's slot.
        Returns 0 for split 0, which holds the sum and stores the tile, 1 for the others (their stores are
        moved past the output, as the workspace path's are)."""
        g = self.g
        size = g.tile_m * g.tile_n
        vectors = cute.size(acc) // 4
        frag = cute.make_tensor(acc.iterator, cute.make_layout((4, vectors), stride=(1, 4)))
        bits = cute.recast_tensor(frag, cutlass.Int32)
        exchange_free = exchange_full + 1
        phase = rounds % 2
        if split > 0:
            cute.arch.mbarrier_wait(exchange_free, phase ^ 1)  # a fresh barrier's odd phase passes: round 0
            for v in cutlass.range_constexpr(vectors):
                slot = sExchange.iterator + cute.assume((split - 1) * size + (v * group_threads + wtid) * 4,
                                                        divby=4)
                cute.arch.store_async_dsmem(slot, (bits[0, v], bits[1, v], bits[2, v], bits[3, v]),
                                            exchange_full, 0)
        else:
            if wtid == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(exchange_full, (g.split_k - 1) * size * 4)
            cute.arch.mbarrier_wait(exchange_full, phase)
            received = cute.recast_tensor(sExchange, cutlass.Float32)
            for s in cutlass.range_constexpr(g.split_k - 1):
                for v in cutlass.range_constexpr(vectors):
                    for j in cutlass.range_constexpr(4):
                        frag[j, v] = frag[j, v] + received[s * size + (v * group_threads + wtid) * 4 + j]
            epi_barrier.arrive_and_wait()  # every slot read before any is freed
            if wtid == 0:
                for peer in cutlass.range_constexpr(1, g.split_k):
                    cute.arch.mbarrier_arrive(exchange_free, peer)
        return cutlass.min(split, 1)
