"""The sm90 CuTe DSL builder, on the CPU: a GEMM spec and a 3x3 conv spec build a candidate.so with every
entry point the tuner loads, ptxas.txt parses, and a bad spec exits 1 with one line. Skipped where the DSL
(the [dsl] extra) is not installed; no GPU is needed (the DSL compiles for sm_90a without one)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed (pip install -e '.[dsl]')")
if shutil.which("gcc") is None:
    pytest.skip("gcc is needed to link candidate.so", allow_module_level=True)

from tuner.build.nvcc import parse_ptxas  # noqa: E402
from tuner.families.sm90_dsl.spec import (  # noqa: E402
    L2_EVICT_FIRST, L2_EVICT_LAST, BuildSpec, EpilogueSpec, ProblemSpec, SpecError, TileSpec)

ENTRY_POINTS = ["tuner_abi_version", "tuner_kernel_count"] + [
    f"tuner_k0_{name}" for name in
    ("can_implement", "workspace_bytes", "grid", "kernel_attributes", "create", "launch", "destroy")]

GEMM = BuildSpec(ProblemSpec.symmetric(32, 7, 7, 512, 2048, 1, 1, 0, 1, 1), EpilogueSpec(),
                 TileSpec(128, 256, 64, schedule="cooperative"))
CONV = BuildSpec(ProblemSpec.symmetric(32, 28, 28, 128, 128, 3, 3, 1, 1, 1),
                 EpilogueSpec(scale=True, bias=True, residual=True, beta=0.5, activation="silu"),
                 TileSpec(64, 128, 64, cluster_m=1, cluster_n=2, schedule="single", tile_q=32))

# bf16 in and out, fused with a bf16 residual
CONV_BF16 = BuildSpec(CONV.problem, CONV.epilogue, CONV.tile, element="bf16")


def problem_values(p: ProblemSpec, split_k: int):
    """The problem array tuner/measure/run.py hands the kernel for the compiled problem."""
    from dataclasses import asdict

    from tuner.families.base import LaunchArgs
    from tuner.core.problem import ConvProblem
    from tuner.measure.run import problem_array

    return problem_array(ConvProblem(**asdict(p)), LaunchArgs(p.c, split_k=split_k))


def run_build(spec_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec_text)
    return subprocess.run([sys.executable, "-m", "tuner.families.sm90_dsl.build", str(spec_file), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)


def exported_symbols(library: Path) -> set[str]:
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
        return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    import ctypes  # loading needs no GPU: the module is loaded lazily by tuner_k0_create
    lib = ctypes.CDLL(str(library))
    return {name for name in ENTRY_POINTS if hasattr(lib, name)}


STEM = BuildSpec(ProblemSpec.symmetric(32, 224, 224, 3, 64, 7, 7, 3, 2, 1), EpilogueSpec(bias=True, activation="relu"),
                 TileSpec(128, 64, 32, schedule="cooperative"))
STEM_BF16 = BuildSpec(STEM.problem, STEM.epilogue, STEM.tile, element="bf16")
CLASSES_21 = BuildSpec(ProblemSpec.symmetric(8, 65, 65, 256, 21, 1, 1, 0, 1, 1), EpilogueSpec(bias=True),
                       TileSpec(128, 32, 64, schedule="cooperative"))


# e4m3 in (one byte an element, per-tensor scales), f16 out: a GEMM and a fused 3x3 conv with a residual
GEMM_E4M3 = BuildSpec(GEMM.problem, GEMM.epilogue, GEMM.tile, element="e4m3")
CONV_E4M3 = BuildSpec(CONV.problem, CONV.epilogue, TileSpec(128, 128, 128, schedule="pingpong", tile_q=16),
                      element="e4m3")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The candidate folder of a spec, built once for every test of this module that reads it."""
    folders = {}

    def build_once(spec: BuildSpec) -> Path:
        if spec not in folders:
            folder = tmp_path_factory.mktemp("build")
            result = run_build(spec.to_json(), folder)
            assert result.returncode == 0, result.stderr[-2000:]
            folders[spec] = folder / "out"
        return folders[spec]
    return build_once


# The tests that build a candidate are `slow`, for the full set: a DSL compile each, about 8 s on 2 cores. The quick
# set keeps the spec's checks, the refusals of the build command and the geometry, which need no compile.
@pytest.mark.slow
@pytest.mark.parametrize("spec", [GEMM, CONV, STEM, CONV_BF16, STEM_BF16, CLASSES_21, GEMM_E4M3, CONV_E4M3],
                         ids=["gemm_1x1", "conv_3x3_fused", "stem_c3_gathered", "conv_3x3_fused_bf16",
                              "stem_c3_gathered_bf16", "k21_stored_by_element", "gemm_1x1_e4m3",
                              "conv_3x3_fused_e4m3"])
def test_builds_a_candidate_with_every_entry_point(spec, built):
    out = built(spec)
    for name in ("kernel.h", "kernel.o", "entry.c", "candidate.so", "ptxas.txt", "build.json"):
        assert (out / name).is_file(), name
    assert set(ENTRY_POINTS) <= exported_symbols(out / "candidate.so")
    report = parse_ptxas((out / "ptxas.txt").read_text())
    assert report.registers > 0 and report.spill_store_bytes == 0 and report.stack_frame_bytes == 0
    info = json.loads((out / "build.json").read_text())
    assert info["threads"] == (256 if spec.tile.schedule == "single" else 384)
    assert 0 < info["dynamic_smem_bytes"] <= 232448
    assert info["cluster"] == [spec.tile.cluster_m, spec.tile.cluster_n, 1]
    assert info["seconds"]["total"] > 0


GEMM_B1_CLUSTER_SPLIT = BuildSpec(ProblemSpec.symmetric(1, 7, 7, 2048, 512, 1, 1, 0, 1, 1),
                                  EpilogueSpec(scale=True, bias=True, residual=True, activation="relu"),
                                  TileSpec(64, 16, 64, schedule="single", split_k=4, split_reduce="cluster"))


def test_split_k_reduced_in_the_cluster_is_part_of_the_spec_and_leaves_the_others_keys_alone():
    assert '"split_reduce": "cluster"' in GEMM_B1_CLUSTER_SPLIT.to_json()
    assert BuildSpec.from_json(GEMM_B1_CLUSTER_SPLIT.to_json()) == GEMM_B1_CLUSTER_SPLIT
    through_workspace = replace(GEMM_B1_CLUSTER_SPLIT, tile=replace(GEMM_B1_CLUSTER_SPLIT.tile,
                                                                    split_reduce="workspace"))
    assert "split_reduce" not in through_workspace.to_json() and "split_reduce" not in CONV.to_json()
    for tile in (replace(GEMM_B1_CLUSTER_SPLIT.tile, cluster_n=2), replace(GEMM_B1_CLUSTER_SPLIT.tile, split_k=1),
                 replace(GEMM_B1_CLUSTER_SPLIT.tile, split_reduce="atomics")):
        with pytest.raises(SpecError):
            replace(GEMM_B1_CLUSTER_SPLIT, tile=tile).check()


@pytest.mark.slow
def test_a_split_reduced_in_the_cluster_builds_with_the_splits_as_its_cluster_and_no_workspace(built):
    out = built(GEMM_B1_CLUSTER_SPLIT)
    info = json.loads((out / "build.json").read_text())
    # 32 tiles of 64x16, 4 splits each, in the 29 clusters of 4 any 132-SM Hopper holds at once (residency.py)
    assert info["cluster"] == [1, 4, 1] and info["grid"] == [1, 4, 29]
    assert info["workspace_bytes"] == 0
    assert "kWorkspace = 0;" in (out / "entry.c").read_text()


def test_programmatic_dependent_launch_is_part_of_the_spec_and_leaves_the_others_keys_alone():
    chained = replace(CONV, pdl=True)
    assert '"pdl": true' in chained.to_json() and BuildSpec.from_json(chained.to_json()) == chained
    assert "pdl" not in CONV.to_json() and not BuildSpec.from_json(CONV.to_json()).pdl
    assert geometry(chained).pdl and not geometry(CONV).pdl


@pytest.mark.slow
def test_a_pdl_kernel_waits_for_the_kernel_before_it_before_it_touches_global_memory(tmp_path):
    """griddepcontrol.wait (then launch_dependents) after the shared-memory set-up and before the first TMA load;
    a kernel built without PDL has neither."""
    (tmp_path / "pdl").mkdir()
    (tmp_path / "plain").mkdir()
    ptx = compiled_ptx(replace(CONV, pdl=True), tmp_path / "pdl")
    wait, trigger = ptx.find("griddepcontrol.wait;"), ptx.find("griddepcontrol.launch_dependents;")
    first_load = ptx.find("cp.async.bulk.tensor")
    assert 0 < wait < trigger < first_load and ptx.rfind("mbarrier.init") < wait
    plain = compiled_ptx(CONV, tmp_path / "plain")
    assert "cp.async.bulk.tensor" in plain and "griddepcontrol" not in plain


@pytest.mark.slow
def test_l2_hints_stream_sets_the_tma_copies_cache_policies_and_the_default_sets_none(tmp_path):
    """The DSL gives every TMA copy an L2 cache-policy operand (.L2::cache_hint), 0 by default: no priority. With
    l2_hints "stream" x's and the residual's loads and y's stores take CUTLASS's evict-first policy and w's loads its
    evict-last one (CONV has all four)."""
    import re
    (tmp_path / "stream").mkdir()
    (tmp_path / "plain").mkdir()
    streamed = replace(CONV, tile=replace(CONV.tile, l2_hints="stream"))
    assert geometry(streamed).l2_stream and not geometry(CONV).l2_stream

    def policies(ptx: str) -> set[int]:
        values = {int(value) for value in re.findall(r"mov\.b64\s+%rd\d+,\s*(\d+);", ptx)}
        return values & {L2_EVICT_FIRST, L2_EVICT_LAST}

    ptx = compiled_ptx(streamed, tmp_path / "stream")
    copies = re.findall(r"cp\.async\.bulk\.tensor\.\S+", ptx)
    assert any(".global.shared::cta" in op for op in copies) and any("shared::cluster.global" in op for op in copies)
    assert all(op.endswith(".L2::cache_hint") for op in copies), copies
    assert policies(ptx) == {L2_EVICT_FIRST, L2_EVICT_LAST}
    moves = dict(re.findall(r"mov\.b64\s+(%rd\d+),\s*(\d+);", ptx))
    operands = [re.search(r"(%rd\d+);$", line.strip()).group(1) for line in ptx.splitlines()
                if "cp.async.bulk.tensor" in line]
    assert len(operands) == len(copies) and {int(moves[r]) for r in operands} == {L2_EVICT_FIRST, L2_EVICT_LAST}
    assert policies(compiled_ptx(CONV, tmp_path / "plain")) == set()


def test_the_element_is_part_of_the_spec():
    assert BuildSpec.from_json(CONV_BF16.to_json()) == CONV_BF16
    assert '"element": "bf16"' in CONV_BF16.to_json()
    assert "element" not in CONV.to_json()  # f16 specs are written as before the field: their cache keys stay
    assert BuildSpec.from_json(CONV.to_json()).element == "f16"


@pytest.mark.slow
def test_abi_answers_without_a_gpu(built):
    """tuner_abi_version, can_implement, grid and attributes are plain C: callable with no CUDA device."""
    import ctypes
    lib = ctypes.CDLL(str(built(GEMM) / "candidate.so"))
    lib.tuner_abi_version.restype = ctypes.c_int32
    assert lib.tuner_abi_version() == 5
    p = GEMM.problem
    problem = problem_values(p, split_k=1)
    assert lib.tuner_k0_can_implement(problem) == 0
    problem[3] = 256  # another C: not the compiled problem
    assert lib.tuner_k0_can_implement(problem) != 0
    grid = (ctypes.c_int32 * 6)()
    lib.tuner_k0_grid(problem, grid)
    assert list(grid)[:2] == [1, 1] and 0 < grid[2] <= 132 and list(grid)[3:] == [1, 1, 1]


@pytest.mark.parametrize("text, reason", [
    ("{not json", "malformed"),
    (BuildSpec(GEMM.problem, GEMM.epilogue, TileSpec(256, 64, 64, schedule="pingpong")).to_json(), "pingpong"),
    (BuildSpec(ProblemSpec.symmetric(1, 9, 9, 64, 64, 3, 3, 1, 3, 1), EpilogueSpec(),
               TileSpec(128, 64, 64, tile_q=8)).to_json(), "stride"),
    (BuildSpec(GEMM.problem, GEMM.epilogue, TileSpec(128, 128, 64, schedule="single")).to_json(), "tile M=128"),
    (BuildSpec(GEMM.problem, GEMM.epilogue, GEMM.tile, element="f32").to_json(), "element"),
    (BuildSpec(ProblemSpec.symmetric(1, 14, 14, 24, 64, 3, 3, 1, 1, 1), EpilogueSpec(),
               TileSpec(128, 64, 64, tile_q=8), element="e4m3").to_json(), "multiple of 16"),
    (BuildSpec(GEMM.problem, GEMM.epilogue, TileSpec(128, 256, 128, schedule="cooperative")).to_json(), "tile K=128"),
], ids=["malformed", "pingpong_tile_m", "stride3", "single_tile_m", "f32_element", "e4m3_c24", "f16_tile_k128"])
def test_a_bad_spec_exits_1_with_one_line(text, reason, tmp_path):
    result = run_build(text, tmp_path)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and reason in lines[-1]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "candidate.so").exists()


# --- split-K -------------------------------------------------------------------------------------------------
from tuner.families.sm90_dsl.geometry import geometry  # noqa: E402
from tuner.families.sm90_dsl.spec import split_k_range, split_k_workspace_bytes  # noqa: E402

LATE_GEMM_B1 = ProblemSpec.symmetric(1, 7, 7, 2048, 512, 1, 1, 0, 1, 1)
INCEPTION_1X7 = ProblemSpec(2, 17, 17, 64, 64, 1, 7, 0, 3, 1, 1, 1, 1)
STRIDE2 = ProblemSpec.symmetric(1, 28, 28, 256, 256, 3, 3, 1, 2, 1)


@pytest.mark.parametrize("problem, tile_k, tile_q, splits", [
    (STRIDE2, 64, 8, 2), (STRIDE2, 64, 8, 7), (STRIDE2, 32, 8, 5),
    (ProblemSpec.symmetric(1, 7, 7, 512, 512, 3, 3, 1, 1, 1), 64, 16, 8),
    (ProblemSpec.symmetric(2, 15, 15, 96, 64, 3, 3, 1, 2, 1), 64, 16, 3),   # odd extents and C not a multiple of tile K
    (ProblemSpec.symmetric(2, 16, 16, 64, 64, 5, 5, 4, 2, 2), 64, 16, 4),   # dilated: taps fall into fewer phases
    (INCEPTION_1X7, 64, 16, 3),
    (ProblemSpec(2, 15, 20, 64, 64, 3, 3, 1, 1, 2, 1, 1, 1), 64, 16, 3),  # stride 2 on rows only
])
def test_the_producer_walks_each_units_k_tiles_exactly_once_over_the_stride_phases(problem, tile_k, tile_q, splits):
    """kernel.py's producer clips each phase's own k tiles to the unit's global range (phase_k_bounds); the
    consumers count end - begin. Mirrored here: every (phase, tap, channel block) of the tile is loaded once
    over the splits, and each unit loads as many k tiles as its consumers wait for."""
    spec = BuildSpec(problem, EpilogueSpec(), TileSpec(128, 128, tile_k, tile_q=tile_q, split_k=splits))
    g = geometry(spec)
    offsets, phases = g.phase_k_offsets(), g.phases()
    loaded = []
    for split in range(splits):
        begin, end = split_k_range(g.k_tiles, splits, split)
        unit = []
        for offset, ph in zip(offsets, phases):
            count = ph.nr * ph.ns * g.k_blocks_per_tap
            unit += [(offset, kt) for kt in range(max(begin, offset) - offset, min(end, offset + count) - offset)]
        assert len(unit) == end - begin >= 1
        loaded += unit
    assert len(loaded) == len(set(loaded)) == g.k_tiles == sum(ph.nr * ph.ns for ph in phases) * g.k_blocks_per_tap


def test_per_axis_problems_get_each_axis_its_own_phases():
    """(r, dilation_h, pad_h, stride_h) lay out the rows' phases, (s, dilation_w, pad_w, stride_w) the columns'."""
    wide = geometry(BuildSpec(INCEPTION_1X7, EpilogueSpec(), TileSpec(128, 64, 64, tile_q=16)))
    [phase] = wide.phases()
    assert (phase.nr, phase.ho0, phase.ns, phase.wo0, phase.view_w, phase.view_h) == (1, 0, 7, -3, 17, 17)
    tall = geometry(BuildSpec(ProblemSpec(2, 15, 20, 64, 64, 3, 3, 1, 1, 2, 1, 1, 1), EpilogueSpec(),
                              TileSpec(128, 64, 64, tile_q=16)))
    assert [(ph.ph, ph.pw, ph.view_h, ph.view_w, ph.nr, ph.ns) for ph in tall.phases()] == [
        (0, 0, 8, 20, 1, 3), (1, 0, 7, 20, 2, 3)]  # rows in two views of every second row, columns in one
    with pytest.raises(SpecError, match="stride 1x3"):
        geometry(BuildSpec(ProblemSpec(2, 15, 16, 64, 64, 3, 3, 1, 1, 1, 3, 1, 1), EpilogueSpec(),
                           TileSpec(128, 64, 64, tile_q=16)))


@pytest.mark.slow
def test_a_per_axis_candidate_takes_exactly_its_problem(tmp_path):
    import ctypes
    result = run_build(BuildSpec(INCEPTION_1X7, EpilogueSpec(), TileSpec(128, 64, 64, tile_q=16)).to_json(), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lib = ctypes.CDLL(str(tmp_path / "out" / "candidate.so"))
    problem = problem_values(INCEPTION_1X7, split_k=1)
    assert lib.tuner_k0_can_implement(problem) == 0
    problem[7], problem[8] = 3, 0  # pad_h, pad_w swapped: the 7x1's padding, not this kernel's
    assert lib.tuner_k0_can_implement(problem) == 8  # the first field that differs, counted from 1


def test_split_k_geometry_workspace_and_refusals():
    g = geometry(BuildSpec(LATE_GEMM_B1, EpilogueSpec(), TileSpec(128, 128, 64, split_k=8)))
    assert g.workspace_bytes == split_k_workspace_bytes(4, 8, 128, 128) and g.grid == (1, 1, 32)
    assert geometry(BuildSpec(LATE_GEMM_B1, EpilogueSpec(), TileSpec(128, 128, 64))).workspace_bytes == 0
    with pytest.raises(SpecError, match="pingpong"):
        geometry(BuildSpec(LATE_GEMM_B1, EpilogueSpec(), TileSpec(128, 128, 64, schedule="pingpong", split_k=2)))
    with pytest.raises(SpecError, match="k tiles"):
        geometry(BuildSpec(LATE_GEMM_B1, EpilogueSpec(), TileSpec(128, 128, 64, split_k=33)))
    with pytest.raises(SpecError, match="split_k"):
        BuildSpec(LATE_GEMM_B1, EpilogueSpec(), TileSpec(128, 128, 64, split_k=-1)).check()


def test_a_k_not_a_multiple_of_8_is_stored_by_element_and_refuses_a_residual_or_a_gathered_c():
    assert geometry(CLASSES_21).stores_elements and not geometry(GEMM).stores_elements
    with pytest.raises(SpecError, match="element by element"):
        BuildSpec(CLASSES_21.problem, EpilogueSpec(residual=True), CLASSES_21.tile).check()
    with pytest.raises(SpecError, match="element by element"):
        BuildSpec(replace(STEM.problem, k=21), EpilogueSpec(), replace(STEM.tile, tile_n=32)).check()


def test_a_gathering_geometry_tiles_the_pixels_and_walks_r_s_c_together():
    g = geometry(STEM)
    assert g.gather and (g.tile_q, g.bp, g.bn) == (128, 1, 1) and g.yq == 32 * 112 * 112
    assert g.m_tiles == 32 * 112 * 112 // 128 and g.k_tiles == 5  # 147 products of (r, s, c) in k tiles of 32
    assert (g.src_n, g.src_h, g.src_w, g.out_p, g.out_q) == (32, 224, 224, 112, 112)
    assert geometry(BuildSpec(replace(STEM.problem, stride_h=4, stride_w=4), EpilogueSpec(), STEM.tile)).gather  # any stride
    for tile, reason in ((replace(STEM.tile, cluster_m=2), "cluster"), (replace(STEM.tile, split_k=2), "split-K"),
                         (replace(STEM.tile, schedule="pingpong"), "single or cooperative")):
        with pytest.raises(SpecError, match=reason):
            geometry(BuildSpec(STEM.problem, STEM.epilogue, tile))
    with pytest.raises(SpecError, match="residual"):
        geometry(BuildSpec(STEM.problem, EpilogueSpec(residual=True), STEM.tile))
    with pytest.raises(SpecError, match="whole filter"):
        geometry(BuildSpec(STEM.problem, EpilogueSpec(), replace(STEM.tile, tile_n=32)))
    # the stages hold A alone; the filter (64 x 5 k tiles of 32) is counted once
    assert g.smem_bytes(1) - g.smem_bytes(0) == 128 * 32 * 2 and g.smem_bytes(0) > 64 * 160 * 2
    with pytest.raises(SpecError, match="C must be a multiple of 8"):
        BuildSpec(replace(STEM.problem, c=12), EpilogueSpec(), STEM.tile).check()


@pytest.mark.slow
def test_a_split_k_candidate_reports_its_workspace_and_takes_only_its_split(tmp_path):
    import ctypes
    spec = BuildSpec(LATE_GEMM_B1, EpilogueSpec(scale=True, bias=True, residual=True, activation="relu"),
                     TileSpec(64, 128, 64, schedule="single", split_k=4))
    result = run_build(spec.to_json(), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    info = json.loads((tmp_path / "out" / "build.json").read_text())
    assert info["split_k"] == 4 and info["grid"] == [1, 1, 4 * 4]  # 1 x 4 tiles of 64x128, 4 units each
    lib = ctypes.CDLL(str(tmp_path / "out" / "candidate.so"))
    lib.tuner_k0_workspace_bytes.restype = ctypes.c_int64
    p = spec.problem
    problem = problem_values(p, split_k=4)
    assert lib.tuner_k0_can_implement(problem) == 0
    assert lib.tuner_k0_workspace_bytes(problem) == info["workspace_bytes"] == split_k_workspace_bytes(4, 4, 64, 128)
    problem[14] = 1  # split_k
    assert lib.tuner_k0_can_implement(problem) == 20


@pytest.mark.slow
def test_a_stream_k_candidate_reports_its_workspace_and_is_launched_as_one_without_a_split(tmp_path):
    """Stream-K (split_k 0): one cluster a share of all tiles' k tiles, a workspace of the plan's slots, and the
    launch's split 1 (the kernel works its units out itself)."""
    import ctypes
    spec = BuildSpec(ProblemSpec.symmetric(32, 7, 7, 512, 512, 3, 3, 1, 1, 1),
                     EpilogueSpec(scale=True, bias=True, residual=True, activation="relu"),
                     TileSpec(128, 128, 64, cluster_n=2, tile_q=8, split_k=0))
    g = geometry(spec)
    result = run_build(spec.to_json(), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    info = json.loads((tmp_path / "out" / "build.json").read_text())
    assert info["stream_k"] and info["split_k"] == 1 and info["grid"] == [1, 2, g.stream_plan.clusters]
    lib = ctypes.CDLL(str(tmp_path / "out" / "candidate.so"))
    lib.tuner_k0_workspace_bytes.restype = ctypes.c_int64
    problem = problem_values(spec.problem, split_k=1)
    assert lib.tuner_k0_can_implement(problem) == 0
    assert lib.tuner_k0_workspace_bytes(problem) == info["workspace_bytes"] == g.workspace_bytes > 0
    assert g.workspace_bytes == split_k_workspace_bytes(g.workspace_tiles, g.stream_plan.slots, 128, 128)


@pytest.mark.parametrize("problem, tile_m, tile_q", [
    (ProblemSpec.symmetric(2, 16, 16, 64, 64, 3, 3, 1, 1, 1), 128, 16),   # the box's width is the input's W
    (ProblemSpec.symmetric(1, 7, 7, 512, 512, 3, 3, 1, 1, 1), 128, 8),    # 16 rows, more than one 7-row image
    (ProblemSpec.symmetric(2, 16, 16, 64, 64, 3, 3, 1, 1, 1), 128, 4),    # not whole swizzle rows
    (ProblemSpec.symmetric(2, 28, 28, 64, 64, 3, 3, 1, 1, 1), 128, 32),   # a valid box
])
def test_the_kernel_and_the_static_checks_state_one_box_rule(problem, tile_m, tile_q):
    from tuner.families.sm90_dsl.box import box_problem
    reason = box_problem(problem, tile_m, tile_q)
    spec = BuildSpec(problem, EpilogueSpec(), TileSpec(tile_m, 64, 64, tile_q=tile_q))
    if reason is None:
        assert geometry(spec).tile_q == tile_q
    else:
        with pytest.raises(SpecError) as raised:
            geometry(spec)
        assert str(raised.value) == reason


# --- e4m3 ------------------------------------------------------------------------------------------------------

def compiled_ptx(spec: BuildSpec, tmp_path: Path) -> str:
    """The PTX the DSL makes of the spec's kernel for sm_90a (compiled in-process: no GPU needed)."""
    from tuner.families.sm90_dsl.build import import_toolchain
    import_toolchain()
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from tuner.families.sm90_dsl.kernel import build_launcher

    launcher, args, _ = build_launcher(spec)
    cute.compile(launcher, *args, cuda.CUstream(0), options=f"--gpu-arch sm_90a --keep-ptx --dump-dir {tmp_path}")
    return "\n".join(path.read_text() for path in tmp_path.rglob("*.ptx"))


@pytest.mark.slow
def test_an_im2col_kernel_loads_a_by_im2col_tma_multicast_across_its_cluster(tmp_path):
    """tile_q -1: A by one im2col TMA load a k tile (here stride 2, C=80 in blocks of 64, a 1x2 cluster, fused
    residual), B by tiled loads of the (K, (C, S, R)) filter, y stored as a GEMM's rows of pixels."""
    import re
    spec = BuildSpec(ProblemSpec.symmetric(4, 14, 14, 80, 256, 3, 3, 1, 2, 1),
                     EpilogueSpec(scale=True, bias=True, residual=True, activation="relu"),
                     TileSpec(128, 128, 64, cluster_n=2, tile_q=-1))
    g = geometry(spec)
    assert g.im2col and g.k_tiles == 18 and (g.xw, g.tile_q) == (4 * 7 * 7, 128)
    loads = set(re.findall(r"cp\.async\.bulk\.tensor\.\S+", compiled_ptx(spec, tmp_path)))
    assert any(".4d.shared::cluster.global.im2col." in op and "multicast" in op for op in loads), loads
    assert not any(".5d." in op for op in loads)


@pytest.mark.slow
def test_an_e4m3_kernel_issues_fp8_wgmma_with_f32_accumulators(tmp_path):
    import re
    spec = BuildSpec(ProblemSpec.symmetric(8, 28, 28, 128, 128, 3, 3, 1, 1, 1), EpilogueSpec(bias=True),
                     TileSpec(128, 128, 64, schedule="cooperative", tile_q=16), element="e4m3")
    mmas = set(re.findall(r"wgmma\.mma_async\S*", compiled_ptx(spec, tmp_path)))
    assert mmas == {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"}


def test_the_e4m3_element_is_in_the_spec_and_writes_f16():
    assert '"element": "e4m3"' in CONV_E4M3.to_json() and BuildSpec.from_json(CONV_E4M3.to_json()) == CONV_E4M3
    assert (CONV_E4M3.output_element, CONV_E4M3.scaled, CONV_E4M3.channel_multiple) == ("f16", True, 16)
    assert (CONV.output_element, CONV.scaled, CONV_BF16.output_element) == ("f16", False, "bf16")


def test_e4m3_stages_hold_a_byte_an_element():
    f16, e4m3 = geometry(GEMM), geometry(GEMM_E4M3)
    assert (e4m3.operand_bytes, e4m3.scaled, f16.operand_bytes, f16.scaled) == (1, True, 2, False)
    assert e4m3.smem_bytes(4) - f16.smem_bytes(4) == -4 * (128 + 256) * 64  # half of each stage's A and B
    assert e4m3.stages >= f16.stages
    with pytest.raises(SpecError, match="tile K=96"):
        geometry(BuildSpec(GEMM.problem, GEMM.epilogue, replace(GEMM.tile, tile_k=96), element="e4m3"))


# --- tf32 -------------------------------------------------------------------------------------------------------

CONV_TF32 = BuildSpec(ProblemSpec.symmetric(8, 14, 14, 256, 256, 3, 3, 1, 1, 1), EpilogueSpec(scale=True, bias=True),
                      TileSpec(128, 128, 32, cluster_n=2, schedule="cooperative", tile_q=16, split_k=2), element="tf32")


@pytest.mark.slow
def test_a_tf32_kernel_issues_tf32_wgmma_and_stages_f32_by_element_for_the_tma_store(tmp_path):
    import re
    ptx = compiled_ptx(CONV_TF32, tmp_path)
    assert set(re.findall(r"wgmma\.mma_async\S*", ptx)) == {"wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"}
    assert "st.shared.b32" in ptx and "stmatrix" not in ptx
    assert re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)  # the output's TMA store


def test_tf32_stages_hold_four_bytes_an_element_and_refuse_what_they_cannot_run():
    g = geometry(CONV_TF32)
    assert (g.operand_bytes, g.output_bytes, g.stages_by_element, CONV_TF32.channel_multiple) == (4, 4, True, 4)
    assert g.smem_bytes(2) - geometry(replace(CONV_TF32, element="f16")).smem_bytes(2) == \
        2 * (128 + 128) * 32 * 2 + 2 * 128 * 32 * 2  # A and B stages, and the two staged subtiles, in 4 bytes not 2
    for tile, words in (((128, 128, 64), "must be 32 in tf32"), ((128, 48, 32), "aborts the DSL")):
        with pytest.raises(SpecError, match=words):
            geometry(replace(CONV_TF32, tile=replace(CONV_TF32.tile, tile_m=tile[0], tile_n=tile[1], tile_k=tile[2])))
    with pytest.raises(SpecError, match="loads no residual"):
        geometry(replace(CONV_TF32, epilogue=EpilogueSpec(residual=True)))


@pytest.mark.slow
def test_an_e4m3_candidate_must_be_handed_its_scales(built):
    """create checks its operands before it loads the module: without a GPU, a scaled epilogue without its scales
    is refused with 35, and one with them goes on to the module load (which fails here, 40 and up)."""
    import ctypes

    from tuner.measure.run import EpilogueOperands, ScaledEpilogueOperands
    lib = ctypes.CDLL(str(built(GEMM_E4M3) / "candidate.so"))
    lib.tuner_k0_create.restype = ctypes.c_void_p

    def status(operands) -> int:
        code = ctypes.c_int32(0)
        pointer = None if operands is None else ctypes.pointer(operands)
        lib.tuner_k0_create(problem_values(GEMM_E4M3.problem, 1), ctypes.c_void_p(0x1000), ctypes.c_void_p(0x2000),
                            ctypes.c_void_p(0x3000), pointer, None, None, ctypes.byref(code))
        return code.value

    bare = EpilogueOperands(None, None, None, 0.0)
    assert status(None) == 35
    assert status(ScaledEpilogueOperands(bare, 0x9000, None)) == 35
    assert status(ScaledEpilogueOperands(bare, 0x9000, 0x9004)) not in (30, 31, 32, 33, 35)


@pytest.mark.slow
def test_a_256_row_cooperative_tile_issues_two_row_blocks_a_warpgroup(tmp_path):
    """Each consumer warpgroup of a 256-row tile holds two 64-row wgmma blocks: twice the wgmma a k tile of the
    128-row tile's, of the same instruction."""
    import re
    problem = ProblemSpec.symmetric(8, 56, 56, 64, 64, 3, 3, 1, 1, 1)
    counts = {}
    for tile_m in (128, 256):
        spec = BuildSpec(problem, EpilogueSpec(bias=True, activation="relu"),
                         TileSpec(tile_m, 64, 64, schedule="cooperative", tile_q=16))
        (folder := tmp_path / str(tile_m)).mkdir()
        ptx = compiled_ptx(spec, folder)
        assert set(re.findall(r"wgmma\.mma_async\S*", ptx)) == {"wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"}
        counts[tile_m] = ptx.count("wgmma.mma_async")
    assert counts[256] == 2 * counts[128]
