"""The command-line options that name a network (--onnx, --torchvision, --batch, --image-size, --dtype), shared
by `tune.py` and `tune.py report`."""
from __future__ import annotations

import argparse
from pathlib import Path

from tuner.cli.choices import positive
from tuner.core.errors import UsageError
from tuner.importers.network import Network
from tuner.importers.onnx_import import from_onnx
from tuner.core.dtypes import DTYPE_CHOICES


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--onnx", type=Path, help="a network's convolutions in place of the layer table: every 2-D "
                                                  "Conv of this ONNX model, named after its node, with the "
                                                  "BatchNormalization / Add / activation after it as its epilogue; "
                                                  "identical problems once (default target: all of them)")
    source.add_argument("--torchvision", metavar="NAME", help="as --onnx, for a torchvision architecture built "
                                                              "without weights: a classification or segmentation "
                                                              "model whole (resnet50, deeplabv3_resnet50), a "
                                                              "detection model's backbone with its FPN "
                                                              "(fasterrcnn_resnet50_fpn; its head's convolutions "
                                                              "are listed as not tuned); needs torch and torchvision")
    parser.add_argument("--batch", type=int, help="with --onnx: the batch size (the model's own, or needed where "
                                                  "its batch dimension is symbolic); with --torchvision: required")
    parser.add_argument("--image-size", type=int, help="with --torchvision: the input's height and width "
                                                       "(default as torchvision evaluates the model: 224, 299 for "
                                                       "inception_v3, 520 for segmentation, a detector's "
                                                       "min_size, e.g. 800)")
    parser.add_argument("--dtype", choices=tuple(DTYPE_CHOICES),
                        help="the convolutions' data type: f16 or bf16 in and out (f32 accumulation), tf32 (f32 "
                             "in and out, TF32 math), or e4m3 (fp8 in with per-tensor scales, f16 out; sm90_dsl "
                             "only); with --onnx/--torchvision default the model's (an f32 model: f16), with "
                             "--shape default f16")


def imported_network(args: argparse.Namespace) -> Network | None:
    """The network named by --onnx or --torchvision, or None (the layer table)."""
    if args.batch is not None:
        positive("--batch", args.batch)
    if args.image_size is not None:
        positive("--image-size", args.image_size)
        if args.torchvision is None:
            raise UsageError("--image-size goes with --torchvision NAME")
    if args.onnx is not None:
        return from_onnx(args.onnx, args.batch, args.dtype)
    if args.torchvision is not None:
        if args.batch is None:
            raise UsageError("--torchvision needs --batch N (the batch size to tune for)")
        from tuner.importers.torch_import import from_torchvision

        return from_torchvision(args.torchvision, args.batch, args.image_size, args.dtype)
    return None
