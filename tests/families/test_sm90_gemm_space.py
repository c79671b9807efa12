"""The sm90_gemm family's space: parsing its YAML file, the static rules (schedules, schedulers, run-time
knobs, accumulators, shared memory, the TMA epilogue's alignment), the layers it refuses (anything but a
1x1, stride-1, unpadded conv), the padded problem and the run-time launch arguments."""
import dataclasses

import pytest
import yaml

from conftest import H100, REPO
from tuner.families.base import SearchSpace, Shape3, SpaceError
from tuner.families.sm90_common.space import SMEM_CAPACITY, EpilogueSchedule, kernel_problem
from tuner.families.sm90_gemm.space import (
    AUTO_STAGES,
    MAX_ACCUMULATORS,
    Schedule,
    Scheduler,
    Sm90GemmConfig,
    k_steps,
    launch_args,
    layer_problem,
    make_config,
    parse_space,
    static_problems,
)
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.search.space import all_configs, load_space, valid_configs

SPACE_FILE = REPO / "search_spaces" / "sm90_gemm.yaml"
LANDSCAPE_FILE = REPO / "search_spaces" / "sm90_gemm_landscape.yaml"
RUN_TIME = ("raster", "swizzle", "split_k")


def problem(**fields) -> ConvProblem:
    base = dict(n=32, h=28, w=28, c=256, k=128, r=1, s=1)  # f16 output
    return ConvProblem(**{**base, **fields})


def params(tile="128x128x64", cluster="1x1x1", schedule="cooperative", scheduler="persistent", epilogue="tma",
           stages=0, raster=0, swizzle=1, split_k=1, swap_ab=False, epilogue_n=0) -> dict:
    return {"tile": tile, "cluster": cluster, "schedule": schedule, "scheduler": scheduler, "epilogue": epilogue,
            "stages": stages, "raster": raster, "swizzle": swizzle, "split_k": split_k, "swap_ab": swap_ab,
            "epilogue_n": epilogue_n}


def config(prob: ConvProblem | None = None, **overrides) -> Sm90GemmConfig:
    return make_config(prob or problem(), params(**overrides))


def reasons_of(cfg: Sm90GemmConfig, device, prob: ConvProblem | None = None) -> list[str]:
    return static_problems(cfg, prob or problem(), device)


def only_problem(cfg: Sm90GemmConfig, device, prob: ConvProblem | None = None) -> str:
    reasons = reasons_of(cfg, device, prob)
    assert len(reasons) == 1, reasons
    return reasons[0]


def space_document(**changes) -> dict:
    document = yaml.safe_load(SPACE_FILE.read_text())
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


# --- the search-space file ----------------------------------------------------------------------

def test_repository_space():
    space = load_space(SPACE_FILE)
    assert space.family == "sm90_gemm"
    assert space == parse_space(yaml.safe_load(SPACE_FILE.read_text()))
    choices = space.choices
    assert list(choices) == ["tile", "cluster", "schedule", "scheduler", "epilogue", "stages", "raster", "swizzle",
                             "split_k", "swap_ab", "epilogue_n"]
    assert choices["swap_ab"] == (False, True)
    assert choices["epilogue_n"] == (0,)  # the file names none: CUTLASS's choice
    assert "128x128x64" in choices["tile"] and "64x64x128" in choices["tile"]
    assert all(Shape3.parse(t).text == t for t in choices["tile"] + choices["cluster"])
    assert choices["schedule"] == ("ws", "cooperative", "pingpong")
    assert choices["scheduler"] == ("persistent", "stream_k")
    assert choices["epilogue"] == ("tma", "nosmem")
    assert choices["stages"] == (0, 3, 4, 5)
    assert (choices["raster"], choices["swizzle"], choices["split_k"]) == ((0, 1, 2), (1, 2, 4, 8), (1, 2, 4))
    expected = 1
    for values in choices.values():
        expected *= len(values)
    assert space.size == expected  # all_configs yields them all: test_config_names_are_unique_and_round_trip


def test_landscape_is_a_slice_of_the_space():
    space, landscape = load_space(SPACE_FILE), load_space(LANDSCAPE_FILE)
    assert landscape.family == "sm90_gemm"
    for knob, values in landscape.choices.items():
        assert set(values) <= set(space.choices[knob]), knob


def test_parse_space_deduplicates_and_sorts():
    space = parse_space(space_document(split_k=[4, 1, 4], swizzle=[8, 1], schedule=["pingpong", "ws", "pingpong"]))
    assert space.choices["split_k"] == (1, 4)
    assert space.choices["swizzle"] == (1, 8)
    assert space.choices["schedule"] == ("pingpong", "ws")


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(warps=["2x2x1"]), ["unknown warps"]),
        (dict(split_k=None), ["missing split_k"]),
        (dict(raster=None, swizzle=None), ["missing raster, swizzle"]),
        (dict(family="sm90_conv"), ["'sm90_conv'", "'sm90_gemm'"]),
        (dict(tile=["128x128"]), ["'128x128'"]),
        (dict(cluster=["2x1x1x1"]), ["'2x1x1x1'"]),
        (dict(schedule=["basic"]), ["schedule value 'basic'", "ws, cooperative, pingpong"]),
        (dict(scheduler=["streamk"]), ["scheduler value 'streamk'", "stream_k"]),
        (dict(epilogue=["auto"]), ["epilogue value 'auto'"]),
        (dict(stages=[1]), ["stages value 1"]),
        (dict(stages=[40]), ["stages value 40"]),
        (dict(raster=[3]), ["raster value 3", "0 heuristic"]),
        (dict(raster=[-1]), ["raster value -1"]),
        (dict(swizzle=[3]), ["swizzle value 3", "1, 2, 4 or 8"]),
        (dict(swizzle=[16]), ["swizzle value 16"]),
        (dict(split_k=[0]), ["split_k value 0", "1 to 64"]),
        (dict(split_k=[65]), ["split_k value 65"]),
        (dict(split_k=[True]), ["split_k value True"]),
        (dict(split_k=["2"]), ["split_k value '2'"]),
        (dict(schedule=[]), ["'schedule' must be a non-empty list"]),
        (dict(raster=0), ["'raster' must be a non-empty list"]),
    ],
)
def test_parse_space_refuses(changes, words):
    with pytest.raises(SpaceError) as error:
        parse_space(space_document(**changes))
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_parse_space_refuses_non_mapping():
    with pytest.raises(SpaceError, match="mapping"):
        parse_space("family: sm90_gemm")


# --- the static rules ---------------------------------------------------------------------------

def test_generator_configurations_are_valid(h100):
    for overrides in (dict(), dict(tile="256x128x64", cluster="1x2x1"), dict(tile="64x256x64", schedule="pingpong"),
                      dict(schedule="ws"), dict(scheduler="stream_k", split_k=4, raster=2, swizzle=8),
                      dict(schedule="pingpong", raster=1, swizzle=4, epilogue="nosmem")):
        assert reasons_of(config(**overrides), h100) == [], overrides


def test_tile_limits(h100):
    assert "tile M=96" in only_problem(config(tile="96x64x64", schedule="ws"), h100)
    assert "tile M=512" in only_problem(config(tile="512x64x64", schedule="ws"), h100)
    assert "tile N=12" in only_problem(config(tile="64x12x64", schedule="ws"), h100)
    assert "tile N=264" in only_problem(config(tile="64x264x64", schedule="ws"), h100)
    assert "tile K=24" in only_problem(config(tile="64x64x24", schedule="ws"), h100)
    assert "tile K=272" in only_problem(config(tile="64x64x272", schedule="ws"), h100)
    assert reasons_of(config(tile="64x8x64", schedule="ws", epilogue="nosmem"), h100) == []  # N a multiple of 8 is enough


@pytest.mark.parametrize("tile", ["64x128x64", "192x64x64"])
def test_cooperative_needs_tile_m_multiple_of_128(h100, tile):
    reason = only_problem(config(tile=tile, schedule="cooperative"), h100)
    assert "cooperative" in reason and f"tile M={Shape3.parse(tile).m}" in reason and "128" in reason
    for schedule in ("ws", "pingpong"):
        assert reasons_of(config(tile=tile, schedule=schedule), h100) == [], schedule


def test_stream_k_only_with_cooperative(h100):
    assert reasons_of(config(scheduler="stream_k"), h100) == []
    for schedule in ("ws", "pingpong"):
        reason = only_problem(config(schedule=schedule, scheduler="stream_k"), h100)
        assert "stream-K" in reason and "cooperative schedule only" in reason and schedule in reason


def test_split_k_only_with_stream_k(h100):
    assert reasons_of(config(scheduler="stream_k", split_k=2), h100) == []
    reason = only_problem(config(scheduler="persistent", split_k=2), h100)
    assert "split_k > 1 needs the stream-K scheduler" == reason


@pytest.mark.parametrize("raster, swizzle", [(1, 1), (2, 1), (0, 2), (0, 8), (2, 4)])
def test_ws_schedule_only_with_default_raster_and_swizzle(h100, raster, swizzle):
    assert reasons_of(config(schedule="ws"), h100) == []
    reason = only_problem(config(schedule="ws", raster=raster, swizzle=swizzle), h100)
    assert "non-persistent ws schedule" in reason and "raster" in reason and "swizzle" in reason
    for schedule in ("cooperative", "pingpong"):
        assert reasons_of(config(schedule=schedule, raster=raster, swizzle=swizzle), h100) == []


def test_accumulators_per_thread(h100):
    assert MAX_ACCUMULATORS == 128
    pingpong = config(tile="128x256x64", schedule="pingpong")
    assert pingpong.accumulators_per_thread == 256
    reason = only_problem(pingpong, h100)
    assert "tile 128x256" in reason and "pingpong" in reason and "256 accumulators" in reason and "spills" in reason
    assert "256 accumulators" in only_problem(config(tile="128x256x64", schedule="ws"), h100)
    cooperative = config(tile="128x256x64", schedule="cooperative")   # two warpgroups split M: 128 each
    assert cooperative.accumulators_per_thread == 128
    assert reasons_of(cooperative, h100) == []
    assert reasons_of(config(tile="128x128x64", schedule="pingpong"), h100) == []


def test_cluster(h100):
    for cluster in ("3x1x1", "4x4x1", "1x1x2"):
        reason = only_problem(config(cluster=cluster), h100)
        assert f"cluster {cluster}" in reason and "powers of two" in reason
    assert reasons_of(config(cluster="2x4x1"), h100) == []
    reason = only_problem(config(tile="128x8x64", schedule="ws", epilogue="nosmem", cluster="16x1x1"), h100)
    assert "cluster 16x1x1" in reason
    # multicast of B over cluster M=8 splits tile N=8 into rows of 1, A over N=8 tile M=64 into rows of 8
    assert reasons_of(config(tile="64x8x64", schedule="ws", epilogue="nosmem", cluster="8x1x1"), h100) == []


def test_multicast_divisibility(h100):
    # every legal tile divides by every legal cluster: the rule catches a tile N of 36 over cluster M=8
    cfg = config(tile="64x36x64", schedule="ws", cluster="8x1x1")
    reasons = reasons_of(cfg, h100)
    assert any("tile N=36" in r for r in reasons)
    assert any("multicast" in r and "64x36x64" in r for r in reasons)


def test_explicit_stages_above_the_auto_count(h100):
    cfg = config(tile="128x128x64", schedule="cooperative")
    fits = cfg.auto_stage_count
    assert fits == 6 and cfg.stage_count == 6
    assert reasons_of(config(stages=fits), h100) == []
    reason = only_problem(config(stages=fits + 1), h100)
    assert f"{fits + 1} stages of {cfg.stage_bytes} bytes do not fit" in reason and f"at most {fits}" in reason
    assert str(SMEM_CAPACITY) in reason
    # the same rule for other tiles: the auto count is the most that is accepted
    for overrides in (dict(tile="256x128x64"), dict(tile="64x64x64", schedule="ws"),
                      dict(tile="128x128x64", epilogue="nosmem")):
        auto = config(**overrides).auto_stage_count
        assert auto >= 2
        assert reasons_of(config(stages=auto, **overrides), h100) == [], overrides
        assert "do not fit" in only_problem(config(stages=auto + 1, **overrides), h100), overrides


def test_auto_stages_fit_the_capacity():
    for overrides in (dict(), dict(tile="256x128x64"), dict(tile="64x256x64", schedule="pingpong"),
                      dict(tile="64x64x128", schedule="ws", epilogue="nosmem")):
        cfg = config(**overrides)
        assert cfg.stages == AUTO_STAGES
        assert 2 <= cfg.stage_count == cfg.auto_stage_count
        assert cfg.smem_bytes <= SMEM_CAPACITY < cfg.smem_bytes + cfg.stage_bytes, overrides


def test_nosmem_epilogue_leaves_more_stages():
    assert config(epilogue="nosmem").auto_stage_count >= config(epilogue="tma").auto_stage_count


def test_tma_epilogue_needs_aligned_k(h100):
    odd_k = problem(k=12)
    reason = only_problem(config(odd_k, epilogue="tma"), h100, odd_k)
    assert "TMA epilogue" in reason and "K=12" in reason and "multiple of 8" in reason and "f16" in reason
    assert reasons_of(config(odd_k, epilogue="nosmem"), h100, odd_k) == []
    f32_out = problem(k=6, output_type=DataType.f32)
    assert "multiple of 4" in only_problem(config(f32_out, epilogue="tma"), h100, f32_out)
    assert reasons_of(config(problem(k=12, output_type=DataType.f32), epilogue="tma"), h100,
                      problem(k=12, output_type=DataType.f32)) == []



def test_tma_epilogue_needs_subtiles_of_16_columns(h100):
    p = problem()
    narrow = config(p, tile="128x56x64", epilogue="tma")  # epilogue subtile gcd(32, 56) = 8: did not compile
    assert "8 columns wide" in only_problem(narrow, h100, p)
    assert reasons_of(config(p, tile="128x56x64", epilogue="nosmem"), h100, p) == []
    assert reasons_of(config(p, tile="128x112x64", epilogue="tma"), h100, p) == []  # 16: compiled and ran
    # an explicit subtile replaces the auto one
    assert reasons_of(config(p, tile="128x112x64", epilogue_n=16), h100, p) == []


# --- epilogue_n: the TMA epilogue's subtile ---------------------------------------------------------

def test_a_space_without_epilogue_n_keeps_cutlass_s_subtile():
    assert parse_space(space_document(epilogue_n=None)).choices["epilogue_n"] == (0,)
    assert parse_space(space_document(epilogue_n=[0, 64, 128])).choices["epilogue_n"] == (0, 64, 128)
    for bad in ([8], [512], ["64"], []):
        with pytest.raises(SpaceError, match="epilogue_n"):
            parse_space(space_document(epilogue_n=bad))


def test_stored_parameters_without_epilogue_n_are_the_auto_subtile():
    stored = params()
    del stored["epilogue_n"]
    assert make_config(problem(), stored) == config()
    assert make_config(problem(), params(epilogue_n="64")).epilogue_n == 64  # a landscape CSV's text


def test_epilogue_subtile_names_smem_and_checks(h100):
    p = problem()
    auto, wide = config(p, tile="128x256x64"), config(p, tile="128x256x64", epilogue_n=128)
    assert auto.name == "sm90g_128x256x64_c1x1x1_cooperative_persistent_tma_sauto_r0_sw1_sk1_a8_f16_f16_f16_f32"
    assert wide.name == "sm90g_128x256x64_c1x1x1_cooperative_persistent_tma_e128_sauto_r0_sw1_sk1_a8_f16_f16_f16_f32"
    assert wide.search_params["epilogue_n"] == 128 and auto.search_params["epilogue_n"] == 0
    assert (auto.epilogue_subtile, wide.epilogue_subtile) == ((128, 32), (128, 128))
    assert config(p, tile="64x256x64", schedule="pingpong", epilogue_n=64).epilogue_subtile == (64, 64)
    # two 128x128 f16 subtiles (64 KB) leave 3 stages of 48 KB where two 128x32 ones left 4
    assert (auto.auto_stage_count, wide.auto_stage_count) == (4, 3)
    from tuner.families import registry
    assert " tma e128 " in registry.get("sm90_gemm").describe(wide)
    assert "multiple of 16 that divides tile N=256" in only_problem(config(p, tile="128x256x64", epilogue_n=96), h100, p)
    assert "multiple of 16 that divides tile N=208" in only_problem(config(p, tile="128x208x64", epilogue_n=24), h100, p)
    assert "must be a power of two" in only_problem(config(p, tile="128x208x64", epilogue_n=208), h100, p)
    assert reasons_of(config(p, tile="128x192x64", epilogue_n=48, swap_ab=True), h100, p) == []  # compiled, ran
    assert "no-smem epilogue has none" in only_problem(config(p, tile="128x256x64", epilogue="nosmem", epilogue_n=64),
                                                       h100, p)

# --- layers it refuses --------------------------------------------------------------------------

def test_resnet_1x1_stride_1_layers_are_runnable(layers):
    runnable = [name for name, layer in layers.items() if layer_problem(layer.problem) is None]
    assert "r50_s3_1x1_256to128_b32" in runnable and "r50_s2_1x1_64to64_b1" in runnable
    for name in runnable:
        prob = layers[name].problem
        assert (prob.r, prob.s, prob.strides, prob.pads) == (1, 1, (1, 1), (0, 0)), name
    assert layer_problem(layers["r50_s3_down_s2_b32"].problem) is not None  # 1x1 with stride 2


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(r=3, s=3, pad=1), ["1x1, stride-1, unpadded", "this is 3x3, stride 1, pad 1"]),
        (dict(r=1, s=3, pad=1), ["this is 1x3"]),
        (dict(stride=2), ["stride 2"]),
        (dict(pad=1), ["pad 1"]),
        (dict(r=3, s=3, dilation=2), ["dilation 2"]),
        (dict(input_type=DataType.bf16, filter_type=DataType.bf16), ["write bf16 or f32", "bf16_bf16_f16_f32"]),
        (dict(output_type=DataType.bf16), ["write f16 or f32"]),
    ],
)
def test_layer_problem_refuses(fields, words):
    reason = layer_problem(problem(**fields))
    assert reason is not None and "\n" not in reason
    for word in words:
        assert word in reason, (word, reason)


def test_a_refused_layer_is_the_only_static_problem(h100):
    three = problem(r=3, s=3, pad=1)
    reason = only_problem(config(three, schedule="pingpong", scheduler="stream_k"), h100, three)
    assert "1x1" in reason


# --- the padded problem, launch arguments, configurations ---------------------------------------

def test_kernel_problem_pads_c_to_8():
    assert kernel_problem(problem(c=3)) == dataclasses.replace(problem(c=3), c=8)
    assert kernel_problem(problem(c=12)).c == 16
    assert kernel_problem(problem(c=64)) == problem(c=64)


def test_k_steps():
    assert k_steps(config(tile="128x128x64"), problem(c=256)) == 4
    assert k_steps(config(tile="128x128x64"), problem(c=3)) == 1
    assert k_steps(config(tile="128x128x128"), problem(c=320)) == 3


def test_launch_args_carry_the_run_time_knobs_and_padded_c():
    prob = problem(c=3)
    cfg = config(prob, scheduler="stream_k", raster=2, swizzle=4, split_k=4)
    args = launch_args(cfg, prob)
    assert (args.kernel_channels, args.split_k, args.raster, args.swizzle) == (8, 4, 2, 4)
    args = launch_args(config(problem(c=64)), problem(c=64))
    assert (args.kernel_channels, args.split_k, args.raster, args.swizzle) == (64, 1, 0, 1)


def test_compiled_drops_the_run_time_knobs():
    cfg = config(scheduler="stream_k", raster=2, swizzle=8, split_k=4, stages=4, cluster="2x1x1")
    compiled = cfg.compiled
    assert (compiled.raster, compiled.swizzle, compiled.split_k) == (0, 1, 1)
    assert dataclasses.replace(compiled, raster=2, swizzle=8, split_k=4) == cfg
    for field in dataclasses.fields(Sm90GemmConfig):
        if field.name not in RUN_TIME:
            assert getattr(compiled, field.name) == getattr(cfg, field.name), field.name
    assert config(raster=1).compiled == config(raster=2, swizzle=4).compiled
    assert config(stages=4).compiled != config(stages=5).compiled
    assert config(scheduler="stream_k").compiled != config().compiled


@pytest.mark.slow
def test_config_names_are_unique_and_round_trip():
    space = load_space(SPACE_FILE)
    prob = problem()
    configs = list(all_configs(space, prob))
    names = [c.name for c in configs]
    assert len(names) == len(set(names)) == space.size
    for cfg in configs[::7] + configs[-5:]:
        assert make_config(prob, cfg.search_params) == cfg


def test_config_name_and_params():
    cfg = config(tile="256x128x64", cluster="1x2x1", scheduler="stream_k", epilogue="nosmem", stages=3, raster=1,
                 swizzle=2, split_k=4)
    assert cfg.name == "sm90g_256x128x64_c1x2x1_cooperative_stream_k_nosmem_s3_r1_sw2_sk4_a8_f16_f16_f16_f32"
    assert cfg.search_params == params(tile="256x128x64", cluster="1x2x1", scheduler="stream_k", epilogue="nosmem",
                                       stages=3, raster=1, swizzle=2, split_k=4)
    assert (cfg.schedule, cfg.scheduler, cfg.epilogue) == (Schedule.cooperative, Scheduler.stream_k, EpilogueSchedule.nosmem)
    assert cfg.family == "sm90_gemm" and cfg.persistent and not config(schedule="ws").persistent


def test_make_config_from_stored_params():
    cfg = make_config(problem(), {**params(), "stages": "4", "raster": "2", "swizzle": "8", "split_k": "1"})
    assert (cfg.stages, cfg.raster, cfg.swizzle, cfg.split_k) == (4, 2, 8, 1)
    for bad, word in ((dict(stages=3.9), "stages=3.9"), (dict(split_k=True), "split_k=True"),
                      (dict(schedule="basic"), "schedule='basic'")):
        with pytest.raises(SpaceError, match=word.replace(".", r"\.")):
            make_config(problem(), {**params(), **bad})


@pytest.mark.slow
def test_valid_configs_of_the_space(h100, layers):
    space = load_space(SPACE_FILE)
    prob = layers["r50_s3_1x1_256to128_b32"].problem
    valid = valid_configs(space, prob, h100)
    assert 0 < len(valid) < space.size
    assert all(c.scheduler is Scheduler.persistent or c.schedule is Schedule.cooperative for c in valid)
    assert all(c.split_k == 1 or c.scheduler is Scheduler.stream_k for c in valid)
    assert all((c.raster, c.swizzle) == (0, 1) for c in valid if c.schedule is Schedule.ws)
    assert len({c.compiled for c in valid}) < len(valid)
    assert valid_configs(space, layers["r50_s3_3x3_b32"].problem, h100) == []


def test_a_tiny_space(h100):
    space = SearchSpace("sm90_gemm", (("tile", ("128x128x64", "64x128x64")), ("cluster", ("1x1x1",)),
                                      ("schedule", ("cooperative",)), ("scheduler", ("persistent",)),
                                      ("epilogue", ("tma",)), ("stages", (0,)), ("raster", (0,)), ("swizzle", (1,)),
                                      ("split_k", (1, 2))))
    assert space.size == 4
    assert [c.name for c in valid_configs(space, problem(), h100)] == [
        "sm90g_128x128x64_c1x1x1_cooperative_persistent_tma_sauto_r0_sw1_sk1_a8_f16_f16_f16_f32"]


# --- swap_ab: the product transposed, M along the output channels -----------------------------------

def test_a_space_without_swap_ab_runs_unswapped():
    document = space_document(swap_ab=None)
    assert parse_space(document).choices["swap_ab"] == (False,)
    with pytest.raises(SpaceError, match="swap_ab value 'yes' is not true or false"):
        parse_space(space_document(swap_ab=["yes"]))


def test_stored_parameters_without_swap_ab_are_the_unswapped_kernel():
    stored = params()
    del stored["swap_ab"]
    assert make_config(problem(), stored) == config()
    # a landscape record (CSV) holds the text of a truth value
    assert make_config(problem(), params(swap_ab="True")).swap_ab is True
    assert make_config(problem(), params(swap_ab="False")).swap_ab is False
    with pytest.raises(SpaceError, match="swap_ab"):
        make_config(problem(), params(swap_ab="maybe"))


def test_swapped_names_are_new_and_unswapped_names_unchanged():
    assert config().name == "sm90g_128x128x64_c1x1x1_cooperative_persistent_tma_sauto_r0_sw1_sk1_a8_f16_f16_f16_f32"
    swapped = config(swap_ab=True)
    assert swapped.name == "sm90g_128x128x64_swab_c1x1x1_cooperative_persistent_tma_sauto_r0_sw1_sk1_a8_f16_f16_f16_f32"
    assert swapped.compiled.swap_ab and swapped.compiled != config().compiled
    assert swapped.search_params["swap_ab"] is True and config().search_params["swap_ab"] is False


def test_swapped_tiles_run_along_the_output_channels():
    # r50_s5_1x1_512to2048_b32: M = 32*7*7 = 1568 pixels, 2048 output channels
    prob = problem(n=32, h=7, w=7, c=512, k=2048)
    unswapped = config(prob, tile="128x224x64", cluster="1x1x1")
    swapped = config(prob, tile="128x224x64", cluster="4x1x1", swap_ab=True)
    assert unswapped.layer_tile == Shape3(128, 224, 64) and unswapped.layer_cluster == (1, 1)
    assert swapped.layer_tile == Shape3(224, 128, 64) and swapped.layer_cluster == (1, 4)
    assert reasons_of(swapped, H100, prob) == []


def test_a_swapped_kernel_is_diagnosed_and_costed_along_the_layer():
    from tuner.families import registry
    prob = problem(n=32, h=7, w=7, c=512, k=2048)
    family = registry.get("sm90_gemm")
    swapped = config(prob, tile="128x224x64", cluster="4x1x1", swap_ab=True)
    shape = family.model.launch_shape(swapped, prob, H100)
    assert shape.tile_mnk == (224, 128, 64) and shape.cluster == (1, 4, 1)
    assert shape.work_tiles == 7 * 16  # 1568 pixels / 224, 2048 channels / 128: one wave on 132 SMs
    assert family.model.launch_shape(config(prob, tile="128x224x64"), prob, H100).work_tiles == 13 * 10
    terms = family.model.cost_terms(swapped, prob, H100)
    assert (terms.tile_m, terms.tile_n) == (224, 128)
    assert "swab" in family.describe(swapped)
