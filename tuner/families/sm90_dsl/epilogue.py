"""The sm90 CuTe DSL kernel's epilogue steps: the fixup of split-K and stream-K, the accumulator registers of an epilogue subtile, the fused
alpha (an e4m3 kernel's per-tensor scales), scale, bias, residual and activation, and the element-by-element store of a
K that TMA cannot store. A mixin of kernel.ConvKernel (self.g is its geometry.Geometry)."""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

GELU_K = 0.7978845608028654   # sqrt(2 / pi)


class EpilogueSteps:
    @cute.jit
    def reduce_splits(self, acc: cute.Tensor, mPart: cute.Tensor, mCount: cute.Tensor, sArrivals: cute.Tensor,
                      tile, slot, units, wtid, group_threads: cutlass.Constexpr, epi_barrier, grp):
        """The fixup of a tile that `units` work units sum (split-K's splits, or stream-K's units of this tile, slot
        being this unit's place among them), with no wait on another CTA: the unit stores its f32 accumulators in
        its workspace slot (tile, slot), element-major across the group's threads (16 bytes a thread, coalesced),
        and after a barrier and a gpu-scope release one thread counts the arrival on the tile's counter. The unit
        that counts last (units - 1 arrived before it) acquires, sums the partials, its own included, in slot
        order (the same sum whichever unit arrives last) and sets the counter back to zero for the next launch.
        Returns 0 for that unit, 1 for the others (which must not store the tile); 0 for a tile of one unit (a
        stream-K share's whole tile), which has no fixup."""
        g = self.g
        f32 = self.acc_dtype
        outside = cutlass.Int32(0)
        if units > 1:
            vectors = cute.size(acc) // 4
            frag = cute.make_tensor(acc.iterator, cute.make_layout((4, vectors), stride=(1, 4)))
            size = g.tile_m * g.tile_n
            thread_layout = cute.make_layout((4, vectors), stride=(1, group_threads * 4))
            store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), f32, num_bits_per_copy=128)
            # partials written by other CTAs in this launch: read from L2 (.cg), never from a stale L1 line
            load = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), f32, num_bits_per_copy=128,
                                       load_cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL)
            base = tile * (g.split_slots * size) + wtid * 4
            cute.copy(store, frag, cute.make_tensor(mPart.iterator + cute.assume(base + slot * size, divby=4),
                                                    thread_layout))
            epi_barrier.arrive_and_wait()  # every thread's partial stored before the release below
            if wtid == 0:
                cute.arch.fence_acq_rel_gpu()
                sArrivals[grp] = cute.arch.atomic_add(mCount.iterator + tile, cutlass.Int32(1), sem="acq_rel",
                                                      scope="gpu")
                cute.arch.fence_acq_rel_gpu()
            epi_barrier.arrive_and_wait()
            arrived = sArrivals[grp]
            if arrived == units - 1:
                cute.copy(load, cute.make_tensor(mPart.iterator + cute.assume(base, divby=4), thread_layout), frag)
                other = cute.make_rmem_tensor((4, vectors), f32)
                for s in cutlass.range(1, units, unroll=1):
                    cute.copy(load, cute.make_tensor(mPart.iterator + cute.assume(base + s * size, divby=4),
                                                     thread_layout), other)
                    frag.store(frag.load() + other.load())
                if wtid == 0:
                    mCount[tile] = cutlass.Int32(0)
            outside = cutlass.min(units - 1 - arrived, 1)
        return outside

    def acc_index(self, sub: int, v: int, n_sub: int) -> int:
        """The accumulator register (flat index into r2s.retile(acc)) of value v of epilogue sub-tile `sub`.

        r2s.retile(acc) is ((8, tile_n/16), m_rep, 1): 8 values (one stmatrix x4: 16 columns of the thread's
        rows) per 16-column group, the groups of one 64-row wgmma block, then the m_rep row blocks a warpgroup
        holds (2 in a 128-row pingpong tile and in a 256-row cooperative one, whose two warpgroups take alternate
        64-row blocks; else 1). A sub-tile's registers rD are
        ((8), m_rep, epi_n/16) in that order (value, row block, column group): v = a + 8 (m + m_rep j).
        (The earlier formula took the row block as the outer index of rD, swapping row blocks and column groups
        of 128-row pingpong tiles.)"""
        g = self.g
        m_rep = g.tile_m // (64 * (1 if g.pingpong else g.consumers))
        groups = g.epi_n // 16
        assert n_sub == 8 * m_rep * groups, (n_sub, m_rep, groups)
        a, m, j = v % 8, (v // 8) % m_rep, v // (8 * m_rep)
        return a + 8 * (sub * groups + j) + (g.tile_n // 2) * m

    @cute.jit
    def epilogue_ops(self, rD: cute.Tensor, crd: cute.Tensor, count: cutlass.Constexpr,
                     sub: cutlass.Constexpr, sScale: cute.Tensor, sBias: cute.Tensor, grp, rR: cute.Tensor, alpha):
        """y = act(scale[k] * alpha * acc + bias[k] + beta * residual) on one epilogue sub-tile's registers (alpha
        only in an e4m3 kernel: the product of its operands' per-tensor scales). scale and
        bias come from shared memory (staged per tile) at each element's (m, n) coordinate in the tile; the
        residual `rR` is sub-tile `sub`, TMA-loaded into a slot of the residual ring and read by ldmatrix through
        the stmatrix layout, so in rD's order."""
        g = self.g
        f32 = self.acc_dtype
        if cutlass.const_expr(g.scaled):
            rD.store(rD.load() * alpha)
        if cutlass.const_expr(g.scale or g.bias):
            for v in cutlass.range_constexpr(count):
                col = crd[self.acc_index(sub, v, count)][1] + grp * g.tile_n
                value = rD[v]
                if cutlass.const_expr(g.scale):
                    value = value * sScale[col]
                if cutlass.const_expr(g.bias):
                    value = value + sBias[col]
                rD[v] = value
        if cutlass.const_expr(g.residual):
            res = rR.load().to(f32)  # the sub-tile's residual, ldmatrix'd in rD's order
            if cutlass.const_expr(g.beta == 1.0):
                rD.store(rD.load() + res)
            else:
                rD.store(rD.load() + f32(g.beta) * res)
        if cutlass.const_expr(g.activation == "relu"):
            vec = rD.load()
            rD.store(cute.where(vec > f32(0.0), vec, cute.full_like(vec, 0.0)))
        elif cutlass.const_expr(g.activation == "silu"):
            # x sigmoid(x) = h + h tanh(h), h = x/2: one tanh.approx.f16x2 (one MUFU op) per two elements
            # (was ex2 + rcp per element: four times the MUFU work, 16 ops/clk/SM, +2.8 us on a 28x28 layer)
            for v in cutlass.range_constexpr(0, count, 2):
                h0 = rD[v] * f32(0.5)
                h1 = rD[v + 1] * f32(0.5)
                rD[v], rD[v + 1] = half_plus_half_tanh2(h0, h1, h0, h1)
        elif cutlass.const_expr(g.activation == "gelu"):
            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (|error| < 5e-4 of the erf form, far under
            # the f16 output's rounding at the sizes that matter): one tanh.approx.f16x2 per two elements
            for v in cutlass.range_constexpr(0, count, 2):
                x0 = rD[v]
                x1 = rD[v + 1]
                u0 = x0 * (f32(GELU_K) + f32(GELU_K * 0.044715) * x0 * x0)
                u1 = x1 * (f32(GELU_K) + f32(GELU_K * 0.044715) * x1 * x1)
                rD[v], rD[v + 1] = half_plus_half_tanh2(x0 * f32(0.5), x1 * f32(0.5), u0, u1)

    @cute.jit
    def store_elements(self, mY: cute.Tensor, sD: cute.Tensor, buf, q0, p0, n0, col0, wtid,
                       group_threads: cutlass.Constexpr, outside):
        """One epilogue subtile (tile_m pixels x epi_n channels from col0), staged in sD[buf], written into y element
        by element by the group's threads, where TMA cannot store it (K not a multiple of 8): pixel m of the box is
        (q0 + m mod tile_q, p0 + (m / tile_q) mod bp, n0 + m / (tile_q bp)); pixels past the output, channels past K
        and a split-K unit that is not its tile's last (outside) write nothing. Consecutive threads take consecutive
        channels of one pixel."""
        g = self.g
        for i in cutlass.range_constexpr(g.tile_m * g.epi_n // group_threads):
            index = wtid + i * group_threads
            m = index // g.epi_n
            col = index - m * g.epi_n
            pixel, kk, inside = self.output_position(m, col, q0, p0, n0, col0, outside)
            if inside > 0:
                mY[(pixel, kk)] = sD[(m, col, buf)]

    def output_position(self, m, col, q0, p0, n0, col0, outside):
        """Pixel m of the tile's box, (q0 + m mod tile_q, p0 + (m / tile_q) mod bp, n0 + m / (tile_q bp)), its
        channel col0 + col, and 1 where both are inside y and the unit stores (outside is 0), else 0."""
        g = self.g
        q = q0 + m % g.tile_q
        p = p0 + (m // g.tile_q) % g.bp
        n = n0 + m // (g.tile_q * g.bp)
        kk = col0 + col
        inside = (cutlass.Int32(q < g.yq) * cutlass.Int32(p < g.yp) * cutlass.Int32(n < g.xn)
                  * cutlass.Int32(kk < g.k) * (1 - outside))
        return (q, p, n), kk, inside

    @cute.jit
    def store_direct(self, mY: cute.Tensor, rD: cute.Tensor, crd: cute.Tensor, count: cutlass.Constexpr,
                     sub: cutlass.Constexpr, q0, p0, n0, k0, outside):
        """One epilogue subtile's values stored from the thread's registers straight into y (epi_store "direct": no
        staging, no barrier): value v is the tile's (m, n) = crd[acc_index(sub, v)], pixel m of the box as in
        store_elements; pixels past the output, channels past K and a split-K unit that is not its tile's last
        (outside) write nothing. With K even, values v and v + 1 (even v) that hold adjacent channels of one pixel,
        as the accumulators' pairs do, go in one store of twice the width; any other pair one value at a time."""
        out = self.dtype
        pair_store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), out, num_bits_per_copy=2 * out.width)
        pair = cute.make_rmem_tensor(2, out)
        for v in cutlass.range_constexpr(0, count, 2):
            m, col = crd[self.acc_index(sub, v, count)]
            m1, col1 = crd[self.acc_index(sub, v + 1, count)]
            pixel, kk, inside = self.output_position(m, col, q0, p0, n0, k0, outside)
            pixel1, kk1, inside1 = self.output_position(m1, col1, q0, p0, n0, k0, outside)
            # an even K puts an even channel 4 bytes (8 in tf32) into y: the pair is one aligned store
            paired = cutlass.Int32(m1 == m) * cutlass.Int32(col1 == col + 1) * cutlass.Int32(self.g.k % 2 == 0)
            if inside * paired > 0:
                pair[0] = rD[v].to(out)
                pair[1] = rD[v + 1].to(out)
                offset = cute.crd2idx((pixel, kk), mY.layout)
                cute.copy(pair_store, pair, cute.make_tensor(mY.iterator + cute.assume(offset, divby=2),
                                                             cute.make_layout(2)))
            elif paired == 0:  # never, in the accumulators' layout: the compiler drops it
                if inside > 0:
                    mY[(pixel, kk)] = rD[v].to(out)
                if inside1 > 0:
                    mY[(pixel1, kk1)] = rD[v + 1].to(out)

    @cute.jit
    def stage_elements(self, sD: cute.Tensor, rD: cute.Tensor, crd: cute.Tensor, count: cutlass.Constexpr,
                       sub: cutlass.Constexpr, buf):
        """One epilogue subtile's f32 values (a tf32 kernel's output, which stmatrix cannot move) written into its
        staging buffer sD[buf] one st.shared each: value v is at the tile's (m, n) = crd[acc_index(sub, v)], subtile
        column n - sub * epi_n; the swizzled layout spreads a warp's rows over the banks."""
        for v in cutlass.range_constexpr(count):
            m, col = crd[self.acc_index(sub, v, count)]
            sD[(m, col - sub * self.g.epi_n, buf)] = rD[v]


@dsl_user_op
def half_plus_half_tanh2(h0, h1, u0, u1, *, loc=None, ip=None):
    """(h0 + h0 tanh(u0), h1 + h1 tanh(u1)) in f32, the two tanh by one tanh.approx.f16x2 (relative error
    about 2^-11, the f16 output's own rounding)."""
    args = [cutlass.Float32(v).ir_value(loc=loc, ip=ip) for v in (h0, h1, u0, u1)]
    pair = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32(), T.f32()]), args,
        "{\n\t.reg .b32 p, t;\n\t.reg .f16 tl, th;\n\t.reg .f32 fl, fh;\n\t"
        "cvt.rn.f16x2.f32 p, $5, $4;\n\t"
        "tanh.approx.f16x2 t, p;\n\t"
        "mov.b32 {tl, th}, t;\n\t"
        "cvt.f32.f16 fl, tl;\n\t"
        "cvt.f32.f16 fh, th;\n\t"
        "fma.rn.f32 $0, $2, fl, $2;\n\t"
        "fma.rn.f32 $1, $3, fh, $3;\n\t}",
        "=f,=f,f,f,f,f", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)
    return (cutlass.Float32(llvm.extractvalue(T.f32(), pair, [0], loc=loc, ip=ip)),
            cutlass.Float32(llvm.extractvalue(T.f32(), pair, [1], loc=loc, ip=ip)))
