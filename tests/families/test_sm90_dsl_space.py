"""The sm90_dsl family without the DSL: its space file, static rules, the box of pixels a conv tile
covers, the build request the compile cache keys on, the compile hook that runs a family's own builder,
the one-line skip where the DSL is not installed, and the export's refusal of its kernels."""
import sys
from dataclasses import replace

import pytest
from rich.console import Console

from conftest import H100, REPO
from tuner.build.compile import Compiler, builder_cache_key
from tuner.cli.tuning_view import TuningView
from tuner.core.epilogue import parse_epilogue
from tuner.families import registry
from tuner.families.base import BuildRequest, SearchSpace, SpaceError
from tuner.families.sm90_dsl.checks import layer_problem, static_problems
from tuner.families.sm90_dsl.space import kernel_problem, make_config, parse_space, problem_spec
from tuner.families.sm90_dsl.box import conv_box
from tuner.families.sm90_dsl.spec import STREAM_K, BuildSpec, SpecError
from tuner.families.sm90_dsl.toolchain import BUILDER_SOURCES, dsl_version
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.search.space import load_space, valid_configs
from tuner.pipeline.tuning import buildable_spaces

SPACE_FILE = REPO / "search_spaces" / "sm90_dsl.yaml"
GEMM = ConvProblem(n=32, h=7, w=7, c=512, k=2048, r=1, s=1)
CONV = ConvProblem(n=32, h=28, w=28, c=128, k=128, r=3, s=3, pad=1)
FAMILY = registry.get("sm90_dsl")


def params(**changes) -> dict:
    base = {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
            "swizzle": 1, "tile_q": 16}
    return {**base, **changes}


@pytest.mark.slow
def test_the_space_file_parses_and_offers_valid_kernels_for_a_gemm_and_a_conv():
    space = load_space(SPACE_FILE)
    assert isinstance(space, SearchSpace) and space.family == "sm90_dsl"
    for problem in (GEMM, CONV):
        configs = valid_configs(space, problem, H100)
        assert configs and len(configs) == len(set(configs))


def test_a_gemm_ignores_tile_q():
    assert make_config(GEMM, params(tile_q=8)) == make_config(GEMM, params(tile_q=64))
    assert make_config(GEMM, params()).tile_q == 0
    assert make_config(CONV, params(tile_q=8)) != make_config(CONV, params(tile_q=64))


def test_an_unknown_knob_or_value_is_refused():
    document = {"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["cooperative"],
                "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [16], "split_k": [1]}
    parse_space(document)
    with pytest.raises(SpaceError, match="schedule"):
        parse_space({**document, "schedule": ["warp"]})
    with pytest.raises(SpaceError, match="tile_q"):
        parse_space({**document, "tile_q": [12]})
    with pytest.raises(SpaceError, match="unknown"):
        parse_space({**document, "epilogue": ["tma"]})


@pytest.mark.parametrize("changes, reason", [
    ({"tile": "64x128x64", "schedule": "cooperative"}, "must be 128"),
    ({"tile": "128x128x64", "schedule": "single"}, "must be 64"),
    ({"tile": "128x120x64"}, "multiple of 16"),
    ({"tile": "128x128x16"}, "tile K"),
    ({"tile": "128x128x128"}, "tile K"),
    ({"tile": "64x256x64", "schedule": "single", "tile_q": 8}, None),
    ({"schedule": "pingpong", "tile": "128x128x64"}, None),
    ({"schedule": "pingpong", "tile": "64x256x64", "tile_q": 8}, None),
    ({"schedule": "pingpong", "tile": "128x256x64"}, "accumulators"),
    ({"schedule": "pingpong", "tile": "256x64x64"}, "64 or 128"),
    # two 64-row wgmma blocks a cooperative warpgroup: 256 rows, as cuDNN's 256x64 kernels
    ({"tile": "256x64x64"}, None),
    ({"tile": "256x128x64"}, None),
    ({"tile": "256x256x64"}, "accumulators"),
    ({"tile": "512x64x64"}, "must be 128 or 256"),
    ({"tile": "256x64x64", "schedule": "single"}, "must be 64"),
    ({"tile": "128x32x64"}, None),
    ({"tile": "64x16x64", "schedule": "single", "tile_q": 8}, None),
    ({"cluster": "4x1x1"}, None),
    ({"cluster": "4x2x1"}, None),
    ({"cluster": "4x4x1"}, "at most 8"),
    ({"cluster": "3x1x1"}, "1, 2 or 4"),
    ({"cluster": "1x1x2"}, "K 1"),
    ({"stages": 16, "tile": "128x256x64"}, "do not fit"),
    ({"tile_q": 64, "tile": "128x128x64"}, "padding"),
    ({"tile_q": 16, "tile": "128x128x64"}, None),
])
def test_static_rules(changes, reason):
    problem = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    problems = static_problems(make_config(problem, params(**changes)), problem, H100)
    assert (problems == []) if reason is None else any(reason in p for p in problems), problems


def test_a_box_side_equal_to_the_input_is_refused_and_auto_avoids_it():
    """W=16 with 16-column boxes validated wrong on the H100 (relative error 0.21): TMA merged W with H."""
    square = ConvProblem(n=2, h=16, w=16, c=64, k=128, r=3, s=3, pad=1)
    assert any("merge" in p for p in static_problems(make_config(square, params(tile_q=16)), square, H100))
    auto = make_config(square, params(tile_q=0))
    assert auto.tile_q == 0 and auto.columns not in (0, 16) and static_problems(auto, square, H100) == []
    assert auto.build_spec().tile.tile_q == auto.columns and "_qauto_" in auto.name
    small = ConvProblem(n=4, h=8, w=8, c=64, k=64, r=3, s=3, pad=1)
    config = make_config(small, params(tile_q=0))
    assert static_problems(config, small, H100) == [] and config.box.rows_p != 8


def test_every_gemm_configuration_holds_tile_q_0_which_every_space_offers():
    assert make_config(GEMM, params(tile_q=32)).search_params["tile_q"] == 0
    assert 0 in load_space(SPACE_FILE).choices["tile_q"]


def test_a_stride_2_box_avoids_the_height_of_every_phase_view():
    """At stride 2 the kernel reads one view per phase, every second row: 15 rows give views of 8 and 7."""
    strided = ConvProblem(n=4, h=15, w=15, c=64, k=64, r=3, s=3, pad=1, stride=2)
    config = make_config(strided, params(tile_q=0))
    assert config.shape.p == 8 and static_problems(config, strided, H100) == []
    assert config.box.rows_p not in (7, 8) and config.columns not in (7, 8)


def test_a_valid_configuration_has_no_problems():
    assert static_problems(make_config(CONV, params()), CONV, H100) == []


def test_layers_it_refuses():
    assert "f16" in layer_problem(replace(CONV, output_type=DataType.f32))
    assert layer_problem(replace(CONV, k=21)) is None  # stored element by element
    assert "K=21" in layer_problem(replace(CONV, k=21, c=3))  # not with the gathering kernel
    assert "residual" in layer_problem(replace(CONV, k=21, epilogue=parse_epilogue("bias+residual+relu")))
    assert FAMILY.supersedes(replace(CONV, k=21)) == frozenset()  # not measured against the C++ families yet
    assert layer_problem(replace(CONV, stride_h=2, stride_w=2)) is None  # one TMA view per stride phase
    assert layer_problem(replace(GEMM, stride_h=2, stride_w=2)) is None
    assert "strides 1 and 2" in layer_problem(replace(CONV, stride_h=3, stride_w=3))
    assert kernel_problem(replace(CONV, c=12)).c == 16  # TMA rows of 16 bytes
    assert kernel_problem(replace(CONV, c=3)).c == 3    # gathered as it is
    assert layer_problem(replace(CONV, c=3, stride_h=4, stride_w=4)) is None  # a gathering kernel takes any stride


STEM = ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)


@pytest.mark.parametrize("changes, reason", [
    ({"tile": "128x64x32"}, None),
    ({"tile": "64x64x64", "schedule": "single"}, None),
    ({"cluster": "2x1x1"}, "no cluster multicast"),
    ({"split_k": 2}, "no split-K"),
    ({"schedule": "pingpong", "tile": "128x64x64"}, "single and cooperative"),
    ({"tile": "128x32x64"}, "must hold all K=64"),
    ({"tile": "256x64x64"}, "one tile row a producer thread"),
])
def test_a_stem_of_three_channels_is_gathered(changes, reason):
    config = make_config(STEM, params(**{"tile": "128x64x64", **changes}))
    assert config.shape.gathers and config.shape.c == 3 and config.tile_q == 0 and config.box is None
    assert config.m_tiles == -(-32 * 112 * 112 // config.tile.m)
    assert config.k_steps == -(-7 * 7 * 3 // config.tile.k)  # (r, s, c) together, not a tap a k tile
    assert "_gather_" in config.name
    problems = static_problems(config, STEM, H100)
    assert (problems == []) if reason is None else any(reason in p for p in problems), problems
    residual = replace(STEM, epilogue=parse_epilogue("bias+residual+relu"))
    assert any("residual" in p for p in static_problems(make_config(residual, params(tile="128x64x64")), residual, H100))
    if reason is None:
        spec = config.build_spec()
        assert spec.tile.tile_q == 0 and BuildSpec.from_json(spec.to_json()) == spec


def test_the_box_of_pixels_covers_the_output():
    shape = make_config(CONV, params()).shape
    box = conv_box(shape, 128, 16)
    assert (box.tile_q, box.rows_p, box.images_n) == (16, 4, 2)  # 4 rows divide P=28: no row padded
    assert box.tiles(shape) == 2 * 7 * 16 and box.useful_fraction(shape) == pytest.approx(28 / 32)
    small = make_config(ConvProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad=1), params(tile_q=8)).shape
    box = conv_box(small, 128, 8)  # 16 rows: one output row of 16 images computes no padded row
    assert (box.rows_p, box.images_n) == (1, 16) and box.tiles(small) == 7 * 2


def test_a_configuration_is_a_build_spec_that_round_trips():
    config = make_config(replace(CONV, epilogue=parse_epilogue("scale+bias+residual*0.5+silu")), params())
    spec = config.build_spec()
    assert BuildSpec.from_json(spec.to_json()) == spec
    assert spec.epilogue.activation == "silu" and spec.epilogue.beta == 0.5 and spec.tile.tile_q == 16
    with pytest.raises(SpecError):
        BuildSpec.from_json(spec.to_json().replace('"cooperative"', '"warp"'))
    with pytest.raises(SpecError):
        BuildSpec.from_json("{not json")


def test_the_kernel_name_says_its_knobs_and_problem():
    name = make_config(CONV, params()).name
    assert name.startswith("dsl_128x128x64_q16_c1x1_cooperative_sauto_rm_sw1_") and "n32h28w28c128k128r3s3p1" in name


def test_the_build_request_and_its_cache_key(monkeypatch):
    monkeypatch.setattr("tuner.families.dsl_common.toolchain.dsl_version", lambda: "4.8.1")
    one, two = (make_config(CONV, params(tile=t)) for t in ("128x128x64", "128x256x64"))
    first, second = FAMILY.emitter.build_request(one), FAMILY.emitter.build_request(two)
    assert first.source_file == "spec.json" and "tuner.families.sm90_dsl.build" in first.command
    assert builder_cache_key(first) != builder_cache_key(second)
    assert builder_cache_key(first) != builder_cache_key(replace(first, toolchain="nvidia-cutlass-dsl 4.9"))


def test_without_the_dsl_the_family_is_skipped_with_one_line(monkeypatch):
    monkeypatch.setattr("tuner.families.dsl_common.toolchain.dsl_version", lambda: None)
    assert "pip install -e '.[dsl]'" in FAMILY.emitter.toolchain_problem()
    with pytest.raises(SpaceError, match=r"\[dsl\]"):
        FAMILY.emitter.build_request(make_config(CONV, params()))
    console = Console(record=True, width=200)
    spaces = (load_space(REPO / "search_spaces" / "sm80.yaml"), load_space(SPACE_FILE))
    kept = buildable_spaces(spaces, TuningView(console))
    assert [s.family for s in kept] == ["sm80"]
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert len(lines) == 1 and "sm90_dsl skipped" in lines[0] and "[dsl]" in lines[0]
    with pytest.raises(SpaceError, match="none of the families"):
        buildable_spaces((load_space(SPACE_FILE),), TuningView(console))


FAKE_BUILDER = """
import json, pathlib, sys
spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
if spec["tile"]["tile_n"] == 256:
    print("error: this builder refuses tile N 256", file=sys.stderr)
    sys.exit(1)
pathlib.Path("candidate.so").write_bytes(b"not really a library")
pathlib.Path("ptxas.txt").write_text("ptxas info    : Used 168 registers, 0 bytes smem\\n"
                                     "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\\n")
"""


def test_the_compiler_runs_the_family_builder_and_caches_its_answer(tmp_path, emitter_pieces):
    script = tmp_path / "fake_builder.py"
    script.write_text(FAKE_BUILDER)
    calls = []

    def request(config):
        calls.append(config)
        return BuildRequest(config.build_spec().to_json(), "spec.json", (sys.executable, str(script), "spec.json"),
                            "fake 1")

    emitter_pieces("sm90_dsl", build_request=request)
    compiler = Compiler(H100, tmp_path / "cache", jobs=1)
    good, bad = make_config(CONV, params()), make_config(CONV, params(tile="128x256x64"))
    built = compiler.compile(good)
    assert built.ok and not built.cached and built.library.read_bytes() == b"not really a library"
    assert built.ptxas.registers == 168
    failed = compiler.compile(bad)
    assert not failed.ok and "refuses tile N 256" in failed.error
    again = Compiler(H100, tmp_path / "cache", jobs=1)
    assert again.compile(good).cached and again.compile(good).library == built.library
    assert again.compile(bad).cached and not again.compile(bad).ok


def test_export_refuses_a_dsl_entry_with_one_line_naming_the_layer(tmp_path, emitter_pieces):
    """Without the DSL a DSL layer cannot be built again for the header: one line, and nothing written
    (tests/test_export_dsl.py has the export itself)."""
    import yaml

    from tuner.pipeline.export import export_header
    from tuner.store.results import ResultsError

    config = make_config(CONV, params())
    entry = {"problem": {"n": 32, "h": 28, "w": 28, "c": 128, "k": 128, "r": 3, "s": 3, "pad": 1, "stride": 1,
                         "dilation": 1},
             "family": "sm90_dsl", "params": config.search_params, "kernel": config.name, "runtime_us": 20.0,
             "date": "2026-11-24"}
    document = {"device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3",
                           "compute_capability": "9.0", "sm_count": 132}, "layer_count": 1,
                "layers": {"suite_layer": entry}}
    (tmp_path / "best.yaml").write_text(yaml.safe_dump(document))
    emitter_pieces("sm90_dsl", toolchain_problem=lambda: "the CuTe DSL is not installed: pip install")
    with pytest.raises(ResultsError) as error:
        export_header(tmp_path, cache_dir=tmp_path / "cache")
    assert "suite_layer" in str(error.value) and "sm90_dsl" in str(error.value) and "\n" not in str(error.value)
    assert "not installed" in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml"]


def test_dsl_version_is_cached_and_text_or_none():
    version = dsl_version()
    assert version is None or isinstance(version, str)


def test_the_builder_digest_covers_every_module_a_kernel_is_built_from():
    """A change to any module the builder imports is a new kernel: the compile cache's key hashes each of them."""
    import ast

    folder = REPO / "tuner" / "families" / "sm90_dsl"
    seen, todo = set(), ["build.py", "serve.py"]
    while todo:
        name = todo.pop()
        seen.add(name)
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    modules = [node.module] if node.module else [alias.name for alias in node.names]
                elif (node.module or "").startswith("tuner.families.sm90_dsl."):
                    modules = [node.module.rpartition(".")[2]]
                else:
                    continue
                todo += [f"{m}.py" for m in modules if f"{m}.py" not in seen]
    assert seen <= set(BUILDER_SOURCES) and {"kernel.py", "mainloop.py", "consumers.py"} <= seen


FAKE_SERVER = """
import json, pathlib, sys
for line in sys.stdin:
    job = json.loads(line)
    folder = pathlib.Path(job["folder"])
    spec = json.loads((folder / job["source_file"]).read_text())
    if spec["tile"]["tile_n"] == 64:
        sys.exit(3)  # dies mid-job
    if spec["tile"]["tile_n"] == 256:
        print(json.dumps({"rc": 1, "log": "build failed: this builder refuses tile N 256"}), flush=True)
        continue
    (folder / "candidate.so").write_bytes(b"built by a server")
    (folder / "ptxas.txt").write_text("ptxas info    : Used 96 registers, 0 bytes smem\\n")
    print(json.dumps({"rc": 0, "log": "pid %d" % __import__("os").getpid()}), flush=True)
"""


def test_a_long_lived_builder_builds_kernel_after_kernel_and_a_dead_one_is_transient(tmp_path, emitter_pieces):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)

    def request(config):
        return BuildRequest(config.build_spec().to_json(), "spec.json", ("false",), "fake 2",
                            serve_command=(sys.executable, str(script)))

    emitter_pieces("sm90_dsl", build_request=request)
    compiler = Compiler(H100, tmp_path / "cache", jobs=1)
    try:
        first, second = (compiler.compile(make_config(CONV, params(tile_q=q))) for q in (8, 32))
        assert first.ok and second.ok and first.library.read_bytes() == b"built by a server"
        assert first.ptxas.registers == 96
        assert len(compiler.builders.idle[(sys.executable, str(script))]) == 1  # one process served both
        refused = compiler.compile(make_config(CONV, params(tile="128x256x64")))
        assert not refused.ok and not refused.transient and "refuses tile N 256" in refused.error
        died = compiler.compile(make_config(CONV, params(tile="128x64x64")))
        assert not died.ok and died.transient and "no answer" in died.error
        assert not compiler.cached(make_config(CONV, params(tile="128x64x64")))  # tried again next time
    finally:
        compiler.close()
    assert not compiler.builders.idle


def test_a_default_study_leaves_out_the_families_the_dsl_supersedes():
    from tuner.search.space import JointSpace, layer_space, without_superseded

    spaces = tuple(load_space(REPO / "search_spaces" / f"{f}.yaml") for f in ("sm80", "sm90_conv", "sm90_dsl",
                                                                               "sm90_gemm", "sm90_s2d"))
    joint, left_out = without_superseded(layer_space(spaces, GEMM, H100), GEMM)
    assert joint.families == ("sm90_dsl",) and left_out == ("sm80", "sm90_conv", "sm90_gemm")
    strided = replace(CONV, stride_h=3, stride_w=3)  # the DSL does not run it: nothing is left out
    joint, left_out = without_superseded(layer_space(spaces, strided, H100), strided)
    assert {"sm80", "sm90_conv"} <= set(joint.families) and left_out == ()
    stem = ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2)  # C < 8: the DSL gathers it
    joint, left_out = without_superseded(layer_space(spaces, stem, H100), stem)
    assert joint.families == ("sm90_dsl",) and set(left_out) == {"sm80", "sm90_conv", "sm90_s2d"}
    folded = replace(stem, c=12)  # 8 to 15 channels: the DSL pads; the C++ families stay
    joint, left_out = without_superseded(layer_space(spaces, folded, H100), folded)
    assert {"sm80", "sm90_conv", "sm90_dsl", "sm90_s2d"} <= set(joint.families) and left_out == ()
    only_cpp = JointSpace(tuple(s for s in spaces if s.family != "sm90_dsl"))
    assert without_superseded(only_cpp, GEMM) == (only_cpp, ())


def test_prestart_starts_one_warm_builder_per_job_for_the_uncached_dsl_kernels(tmp_path, monkeypatch):
    from tuner.build.builder_pool import BuilderPool
    from tuner.build.compile import Compiler

    started = []
    monkeypatch.setattr(BuilderPool, "_start", staticmethod(lambda command: started.append(command) or command))
    compiler = Compiler(H100, tmp_path, jobs=3)
    configs = [make_config(CONV, params(tile=t)) for t in ("128x64x64", "128x128x64", "128x256x64", "128x64x32")]
    compiler.prestart(configs)
    assert len(started) == 3 and all(c[-1] == "tuner.families.sm90_dsl.serve" for c in started)
    compiler.prestart(configs)  # already idle: none started again
    assert len(started) == 3
    compiler.builders.idle.clear()


# --- split-K -------------------------------------------------------------------------------------------------
from tuner.families.sm90_dsl.spec import scheduled_tiles, split_k_range, split_k_workspace_bytes  # noqa: E402
from tuner.families.sm90_dsl.stream_plan import StreamKPlan  # noqa: E402

LATE_GEMM_B1 = ConvProblem(n=1, h=7, w=7, c=2048, k=512, r=1, s=1)       # M=49: 4 tiles of 128x128
LATE_CONV_B1 = ConvProblem(n=1, h=7, w=7, c=512, k=512, r=3, s=3, pad=1)  # 72 k tiles of 64


def test_split_k_is_a_knob_of_the_name_the_spec_and_the_launch():
    plain, split = make_config(LATE_GEMM_B1, params()), make_config(LATE_GEMM_B1, params(split_k=4))
    assert plain.split_k == 1 and "_sk" not in plain.name and "_sk4_" in split.name
    assert split.search_params["split_k"] == 4 and split.build_spec().tile.split_k == 4
    assert plain.build_spec().tile.split_k == 1
    assert FAMILY.rules.launch_args(split, LATE_GEMM_B1).split_k == 4
    shape = FAMILY.model.launch_shape(split, LATE_GEMM_B1, H100)
    assert shape.can_split_k and shape.split_k_slices == 4 and shape.work_tiles == 4 * 4
    assert "sk4" in FAMILY.describe(split) and "sk" not in FAMILY.describe(plain)
    # trials stored before the knob existed ran without a split
    stored = {k: v for k, v in params().items() if k != "split_k"}
    assert make_config(LATE_GEMM_B1, stored) == plain
    with pytest.raises(SpaceError, match="split_k"):
        parse_space({"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["single"],
                     "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [0], "split_k": [-1]})


def test_split_k_static_checks():
    def problems(problem, **changes):
        return static_problems(make_config(problem, params(**changes)), problem, H100)
    assert problems(LATE_GEMM_B1, split_k=16) == []          # 32 k tiles: 2 a split
    assert any("fewer than 2" in r for r in problems(LATE_GEMM_B1, split_k=32))
    assert problems(LATE_CONV_B1, split_k=16, tile_q=16) == []  # 72 k tiles
    assert any("pingpong" in r for r in problems(LATE_GEMM_B1, split_k=2, schedule="pingpong"))
    # 13 x 16 = 208 tiles of 128x128 fill the 132 SMs already: no split
    assert any("fill" in r for r in problems(GEMM, split_k=2))
    assert problems(GEMM, split_k=1) == []


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_the_space_offers_split_k_only_where_the_grid_leaves_sms_idle():
    space = load_space(SPACE_FILE)
    for problem in (LATE_GEMM_B1, LATE_CONV_B1):
        assert {c.split_k for c in valid_configs(space, problem, H100)} == {STREAM_K, 1, 2, 4, 8, 16}
    for config in valid_configs(space, CONV, H100):  # 28x28 b32: every tile shape fills the SMs
        assert config.split_k in (1, STREAM_K) or config.cluster_tiles < H100.sm_count


def test_split_k_workspace_holds_a_partial_a_tile_and_split_and_a_counter_a_tile():
    assert split_k_workspace_bytes(4, 1, 128, 128) == 0
    assert split_k_workspace_bytes(4, 8, 128, 128) == 8 * 4 * 128 * 128 * 4 + 4 * 4
    config = make_config(LATE_GEMM_B1, params(split_k=8))
    assert config.workspace_bytes == split_k_workspace_bytes(4, 8, 128, 128)
    # the scheduler hands out whole clusters and swizzle groups: each of those tiles has a slot
    assert scheduled_tiles(1, 4, 2, 1, 1, True) == (2, 4)
    assert scheduled_tiles(1, 4, 1, 1, 8, True) == (1, 8)
    assert scheduled_tiles(3, 4, 1, 1, 2, False) == (4, 4)
    swizzled = make_config(LATE_GEMM_B1, params(split_k=2, cluster="2x1x1", swizzle=8))
    assert swizzled.workspace_bytes == split_k_workspace_bytes(2 * 8, 2, 128, 128)


def test_split_k_reduced_in_the_cluster_is_a_knob_of_the_name_the_spec_and_the_launch():
    """The splits of a tile as the CTAs of a 1 x split_k cluster: no workspace, the launch's cluster is the splits."""
    workspace = make_config(LATE_GEMM_B1, params(split_k=4))
    cluster = make_config(LATE_GEMM_B1, params(split_k=4, split_reduce="cluster"))
    assert workspace.split_reduce.value == "workspace" and cluster.cluster_reduce
    assert "_sk4_" in workspace.name and "_sk4c_" in cluster.name
    assert cluster.search_params["split_reduce"] == "cluster" and cluster.build_spec().tile.split_reduce == "cluster"
    assert cluster.workspace_bytes == 0 and workspace.workspace_bytes > 0
    assert (cluster.launch_cluster.m, cluster.launch_cluster.n) == (1, 4)
    assert cluster.exchange_bytes == 3 * 128 * 128 * 4
    assert cluster.epilogue_bytes() - workspace.epilogue_bytes() == cluster.exchange_bytes
    assert FAMILY.model.launch_shape(cluster, LATE_GEMM_B1, H100).cluster == (1, 4, 1)
    assert "in the cluster" in FAMILY.describe(cluster) and "cluster" not in FAMILY.describe(workspace)
    # without a split nothing is reduced: one kernel, whatever the knob says; stored trials before the knob reduced
    # through the workspace
    assert make_config(LATE_GEMM_B1, params(split_reduce="cluster")) == make_config(LATE_GEMM_B1, params())
    assert make_config(LATE_GEMM_B1, params(split_k=0, split_reduce="cluster")).split_reduce.value == "workspace"
    assert make_config(LATE_GEMM_B1, params(split_k=4)) == workspace
    # the space file may leave the knob out (workspace), and names no other value
    document = {"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["single"],
                "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [0], "split_k": [1, 4]}
    assert parse_space(document).choices["split_reduce"] == ("workspace",)
    assert load_space(SPACE_FILE).choices["split_reduce"] == ("workspace", "cluster")
    with pytest.raises(SpaceError, match="split_reduce"):
        parse_space({**document, "split_reduce": ["atomics"]})


def test_split_k_reduced_in_the_cluster_static_checks():
    def problems(problem, **changes):
        return static_problems(make_config(problem, params(split_reduce="cluster", **changes)), problem, H100)
    assert problems(LATE_GEMM_B1, split_k=8, tile="64x16x64", schedule="single") == []
    assert problems(LATE_GEMM_B1, split_k=2, tile="128x64x64") == []
    assert any("8 CTAs a portable cluster" in r for r in problems(LATE_GEMM_B1, split_k=16))
    assert any("no multicast cluster 1x2" in r for r in problems(LATE_GEMM_B1, split_k=4, cluster="1x2x1"))
    assert any("pingpong" in r for r in problems(LATE_GEMM_B1, split_k=2, schedule="pingpong"))
    # the exchange buffer takes shared memory from the stages: 7 x 64 KB of 128x128 partials leave none
    assert any("stage" in r for r in problems(LATE_GEMM_B1, split_k=8))
    # the workspace path's rules hold too: 208 tiles fill the SMs already
    assert any("fill" in r for r in problems(GEMM, split_k=2))
    with pytest.raises(SpecError, match="portable cluster"):
        make_config(LATE_GEMM_B1, params(split_k=16, split_reduce="cluster")).build_spec().check()


def test_the_cost_model_counts_no_global_round_trip_for_a_split_reduced_in_the_cluster():
    from tuner.search.costmodel import predicted_us
    # 16 clusters of 4 (all fit at once); on an H200 5.53 us through the workspace, 4.49 in the cluster
    workspace = make_config(LATE_GEMM_B1, params(split_k=4, tile="64x32x64", schedule="single"))
    cluster = make_config(LATE_GEMM_B1, params(split_k=4, tile="64x32x64", schedule="single", split_reduce="cluster"))
    assert predicted_us(cluster, LATE_GEMM_B1, H100) < predicted_us(workspace, LATE_GEMM_B1, H100)
    assert FAMILY.model.cost_terms(cluster, LATE_GEMM_B1, H100).cluster_size == 4


def test_the_prior_picks_one_warpgroup_tiles_first_where_the_output_fits_64_rows():
    """A 128-row cooperative tile on ResNet-50's 49-pixel batch-1 1x1 computes mostly padding: the picks of that layer
    were all such tiles, while a 64-row single tile with four splits reduced in the cluster ran fastest (H200)."""
    from tuner.search.costmodel import prior_picks
    space = load_space(SPACE_FILE)
    picks = prior_picks(space, LATE_GEMM_B1, H100, 8)
    assert picks and all(p.schedule.value == "single" and p.tile.m == 64 for p in picks)
    assert any(p.tile.text == "64x32x64" and p.split_k == 4 and p.cluster_reduce for p in picks)
    wide = ConvProblem(n=1, h=14, w=14, c=1024, k=512, r=1, s=1)  # 196 pixels: two warpgroups first
    assert prior_picks(space, wide, H100, 1)[0].schedule.value == "cooperative"


@pytest.mark.parametrize("k_tiles", [2, 3, 7, 8, 32, 36, 72, 73, 144])
def test_split_k_ranges_cover_every_k_tile_once(k_tiles):
    for splits in range(1, k_tiles // 2 + 1):
        covered = [kt for split in range(splits) for kt in range(*split_k_range(k_tiles, splits, split))]
        assert covered == list(range(k_tiles)), (k_tiles, splits)
        sizes = [end - begin for begin, end in (split_k_range(k_tiles, splits, s) for s in range(splits))]
        assert min(sizes) >= 2 and max(sizes) - min(sizes) <= 1


def test_a_box_never_spans_images_of_a_one_image_batch():
    one_image = ConvProblem(n=1, h=7, w=7, c=512, k=512, r=3, s=3, pad=1)
    assert conv_box(problem_spec(one_image), 128, 16).images_n == 1
    reasons = static_problems(make_config(one_image, params(tile_q=8)), one_image, H100)
    assert any("pick a wider tile_q" in r for r in reasons), reasons
    assert static_problems(make_config(one_image, params(tile_q=16)), one_image, H100) == []


def test_a_residual_runs_with_pingpong_in_a_cluster_and_with_the_direct_store():
    """Both were refused while the residual ring raced (its slot released to the TMA refill unfenced)."""
    fused = replace(GEMM, epilogue=parse_epilogue("scale+bias+residual+silu"))
    for changes in ({"schedule": "pingpong", "cluster": "1x2x1", "tile": "128x64x64"}, {"epi_store": "direct"}):
        assert static_problems(make_config(fused, params(**changes)), fused, H100) == [], changes


def test_a_tile_n_is_any_multiple_of_16_and_its_epilogue_subtiles_divide_it():
    """48, 80, 112 (RegNet's K=48 and K=104 layers; cuBLAS runs the latter with a 104-column tile) store 16-column
    subtiles; the multiples of 32, 32-column ones."""
    from tuner.families.sm90_dsl.spec import epilogue_columns
    for n, refused in ((16, False), (24, True), (32, False), (48, False), (80, False), (96, False), (112, False),
                       (192, False), (272, True)):
        reasons = static_problems(make_config(GEMM, params(tile=f"128x{n}x64")), GEMM, H100)
        assert any("multiple of 16 up to 256" in r for r in reasons) == refused, (n, reasons)
        if not refused:
            assert n % epilogue_columns(n) == 0 and epilogue_columns(n) == (32 if n % 32 == 0 else 16)


R50_S5_3X3_B32 = ConvProblem(n=32, h=7, w=7, c=512, k=512, r=3, s=3, pad=1)  # 13 x 4 tiles of 128x128, 72 k tiles


@pytest.mark.parametrize("tiles, k_tiles, clusters", [(52, 72, 132), (4, 32, 128), (208, 8, 132), (28, 72, 66),
                                                      (1, 9, 5), (7, 3, 20), (132, 4, 132), (133, 5, 132)])
def test_stream_k_shares_walked_as_the_kernel_walks_them_sum_every_k_tile_once(tiles, k_tiles, clusters):
    """Each cluster walks its share unit by unit with the plan's unit/next_position/slot (what StreamKScheduler runs
    on the device): together the units cover every (tile, k tile) once, and a tile's units take the slots 0..n-1,
    n being what the fixup waits for."""
    plan = StreamKPlan(tiles, k_tiles, clusters)
    covered, slots = [], {}
    for cluster in range(clusters):
        position, end = plan.share(cluster)
        assert end - position >= plan.shortest_share
        while position < end:
            tile, begin, stop = plan.unit(position, end)
            assert 0 <= begin < stop <= k_tiles and position == tile * k_tiles + begin
            covered += [(tile, k) for k in range(begin, stop)]
            slot, units = plan.slot(position)
            slots.setdefault(tile, []).append((slot, units))
            position = plan.next_position(position, end)
    assert covered == [(t, k) for t in range(tiles) for k in range(k_tiles)]
    for tile, taken in slots.items():
        units = len(taken)
        assert taken == [(slot, units) for slot in range(units)] and plan.units(tile)[1] == units
    assert plan.slots == max(len(taken) for taken in slots.values())


def test_the_slots_counted_from_the_shares_starts_are_the_most_units_any_tile_has():
    """StreamKPlan.slots walks the clusters' share starts (the static checks ask it of every stream-K configuration);
    it must agree with the tile-by-tile count."""
    import random
    chooser = random.Random(7)
    for _ in range(500):
        tiles, k_tiles = chooser.randint(1, 300), chooser.randint(1, 80)
        plan = StreamKPlan(tiles, k_tiles, chooser.randint(1, min(tiles * k_tiles, 132)))
        assert plan.slots == max(plan.units(tile)[1] for tile in range(tiles)), plan


def test_stream_k_is_split_k_0_in_the_name_the_spec_the_geometry_and_the_launch():
    from tuner.families.sm90_dsl.geometry import geometry

    config = make_config(R50_S5_3X3_B32, params(split_k=0, tile_q=8))
    assert config.stream_k and "_skstream_" in config.name and "stream-K" in FAMILY.describe(config)
    assert config.build_spec().tile.split_k == 0 and config.search_params["split_k"] == 0
    assert FAMILY.rules.launch_args(config, R50_S5_3X3_B32).split_k == 1  # launched as a kernel without a split
    plan = config.stream_plan
    assert (plan.k_tiles, plan.clusters) == (72, 132) and plan.slots >= 2
    g = geometry(config.build_spec())
    assert g.stream_k and g.split_k == 1 and g.splits and g.stream_plan == plan and g.grid == (1, 1, 132)
    assert config.workspace_bytes == g.workspace_bytes == split_k_workspace_bytes(plan.cluster_tiles, plan.slots,
                                                                                  128, 128)
    assert g.partial_elements == plan.slots * plan.cluster_tiles * 128 * 128
    shape = FAMILY.model.launch_shape(config, R50_S5_3X3_B32, H100)
    assert shape.work_tiles == 132 and shape.split_k_slices == 3  # 132 CTAs on 52 tiles
    assert static_problems(config, R50_S5_3X3_B32, H100) == []
    clustered = make_config(R50_S5_3X3_B32, params(split_k=0, tile_q=8, cluster="1x2x1"))
    assert clustered.stream_plan.clusters == 66 and geometry(clustered.build_spec()).grid == (1, 2, 66)


def test_stream_k_static_checks():
    def problems(problem, **changes):
        return static_problems(make_config(problem, params(**changes)), problem, H100)
    assert any("pingpong" in r for r in problems(R50_S5_3X3_B32, split_k=0, tile_q=8, schedule="pingpong"))
    # 4 tiles x 32 k tiles in 128 shares: one k tile a share
    assert any("fewer than 2" in r for r in problems(LATE_GEMM_B1, split_k=0))
    # 4 tiles of 72 k tiles in 132 shares of about 2: a tile split 33 ways, its last unit reading 33 partials back
    assert any("split a tile 33 ways" in r for r in problems(LATE_CONV_B1, split_k=0, tile_q=16))
    # 132 tiles of 128x128 on 132 SMs: every share is one whole tile, nothing to balance
    whole = ConvProblem(n=1, h=66, w=128, c=512, k=256, r=1, s=1)
    assert any("splits no tile" in r for r in problems(whole, split_k=0))
    stem = ConvProblem(n=2, h=64, w=64, c=3, k=64, r=7, s=7, pad=3, stride=2)
    assert any("split-K" in r for r in problems(stem, tile="128x64x32", split_k=0))
    with pytest.raises(SpecError, match="pingpong"):
        from tuner.families.sm90_dsl.geometry import geometry
        geometry(make_config(R50_S5_3X3_B32, params(split_k=0, tile_q=8, schedule="pingpong")).build_spec())


def test_the_cost_model_sees_stream_k_balance_the_sms_where_split_k_leaves_a_partial_wave():
    from tuner.search.costmodel import predicted_us

    def predicted(split_k):
        return predicted_us(make_config(R50_S5_3X3_B32, params(split_k=split_k, tile_q=8)), R50_S5_3X3_B32, H100)
    assert predicted(0) < predicted(2) < predicted(1)


def test_im2col_is_tile_q_minus_1_in_the_name_the_spec_the_geometry_and_the_checks():
    """TMA im2col loads: the M tiles run over the n*p*q pixels in order (no box computes padded pixels), for any
    stride and dilation; a GEMM or a gathered stem has none."""
    from tuner.families.sm90_dsl.geometry import geometry
    from tuner.families.sm90_dsl.im2col import TILE_Q_IM2COL

    config = make_config(R50_S5_3X3_B32, params(tile_q=TILE_Q_IM2COL))
    assert config.im2col and config.tiles_pixels and config.box is None and "_qim2col_" in config.name
    assert " im2col" in FAMILY.describe(config) and config.build_spec().tile.tile_q == TILE_Q_IM2COL
    assert config.m_tiles == 13 and config.k_steps == 72  # 1568 pixels in tiles of 128, 9 taps x 8 blocks
    boxed = make_config(R50_S5_3X3_B32, params(tile_q=8))
    # boxes of 8 columns by one row of 16 images: an eighth of a 7-column output's rows are padding
    assert boxed.m_tiles == 14 and boxed.box.useful_fraction(boxed.shape) == 0.875
    g = geometry(config.build_spec())
    assert g.im2col and (g.xw, g.yq, g.tile_q, g.bp, g.bn) == (1568, 1568, 128, 1, 1) and g.m_tiles == 13
    assert (g.src_n, g.src_h, g.src_w, g.out_p, g.out_q) == (32, 7, 7, 7, 7) and g.k_tiles == 72
    assert static_problems(config, R50_S5_3X3_B32, H100) == []
    # stride 2, dilation 2 and a C that no tile K divides are the TMA unit's to handle
    for problem in (ConvProblem(n=4, h=14, w=14, c=80, k=256, r=3, s=3, pad=1, stride=2),
                    ConvProblem(n=2, h=33, w=33, c=64, k=64, r=3, s=3, pad=2, dilation=2),
                    ConvProblem(n=1, h=65, w=65, c=2048, k=256, r=3, s=3, pad=12, dilation=12)):
        assert static_problems(make_config(problem, params(tile_q=TILE_Q_IM2COL)), problem, H100) == []
    # a GEMM and a gathered stem take no tile_q: im2col there is the same kernel as any other
    assert not make_config(LATE_GEMM_B1, params(tile_q=TILE_Q_IM2COL)).im2col
    stem = ConvProblem(n=2, h=64, w=64, c=3, k=64, r=7, s=7, pad=3, stride=2)
    assert not make_config(stem, params(tile="128x64x32", tile_q=TILE_Q_IM2COL)).im2col
    wide = ConvProblem(n=1, h=65, w=65, c=256, k=256, r=3, s=3, pad=16, dilation=16)  # filter reach 32
    assert any("filter offset" in r for r in static_problems(make_config(wide, params(tile_q=TILE_Q_IM2COL)), wide,
                                                              H100))
    far = ConvProblem(n=1, h=65, w=65, c=256, k=256, r=3, s=3, pad=18, dilation=18)  # corner -18
    assert any("corners" in r for r in static_problems(make_config(far, params(tile_q=TILE_Q_IM2COL)), far, H100))
    with pytest.raises(SpecError, match="filter offset"):
        geometry(make_config(wide, params(tile_q=TILE_Q_IM2COL)).build_spec())
    space = parse_space({"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["single"],
                         "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [-1, 8], "split_k": [1]})
    assert space.choices["tile_q"] == (-1, 0, 8)


@pytest.mark.parametrize("extent, out, taps, pad, stride, dilation", [
    (7, 7, 3, 1, 1, 1), (14, 7, 3, 1, 2, 1), (56, 28, 1, 0, 2, 1), (17, 8, 3, 0, 2, 1), (33, 33, 3, 2, 1, 2),
    (299, 149, 3, 0, 2, 1), (65, 65, 3, 12, 1, 12), (224, 112, 7, 3, 2, 1)])
def test_the_im2col_pixel_box_holds_exactly_the_outputs_positions(extent, out, taps, pad, stride, dilation):
    """The box runs from the lower corner to extent - 1 + the upper corner in steps of the stride: out positions,
    the first at -pad and the last whose farthest tap is the last input element the output reads."""
    from tuner.families.sm90_dsl.im2col import im2col_axis

    axis = im2col_axis(extent, out, taps, pad, stride, dilation)
    positions = range(axis.lower_corner, extent + axis.upper_corner, stride)
    assert len(positions) == out and positions[0] == -pad
    assert positions[-1] + axis.filter_offset == extent - 1 + axis.upper_padding
    assert axis.upper_corner == axis.upper_padding - axis.filter_offset


def test_the_waste_diagnosis_counts_the_padded_rows_of_a_box_kernel_and_none_of_an_im2col_one():
    """tile_padding counts the rows a box kernel's tiles compute (14 tiles of 128 for a 7x7 output of 32 images in
    8-column boxes: 1792 rows for 1568 pixels), where M rounded up to the tile alone (1664) would hide them."""
    from tuner.analysis.diagnose import diagnose, kernel_facts
    from tuner.families.sm90_dsl.im2col import TILE_Q_IM2COL
    from tuner.measure.run import KernelAttributes

    attributes = KernelAttributes(registers_per_thread=168, static_smem_bytes=0, dynamic_smem_bytes=200_000,
                                  local_bytes_per_thread=0, threads_per_block=384, max_active_blocks_per_sm=1)

    def padding(tile_q):
        config = make_config(R50_S5_3X3_B32, params(tile_q=tile_q))
        facts = kernel_facts(config, R50_S5_3X3_B32, H100, 56, attributes, 0)
        return facts.padded_m, [f for f in diagnose(facts) if f.code == "tile_padding"]
    rows, flags = padding(8)
    assert rows == 14 * 128 and len(flags) == 1 and "M 1568->1792: 12%" in flags[0].message
    rows, flags = padding(TILE_Q_IM2COL)
    assert rows is None and flags == []  # 1664 rows for 1568 pixels: 6 %, under the rule's 10 %


def test_the_epilogue_staging_is_a_knob_of_the_name_the_spec_and_the_shared_memory():
    """64-column subtiles and 4 buffers: what the memory-bound 1x1s gained from on the H200 (docs/dsl.md)."""
    from tuner.families.sm90_dsl.spec import epilogue_columns
    plain, wide = make_config(GEMM, params()), make_config(GEMM, params(epi_columns=64, epi_buffers=4))
    assert (plain.epi_columns, plain.epi_buffers) == (32, 2) and "_e" not in plain.name.split("_f16")[0]
    assert "_e64x4_" in wide.name and "e64x4" in FAMILY.describe(wide) and "e64" not in FAMILY.describe(plain)
    assert wide.search_params["epi_columns"] == 64 and wide.search_params["epi_buffers"] == 4
    assert (wide.build_spec().tile.epi_columns, wide.build_spec().tile.epi_buffers) == (64, 4)
    # four subtiles of twice the width: four times the staging, and fewer stages of the main loop fit beside it
    assert wide.epilogue_bytes() - plain.epilogue_bytes() == 128 * (64 * 4 - 32 * 2) * 2
    assert wide.stage_count < plain.stage_count
    # 64 columns only where they divide tile N: 96 and 48 keep 32 and 16, one value naming each kernel
    for n, columns in ((128, 64), (192, 64), (96, 32), (48, 16)):
        assert epilogue_columns(n, 64) == columns and epilogue_columns(n) == min(columns, 32)
    assert make_config(GEMM, params(tile="128x96x64", epi_columns=64)) == make_config(GEMM, params(tile="128x96x64"))
    # trials and entries stored before the knobs existed ran with the default staging
    assert make_config(GEMM, {k: v for k, v in params().items() if not k.startswith("epi_")}) == plain


def test_the_default_staging_keeps_the_cache_keys_it_had_and_another_round_trips():
    plain = make_config(GEMM, params()).build_spec()
    assert "epi_" not in plain.to_json()
    wide = make_config(GEMM, params(epi_columns=64, epi_buffers=4)).build_spec()
    assert BuildSpec.from_json(wide.to_json()) == wide and '"epi_buffers": 4' in wide.to_json()
    for bad in ('"epi_buffers": 5', '"epi_columns": 48'):
        knob = bad.split('"')[1]
        text = wide.to_json().replace(f'"{knob}": {getattr(wide.tile, knob)}', bad)
        with pytest.raises(SpecError, match=knob):
            BuildSpec.from_json(text)


def test_a_space_file_may_leave_out_the_staging_and_may_not_give_a_bad_value():
    document = {"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["cooperative"],
                "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [16], "split_k": [1]}
    assert dict(parse_space(document).choices_items)["epi_buffers"] == (2,)
    assert dict(parse_space({**document, "epi_columns": [32, 64]}).choices_items)["epi_columns"] == (32, 64)
    for knob, value in (("epi_columns", 48), ("epi_buffers", 8)):
        with pytest.raises(SpaceError, match=knob):
            parse_space({**document, knob: [value]})


def test_staging_that_leaves_too_few_stages_is_refused_before_the_build():
    """EfficientNet's C16 expand in 128x128x64 with 4 stages: 4 pingpong buffers of 64 columns failed to build on the
    H200 ('4 stages need ... bytes'); the checks say so first."""
    expand = ConvProblem(n=32, h=112, w=112, c=16, k=96, r=1, s=1)
    config = make_config(expand, params(schedule="pingpong", stages=4, epi_columns=64, epi_buffers=4))
    assert any("do not fit" in reason for reason in static_problems(config, expand, H100))
    assert static_problems(make_config(expand, params(schedule="pingpong", stages=4)), expand, H100) == []


def test_the_direct_store_is_a_knob_that_stages_nothing_and_a_gathered_c_refuses():
    direct = make_config(GEMM, params(epi_store="direct", epi_columns=64, epi_buffers=4))
    # nothing is staged: the staging knobs hold their defaults, so one kernel answers to any of them
    assert (direct.epi_columns, direct.epi_buffers) == (32, 2)
    assert direct == make_config(GEMM, params(epi_store="direct"))
    assert "_edirect_" in direct.name and "direct store" in FAMILY.describe(direct)
    assert direct.search_params["epi_store"] == "direct" and direct.build_spec().tile.epi_store == "direct"
    assert BuildSpec.from_json(direct.build_spec().to_json()) == direct.build_spec()
    assert "epi_store" not in make_config(GEMM, params()).build_spec().to_json()
    assert static_problems(direct, GEMM, H100) == []
    stem = ConvProblem(n=2, h=64, w=64, c=3, k=64, r=7, s=7, pad=3, stride=2)
    gathered = {"tile": "128x64x64", "tile_q": 0, "epi_store": "direct"}
    assert any("stores its output by TMA" in r for r in static_problems(make_config(stem, params(**gathered)), stem,
                                                                         H100))
    with pytest.raises(SpecError, match="gathering"):
        make_config(stem, params(**gathered)).build_spec().check()
    with pytest.raises(SpaceError, match="epi_store"):
        parse_space({"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["single"],
                     "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [0], "split_k": [1],
                     "epi_store": ["registers"]})


def test_the_l2_hints_are_a_knob_named_in_the_kernel_and_left_out_of_the_default_spec():
    streamed = make_config(GEMM, params(l2_hints="stream"))
    assert "_l2s_" in streamed.name and "L2 stream" in FAMILY.describe(streamed)
    assert streamed.search_params["l2_hints"] == "stream" and streamed.build_spec().tile.l2_hints == "stream"
    assert BuildSpec.from_json(streamed.build_spec().to_json()) == streamed.build_spec()
    plain = make_config(GEMM, params())
    assert plain.l2_hints.value == "none" and "l2" not in plain.build_spec().to_json() and "_l2s" not in plain.name
    assert static_problems(streamed, GEMM, H100) == []
    with pytest.raises(SpaceError, match="l2_hints"):
        parse_space({"family": "sm90_dsl", "tile": ["128x128x64"], "cluster": ["1x1x1"], "schedule": ["single"],
                     "stages": [0], "raster": ["m"], "swizzle": [1], "tile_q": [0], "split_k": [1],
                     "l2_hints": ["evict_first"]})
    with pytest.raises(SpecError, match="l2_hints"):
        replace(streamed.build_spec(), tile=replace(streamed.build_spec().tile, l2_hints="first")).check()

