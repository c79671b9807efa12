"""PyTorch modules the tests build themselves become the tuner's layers: traced by torch.fx, shapes from
fake tensors, epilogues from what follows each conv; `--torchvision` on the command line (against a
stand-in torchvision package, so nothing is downloaded and no real torchvision is needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tuner.network import NetworkError  # noqa: E402
from tuner.torch_import import from_torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class Block(nn.Module):
    """conv1 (BN, ReLU) -> conv2 (BN, + x, ReLU) -> depthwise -> c3 (bias, SiLU) -> F.conv2d (tanh GELU)
    -> transposed."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.c3, self.act = nn.Conv2d(16, 32, 3, padding="same"), nn.SiLU()
        self.weight = nn.Parameter(torch.ones(32, 32, 3, 3))
        self.up = nn.ConvTranspose2d(32, 32, 2, 2)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        y = self.act(self.c3(self.dw(y)))
        return self.up(F.gelu(F.conv2d(y, self.weight, padding=1, stride=2), approximate="tanh"))


def test_a_module_becomes_layers_with_their_epilogues():
    network = from_torch(Block().eval(), torch.empty(4, 16, 12, 12))
    by_node = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert set(by_node) == {"conv1", "conv2", "c3", "conv2d"}
    one = by_node["conv1"]
    assert (one.n, one.h, one.w, one.c, one.k, one.r, one.pads) == (4, 12, 12, 16, 16, 3, (1, 1))
    assert one.epilogue.key == "scale+bias+relu"
    assert by_node["conv2"].epilogue.key == "scale+bias+residual+relu"
    assert by_node["c3"].epilogue.key == "bias+silu" and by_node["c3"].pads == (1, 1)  # padding='same'
    assert by_node["conv2d"].strides == (2, 2) and not by_node["conv2d"].epilogue.fused
    reasons = {item.node: item.reason for item in network.unsupported}
    assert "depthwise" in reasons["dw"] and "transposed" in reasons["up"]
    assert network.not_fused == ("conv2d -> Gelu(tanh)",)


def test_weights_are_never_read():
    """A module on the meta device (no weights at all) imports as one with weights does."""
    with torch.device("meta"):
        meta = Block().eval()
    assert from_torch(meta, (4, 16, 12, 12)) == from_torch(Block().eval(), (4, 16, 12, 12))


class Downsampled(nn.Module):
    """A residual block's main path and its downsample branch meet at one add (torchvision's order:
    the main path first)."""

    def __init__(self):
        super().__init__()
        self.conv3, self.bn3 = nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32)
        self.downsample = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.bn3(self.conv3(x))
        out += self.downsample(x)
        return self.relu(out)


def test_two_convs_meeting_at_an_add_fuse_it_once():
    network = from_torch(Downsampled().eval(), (2, 16, 8, 8))
    by_node = {node: layer.problem.epilogue.key for layer in network.layers for node in layer.nodes}
    assert by_node == {"conv3": "scale+bias+residual+relu", "downsample.0": "scale+bias"}


def test_identical_problems_merge_with_their_nodes():
    module = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
    network = from_torch(module, (2, 16, 8, 8))
    assert [(layer.name, layer.nodes) for layer in network.layers] == [("sequential_b2_0", ("0", "2"))]
    assert from_torch(module, (4, 16, 8, 8), "net").layers[0].name == "net_b4_0"


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3)

    def forward(self, x):
        return self.conv(x) if x.sum() > 0 else x


@pytest.mark.parametrize("module, shape, says", [
    (nn.Sequential(nn.ReLU()), (1, 16, 8, 8), "has no convolution"),
    (Branchy(), (1, 16, 8, 8), "torch.fx cannot trace Branchy"),
    (nn.Sequential(nn.Conv2d(16, 16, 3)), (1, 3, 8, 8), "does not run on an input of shape [1, 3, 8, 8]"),
])
def test_modules_the_importer_cannot_read_are_one_line_errors(module, shape, says, capfd):
    with pytest.raises(NetworkError) as caught:
        from_torch(module, shape)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")  # fake tensors: no copy is made
def test_reflect_padding_is_listed_with_its_reason_and_per_axis_convs_are_layers():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.reflect = nn.Conv2d(16, 16, 3, padding=1, padding_mode="reflect")
            self.tall = nn.Conv2d(16, 16, (3, 1), padding=(1, 0))
            self.wide = nn.Conv2d(16, 16, (1, 7), padding=(0, 3), stride=(1, 2))
            self.same = nn.Conv2d(16, 16, (1, 4), padding="same")  # pads the right one column more

        def forward(self, x):
            return self.same(self.wide(self.tall(self.reflect(x))))

    network = from_torch(Mixed(), (1, 16, 8, 8))
    reasons = {item.node: item.reason for item in network.unsupported}
    assert set(reasons) == {"reflect", "same"}
    assert "padding_mode reflect" in reasons["reflect"] and "pads one side more" in reasons["same"]
    problems = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert (problems["tall"].r, problems["tall"].s, problems["tall"].pads) == (3, 1, (1, 0))
    wide = problems["wide"]
    assert (wide.pads, wide.strides, wide.p, wide.q) == ((0, 3), (1, 2), 8, 4)


FAKE_TORCHVISION = """
    import torch.nn as nn
    from types import SimpleNamespace


    def tiny(weights=None):
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1, groups=16))


    def widths(weights=None):
        # a builder that computes with tensors, as RegNet's does: it cannot run on the meta device
        import torch
        width = int(torch.tensor([8.0]).mul(2).item())
        return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU())


    def list_models(module=None):
        return ["tiny", "widths"]


    def get_model(name, weights=None):
        assert weights is None
        return {"tiny": tiny, "widths": widths}[name]()


    models = SimpleNamespace(list_models=list_models, get_model=get_model)
"""


def tune(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """tune.py with a stand-in torchvision package first on the path."""
    package = tmp_path / "site" / "torchvision"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_TORCHVISION))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "220", "PYTHONPATH": str(tmp_path / "site")}
    return subprocess.run([sys.executable, str(REPO / "tune.py"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_torchvision_on_the_command_line(tmp_path):
    started = time.monotonic()
    result = tune("--torchvision", "tiny", "--batch", "8", "--list-layers", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tiny_b8_0" in result.stdout and "scale+bias+relu" in result.stdout
    assert "not tuned: 3: depthwise convolution" in result.stdout
    assert time.monotonic() - started < 30


def test_a_builder_that_computes_with_tensors_still_imports(tmp_path):
    result = tune("--torchvision", "widths", "--batch", "2", "--write-layers", str(tmp_path / "w.yaml"),
                  tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "c: 3, k: 16" in (tmp_path / "w.yaml").read_text()


@pytest.mark.parametrize("args, says", [
    (("--torchvision", "nope", "--batch", "8", "--list-layers"), "'nope' is not a torchvision classification model"),
    (("--torchvision", "tiny", "--list-layers"), "--torchvision needs --batch N"),
    (("--torchvision", "tiny", "--batch", "2", "--image-size", "0", "--list-layers"), "--image-size must be at least 1"),
    (("--layer", "conv_1", "--image-size", "64"), "--image-size goes with --torchvision"),
])
def test_bad_torchvision_input_is_one_line_exit_2(tmp_path, args, says):
    result = tune(*args, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
