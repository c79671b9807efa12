"""`tune.py predict`: the ranking and the static diagnosis of a configuration on a GPU that is not here."""
import json
import re
import subprocess

import pytest

from tuner.core.errors import UsageError
from tuner.families import registry
from tuner.core.gpus import device_facts, lookup
from tuner.analysis.predict import ceilings, config_waste, fills, predict, ranking
from tuner.cli.predict import parse_config_text, versus
from tuner.search.space import joint_valid_configs, layer_space, load_space, default_space_file

from conftest import REPO, config_for, tune_in_process  # noqa: E402

REFERENCE = "128x128x64,w2x2x1,s3"


def run_predict(*args: str) -> subprocess.CompletedProcess:
    return tune_in_process("predict", *args, env={"COLUMNS": "200"})


def ranked_for(gpu_name, problem):
    gpu = lookup(gpu_name)
    device = device_facts(gpu)
    spaces = tuple(load_space(default_space_file(family)) for family in registry.names())
    joint = layer_space(spaces, problem, device)
    return joint, device, ranking(joint_valid_configs(joint, problem, device), problem, device, ceilings(gpu))


def test_reference_config_on_an_rtx3060_is_a_small_grid_held_by_shared_memory(conv_1):
    device = device_facts(lookup("rtx3060"))
    config = parse_config_text(REFERENCE, conv_1)
    assert config == config_for(conv_1)  # swizzle 1, optimized iterator, split-K 1 by default
    waste = config_waste(config, conv_1, device)
    assert (waste.facts.grid_blocks, waste.facts.sm_count) == (8, 28)
    assert waste.occupancy.blocks_per_sm == 1 and waste.occupancy.limited_by == ("shared memory",)
    assert waste.waves == pytest.approx(8 / 28)
    codes = [flag.code for flag in waste.flags]
    assert codes[0] == "small_grid" and "occupancy_limit" in codes
    assert waste.flags[0].message == "8 blocks on 28 SMs: 20 SMs idle (0.29 waves)"


def test_the_same_config_on_an_h100_fits_two_blocks_per_sm(conv_1):
    waste = config_waste(parse_config_text(REFERENCE, conv_1), conv_1, device_facts(lookup("h100-sxm")))
    assert waste.facts.sm_count == 132 and waste.occupancy.blocks_per_sm == 2


@pytest.mark.slow
def test_ranking_holds_only_valid_configs_of_the_families_the_gpu_runs(conv_1):
    joint, device, ranked = ranked_for("rtx3060", conv_1)
    assert joint.families == ("sm80",)  # compute capability 8.6: no sm90 family
    assert len(ranked) > 100
    for prediction in ranked[:200]:
        family = registry.family_of(prediction.config)
        assert family.rules.static_problems(prediction.config, conv_1, device) == []
        assert joint.contains(prediction.config)
    times = [prediction.predicted_us for prediction in ranked]
    assert all(a <= b + 1e-6 for a, b in zip(times, times[1:]))  # equal predictions keep the fitted knobs first
    best = ranked[0]
    assert fills(best) and best.blocks >= 28  # the top-ranked fills the part, unlike the reference's 8 blocks
    reference = predict(config_for(conv_1), conv_1, device, ceilings(lookup("rtx3060")))
    assert best.predicted_us < reference.predicted_us and reference.blocks == 8


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_ranking_on_an_h100_searches_the_sm90_families(layers):
    problem = layers["r50_s4_3x3_b32"].problem
    joint, _, ranked = ranked_for("h100", problem)
    assert "sm80" in joint.families and any(family.startswith("sm90") for family in joint.families)
    assert {prediction.config.family for prediction in ranked} == set(joint.families)


@pytest.mark.parametrize("text, says", [
    ("128x128", "cannot read '128x128'"),
    ("128x128x64,w2x2x1", "lacks stages"),
    ("128x128x64,w2x2x1,s3,s4", "gives stages twice"),
    ("128x128x64,w2x2x1,s3,sw3", "swizzle 3 is not 1, 2, 4, 8"),
    ("128x128x64,w2x2x1,s1", "stages 1 is not 2 to 16"),
])
def test_bad_config_text(conv_1, text, says):
    with pytest.raises(UsageError, match=says):
        parse_config_text(text, conv_1)


def test_config_text_takes_every_knob(conv_1):
    config = parse_config_text("64x64x64,w2x2x1,s4,sw2,sk2,analytic", conv_1)
    assert config.search_params == {"tile": "64x64x64", "warps": "2x2x1", "stages": 4, "swizzle": 2,
                                    "iterator": "analytic", "split_k": 2}


def test_predict_command_on_the_reference_example():
    result = run_predict("--gpu", "rtx3060", "--layer", "conv_1", "--config", REFERENCE, "--top", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "predictions" in out and "not measurements" in out
    assert ("8 blocks on 28 SMs, 0.29 waves, 1 block per SM limited by shared memory" in out)
    assert "small_grid: 8 blocks on 28 SMs: 20 SMs idle (0.29 waves)" in out
    assert "instead: sm80 " in out and "(the top-ranked)" in out and "every SM busy" in out
    assert "top 3 of" in out and "modelled" in out and "x faster" not in out
    assert "x the time of this configuration's)" in out


@pytest.mark.slow
def test_predict_command_with_a_shape_and_an_impossible_config():
    result = run_predict("--gpu", "a100-40gb", "--shape", "32,56,56,64,64,3,3,1", "--config",
                         "256x128x64,w4x2x1,s4", "--top", "2")
    assert result.returncode == 0, result.stderr
    assert "cannot run: 192 KB of shared memory exceeds the 163 KB a block may opt into" in result.stdout


def test_predict_help():
    result = run_predict("--help")
    assert result.returncode == 0 and "usage: tune.py predict" in result.stdout


@pytest.mark.parametrize("args, says", [
    (["--gpu", "nope", "--layer", "conv_1"], "unknown GPU 'nope'; known: rtx3060"),
    (["--layer", "conv_1"], "required: --gpu"),
    (["--gpu", "rtx3060"], "--layer --shape is required"),
    (["--gpu", "rtx3060", "--layer", "conv_1", "--shape", "1,8,8,8,8,1,1"], "not allowed with argument"),
    (["--gpu", "rtx3060", "--layer", "nope"], "unknown layer 'nope'"),
    (["--gpu", "rtx3060", "--layer", "conv_1", "--config", "128x128"], "cannot read"),
    (["--gpu", "rtx3060", "--layer", "conv_1", "--top", "0"], "--top must be at least 1"),
    (["--gpu", "rtx3060", "--shape", "1,2,3"], "has 3 numbers"),
    (["--gpu", "rtx3060", "--layer", "conv_1", "--family", "sm90_conv"], "compute capability 9.0 only"),
    (["--gpu", "rtx3060", "--layer", "conv_1", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_are_one_line_exit_2(args, says):
    result = run_predict(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert "Traceback" not in result.stderr


# --- a GPU with measurements: the committed H100 results, copied where the test may write ------------

H100_RESULTS = REPO / "results" / "nvidia-h100-80gb-hbm3"
MEASURED_LAYER = "r50_s4_1x1_512to256_b32"


@pytest.fixture
def h100_results(tmp_path):
    import shutil

    folder = tmp_path / "results" / H100_RESULTS.name
    folder.mkdir(parents=True)
    for name in ("best.yaml", "bench.yaml"):
        shutil.copy(H100_RESULTS / name, folder / name)
    for landscape in (H100_RESULTS / "landscape").glob(f"*/{MEASURED_LAYER}.csv"):
        (folder / "landscape" / landscape.parent.name).mkdir(parents=True)
        shutil.copy(landscape, folder / "landscape" / landscape.parent.name / landscape.name)
    return folder


def predict_json(*args: str) -> list[dict]:
    result = run_predict(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_versus_words_a_ratio_exactly():
    assert versus(1.39, 1.0) == "1.39x slower"
    assert versus(0.72, 1.0) == "0.72x the time"
    assert versus(1.001, 1.0) == "the same time"


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_measured_figures_lead_and_no_modelled_figure_contradicts_them(h100_results):
    rows = predict_json("--gpu", "h100", "--layer", MEASURED_LAYER, "--top", "400",
                        "--results-dir", str(h100_results.parent))
    first = rows[0]
    assert (first["source"], first["family"], first["measured_us"]) == ("measured", "sm90_dsl", 16.174)
    assert first["where"] == "best.yaml (tuned)"
    assert {row["source"] for row in rows} == {"measured", "modelled"}
    for row in rows:
        assert ("measured_us" in row) == (row["source"] == "measured") != ("predicted_us" in row)
    kernel_rows = [row for row in rows if row["family"] != "library"]
    fastest = {}
    for rank, row in enumerate(kernel_rows):
        if row["source"] == "measured":
            fastest.setdefault(row["family"], rank)
    layer_best = min(rank for rank in fastest.values())
    for rank, row in enumerate(kernel_rows):
        if row["source"] == "modelled":  # never above the layer's or its family's fastest measurement
            assert rank > layer_best and rank > fastest.get(row["family"], -1), row
    sm80 = [row for row in rows if row["family"] == "sm80"]
    assert sm80 and sm80[0]["source"] == "measured" and sm80[0]["measured_us"] == pytest.approx(28.09, abs=0.01)
    assert all(row["scale"] > 1.5 for row in sm80 if row["source"] == "modelled")  # the model's 14.87 was 2x off
    libraries = {row["name"]: row["measured_us"] for row in rows if row["family"] == "library"}
    assert set(libraries) >= {"cuDNN", "cuBLAS"}
    names = [row["name"] for row in rows]
    assert len(names) == len(set(names))
    # one row per kernel the model tells apart: no two modelled rows differ only in the swizzle
    without_swizzle = [(row["family"], re.sub(r" sw\d+", "", row["configuration"])) for row in rows
                       if row["source"] == "modelled"]
    assert len(without_swizzle) == len(set(without_swizzle))
    assert any("swizzle" in row["collapsed_knobs"] and row["variants"] > 1 for row in rows)
    assert all(" faster" not in row["versus_top"] for row in rows)


def test_a_changed_measurement_changes_the_ranking(h100_results):
    best = h100_results / "best.yaml"
    best.write_text(best.read_text().replace("runtime_us: 16.174\n", "runtime_us: 99.0\n"))
    rows = predict_json("--gpu", "h100", "--layer", MEASURED_LAYER, "--family", "sm90_dsl", "--top", "50",
                        "--results-dir", str(h100_results.parent))
    tuned = next(row for row in rows if row["where"] == "best.yaml (tuned)")
    assert tuned["measured_us"] == 99.0 and rows[0]["family"] == "library" and tuned["rank"] > 1
    # the family's one measurement now stands above every modelled figure of it, however fast they are modelled
    modelled = [row for row in rows if row["source"] == "modelled"]
    assert modelled and all(row["rank"] > tuned["rank"] for row in modelled)
    assert all(row["below_measured_best"] == (row["predicted_us"] < 99.0) for row in modelled)
    assert modelled[0]["scale"] == pytest.approx(99.0 / tuned["model_us"], rel=1e-3)


def test_a_gpu_without_results_is_the_model_alone(tmp_path):
    rows = predict_json("--gpu", "rtx3060", "--layer", "conv_1", "--top", "5", "--results-dir", str(tmp_path))
    assert len(rows) == 5 and {row["source"] for row in rows} == {"modelled"}
    assert all("predicted_us" in row and row["scale"] is None for row in rows)
    times = [row["predicted_us"] for row in rows]
    assert times == sorted(times)


@pytest.mark.slow
def test_the_table_says_what_is_measured(h100_results):
    result = run_predict("--gpu", "h100", "--layer", MEASURED_LAYER, "--family", "sm80", "--top", "3",
                         "--results-dir", str(h100_results.parent))
    assert result.returncode == 0, result.stderr
    assert "measured" in result.stdout and "landscape/sm80" in result.stdout and "x faster" not in result.stdout


@pytest.mark.slow
def test_a_measured_config_shows_its_measurement_and_no_contradicted_alternative(h100_results):
    """The landscape measured the reference at 29.48 µs, sm80's best at 28.09: the model's 18.53 µs was shown as
    the configuration's figure, and its 14.87 µs recommended."""
    result = run_predict("--gpu", "h100", "--layer", MEASURED_LAYER, "--family", "sm80", "--config", REFERENCE,
                         "--top", "1", "--results-dir", str(h100_results.parent))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    figure = next(line for line in lines if "18.53" in line)
    assert figure.startswith("  measured 29.48 µs (landscape/sm80); modelled 18.53 µs by the cost model alone, rank ")
    instead = [line for line in lines if line.startswith("  instead: ")]
    assert len(instead) == 1 and "sm80 128x256x32 w2x4x1 s4" in instead[0]
    assert "measured 28.09 µs (landscape/sm80) (0.95x the time of this configuration's)" in instead[0]
    assert "14.87" not in result.stdout and "predicted 18.53" not in result.stdout


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_an_unmeasured_config_is_modelled_as_the_ranking_scales_its_family(h100_results):
    result = run_predict("--gpu", "h100", "--layer", MEASURED_LAYER, "--family", "sm80", "--config",
                         "256x64x32,w4x1x1,s7,sw4,sk3,analytic", "--top", "1",
                         "--results-dir", str(h100_results.parent))
    assert result.returncode == 0, result.stderr
    assert ("not measured: modelled 35.95 µs by the cost model, ~59.55 µs with sm80's measured/modelled ratio on "
            "this layer (x1.66), rank ") in result.stdout
    assert "measured 28.09 µs (landscape/sm80) (0.47x the time" in result.stdout


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_a_config_on_every_family_is_told_the_measured_best_of_each(h100_results):
    result = run_predict("--gpu", "h100", "--layer", MEASURED_LAYER, "--config", REFERENCE, "--top", "1",
                         "--results-dir", str(h100_results.parent))
    assert result.returncode == 0, result.stderr
    instead = [line for line in result.stdout.splitlines() if line.startswith("  instead: ")]
    assert [line.split(" (")[1].split(")")[0] for line in instead] == ["the top-ranked", "the best-ranked sm80"]
    assert "measured 16.17 µs (best.yaml (tuned))" in instead[0] and "measured 28.09 µs" in instead[1]
    assert "14.87" not in result.stdout


def test_json_with_config_is_refused():
    result = run_predict("--gpu", "rtx3060", "--layer", "conv_1", "--config", REFERENCE, "--json")
    assert result.returncode == 2 and "leave out --config" in result.stderr and "Traceback" not in result.stderr
