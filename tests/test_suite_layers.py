"""The committed generalisation suite (search_spaces/suite.yaml, written by tools/make_suite.py): at least
40 distinct bare problems that the ResNet-50 table does not hold, from at least six networks, at batch
1, 8 and 32, with fused layers (SiLU among them) that some family runs; and the tool writes the same
file again where torchvision loads."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.core.epilogue import Activation, Epilogue
from tuner.families import registry
from tuner.core.layers import load_layers

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "search_spaces" / "suite.yaml"
TOOL = REPO / "tools" / "make_suite.py"


def _tool():
    spec = importlib.util.spec_from_file_location("make_suite", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_suite = _tool()


@pytest.fixture(scope="module")
def suite():
    return load_layers(SUITE)


@pytest.fixture(scope="module")
def table():
    return load_layers(REPO / "search_spaces" / "layers.yaml")


def network_of(name: str) -> tuple[str, bool]:
    """The network key a layer's name begins with, and whether it is the fused form (<key>f_)."""
    for source in make_suite.NETWORKS:
        for fused in (False, True):
            if name.startswith(f"{source.key}{make_suite.FUSED_MARK if fused else ''}_"):
                return source.key, fused
    raise AssertionError(f"{name} names no network of tools/make_suite.py")


def test_suite_holds_at_least_forty_distinct_bare_problems(suite):
    bare = [layer.problem for layer in suite.values() if not layer.problem.epilogue.fused]
    assert len(set(bare)) == len(bare) >= 40


def test_no_suite_problem_is_the_resnet50_tables(suite, table):
    table_problems = {layer.problem for layer in table.values()}
    shared = [name for name, layer in suite.items() if layer.problem in table_problems]
    assert not shared
    assert not set(suite) & set(table)  # nor a name: both files can be given to one results folder


def test_six_networks_each_with_bare_and_fused_layers(suite):
    networks = {network_of(name) for name in suite}
    keys = {key for key, _ in networks}
    assert len(keys) >= 6 and keys == {source.key for source in make_suite.NETWORKS}
    assert all((key, False) in networks and (key, True) in networks for key in keys)


def test_batches_1_8_32_and_names_that_say_the_batch(suite):
    assert {layer.problem.n for layer in suite.values()} == {1, 8, 32}
    for name, layer in suite.items():
        assert re.search(r"_b(\d+)$", name).group(1) == str(layer.problem.n), name
    for batch in (1, 8, 32):
        assert sum(layer.problem.n == batch and not layer.problem.epilogue.fused for layer in suite.values()) >= 14


def test_fused_layers_are_marked_and_include_silu_and_the_residual(suite):
    fused = {name: layer.problem.epilogue for name, layer in suite.items() if layer.problem.epilogue.fused}
    assert all(network_of(name)[1] == bool(name in fused) for name in suite)
    assert len(fused) >= 30
    assert any(epilogue.activation is Activation.silu for epilogue in fused.values())
    assert any(epilogue.activation is Activation.relu for epilogue in fused.values())
    assert any(epilogue.residual for epilogue in fused.values())
    # SiLU and ReLU on one bare problem (EfficientNet-B0's stem, RegNet's): what the two cost on one kernel
    stems = {dataclasses.replace(layer.problem, epilogue=Epilogue()) for name, layer in suite.items()
             if name in fused and fused[name].activation is Activation.relu}
    assert any(dataclasses.replace(layer.problem, epilogue=Epilogue()) in stems
               for name, layer in suite.items() if name in fused and fused[name].activation is Activation.silu)


def test_every_layer_is_one_some_family_runs(suite):
    for name, layer in suite.items():
        reasons = registry.problem_reasons(layer.problem)
        assert any(reason is None for reason in reasons.values()), (name, reasons)


def test_the_tool_takes_help_and_refuses_bad_flags_in_one_line():
    done = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--output" in done.stdout and "--check" in done.stdout
    done = subprocess.run([sys.executable, str(TOOL), "--bogus"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--bogus" in done.stderr


def _torchvision_loads() -> bool:
    try:
        import torchvision

        torchvision.models.list_models()
    except Exception:  # not installed, or built for another torch
        return False
    return True


def test_the_tool_writes_the_committed_suite_again(tmp_path):
    if not _torchvision_loads():
        pytest.skip("needs torch with a working torchvision")
    out = tmp_path / "suite.yaml"
    done = subprocess.run([sys.executable, str(TOOL), "--output", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == SUITE.read_text()
