"""The sm90 CuTe DSL kernel's consumer warpgroups: for each work tile, the wgmma mainloop over the stages the
producer fills, split-K's fixup (through the workspace, or within the cluster), and the epilogue subtile by subtile
(the fused operations, the residual from its ring, the store through shared memory). A mixin of kernel.ConvKernel
(self.g is its geometry.Geometry)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils


class Consumers:
    @cute.jit
    def consume(self, tiled_mma: cute.TiledMma, mainloop, sA: cute.Tensor, sB: cute.Tensor, sD: cute.Tensor,
                sD_map: cute.Tensor, tma_d: cute.CopyAtom, mY: cute.Tensor, sched: utils.PersistentTileSchedulerParams,
                mScale: cute.Tensor, mBias: cute.Tensor, sScale: cute.Tensor, sBias: cute.Tensor,
                sR: cute.Tensor, ring_full, ring_empty, order_barrier, tidx, warp_idx, mPart: cute.Tensor,
                mCount: cute.Tensor, sArrivals: cute.Tensor, mInputScale: cute.Tensor, mFilterScale: cute.Tensor,
                sExchange: cute.Tensor, exchange_full):
        g = self.g
        f16, f32 = self.staged_dtype, self.acc_dtype
        alpha = f32(1.0)
        if cutlass.const_expr(g.scaled):
            alpha = mInputScale[0] * mFilterScale[0]  # the e4m3 operands' per-tensor scales, once a thread
        ctid = tidx - 128
        # pingpong: consumer warpgroup `grp` takes the CTA's tiles grp, grp + 2, ... alone (its own tile_m x
        # tile_n accumulators, epilogue buffers, scale/bias copies, residual ring and named barrier); its epilogue
        # runs while the other warpgroup's mainloop uses the tensor cores. Otherwise grp is 0 and the
        # consumers share each tile.
        grp = 0
        wtid = ctid
        group_threads = self.num_mma_threads
        if cutlass.const_expr(g.pingpong):
            grp = cute.arch.make_warp_uniform(ctid // 128)
            wtid = ctid - grp * 128
            group_threads = 128
            thr_mma = tiled_mma.get_slice(0)
        else:
            thr_mma = tiled_mma.get_slice((ctid // 128) * 128)  # A/B: one slice per warpgroup
        epi_barrier = pipeline.NamedBarrier(barrier_id=1 + grp, num_threads=group_threads)
        lead_warp = warp_idx == 4 + grp * 4  # issues the group's TMA stores
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        cTile = cute.make_identity_tensor((g.tile_m, g.tile_n))
        tCcC = tiled_mma.get_slice(wtid).partition_C(cTile)  # C: this thread's elements
        acc = cute.make_rmem_tensor(tCcC.shape, f32)
        k_blocks = cute.size(tCrA, mode=[2])

        # epilogue: accumulators -> registers (f16) -> shared (stmatrix) -> TMA store, epi_n columns a time
        kmaj = utils.LayoutEnum.ROW_MAJOR
        r2s_atom = sm90_utils.get_smem_store_op(kmaj, elem_ty_d=f16, elem_ty_acc=f32)
        st_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), f16)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(st_atom, tiled_mma))
        thr_r2s = r2s.get_slice(wtid)
        tRS_sD = thr_r2s.partition_D(sD_map)
        tRS_acc = r2s.retile(acc)
        tRS_crd = r2s.retile(tCcC)
        rD_shape = cute.shape(thr_r2s.partition_S(sD_map))
        rD = cute.make_rmem_tensor(rD_shape[:3], f32)
        rD_out = cute.make_rmem_tensor(rD_shape[:3], f16)
        n_sub = cute.size(rD)
        # the residual is read back by ldmatrix through the stmatrix layout (CUTLASS's S2R of the epilogue
        # source): its registers come in rD's order, one ldmatrix.x4 per 8 values instead of a scalar load by
        # (m, n) coordinate from the swizzled copy each (H100: 2048x1568x512 GEMM + residual 16.21 -> 14.75 us)
        rR = rD_out
        tSR_sR = tRS_sD
        tSR_rR = rD_out
        s2r = r2s
        if cutlass.const_expr(g.residual):
            ld_atom = cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), f16)
            s2r = cute.make_tiled_copy_S(ld_atom, cute.make_tiled_copy_C_atom(st_atom, tiled_mma))
            tSR_sR = s2r.get_slice(wtid).partition_S(sR)
            rR = cute.make_rmem_tensor(rD_shape[:3], f16)
            tSR_rR = s2r.retile(rR)
        epi_count = g.epi_count

        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=g.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, group_threads))
        # the producer loads every tile's k tiles in order; a pingpong group starts past the other group's
        # first tile (group 1) and skips the other's k tiles after each of its own
        read_state = self.consumer_state_at(grp * g.k_tiles)
        release_state = self.consumer_state_at(grp * g.k_tiles)
        box_m = (g.tile_q, g.bp, g.bn)
        tile_step = g.groups
        order_phase = cutlass.Int32(1) - grp  # group 0's first wait passes, group 1's waits for group 0

        scheduler = self.make_scheduler(sched)
        if cutlass.const_expr(g.pingpong):
            scheduler._current_work_linear_idx += grp * scheduler.num_persistent_clusters
        work = scheduler.initial_work_tile_info()
        while work.is_valid_tile:
            q0, p0, n0, k0 = self.tile_origin(work)
            k_begin, k_end = self.unit_k_range(scheduler, work)
            gD = self.output_tile(mY, work)
            if cutlass.const_expr(g.scale or g.bias):
                for i in cutlass.range_constexpr(-(-g.tile_n // (self.num_mma_threads // g.groups))):
                    col = wtid + i * (self.num_mma_threads // g.groups)
                    if col < g.tile_n:
                        kk = k0 + col
                        if cutlass.const_expr(g.k % g.tile_n != 0):
                            if kk >= g.k:
                                kk = k0 * 0 + (g.k - 1)  # a column past K: any value, TMA clips its store
                        if cutlass.const_expr(g.scale):
                            sScale[col + grp * g.tile_n] = mScale[kk]
                        if cutlass.const_expr(g.bias):
                            sBias[col + grp * g.tile_n] = mBias[kk]

            if cutlass.const_expr(g.pingpong):
                cute.arch.mbarrier_wait(order_barrier + grp, order_phase)
                order_phase = order_phase ^ 1
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            cute.nvgpu.warpgroup.fence()
            # first k tile: no earlier wgmma to wait for
            mainloop.consumer_wait(read_state)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                          tCrB[(None, None, kb, 0 if g.gather else read_state.index)], acc)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
            cute.nvgpu.warpgroup.commit_group()
            read_state.advance()
            for kt in cutlass.range(1, k_end - k_begin, unroll=1):
                mainloop.consumer_wait(read_state)
                b_index = read_state.index
                if cutlass.const_expr(g.gather):
                    b_index = kt  # the resident filter's k tile
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read_state.index)],
                              tCrB[(None, None, kb, b_index)], acc)
                cute.nvgpu.warpgroup.commit_group()
                cute.nvgpu.warpgroup.wait_group(1)
                mainloop.consumer_release(release_state)
                release_state.advance()
                read_state.advance()
            if cutlass.const_expr(g.pingpong):
                # every k tile of this one waited for: the other group's mainloop may start
                cute.arch.mbarrier_arrive(order_barrier + (1 - grp))
            cute.nvgpu.warpgroup.wait_group(0)
            mainloop.consumer_release(release_state)
            release_state.advance()
            if cutlass.const_expr(g.pingpong):
                read_state = self.consumer_state_at(read_state.count + g.k_tiles)
                release_state = self.consumer_state_at(release_state.count + g.k_tiles)
            if cutlass.const_expr(g.splits):
                # every unit runs the epilogue (the residual and store pipelines keep their rhythm), but only the
                # unit holding the full sum stores (the tile's last to arrive, or split 0 of a cluster-reduced
                # tile): the others' store boxes are moved past the output (q and n beyond it, out of bounds
                # however TMA merges the modes) and clipped
                if cutlass.const_expr(g.cluster_reduce):
                    outside = self.reduce_in_cluster(acc, sExchange, exchange_full, work.tile_idx[2],
                                                     scheduler.num_tiles_executed, wtid, group_threads, epi_barrier)
                else:
                    tile = work.tile_idx[0] * g.scheduled_tiles[1] + work.tile_idx[1]
                    slot, units = work.tile_idx[2], g.split_k
                    if cutlass.const_expr(g.stream_k):
                        slot, units = scheduler.unit_slot()
                    outside = self.reduce_splits(acc, mPart, mCount, sArrivals, tile, slot, units, wtid,
                                                 group_threads, epi_barrier, grp)
                gD = cute.local_tile(cute.domain_offset(((q0 + outside * g.yq, p0, n0 + outside * g.xn), k0), mY),
                                     (box_m, g.tile_n), (0, 0))

            if cutlass.const_expr(g.scale or g.bias):
                epi_barrier.arrive_and_wait()  # scale and bias are in shared memory
            gD_epi = cute.zipped_divide(gD, (box_m, g.epi_n))
            bSG_sD, bSG_gD = sD, gD_epi
            if cutlass.const_expr(not g.stores_by_thread):
                bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
                    tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi)
            base = scheduler.num_tiles_executed * epi_count
            for e in cutlass.range_constexpr(epi_count):
                for v in cutlass.range_constexpr(n_sub):
                    rD[v] = tRS_acc[self.acc_index(e, v, n_sub)]
                if cutlass.const_expr(g.residual):
                    slot, phase = self.ring_position(scheduler.num_tiles_executed, e)
                    slot = slot + grp * g.res_stages
                    cute.arch.mbarrier_wait(ring_full + slot, phase)
                    cute.copy(s2r, tSR_sR[(None, None, None, slot)], tSR_rR)
                    # the registers hold the subtile: the load warp may refill its slot. The refill is a TMA write
                    # (the async proxy), so the generic proxy's reads are fenced first (as CUTLASS's epilogue
                    # fences before it releases a C buffer)
                    cute.arch.fence_proxy("async.shared", space="cta")
                    cute.arch.mbarrier_arrive(ring_empty + slot)
                self.epilogue_ops(rD, tRS_crd, n_sub, e, sScale, sBias, grp, rR, alpha)
                if cutlass.const_expr(g.stores_direct):
                    self.store_direct(mY, rD, tRS_crd, n_sub, e, q0, p0, n0, k0, outside if g.splits else 0)
                else:
                    buf = grp * g.epi_stages + (base + e) % g.epi_stages
                    if cutlass.const_expr(g.stages_by_element):
                        self.stage_elements(sD, rD, tRS_crd, n_sub, e, buf)
                    else:
                        rD_out.store(rD.load().to(f16))
                        cute.copy(r2s, rD_out, tRS_sD[(None, None, None, buf)])
                    cute.arch.fence_proxy("async.shared", space="cta")
                    epi_barrier.arrive_and_wait()
                    if cutlass.const_expr(g.stores_elements):
                        self.store_elements(mY, sD, buf, q0, p0, n0, k0 + e * g.epi_n, wtid, group_threads,
                                            outside if g.splits else 0)
                    elif lead_warp:
                        cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, (0, e))], **self.l2_policy("y"))
                        store_pipe.producer_commit()
                        store_pipe.producer_acquire()
                    epi_barrier.arrive_and_wait()
            if cutlass.const_expr(g.stores_direct and (g.scale or g.bias)):
                epi_barrier.arrive_and_wait()  # every thread has read this tile's scale and bias: the next may load
            scheduler.advance_to_next_work(advance_count=tile_step)
            work = scheduler.get_current_work()
        store_pipe.producer_tail()

    def ring_position(self, group_tiles, sub: int):
        """(slot, phase) of epilogue subtile `sub` of a consumer group's tile number `group_tiles` (counted from 0)
        in the group's residual ring: the group's subtiles go round the ring in order, position
        group_tiles * epi_count + sub, slot = position mod res_stages, and the mbarriers' phase flips a lap."""
        g = self.g
        if g.epi_count % g.res_stages == 0:  # the slot is static
            laps = group_tiles * (g.epi_count // g.res_stages) + sub // g.res_stages
            return sub % g.res_stages, laps % 2
        position = group_tiles * g.epi_count + sub
        return position % g.res_stages, (position // g.res_stages) % 2
