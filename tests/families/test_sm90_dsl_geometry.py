"""The sm90 DSL kernel's geometry, on the CPU: the residual ring's size, its shared memory and the pipeline
stages it leaves, and the ring slot and mbarrier phase of each epilogue subtile. Skipped where the DSL (the
[dsl] extra) is not installed; nothing is compiled."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed (pip install -e '.[dsl]')")

from tuner.core.epilogue import parse_epilogue  # noqa: E402
from tuner.families.sm90_dsl.kernel import ConvKernel, geometry  # noqa: E402
from tuner.families.sm90_dsl.residency import resident_clusters  # noqa: E402
from tuner.families.sm90_dsl.space import make_config  # noqa: E402
from tuner.families.sm90_dsl.spec import BuildSpec, EpilogueSpec, ProblemSpec, TileSpec  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402

GEMM = ProblemSpec.symmetric(32, 7, 7, 512, 2048, 1, 1, 0, 1, 1)  # 1568x2048x512
RESIDUAL = EpilogueSpec(scale=True, bias=True, residual=True, activation="relu")
BARE = EpilogueSpec(scale=True, bias=True, activation="relu")


def gemm(tile_m: int, tile_n: int, schedule: str, epilogue: EpilogueSpec = RESIDUAL):
    return geometry(BuildSpec(GEMM, epilogue, TileSpec(tile_m, tile_n, 64, schedule=schedule)))


@pytest.mark.parametrize("tile_n, epi_count, slots", [(16, 1, 1), (32, 1, 1), (64, 2, 2), (128, 4, 4), (192, 6, 4),
                                                      (256, 8, 4)])
def test_the_ring_holds_a_tiles_subtiles_up_to_four(tile_n, epi_count, slots):
    g = gemm(64, tile_n, "single")
    assert (g.epi_count, g.res_stages) == (epi_count, slots)
    assert gemm(64, tile_n, "single", BARE).res_stages == 0


@pytest.mark.parametrize("tile_m, tile_n, schedule", [(64, 128, "single"), (128, 256, "cooperative"),
                                                      (128, 64, "cooperative"), (64, 256, "pingpong"),
                                                      (128, 128, "pingpong")])
def test_the_ring_takes_its_subtiles_of_shared_memory_a_group_never_more_than_the_tile(tile_m, tile_n, schedule):
    ring, bare = gemm(tile_m, tile_n, schedule), gemm(tile_m, tile_n, schedule, BARE)
    ring_bytes = ring.smem_bytes(0) - bare.smem_bytes(0)
    assert ring_bytes == ring.groups * ring.res_stages * tile_m * ring.epi_n * 2
    assert ring_bytes <= ring.groups * tile_m * tile_n * 2  # the whole residual tile the kernel kept before
    assert ring.smem_bytes() <= 232448


@pytest.mark.parametrize("tile_m, tile_n, schedule, stages, bare_stages", [
    (128, 256, "cooperative", 3, 4),  # the whole residual tile left 2
    (64, 256, "pingpong", 4, 5),      # 3 before
    (128, 128, "pingpong", 3, 5),     # the ring is the whole tile here (4 subtiles): 3 as before
])
def test_the_ring_gives_the_gemm_back_pipeline_stages(tile_m, tile_n, schedule, stages, bare_stages):
    assert gemm(tile_m, tile_n, schedule).stages == stages
    assert gemm(tile_m, tile_n, schedule, BARE).stages == bare_stages


# 64 and 256: the ring size divides the tile's subtiles (2 of 2, 4 of 8), the slot is static; 192: 4 slots, 6 subtiles
@pytest.mark.parametrize("tile_n", [64, 192, 256])
def test_each_subtile_has_the_next_ring_position_and_a_slot_reused_flips_its_phase(tile_n):
    kernel = ConvKernel(gemm(64, tile_n, "single"))
    g = kernel.g
    seen: dict[int, int] = {}
    for tile in range(5):
        for sub in range(g.epi_count):
            position = tile * g.epi_count + sub
            slot, phase = kernel.ring_position(tile, sub)
            assert (slot, phase) == (position % g.res_stages, (position // g.res_stages) % 2)
            if slot in seen:
                assert phase == seen[slot] ^ 1
            seen[slot] = phase


def test_the_space_counts_the_ring_as_the_kernel_does():
    problem = ConvProblem(n=32, h=7, w=7, c=512, k=2048, r=1, s=1)
    params = {"tile": "128x256x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
              "swizzle": 1, "tile_q": 0}
    fused = make_config(replace(problem, epilogue=parse_epilogue("scale+bias+residual+relu")), params)
    bare = make_config(replace(problem, epilogue=parse_epilogue("scale+bias+relu")), params)
    g = geometry(fused.build_spec())
    assert fused.epilogue_bytes() - bare.epilogue_bytes() == g.smem_bytes(0) - replace(g, res_stages=0).smem_bytes(0)


def test_a_256_row_cooperative_tile_gives_each_warpgroup_two_row_blocks_and_the_kernel_states_the_rule_once():
    from tuner.families.sm90_dsl.spec import SpecError, tile_m_problem

    tall = gemm(256, 64, "cooperative", BARE)
    assert (tall.tile_m, tall.consumers, tall.tile_q) == (256, 2, 256) and tall.stages >= 2
    assert tall.smem_bytes() <= 232448
    for tile_m, tile_n, schedule in [(256, 256, "cooperative"), (512, 64, "cooperative"), (256, 64, "pingpong"),
                                     (128, 64, "single")]:
        with pytest.raises(SpecError) as raised:
            gemm(tile_m, tile_n, schedule)
        assert str(raised.value) == tile_m_problem(tile_m, tile_n, schedule, False)


@pytest.mark.parametrize("tile_m, tile_n, schedule", [(64, 128, "single"), (128, 256, "cooperative"),
                                                      (256, 64, "cooperative"), (256, 128, "cooperative"),
                                                      (128, 128, "pingpong"), (64, 256, "pingpong"),
                                                      (128, 48, "cooperative"), (256, 48, "cooperative"),
                                                      (128, 112, "pingpong"), (64, 80, "single")])
def test_the_epilogue_reads_each_accumulator_of_a_warpgroup_once(tile_m, tile_n, schedule):
    """The subtiles' registers (acc_index) cover a thread's accumulators exactly once: tile_n / 2 a 64-row wgmma
    block, times the blocks a warpgroup holds (two in a 128-row pingpong tile and a 256-row cooperative one)."""
    kernel = ConvKernel(gemm(tile_m, tile_n, schedule, BARE))
    g = kernel.g
    blocks = tile_m // (64 * (1 if g.pingpong else g.consumers))
    n_sub = 8 * blocks * (g.epi_n // 16)
    read = [kernel.acc_index(sub, v, n_sub) for sub in range(g.epi_count) for v in range(n_sub)]
    assert sorted(read) == list(range(tile_n // 2 * blocks))


# (problem, tile, cluster_m, swizzle, raster): scheduled M tiles past the last, in each of the three ways y's modes
# can be degenerate: pixels in order (im2col, N=1 and one "row"), boxes at batch 1 (N of extent 1), boxes at batch 8
@pytest.mark.parametrize("problem, tile, cluster_m, swizzle, raster", [
    (ProblemSpec.symmetric(1, 28, 28, 128, 128, 3, 3, 1, 1, 1), TileSpec(128, 64, 64, tile_q=-1), 2, 1, "m"),
    (ProblemSpec.symmetric(1, 28, 28, 128, 128, 3, 3, 1, 1, 1), TileSpec(128, 64, 64, tile_q=-1), 1, 2, "n"),
    (ProblemSpec.symmetric(1, 28, 28, 128, 128, 1, 1, 0, 1, 1), TileSpec(128, 64, 64), 2, 1, "m"),
    (ProblemSpec.symmetric(1, 28, 28, 256, 256, 3, 3, 1, 1, 1), TileSpec(128, 64, 64, tile_q=32), 2, 1, "m"),
    (ProblemSpec.symmetric(1, 56, 56, 64, 64, 3, 3, 1, 1, 1), TileSpec(64, 64, 64, schedule="single", tile_q=8), 2,
     1, "m"),
    (ProblemSpec.symmetric(8, 7, 7, 512, 512, 3, 3, 1, 1, 1), TileSpec(128, 64, 64, tile_q=8), 2, 4, "n"),
])
def test_scheduled_tiles_past_the_last_land_outside_y_in_a_mode_tma_keeps(problem, tile, cluster_m, swizzle, raster):
    """TMA drops a mode of extent 1 from y's view, so a padded M tile whose overflow went into such a mode was
    stored onto a real tile (the first): the im2col kernels' padded tile overwrote it on the H200."""
    spec = BuildSpec(problem, EpilogueSpec(), replace(tile, cluster_m=cluster_m, swizzle=swizzle, raster=raster))
    kernel = ConvKernel(geometry(spec))
    g = kernel.g
    scheduled_m, _ = g.scheduled_tiles
    assert scheduled_m > g.m_tiles  # the case has padded tiles
    extents = (g.yq, g.yp, g.xn)
    origins = set()
    for mi in range(scheduled_m):
        q0, p0, n0, _ = kernel.tile_origin(SimpleNamespace(tile_idx=(mi, 0, 0)))
        if mi < g.m_tiles:
            assert all(0 <= v < e for v, e in zip((q0, p0, n0), extents)), (mi, q0, p0, n0)
            origins.add((q0, p0, n0))
        else:
            assert any(v >= e > 1 for v, e in zip((q0, p0, n0), extents)), (mi, q0, p0, n0, extents)
    assert len(origins) == g.m_tiles


@pytest.mark.parametrize("tile_n, columns, buffers", [(128, 64, 4), (128, 64, 2), (96, 64, 4), (48, 64, 3)])
def test_the_space_counts_the_epilogue_staging_as_the_kernel_does(tile_n, columns, buffers):
    problem = ConvProblem(n=32, h=7, w=7, c=512, k=2048, r=1, s=1, epilogue=parse_epilogue("scale+bias+residual+relu"))
    params = {"tile": f"128x{tile_n}x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
              "swizzle": 1, "tile_q": 0}
    plain, staged = make_config(problem, params), make_config(problem, {**params, "epi_columns": columns,
                                                                          "epi_buffers": buffers})
    g, g0 = geometry(staged.build_spec()), geometry(plain.build_spec())
    assert (g.epi_n, g.epi_stages) == (tile_n % 64 == 0 and 64 or (32 if tile_n % 32 == 0 else 16), buffers)
    assert staged.epilogue_bytes() - plain.epilogue_bytes() == g.smem_bytes(0) - g0.smem_bytes(0)


@pytest.mark.parametrize("tile, schedule, splits", [("64x16x64", "single", 4), ("128x64x64", "cooperative", 2),
                                                    ("64x32x64", "single", 8)])
def test_splits_reduced_in_the_cluster_launch_as_the_cluster_with_no_workspace(tile, schedule, splits):
    """A 1 x S cluster a tile, S clusters' worth of CTAs a wave at most; split 0's buffer of the others' partials
    counted by the space as by the kernel; no global workspace."""
    problem = ConvProblem(n=1, h=7, w=7, c=2048, k=512, r=1, s=1, epilogue=parse_epilogue("scale+bias+residual+relu"))
    params = {"tile": tile, "cluster": "1x1x1", "schedule": schedule, "stages": 0, "raster": "m", "swizzle": 1,
              "tile_q": 0, "split_k": splits}
    workspace, cluster = make_config(problem, params), make_config(problem, {**params, "split_reduce": "cluster"})
    g, g0 = geometry(cluster.build_spec()), geometry(workspace.build_spec())
    assert g.cluster_reduce and not g0.cluster_reduce
    assert g.launch_cluster == (1, splits) and g0.launch_cluster == (1, 1)
    assert (g.cluster_m, g.cluster_n) == (1, 1)  # nothing multicast: each split loads its own k tiles
    tiles = g.m_tiles * g.n_tiles
    assert g.grid == (1, splits, min(tiles, resident_clusters(splits)))  # 29 clusters of 4, 13 of 8
    assert not g.uses_workspace and g.workspace_bytes == 0 and g.partial_elements == 0
    assert g0.uses_workspace and g0.workspace_bytes > 0
    assert g.exchange_elements == (splits - 1) * g.tile_m * g.tile_n
    assert cluster.epilogue_bytes() - workspace.epilogue_bytes() == g.smem_bytes(0) - g0.smem_bytes(0)
    assert g.stages == min(cluster.stage_count, 8)
