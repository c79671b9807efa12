"""Stream-K's work walk for the sm90 CuTe DSL kernel: a persistent tile scheduler whose cluster sums its share of the
k tiles of every tile laid end to end (spec.StreamKPlan states the arithmetic; this computes the same integers on the
device). Its interface is StaticPersistentTileScheduler's, so that the producer, the consumers and the residual's load
warp walk their units with the loops they walk tiles with: a work tile is one unit, (tile, k tiles [begin, end))."""
from __future__ import annotations

import cutlass
import cutlass.utils as utils
from cutlass.cutlass_dsl import Int32, extract_mlir_values, new_from_mlir_values
from cutlass.utils.static_persistent_tile_scheduler import WorkTileInfo

from .stream_plan import StreamKPlan


class StreamKScheduler(utils.StaticPersistentTileScheduler):
    """`_current_work_linear_idx` is the position in the end-to-end k order (tile * k_tiles + k tile), `_end` the end
    of this cluster's share; the tile at a position is the scheduler's tile (tile coordinates, cluster rank added) of
        the linear index position // k_tiles. The plan's integers are compiled in, and its methods are the arithmetic
    (the tests walk the shares with the same methods on the CPU)."""

    def __init__(self, params, num_persistent_clusters, current_work_linear_idx, cta_id_in_cluster,
                 num_tiles_executed, end, plan: StreamKPlan):
        super().__init__(params, num_persistent_clusters, current_work_linear_idx, cta_id_in_cluster,
                         num_tiles_executed)
        self._end = end
        self.plan = plan

    def __extract_mlir_values__(self):
        return super().__extract_mlir_values__() + extract_mlir_values(self._end)

    def __new_from_mlir_values__(self, values):
        base = super().__new_from_mlir_values__(values[:-1])
        return StreamKScheduler(base.params, base.num_persistent_clusters, base._current_work_linear_idx,
                                base.cta_id_in_cluster, base._num_tiles_executed,
                                new_from_mlir_values(self._end, [values[-1]]), self.plan)

    @staticmethod
    def create_for(params: utils.PersistentTileSchedulerParams, block_idx, grid_dim, plan: StreamKPlan):
        base = utils.StaticPersistentTileScheduler.create(params, block_idx, grid_dim)
        begin, end = plan.share(base._current_work_linear_idx)  # the grid's z index: one share a cluster
        return StreamKScheduler(base.params, base.num_persistent_clusters, Int32(begin), base.cta_id_in_cluster,
                                base._num_tiles_executed, Int32(end), plan)

    def get_current_work(self, *, loc=None, ip=None) -> WorkTileInfo:
        tile, _, _ = self.plan.unit(self._current_work_linear_idx, self._end, cutlass.min)
        return WorkTileInfo(self._get_current_work_for_linear_idx(tile, loc=loc, ip=ip).tile_idx,
                            self._current_work_linear_idx < self._end)

    def initial_work_tile_info(self, *, loc=None, ip=None) -> WorkTileInfo:
        return self.get_current_work(loc=loc, ip=ip)

    def advance_to_next_work(self, *, advance_count: int = 1, loc=None, ip=None) -> None:
        self._current_work_linear_idx = self.plan.next_position(self._current_work_linear_idx, self._end, cutlass.min)
        self._num_tiles_executed += Int32(1)

    def k_range(self):
        """The current unit's k tiles [begin, end) of its tile."""
        _, begin, end = self.plan.unit(self._current_work_linear_idx, self._end, cutlass.min)
        return begin, end

    def unit_slot(self):
        """(the current unit's place among its tile's units, how many units the tile has)."""
        return self.plan.slot(self._current_work_linear_idx)
