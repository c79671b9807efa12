"""A build host with nvcc and no GPU: `bench --compile-only` and `export` take the GPU by name and work
for it; measuring without one is refused in one line (tests/test_cli.py holds the tuning commands)."""
from __future__ import annotations

import re
import shutil

import pytest
import yaml

from test_cli import REPO, one_error_line, tune
from tuner.pipeline.landscape import compile_target
from tuner.core.errors import UsageError
from tuner.store.results import results_slug

H100_SLUG = "nvidia-h100-80gb-hbm3"
ONE_SM80_KERNEL = """\
family: sm80
threadblock: [64x64x32]
warp_count: [2x2x1]
stages: [3]
swizzle: [1]
iterator: [optimized]
split_k: [1]
"""


def test_results_slug_takes_a_folder_or_a_known_gpus_name(tmp_path):
    (tmp_path / "my-gpu").mkdir()
    (tmp_path / "my-gpu" / "best.yaml").write_text("layers: {}\n")
    assert results_slug(tmp_path, "my-gpu") == "my-gpu"
    assert results_slug(tmp_path, "h100") == H100_SLUG
    assert results_slug(tmp_path, "H200") == "nvidia-h200"
    assert results_slug(tmp_path, "typo") == "typo"  # left for the reader of results/ to refuse


def test_compile_target_prefers_the_facts_measured_on_the_gpu():
    measured = yaml.safe_load((REPO / "results" / H100_SLUG / "bench.yaml").read_text())["device"]
    facts = compile_target(REPO / "results", "h100")
    assert (facts.name, facts.cc, facts.sm_count, facts.l2_bytes) == (
        measured["name"], 90, measured["sm_count"], measured["l2_bytes"])


def test_compile_target_from_the_gpu_table_without_results(tmp_path):
    facts = compile_target(tmp_path, "rtx3060")
    assert (facts.name, facts.cc, facts.sm_count) == ("NVIDIA GeForce RTX 3060", 86, 28)


def test_compile_target_from_a_best_yaml_of_a_gpu_the_table_lacks(tmp_path):
    folder = tmp_path / "nvidia-a800"
    folder.mkdir()
    (folder / "best.yaml").write_text(yaml.safe_dump({"device": {
        "name": "NVIDIA A800", "slug": "nvidia-a800", "compute_capability": "8.0", "sm_count": 108}, "layers": {}}))
    facts = compile_target(tmp_path, "nvidia-a800")
    assert (facts.name, facts.cc, facts.sm_count) == ("NVIDIA A800", 80, 108)


@pytest.mark.parametrize("name", ["typo", "../x"])
def test_compile_target_refuses_an_unknown_gpu_with_the_known_ones(tmp_path, name):
    with pytest.raises(UsageError, match="h100-sxm") as raised:
        compile_target(tmp_path, name)
    assert repr(name) in str(raised.value)


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_compile_only_builds_for_the_named_gpus_arch_without_touching_a_gpu(tmp_path):
    space = tmp_path / "sm80_one.yaml"
    space.write_text(ONE_SM80_KERNEL)
    cache = tmp_path / "cache"
    result = tune("bench", "--compile-only", "--gpu", "h100", "--layers", "conv_1", "--family", "sm80",
                  "--space-file", str(space), "--cache-dir", str(cache), tmp_path=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiling for NVIDIA H100 80GB HBM3 (sm_90)" in result.stdout
    assert "1 kernels compiled or cached, 0 failed" in result.stdout
    [library] = cache.rglob("candidate.so")
    assert "for 'sm_90'" in (library.parent / "ptxas.txt").read_text()


@pytest.mark.parametrize("args, words", [
    (["--compile-only", "--gpu", "h100", "--steps", "cudnn"], "--compile-only compiles the landscapes and stops"),
    (["--compile-only", "--gpu", "h100", "--replay-only"], "--compile-only compiles the landscapes and stops"),
    (["--compile-only", "--gpu", "h100", "--measure-only"], "--compile-only compiles the landscapes and stops"),
    (["--compile-only", "--gpu", "no-such-gpu"], "--gpu 'no-such-gpu': no results/<gpu>/ folder"),
    (["--gpu", "h100", "--steps", "cudnn"], "--gpu goes with --replay-only, --summary or --compile-only"),
])
def test_bench_refuses_what_it_cannot_do_in_one_line(tmp_path, args, words):
    result = tune("bench", "--layers", "conv_1", *args, "--cache-dir", str(tmp_path / "cache"), tmp_path=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in one_error_line(result)
    assert not (tmp_path / "cache").exists()


def test_export_takes_a_gpus_name_and_needs_no_gpu(tmp_path):
    """`--gpu h200` finds results/nvidia-h200/. Its C++ layers only: the header of its DSL layers builds each
    kernel's object (minutes; tests/test_export_dsl.py checks that header)."""
    folder = tmp_path / "results" / "nvidia-h200"
    folder.mkdir(parents=True)
    document = yaml.safe_load((REPO / "results" / "nvidia-h200" / "best.yaml").read_text())
    document["layers"] = {name: entry for name, entry in document["layers"].items() if entry["family"] != "sm90_dsl"}
    document["layer_count"] = len(document["layers"])
    assert document["layers"]
    (folder / "best.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = tune("export", "--gpu", "h200", "--results-dir", str(tmp_path / "results"), tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    header = (folder / "best_configs.h").read_text()
    assert all(f'"{name}"' in header for name in document["layers"])


def test_the_no_gpu_message_names_every_command_of_the_readmes_offline_section():
    from tuner.measure.evaluate import OFFLINE_FEATURES

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Without a GPU"):]
    block = section[section.index("```sh\n") + 6:section.index("```\n", section.index("```sh\n") + 6)]
    commands = [line.split("#")[0].split()[2:] for line in block.splitlines() if line.startswith("python tune.py")]
    assert len(commands) >= 8
    for words in commands:
        what = words[1] if words[0] == "bench" else words[0]  # bench's offline modes are its flags
        assert re.search(rf"(?<![\w-]){re.escape(what)}(?![\w-])", OFFLINE_FEATURES), what
