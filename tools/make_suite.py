#!/usr/bin/env python3
"""Write search_spaces/suite.yaml, the generalisation suite: convolutions of six networks that the
ResNet-50 table (search_spaces/layers.yaml) does not hold, each at batch 1, 8 and 32, bare and, for a
share of them, fused as the network runs them. The networks are imported the way `tune.py
--torchvision NAME --batch N` imports them (tuner/importers/torch_import.py: built without weights on the meta
device, shapes from torch.fx with fake tensors); the layers taken from each are the hand-picked nodes
of NETWORKS below, each with why it is there. The output depends on nothing but torchvision's
architectures: running this again writes the same bytes. docs/suite.md says how the picks were made."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: the tuner package is the repository's

from tuner.core.epilogue import Epilogue  # noqa: E402
from tuner.importers.frontend import NetworkError  # noqa: E402
from tuner.importers.network import LAYERS_DEFAULTS, ImportedLayer, Network, layer_entry, layer_name  # noqa: E402
from tuner.core.errors import ProblemError  # noqa: E402
from tuner.core.layers import load_layers  # noqa: E402
from tuner.core.problem import ConvProblem  # noqa: E402

BATCHES = (1, 8, 32)
FUSED_MARK = "f"  # vgg16f_features_0_b1: the layer with its epilogue, as layers.yaml's r50f_ layers
DEFAULT_OUTPUT = REPO / "search_spaces" / "suite.yaml"
DEFAULT_TABLE = REPO / "search_spaces" / "layers.yaml"
COMMAND = "python tools/make_suite.py"
COMMENT_WIDTH = 110


class SuiteError(Exception):
    """Bad input or a pick the networks no longer hold: one line, exit 2."""


@dataclass(frozen=True)
class Pick:
    """One convolution of a network, by its node: in the suite bare, fused (with the epilogue the
    network gives it), or both."""

    node: str
    why: str
    bare: bool = True
    fused: bool = False


@dataclass(frozen=True)
class Source:
    key: str          # begins every layer name: <key>_<node>_b<batch>, fused <key>f_<node>_b<batch>
    title: str        # what was imported, for the file's comments
    build: Callable[[int], Network]  # the network at a batch
    picks: tuple[Pick, ...]


@dataclass(frozen=True)
class SuiteLayer:
    name: str
    network: str  # the Source's key
    node: str
    problem: ConvProblem


def torchvision_classifier(name: str) -> Callable[[int], Network]:
    """The network as `tune.py --torchvision NAME --batch N` imports it."""
    def build(batch: int) -> Network:
        from tuner.importers.torch_import import from_torchvision

        return from_torchvision(name, batch)
    return build


def inception_v3(batch: int) -> Network:
    """torchvision's Inception-v3 without its auxiliary classifier (inference), at 299x299."""
    torch, torchvision = _torchvision()
    from tuner.importers.torch_import import from_torch

    with torch.device("meta"):
        module = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False).eval()
    return from_torch(module, (batch, 3, 299, 299), "inception_v3")


def deeplabv3(batch: int) -> Network:
    """torchvision's DeepLabV3 with a ResNet-50 backbone (dilated: output stride 8) and no auxiliary head,
    at 520x520, the size its weights' transforms resize to. `--torchvision` takes classifiers only,
    so this goes through from_torch, which is what it calls."""
    torch, torchvision = _torchvision()
    from tuner.importers.torch_import import from_torch

    with torch.device("meta"):
        module = torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                                    aux_loss=False).eval()
    return from_torch(module, (batch, 3, 520, 520), "deeplabv3_resnet50")


def _torchvision():
    try:
        import torch
        import torchvision
    except ImportError:
        raise SuiteError("the suite is imported from torchvision: pip install 'cutlass-conv-tuner[torch]'") from None
    except RuntimeError as error:  # a torchvision built for another torch
        raise SuiteError(f"torchvision does not load beside this torch ({error}); install the matching pair") from None
    return torch, torchvision


NETWORKS: tuple[Source, ...] = (
    Source("vgg16", "torchvision vgg16 at 224x224; every conv with its bias and ReLU",
           torchvision_classifier("vgg16"), (
               Pick("features.0", "the first layer: C=3, the largest output of the network", fused=True),
               Pick("features.2", "64->64 at 224x224: large spatial, small C and K"),
               Pick("features.12", "256->256 at 56x56, a mid-sized 3x3", fused=True),
               Pick("features.24", "512->512 at 14x14: small spatial, large C and K"))),
    Source("inception3", "torchvision inception_v3 (aux_logits off) at 299x299; BasicConv2d: batch norm "
                         "and ReLU", inception_v3, (
               Pick("Conv2d_1a_3x3.conv", "the stem: C=3, 3x3 stride 2, unpadded, at 299x299"),
               Pick("Conv2d_4a_3x3.conv", "80->192 3x3 unpadded at 73x73: C=80, not a multiple of 32", fused=True),
               Pick("Mixed_5b.branch5x5_2.conv", "48->64 at 35x35: the suite's only 5x5 filter", fused=True),
               Pick("Mixed_6b.branch1x1.conv", "768->192 1x1 at 17x17: the network's most frequent "
                                               "problem; odd spatial size"))),
    Source("densenet121", "torchvision densenet121 at 224x224; pre-activation: a 1x1 conv carries the next "
                          "batch norm and ReLU, a 3x3 ends in a concat (no epilogue); the stem and the "
                          "transitions are ResNet-50 problems", torchvision_classifier("densenet121"), (
               Pick("features.denseblock1.denselayer1.conv2", "128->32 3x3 at 56x56: K=32, the growth rate"),
               Pick("features.denseblock3.denselayer1.conv2", "128->32 3x3 at 14x14: the network's most "
                                                              "frequent conv, a small GEMM N"),
               Pick("features.denseblock1.denselayer2.conv1", "96->128 1x1 at 56x56", fused=True),
               Pick("features.denseblock3.denselayer16.conv1", "736->128 1x1 at 14x14: C a multiple of 32, not 64",
                    fused=True))),
    Source("deeplabv3", "torchvision deeplabv3_resnet50 (aux_loss off) at 520x520: a dilated ResNet-50 "
                        "backbone (output stride 8) and the ASPP head; batch norm and ReLU", deeplabv3, (
               Pick("backbone.conv1", "the stem: C=3, 7x7 stride 2, at 520x520"),
               Pick("backbone.layer3.1.conv2", "256->256 3x3 dilation 2 at 65x65", fused=True),
               Pick("classifier.0.convs.1.0", "ASPP: 2048->256 3x3 dilation 12 at 65x65", fused=True),
               Pick("classifier.4", "the classifier: 256->21 1x1 at 65x65, K=21 (odd)"))),
    Source("effnetb0", "torchvision efficientnet_b0 at 224x224, its dense convs (the depthwise ones no family "
                       "runs; the squeeze-excite 1x1s at 1x1 spatial left out); batch norm and SiLU",
           torchvision_classifier("efficientnet_b0"), (
               Pick("features.0.0", "the stem: C=3, 3x3 stride 2", fused=True),
               Pick("features.2.0.block.0.0", "expansion 16->96 1x1 at 112x112: C=16", fused=True),
               Pick("features.4.1.block.0.0", "expansion 80->480 1x1 at 14x14", fused=True),
               Pick("features.8.0", "the head: 320->1280 1x1 at 7x7", fused=True))),
    Source("regnety400", "torchvision regnet_y_400mf at 224x224, its dense convs (the grouped 3x3s no family "
                         "runs; the squeeze-excite 1x1s left out); batch norm, ReLU, the residual on the block's "
                         "first conv in graph order", torchvision_classifier("regnet_y_400mf"), (
               Pick("stem.0", "the stem: the bare problem of EfficientNet-B0's, here with ReLU (SiLU and ReLU "
                              "on one problem)", bare=False, fused=True),
               Pick("trunk_output.block1.block1-0.f.a.0", "32->48 1x1 at 112x112"),
               Pick("trunk_output.block2.block2-1.f.c.0", "104->104 1x1 at 28x28, with the residual",
                    fused=True),
               Pick("trunk_output.block4.block4-0.proj.0", "the shortcut projection: 208->440 1x1 stride 2 at "
                                                           "14x14", fused=True),
               Pick("trunk_output.block4.block4-1.f.c.0", "440->440 1x1 at 7x7"))),
)


def suite_name(source: Source, node: str, batch: int, fused: bool) -> str:
    return layer_name(f"{source.key}{FUSED_MARK if fused else ''}_{node}_b{batch}")


def imported_node(network: Network, source: Source, node: str, batch: int) -> ImportedLayer:
    """The network's layer that holds the node; a node no family runs, or one torchvision no longer
    has, is an error that names it."""
    for layer in network.layers:
        if node in layer.nodes:
            return layer
    reason = next((item.reason for item in network.unsupported if item.node == node), None)
    if reason is not None:
        raise SuiteError(f"{source.key} {node} (batch {batch}) is not tunable: {reason}; pick another node")
    raise SuiteError(f"{source.key} has no convolution {node} at batch {batch}; pick a node that "
                     f"`tune.py --torchvision ... --list-layers` lists")


def collect(networks: tuple[Source, ...], table: dict[ConvProblem, str],
            batches: tuple[int, ...] = BATCHES) -> tuple[list[tuple[Source, Pick, list[SuiteLayer], int]], int]:
    """Every pick at every batch, checked: its problems are not the table's, no two picks share a
    bare problem, a fused pick has an epilogue. Returns (source, pick, its layers, its count in the
    network) in order, and how many distinct bare problems there are."""
    picked = []
    bare_seen: dict[ConvProblem, str] = {}
    for source in networks:
        imported = {batch: source.build(batch) for batch in batches}
        for pick in source.picks:
            layers, count = [], 0
            for fused in (False, True):
                if not (pick.fused if fused else pick.bare):
                    continue
                for batch in batches:
                    layer = imported_node(imported[batch], source, pick.node, batch)
                    count = layer.count
                    problem = layer.problem if fused else dataclasses.replace(layer.problem, epilogue=Epilogue())
                    name = suite_name(source, pick.node, batch, fused)
                    if fused and not problem.epilogue.fused:
                        raise SuiteError(f"{name}: {source.key} {pick.node} has no epilogue to fuse; make it bare")
                    if problem in table:
                        raise SuiteError(f"{name} is layer {table[problem]} of the table, which the suite "
                                         "must not hold; pick another node")
                    if not fused and problem in bare_seen:
                        raise SuiteError(f"{name} is the bare problem of {bare_seen[problem]}; pick it fused only")
                    if not fused:
                        bare_seen[problem] = name
                    layers.append(SuiteLayer(name, source.key, pick.node, problem))
            picked.append((source, pick, layers, count))
    return picked, len(bare_seen)


def render(picked: list[tuple[Source, Pick, list[SuiteLayer], int]], bare_problems: int,
           batches: tuple[int, ...] = BATCHES) -> str:
    layers = [layer for _, _, per_pick, _ in picked for layer in per_pick]
    fused = sum(layer.problem.epilogue.fused for layer in layers)
    lines = [
        "# The generalisation suite (issue 23, item 6): convolutions of six networks that the ResNet-50",
        "# table (search_spaces/layers.yaml) does not hold, at batch " + ", ".join(map(str, batches)) + ": "
        f"{bare_problems} bare problems and {fused} fused",
        "# ones (<network>f_ names: the epilogue the network gives the conv). Layer names: network, node, batch.",
        f"# Written by `{COMMAND}` (needs torch and torchvision); edit NETWORKS there, not this file.",
        "# docs/suite.md: how the layers were chosen, and how to tune and bench them.",
        LAYERS_DEFAULTS,
        "layers:",
    ]
    current = None
    for source, pick, per_pick, count in picked:
        if source.key != current:
            current = source.key
            lines += textwrap.wrap(f"{source.key}: {source.title}", COMMENT_WIDTH, initial_indent="  # ",
                                   subsequent_indent="  #   ")
        lines += textwrap.wrap(f"{pick.node} (x{count} in the network): {pick.why}", COMMENT_WIDTH,
                               initial_indent="  # ", subsequent_indent="  #   ")
        lines += [layer_entry(layer.name, layer.problem) for layer in per_pick]
    return "\n".join(lines) + "\n"


def table_problems(path: Path) -> dict[ConvProblem, str]:
    if not path.is_file():
        raise SuiteError(f"--table {path}: no such file")
    try:
        return {layer.problem: name for name, layer in load_layers(path).items()}
    except ProblemError as error:
        raise SuiteError(f"--table: {error}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise SuiteError(f"{message} (see {COMMAND} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help="the suite file to write (default search_spaces/suite.yaml)")
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE,
                        help="the layer table whose problems the suite leaves out (default search_spaces/layers.yaml)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing: exit 0 if --output holds exactly what would be written, 1 if not")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if not args.check and not args.output.parent.is_dir():
            raise SuiteError(f"--output {args.output}: the folder {args.output.parent} does not exist")
        picked, bare_problems = collect(NETWORKS, table_problems(args.table))
    except (SuiteError, NetworkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = render(picked, bare_problems)
    layers = sum(len(per_pick) for _, _, per_pick, _ in picked)
    if args.check:
        same = args.output.is_file() and args.output.read_text() == text
        print(f"{args.output}: {'up to date' if same else f'differs from what {COMMAND} writes'}")
        return 0 if same else 1
    from tuner.store.results import atomic_write

    try:
        atomic_write(args.output, text)
    except OSError as error:
        print(f"error: --output {args.output}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {layers} layers, {bare_problems} bare problems, from {len(NETWORKS)} networks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
