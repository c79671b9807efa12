"""PyTorch modules the tests build themselves become the tuner's layers: traced by torch.fx, shapes from
fake tensors, epilogues from what follows each conv; `--torchvision` on the command line (against a
stand-in torchvision package, so nothing is downloaded and no real torchvision is needed)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from conftest import MODEL_DTYPE_CASES, tune_in_process  # noqa: E402
from tuner.importers.frontend import NetworkError  # noqa: E402
from tuner.importers.torch_import import from_torch  # noqa: E402

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
    assert set(by_node) == {"conv1", "conv2", "c3", "conv2d", "dw", "up"}
    assert by_node["dw"].groups == by_node["dw"].c  # depthwise: sm80_depthwise's
    one = by_node["conv1"]
    assert (one.n, one.h, one.w, one.c, one.k, one.r, one.pads) == (4, 12, 12, 16, 16, 3, (1, 1))
    assert one.epilogue.key == "scale+bias+relu"
    assert by_node["conv2"].epilogue.key == "scale+bias+residual+relu"
    assert by_node["c3"].epilogue.key == "bias+silu" and by_node["c3"].pads == (1, 1)  # padding='same'
    assert by_node["conv2d"].strides == (2, 2) and not by_node["conv2d"].epilogue.fused
    assert network.unsupported == ()
    up = by_node["up"]
    assert up.transposed and (up.h, up.c, up.k, up.r, up.strides, up.p) == (6, 32, 32, 2, (2, 2), 12)
    assert not up.epilogue.fused  # its bias stays the model's: no family fuses into a transposed conv yet
    assert network.not_fused == ("conv2d -> Gelu(tanh)",
                                 "up -> bias (no family fuses an epilogue into a transposed convolution yet)")


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


def test_the_fused_chain_names_the_nodes_a_kernel_takes_the_place_of():
    from tuner.importers.torch_import import traced_module

    fused = {f.conv.node: f for f in traced_module(Downsampled().eval(), (2, 16, 8, 8)).fused_convs()}
    main, branch = fused["conv3"], fused["downsample.0"]
    assert (main.norm, main.add, main.residual, main.activation, main.output) == \
        ("bn3", "add", "downsample_1", ("relu",), "relu")
    assert main.fused_ops == ("bn3", "add", "relu")
    assert (branch.norm, branch.add, branch.output) == ("downsample_1", None, "downsample_1")


class Stage(nn.Module):
    """conv + BN + ReLU, then conv + BN + the input + ReLU: what torchvision's ResNet blocks are made of."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


@pytest.mark.parametrize("folded", [True, False], ids=["bn-folded", "bn-kept"])
def test_every_import_path_gives_a_conv_one_key(tmp_path, folded):
    """A conv tuned through the PyTorch import is found for the same network exported to ONNX, with its batch
    norms folded into the convs by the exporter (bias+relu) or kept (scale+bias+relu)."""
    import warnings

    import yaml

    pytest.importorskip("onnx")
    from tuner.importers.onnx_import import from_onnx
    from tuner.core.problem import canonical_problem, problem_to_dict
    from tuner.store.best import best_entries, names_by_problem

    module = Stage().eval()
    path = tmp_path / "stage.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(2, 16, 8, 8),), str(path), dynamo=False, do_constant_folding=folded,
                          training=torch.onnx.TrainingMode.EVAL if folded else torch.onnx.TrainingMode.PRESERVE)
    from_module, from_file = from_torch(module, (2, 16, 8, 8)), from_onnx(path)
    keys = [{canonical_problem(layer.problem) for layer in network.layers} for network in (from_module, from_file)]
    assert keys[0] == keys[1] and len(keys[0]) == 2
    epilogues = sorted(layer.problem.epilogue.key for layer in from_file.layers)
    assert epilogues == (["bias+relu", "bias+residual+relu"] if folded
                         else ["scale+bias+relu", "scale+bias+residual+relu"])
    folder = tmp_path / "results"
    folder.mkdir()
    layers = {layer.name: {"problem": problem_to_dict(layer.problem), "family": "sm80", "params": {"tile": "x"},
                           "kernel": "k", "runtime_us": 1.0} for layer in from_module.layers}
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": len(layers), "layers": layers}))
    tuned = names_by_problem(best_entries(folder))
    assert {tuned.get(layer.problem) for layer in from_file.layers} == set(layers)


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


    def segmenter(weights=None, weights_backbone="IMAGENET1K_V1"):
        assert weights_backbone is None, "would download the backbone's weights"
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 1))


    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.transform = SimpleNamespace(min_size=(800, 40))  # the last is the one it evaluates at
            self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU())
            self.head = nn.ModuleDict({"cls": nn.Conv2d(16, 8, 3, padding=1), "box": nn.Conv2d(16, 4, 1)})

        def forward(self, images):
            features = self.backbone(images)
            if features.sum() > 0:  # data-dependent, as a real detector's proposals are: torch.fx cannot trace it
                return self.head["cls"](features)
            return self.head["box"](features)


    def detector(weights=None, weights_backbone="IMAGENET1K_V1"):
        assert weights_backbone is None, "would download the backbone's weights"
        return Detector()


    BUILDERS = {"tiny": tiny, "widths": widths, "segmenter": segmenter, "detector": detector}
    segmentation, detection = SimpleNamespace(), SimpleNamespace()


    def list_models(module=None):
        return {id(segmentation): ["segmenter"], id(detection): ["detector"]}.get(id(module), ["tiny", "widths"])


    def get_model(name, weights=None, **options):
        assert weights is None
        return BUILDERS[name](**options)


    models = SimpleNamespace(list_models=list_models, get_model=get_model, segmentation=segmentation,
                             detection=detection)
"""


def tune(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """tune.py with a stand-in torchvision package first on the path."""
    package = tmp_path / "site" / "torchvision"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_TORCHVISION))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "220", "PYTHONPATH": str(tmp_path / "site")}
    return subprocess.run([sys.executable, str(REPO / "tune.py"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


@pytest.fixture
def tune_here(monkeypatch, tmp_path):
    """tune() in this process (torch is imported once, not once a command), the stand-in torchvision imported
    as torchvision."""
    stand_in = types.ModuleType("torchvision")
    exec(textwrap.dedent(FAKE_TORCHVISION), stand_in.__dict__)
    monkeypatch.setitem(sys.modules, "torchvision", stand_in)
    return lambda *args: tune_in_process(*args, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "220"})


def cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.slow  # about 12 s on 2 cores, half of it importing torch: the full set runs it
def test_torchvision_on_the_command_line(tmp_path):
    before = cpu_seconds_of_children()
    result = tune("--torchvision", "tiny", "--batch", "8", "--list-layers", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tiny_b8_0" in result.stdout and "scale+bias+relu" in result.stdout
    assert "tiny_b8_3" in result.stdout and "not tuned" not in result.stdout  # the depthwise conv is a layer
    # The import is quick: counted in the command's CPU seconds, which a busy machine leaves as they are (its
    # wall-clock time waits for a core: 30 s of it failed under load)
    assert cpu_seconds_of_children() - before < 30


def test_a_builder_that_computes_with_tensors_still_imports(tmp_path, tune_here):
    result = tune_here("--torchvision", "widths", "--batch", "2", "--write-layers", str(tmp_path / "w.yaml"))
    assert result.returncode == 0, result.stderr
    assert "c: 3, k: 16" in (tmp_path / "w.yaml").read_text()


@pytest.mark.parametrize("args, says", [
    (("--torchvision", "nope", "--batch", "8", "--list-layers"),
     "'nope' is not a torchvision classification, segmentation or detection model; one of: classification: tiny, "
     "widths; segmentation: segmenter; detection: detector"),
    (("--torchvision", "tiny", "--list-layers"), "--torchvision needs --batch N"),
    (("--torchvision", "tiny", "--batch", "2", "--image-size", "0", "--list-layers"), "--image-size must be at least 1"),
    (("--layer", "conv_1", "--image-size", "64"), "--image-size goes with --torchvision"),
])
def test_bad_torchvision_input_is_one_line_exit_2(args, says, tune_here):
    result = tune_here(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_a_segmentation_model_is_imported_whole_at_its_recipes_size(tmp_path, tune_here):
    result = tune_here("--torchvision", "segmenter", "--batch", "2", "--write-layers", str(tmp_path / "s.yaml"))
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "s.yaml").read_text()
    assert "h: 520, w: 520, c: 3, k: 16" in written and "c: 16, k: 8" in written


@pytest.mark.slow  # over 5 s on 2 cores: the full set runs it
def test_a_detection_model_gives_its_backbone_and_lists_its_head(tmp_path):
    result = tune("--torchvision", "detector", "--batch", "2", "--list-layers", "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    import json

    document = json.loads(result.stdout)
    [layer] = document["layers"]
    assert layer["nodes"] == ["backbone.0"] and (layer["h"], layer["w"]) == (40, 40)  # the transform's min_size
    assert {item["node"] for item in document["not_tuned"]} == {"head.cls", "head.box"}
    assert all("detection head" in item["reason"] for item in document["not_tuned"])
    sized = tune("--torchvision", "detector", "--batch", "2", "--image-size", "64", "--list-layers", "--json",
                 tmp_path=tmp_path)
    assert json.loads(sized.stdout)["layers"][0]["h"] == 64


def _torchvision_loads() -> bool:
    try:
        import torchvision

        return bool(torchvision.models.list_models(module=torchvision.models.detection))
    except Exception:  # noqa: BLE001 - absent, or built for another torch ('operator torchvision::nms does not exist')
        return False


@pytest.mark.skipif(not _torchvision_loads(), reason="needs torch with a torchvision that loads beside it")
def test_real_segmentation_and_detection_models_import():
    from tuner.importers.torch_import import from_torchvision

    deeplab = from_torchvision("deeplabv3_resnet50", 1)
    nodes = {node for layer in deeplab.layers for node in layer.nodes}
    assert "backbone.conv1" in nodes and "classifier.0.project.0" in nodes and deeplab.layers[0].problem.h == 520
    rcnn = from_torchvision("fasterrcnn_resnet50_fpn", 1)
    assert rcnn.layers[0].nodes[0] == "backbone.body.conv1" and rcnn.layers[0].problem.h == 800
    assert {item.node for item in rcnn.unsupported} == {"rpn.head.conv.0.0", "rpn.head.cls_logits", "rpn.head.bbox_pred"}


# --- data types ------------------------------------------------------------------------------------------------

class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(16, 32, 3, padding=1), nn.Conv2d(32, 32, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("element, dtype, key, tag", MODEL_DTYPE_CASES)
def test_the_modules_type_or_dtype_types_its_layers(element, dtype, key, tag):
    network = from_torch(TwoConvs().to(getattr(torch, element)).eval(), (2, 16, 8, 8), "two", dtype)
    assert {layer.problem.dtype_key for layer in network.layers} == {key}
    assert sorted(layer.name for layer in network.layers) == [f"two{tag}_b2_a", f"two{tag}_b2_b"]


def test_a_float64_module_is_listed_with_the_reason():
    network = from_torch(TwoConvs().double().eval(), (2, 16, 8, 8), "two")
    assert not network.layers and all("float64" in item.reason and "--dtype" in item.reason
                                      for item in network.unsupported)
    assert from_torch(TwoConvs().double().eval(), (2, 16, 8, 8), "two", "bf16").layers


def test_dtype_on_the_command_line(tune_here):
    result = tune_here("--torchvision", "tiny", "--batch", "8", "--dtype", "bf16", "--list-layers", "--json")
    assert result.returncode == 0, result.stderr
    import json
    rows = json.loads(result.stdout)["layers"]
    assert rows and all(row["types"] == "bf16_bf16_bf16_f32" and row["name"].startswith("tiny_bf16_b8_")
                        for row in rows)
    assert all("sm90_dsl" in row["families"] and "sm80" in row["families"] for row in rows if row["c"] % 8 == 0 and row["groups"] == 1)

class TinyUNet(nn.Module):
    """down (3x3 s2) -> up (ConvTranspose2d 2x2 s2, bias) -> cat with x -> up2 (4x4 s2 pad 1, no bias, BN, ReLU)
    -> up3 (3x3 s2 pad 1 output_padding 1)."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.up2, self.bn = nn.ConvTranspose2d(32, 8, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.up3 = nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        y = torch.cat([self.up(self.down(x)), x], 1)
        return self.up3(torch.relu(self.bn(self.up2(y))))


def test_conv_transpose2d_modules_are_transposed_layers():
    network = from_torch(TinyUNet().eval(), torch.empty(2, 16, 16, 16))
    by_node = {layer.nodes[0]: layer.problem for layer in network.layers}
    assert set(by_node) == {"down", "up", "up2", "up3"} and network.unsupported == ()
    up, up3 = by_node["up"], by_node["up3"]
    assert up.transposed and (up.h, up.c, up.k, up.r, up.strides, up.p) == (8, 32, 16, 2, (2, 2), 16)
    assert up3.output_paddings == (1, 1) and (up3.p, up3.q) == (64, 64)
    # the same problems as the model's own output shapes say
    module = TinyUNet().eval()
    with torch.no_grad():
        x = torch.randn(2, 16, 16, 16)
        u = module.up(module.down(x))
        u3 = module.up3(torch.relu(module.bn(module.up2(torch.cat([u, x], 1)))))
    assert tuple(u.shape) == (up.n, up.k, up.p, up.q) and tuple(u3.shape) == (up3.n, up3.k, up3.p, up3.q)
    assert network.not_fused == (
        "up -> bias (no family fuses an epilogue into a transposed convolution yet)",
        "up2 -> scale+bias+relu (no family fuses an epilogue into a transposed convolution yet)",
        "up3 -> bias (no family fuses an epilogue into a transposed convolution yet)")


def test_onnx_and_torch_give_a_conv_transpose_one_key(tmp_path):
    from tuner.importers.onnx_import import from_onnx

    module = TinyUNet().eval()
    path = tmp_path / "unet.onnx"
    torch.onnx.export(module, (torch.randn(2, 16, 16, 16),), str(path), dynamo=False)
    keys = {layer.problem.key for layer in from_onnx(path).layers}
    assert keys == {layer.problem.key for layer in from_torch(module, (2, 16, 16, 16)).layers}
    assert sum(key.endswith(("t", "t1")) for key in keys) == 3


def test_the_pytorch_op_leaves_a_conv_transpose2d_to_pytorch():
    from tuner.importers.plan import Fallback, TunedIndex, decide

    [up] = [layer for layer in from_torch(TinyUNet().eval(), (2, 16, 16, 16)).layers if layer.nodes == ("up",)]
    decision = decide("up", up.problem, TunedIndex({}))
    assert decision.fallback is Fallback.not_replaceable and "ConvTranspose2d" in decision.note
