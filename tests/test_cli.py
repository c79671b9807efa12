"""tune.py as a user runs it: a subprocess at the repository root."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.cli.main import build_parser
from tuner.core.device import missing_gpu

REPO = Path(__file__).resolve().parents[1]
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def tune(*args: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "CUTLASS_TUNER_CACHE": str(tmp_path / "tuner-cache"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, str(REPO / "tune.py"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_help_mentions_every_flag(tmp_path):
    result = tune("--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    flags = [flag for action in build_parser()._actions for flag in action.option_strings]
    for flag in ["--layer", "--shape", "--list-layers", "--trials", "--storage", "--seed", "--jobs", "--top",
                 "--confirm-rounds", "--timeout", "--layers-file", "--space-file", "--results-dir", "--cache-dir"]:
        assert flag in flags, flag
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), flag
    assert "usage: tune.py" in text
    assert "option_strings" not in text and "more than 3 %" in text  # a bare % once printed argparse's dict


@pytest.mark.parametrize("command", ["bench", "plots", "export", "diagnose"])
def test_every_subcommand_helps_without_a_python_dict(tmp_path, command):
    result = tune(command, "--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"usage: tune.py {command}" in result.stdout and "option_strings" not in result.stdout


def test_list_layers(tmp_path):
    result = tune("--list-layers", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"\bconv_1\b", result.stdout)
    assert re.search(r"\br50_s4_3x3_b32\b", result.stdout)
    assert result.stdout.count("r50_") == 46
    assert result.stderr == ""


def test_unknown_layer(tmp_path):
    result = tune("--layer", "conv_9", tmp_path=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "'conv_9'" in line and "--list-layers" in line
    assert result.stdout == ""


def test_shape_with_an_empty_output(tmp_path):
    result = tune("--shape", "1,2,2,32,32,3,3", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "empty" in one_error_line(result)


def test_shape_with_too_few_numbers(tmp_path):
    result = tune("--shape", "1,32,32,32", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "4 numbers" in one_error_line(result)


def test_zero_trials(tmp_path):
    result = tune("--layer", "conv_1", "--trials", "0", "--results-dir", str(tmp_path / "results"), tmp_path=tmp_path)
    assert result.returncode == 2
    assert "--trials must be at least 1" in one_error_line(result)
    assert not (tmp_path / "results").exists()


def test_malformed_layers_file(tmp_path):
    layers = tmp_path / "layers.yaml"
    layers.write_text("layers:\n  conv_1: {n: 1, h: 32\n")
    result = tune("--layer", "conv_1", "--layers-file", str(layers), tmp_path=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "layers.yaml" in line and "not valid YAML" in line


def test_layers_file_that_is_a_directory(tmp_path):
    result = tune("--list-layers", "--layers-file", str(tmp_path), tmp_path=tmp_path)
    assert result.returncode == 2
    one_error_line(result)


def test_malformed_space_file(tmp_path):
    space = tmp_path / "sm80.yaml"
    space.write_text((REPO / "search_spaces" / "sm80.yaml").read_text().replace("swizzle: [1, 2, 4, 8]",
                                                                                "swizzle: [1, 3]"))
    result = tune("--layer", "conv_1", "--space-file", str(space), tmp_path=tmp_path)
    assert result.returncode == 2
    assert "swizzle value 3" in one_error_line(result)


NO_GPU_HERE = missing_gpu()
NEEDS_GPU_LINE = "error: this command needs an NVIDIA GPU and a driver; without one you can: "


@pytest.mark.skipif(NO_GPU_HERE is None, reason="checks the answer of a host without a GPU")
@pytest.mark.parametrize("args", [["--layer", "conv_1", "--trials", "2"], ["--layer", "conv_1", "--gpus", "0,1"],
                                  ["bench", "--layers", "conv_1", "--steps", "cudnn"]],
                         ids=["tune", "tune --gpus", "bench"])
def test_without_a_gpu_exits_2_with_the_offline_commands_and_writes_nothing(tmp_path, args):
    results = tmp_path / "results"
    cache = tmp_path / "cache"
    result = tune(*args, "--results-dir", str(results), "--cache-dir", str(cache), tmp_path=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_error_line(result)
    assert line.startswith(NEEDS_GPU_LINE) and "bench --replay-only" in line and NO_GPU_HERE in line
    assert "cudaError" not in line and "Traceback" not in result.stdout
    assert not results.exists() or not any(results.rglob("*"))
    assert not cache.exists() or not any(cache.rglob("*"))
    assert not (tmp_path / "tuner-cache").exists()


@pytest.mark.parametrize("args", [["--layer", "conv_1", "--trials", "2"], ["bench", "--layers", "conv_1", "--steps", "cudnn"],
                                  ["e2e", "--torchvision", "resnet50", "--batch", "1"]], ids=["tune", "bench", "e2e"])
def test_under_a_profiler_the_timing_commands_exit_2_and_write_nothing(tmp_path, monkeypatch, args):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nsight-compute/target/libcuda-injection.so")
    results = tmp_path / "results"
    result = tune(*args, "--results-dir", str(results), tmp_path=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_error_line(result)
    assert "a CUDA profiler is attached (CUDA_INJECTION64_PATH is set)" in line and "--ncu-top" in line
    assert not results.exists() or not any(results.rglob("*"))


@pytest.mark.parametrize("flag, value", [("--jobs", "-1"), ("--timeout", "0"), ("--timeout", "-5")])
def test_non_positive_jobs_and_timeout_are_usage_errors(tmp_path, flag, value):
    result = tune("--layer", "conv_1", flag, value, "--results-dir", str(tmp_path / "results"), tmp_path=tmp_path)
    assert result.returncode == 2
    assert flag in one_error_line(result)


# --- kernel families ----------------------------------------------------------------------------

def test_list_layers_says_which_families_can_run_each(tmp_path):
    result = tune("--list-layers", tmp_path=tmp_path)
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") > 10}
    assert "sm80,sm90_conv,sm90_dsl,sm90_gem" in rows["r50_s4_1x1_512to256_b32"]  # folds past the width
    assert "sm90_gemm" not in rows["r50_s4_3x3_b32"] and "sm90_conv" in rows["r50_s4_3x3_b32"]


@pytest.mark.parametrize("args, words", [
    (["--layer", "conv_1", "--family", "sm100"], ["--family 'sm100'", "unknown family sm100", "sm80, sm80_depthwise, sm80_dgrad, sm80_group, sm90_conv, sm90_dsl, sm90_gemm"]),
    (["--layer", "r50_s4_3x3_b32", "--family", "sm90_gemm"],
     ["layer r50_s4_3x3_b32", "no kernel family can run it", "1x1, stride-1, unpadded", "leave out --family"]),
    (["--shape", "1,16,16,32,20,3,3,1", "--family", "sm90_conv"], ["K=20", "pad K to 24"]),
    (["--layer", "conv_1", "--family", "sm80", "--space-file", "search_spaces/sm90_conv.yaml"],
     ["--space-file for sm90_conv", "add it to --family"]),
    (["--layer", "conv_1", "--space-file", "search_spaces"], ["search space search_spaces", "is a directory"]),
    (["--layer", "conv_1", "--timeout", "inf"], ["--timeout must be more than 0 and at most 86400", "got inf"]),
    (["--layer", "conv_1", "--timeout", "nan"], ["--timeout", "got nan"]),
])
def test_family_choices_that_cannot_run_are_one_line(tmp_path, args, words):
    result = tune(*args, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    for word in words:
        assert word in line, (word, line)
    assert result.stdout == ""


@pytest.mark.parametrize("args, words", [
    (["plots", "--gpu", "typo"], ["no ", "typo/best.yaml", "GPUs with one are none"]),
    (["export", "--gpu", "typo"], ["typo/best.yaml", "pass --gpu"]),
    (["export", "--gpu", "../../x"], ["GPU '../../x' is not a results folder name"]),
    (["plots", "--gpu", "A/B"], ["GPU 'A/B' is not a results folder name"]),
])
def test_reading_commands_name_a_known_gpu_and_create_nothing(tmp_path, args, words):
    results = tmp_path / "results"
    results.mkdir()
    result = tune(*args, "--results-dir", str(results), tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    for word in words:
        assert word in line, (word, line)
    assert not any(results.iterdir()) and not (tmp_path / "x").exists()


def test_the_command_line_sits_on_top(tmp_path):
    """Nothing under tuner/ imports tuner.cli.main (bench and cli once imported each other), and the top-level
    --help names every subcommand."""
    for path in (REPO / "tuner").rglob("*.py"):
        if path.name != "cli.py":
            assert "from tuner.cli.main" not in path.read_text() and "import tuner.cli.main" not in path.read_text(), path
    text = tune("--help", tmp_path=tmp_path).stdout
    commands = text[text.index("commands:"):]
    for command in ("diagnose", "export", "bench", "plots", "report", "predict"):
        assert f" {command} " in " ".join(commands.split()), command


# --- epilogues -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (("--shape", "32,14,14,256,256,3,3,1", "--epilogue", "scale+tanh"), "--epilogue: epilogue 'scale+tanh': unknown part"),
    (("--shape", "32,14,14,256,256,3,3,1", "--epilogue", "relu+silu"), "names two activations"),
    (("--layer", "conv_1", "--epilogue", "relu"), "--epilogue goes with --shape"),
])
def test_bad_epilogues_are_one_line_usage_errors(tmp_path, args, says):
    result = tune(*args, "--results-dir", str(tmp_path / "results"), tmp_path=tmp_path)
    assert result.returncode == 2 and says in one_error_line(result)
    assert not (tmp_path / "results").exists()


def test_a_family_that_cannot_fuse_a_part_names_it_and_who_can(monkeypatch, capsys):
    import dataclasses

    from tuner.cli import tune as cli
    from tuner.families import registry

    narrower = dataclasses.replace(registry.get("sm90_gemm"), fusable=frozenset({"bias", "relu"}))
    monkeypatch.setitem(registry.families(), "sm90_gemm", narrower)
    layers = cli.load_layers(REPO / "search_spaces" / "layers.yaml")
    spaces = cli.chosen_spaces("sm90_gemm", None)
    with pytest.raises(cli.UsageError) as refused:
        cli.check_layers_runnable([layers["r50f_s4_1x1_256to1024_b32"]], spaces, explicit=True)
    message = str(refused.value)
    assert "sm90_gemm cannot fuse scale and residual into its epilogue" in message
    assert "families that fuse scale+bias+residual+relu: sm80, sm80_group, sm90_conv, sm90_dsl, sm90_s2d" in message
    cli.check_layers_runnable([layers["r50_s4_1x1_256to1024_b32"]], spaces, explicit=True)  # bare: runs


def test_help_lists_every_command_with_its_summary():
    import subprocess
    import sys

    from tuner.cli.main import COMMAND_SUMMARIES, COMMANDS

    assert set(COMMAND_SUMMARIES) == set(COMMANDS)
    result = subprocess.run([sys.executable, str(REPO / "tune.py"), "--help"], capture_output=True, text=True,
                            timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert result.returncode == 0
    commands = result.stdout[result.stdout.index("commands:"):]
    for name, summary in COMMAND_SUMMARIES.items():
        assert f"{name} " in commands and summary.split(":")[0] in " ".join(commands.split()), name


@pytest.mark.parametrize("dtype, key, suffix", [(None, "f16_f16_f16_f32", ""), ("bf16", "bf16_bf16_bf16_f32", "_bf16"),
                                                ("tf32", "tf32_tf32_f32_f32", "_tf32"),
                                                ("e4m3", "e4m3_e4m3_f16_f32", "_e4m3")])
def test_a_shape_takes_a_dtype_into_its_types_and_name(dtype, key, suffix):
    from tuner.cli.tune import shape_layer

    layer = shape_layer("2,14,14,64,64,3,3,1", None, dtype)
    assert layer.problem.dtype_key == key
    assert layer.name == f"shape_2x14x14x64_k64_3x3_p1s1d1{suffix}"


def test_dtype_has_help_and_choices():
    action = next(a for a in build_parser()._actions if "--dtype" in a.option_strings)
    assert tuple(action.choices) == ("f16", "bf16", "tf32", "e4m3") and "TF32" in action.help
    assert "e4m3 (fp8 in with per-tensor scales, f16 out; sm90_dsl only)" in action.help
