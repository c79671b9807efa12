"""The dsl_direct family on the CPU: its space file, the layers it takes and refuses, its static checks, the spec it
hands its builder, its cost terms; and (`slow`, where the CuTe DSL is installed) real builds of a depthwise and a
grouped kernel whose host entry points answer without a GPU and refuse another problem."""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import H100, REPO
from tuner.build.nvcc import parse_ptxas
from tuner.core.epilogue import parse_epilogue
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import LaunchArgs, SpaceError
from tuner.families.dsl_common.build_tools import sm90_blocks_per_sm
from tuner.families.dsl_direct.spec import DirectBuildSpec, SpecError
from tuner.measure.run import problem_array
from tuner.search.space import load_space, valid_configs

FAMILY = registry.get("dsl_direct")
DW7 = ConvProblem(n=8, h=56, w=56, c=96, k=96, r=7, s=7, pad=3, groups=96, epilogue=parse_epilogue("bias"))
DW3_S2 = ConvProblem(n=8, h=112, w=112, c=96, k=96, r=3, s=3, pad=1, stride=2, groups=96,
                     epilogue=parse_epilogue("scale+bias+relu"))
REGNET = ConvProblem(n=8, h=28, w=28, c=104, k=104, r=3, s=3, pad=1, groups=13,
                     epilogue=parse_epilogue("scale+bias+silu"))


def config(problem: ConvProblem, tile="8x8", channels=8, columns=2):
    return FAMILY.rules.make_config(problem, {"tile": tile, "channels": channels, "columns": columns})


def test_the_space_file_parses_and_has_configurations_for_each_kind():
    space = load_space(REPO / "search_spaces" / "dsl_direct.yaml")
    assert space.family == "dsl_direct"
    for problem in (DW7, DW3_S2, REGNET, ConvProblem(n=8, h=7, w=7, c=440, k=440, r=3, s=3, pad=1, groups=55)):
        assert valid_configs(space, problem, H100), problem


@pytest.mark.parametrize("problem, fragment", [
    (ConvProblem(n=1, h=14, w=14, c=64, k=64, r=3, s=3, pad=1), "groups of 8 channels with K = C"),
    (ConvProblem(n=1, h=14, w=14, c=128, k=128, r=3, s=3, pad=1, groups=32), "groups=32"),   # 4 channels a group
    (ConvProblem(n=1, h=14, w=14, c=64, k=128, r=3, s=3, pad=1, groups=64), "K=128"),
    (ConvProblem(n=1, h=14, w=14, c=36, k=36, r=3, s=3, pad=1, groups=36), "not a multiple"),
    (ConvProblem(n=1, h=14, w=14, c=64, k=64, r=3, s=3, pad=1, groups=64, epilogue=parse_epilogue("residual")),
     "not a residual"),
])
def test_only_depthwise_and_8_channel_groups_of_whole_vectors_run(problem, fragment):
    reason = FAMILY.rules.layer_problem(problem) or FAMILY.refusal(problem)
    assert reason and fragment in reason


def test_static_checks_say_what_does_not_fit():
    assert FAMILY.rules.static_problems(config(REGNET), REGNET, H100) == []
    assert any("16 channels a CTA do not divide C=104" in r
               for r in FAMILY.rules.static_problems(config(REGNET, channels=16), REGNET, H100))
    assert any("outside 32 to 1024" in r
               for r in FAMILY.rules.static_problems(config(REGNET, tile="2x8", columns=4), REGNET, H100))
    assert any("more than twice" in r for r in FAMILY.rules.static_problems(
        config(ConvProblem(n=8, h=7, w=7, c=440, k=440, r=3, s=3, pad=1, groups=55), tile="16x16", columns=4),
        ConvProblem(n=8, h=7, w=7, c=440, k=440, r=3, s=3, pad=1, groups=55), H100))
    big = config(DW7, tile="32x32", channels=96, columns=8)  # a 38x38 window of 96 channels: 277 KB
    assert any("KB of shared memory (the input window and the filter) exceed" in r
               for r in FAMILY.rules.static_problems(big, DW7, H100))


def test_the_spec_carries_the_problem_the_tile_and_the_epilogue():
    spec = config(REGNET).build_spec()
    assert spec.problem.group_width == 8 and (spec.problem.p, spec.problem.q) == (28, 28)
    assert (spec.epilogue.scale, spec.epilogue.bias, spec.epilogue.activation) == (True, True, "silu")
    assert spec.tile.threads() == 1 * 8 * 4
    assert spec.window() == (10, 10)
    assert spec.grid() == (4 * 4 * 8, 13, 1)
    assert DirectBuildSpec.from_json(spec.to_json()) == spec
    stride2 = config(DW3_S2, tile="8x16", channels=32, columns=4).build_spec()
    assert stride2.window() == (17, 33) and stride2.window_columns_a_thread() == 9
    with pytest.raises(SpecError, match="not a dsl_direct build spec"):
        DirectBuildSpec.from_json("{}")
    with pytest.raises(SpecError, match="dividing C=104"):
        DirectBuildSpec.from_json(spec.to_json().replace('"channels": 8', '"channels": 16'))


def test_config_names_hold_every_compiled_fact():
    name = config(DW3_S2, tile="8x16", channels=32, columns=4).name
    assert name == "direct_8x16_c32_x4_f16_f16_f16_f32_esbrelu_n8h112w112c96r3s3p1x1u2x2d1x1g1"
    assert config(REGNET).name.endswith("g8")


def mma(problem: ConvProblem, tile="8x8", channels=104, columns=2):
    return FAMILY.rules.make_config(problem, {"tile": tile, "channels": channels, "columns": columns,
                                              "mapping": "mma"})


def test_the_mma_mapping_gives_a_warp_16_pixel_tiles_of_one_group():
    cfg = mma(REGNET)
    spec = cfg.build_spec()
    assert spec.tile.mapping == "mma" and spec.smem_bytes() == 0
    assert spec.tile.threads() == 32 * 13 * (64 // (16 * 2))   # 13 groups x 2 warps of 32 pixels
    assert spec.grid() == (4 * 4 * 8, 1, 1)
    assert DirectBuildSpec.from_json(spec.to_json()) == spec
    assert cfg.name.startswith("direct_mma_8x8_c104_x2_") and cfg.search_params["mapping"] == "mma"
    assert FAMILY.rules.static_problems(cfg, REGNET, H100) == []
    assert FAMILY.model.cost_terms(cfg, REGNET, H100).efficiency > FAMILY.model.cost_terms(config(REGNET), REGNET,
                                                                                          H100).efficiency


def test_a_stored_entry_without_a_mapping_reads_as_simt():
    legacy = FAMILY.rules.make_config(REGNET, {"tile": "8x8", "channels": 8, "columns": 2})
    assert legacy.mapping == "simt" and legacy == config(REGNET)
    assert legacy.name == "direct_8x8_c8_x2_f16_f16_f16_f32_esbsilu_n8h28w28c104r3s3p1x1u1x1d1x1g8"
    assert DirectBuildSpec.from_json(legacy.build_spec().to_json().replace(', "mapping": "simt"', "")) == \
        legacy.build_spec()


def test_the_mma_mapping_refuses_what_it_cannot_run():
    assert any("groups of 8 channels, not depthwise" in r
               for r in FAMILY.rules.static_problems(mma(DW7, channels=32), DW7, H100))
    assert any("tiles of 16 pixels a warp do not divide the 4x4 tile" in r
               for r in FAMILY.rules.static_problems(mma(REGNET, tile="4x4"), REGNET, H100))
    assert any("outside 32 to 1024" in r
               for r in FAMILY.rules.static_problems(mma(REGNET, tile="16x16", columns=1), REGNET, H100))
    with pytest.raises(SpecError, match="runs groups of 8 channels"):
        DirectBuildSpec.from_json(mma(DW7, channels=32).build_spec().to_json())
    with pytest.raises(SpaceError, match="mapping 'wmma' must be one of simt, mma"):
        FAMILY.rules.make_config(REGNET, {"tile": "8x8", "channels": 8, "columns": 2, "mapping": "wmma"})


def test_the_space_file_searches_both_mappings_and_an_old_one_means_simt():
    space = load_space(REPO / "search_spaces" / "dsl_direct.yaml")
    assert dict(space.choices)["mapping"] == ("simt", "mma")
    mappings = {c.mapping for c in valid_configs(space, REGNET, H100)}
    assert mappings == {"simt", "mma"}
    assert {c.mapping for c in valid_configs(space, DW7, H100)} == {"simt"}
    landscape = load_space(REPO / "search_spaces" / "dsl_direct_landscape.yaml")
    assert dict(landscape.choices)["mapping"] == ("simt",)


def test_cost_terms_count_a_groups_eight_inputs():
    dw = FAMILY.model.cost_terms(config(DW7, channels=32), DW7, H100)
    grouped = FAMILY.model.cost_terms(config(REGNET), REGNET, H100)
    # one step a tile: the taps are register FMAs, not pipeline iterations
    assert (dw.block_k_steps, dw.flops_per_k_step) == (1, 2 * 64 * 32 * 49) and dw.memory_bound
    assert (grouped.block_k_steps, grouped.flops_per_k_step) == (1, 2 * 64 * 8 * 9 * 8) and not grouped.memory_bound


def test_the_ctas_an_sm_holds_come_from_the_scarcest_resource():
    assert sm90_blocks_per_sm(32, 10 << 10, 64) == 20       # shared memory: 233472 // (10240 + 1024)
    assert sm90_blocks_per_sm(128, 1 << 10, 256) == 2       # registers: 65536 // (128 * 256)
    assert sm90_blocks_per_sm(32, 1 << 10, 32) == 32        # the SM's 32 blocks
    assert sm90_blocks_per_sm(40, 1 << 10, 1024) == 1       # registers: 65536 // (40 * 1024)
    assert sm90_blocks_per_sm(255, 200 << 10, 1024) == 0    # fits no SM


def test_without_the_dsl_the_family_says_how_to_install_it(monkeypatch):
    from tuner.families.dsl_common import toolchain
    monkeypatch.setattr(toolchain, "dsl_version", lambda: None)
    assert "pip install -e '.[dsl]'" in FAMILY.emitter.toolchain_problem()


# Builds: a DSL compile each (about 5-25 s on 2 cores), so `slow`.
def build(spec: DirectBuildSpec, folder: Path) -> subprocess.CompletedProcess:
    (folder / "spec.json").write_text(spec.to_json())
    return subprocess.run([sys.executable, "-m", "tuner.families.dsl_direct.build", str(folder / "spec.json"),
                           str(folder / "out")], cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("problem, params", [
    (DW7, {"tile": "8x16", "channels": 32, "columns": 4}),
    (REGNET, {"tile": "8x8", "channels": 8, "columns": 2}),
    (REGNET, {"tile": "4x8", "channels": 104, "columns": 2, "mapping": "mma"}),
], ids=["depthwise_7x7_bias", "groups_of_8_scale_bias_silu", "groups_of_8_on_tensor_cores"])
def test_a_kernel_builds_and_its_entry_points_answer_without_a_gpu(problem, params, tmp_path):
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl not installed (pip install -e '.[dsl]')")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to link candidate.so")
    cfg = FAMILY.rules.make_config(problem, params)
    result = build(cfg.build_spec(), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = tmp_path / "out"
    report = parse_ptxas((out / "ptxas.txt").read_text())
    assert 0 < report.registers <= 128 and report.spill_store_bytes == 0
    info = json.loads((out / "build.json").read_text())
    assert info["threads"] == cfg.threads and info["grid"] == list(cfg.build_spec().grid())
    lib = ctypes.CDLL(str(out / "candidate.so"))
    lib.tuner_abi_version.restype = ctypes.c_int32
    assert lib.tuner_abi_version() == 5
    array = problem_array(problem, LaunchArgs(problem.c))
    assert lib.tuner_k0_can_implement(array) == 0
    array[2] += 1  # another W: not the compiled problem
    assert lib.tuner_k0_can_implement(array) != 0
    attributes = (ctypes.c_int32 * 6)()
    assert lib.tuner_k0_kernel_attributes(attributes) == 0
    # the CTAs an SM holds, from the kernel's own registers, shared memory and warps (the occupancy diagnosis)
    smem = attributes[1] + attributes[2]
    assert attributes[5] == sm90_blocks_per_sm(report.registers, smem, cfg.threads) > 1


def test_a_bad_spec_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "spec.json").write_text("{not json")
    result = subprocess.run([sys.executable, "-m", "tuner.families.dsl_direct.build", str(tmp_path / "spec.json"),
                             str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("build failed: not a dsl_direct build spec")
