#!/usr/bin/env python3
"""Write search_spaces/networks/grouped_b8.yaml: every distinct grouped and depthwise convolution of MobileNetV2,
EfficientNet-B0, ConvNeXt-T and RegNetY-400MF (the networks of the coverage issue's grouped/depthwise goal), bare,
at one batch (default 8, the batch the issue imported them at), named <network>_<node>_b<batch> after the first node
that has the problem. Imported as `tune.py --torchvision NAME --batch N` imports them; the output depends only on
torchvision's architectures. Needs torch and torchvision; no GPU.

usage: python tools/make_grouped_table.py [--batch N] [--output FILE]"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere: the tuner package is the repository's

from tuner.core.epilogue import Epilogue  # noqa: E402
from tuner.importers.frontend import NetworkError  # noqa: E402
from tuner.importers.network import LAYERS_DEFAULTS, layer_entry, layer_name  # noqa: E402
from tuner.importers.torch_import import from_torchvision  # noqa: E402
from tuner.store.results import atomic_write  # noqa: E402

NETWORKS = {"mobilenet_v2": "mbv2", "efficientnet_b0": "effnetb0", "convnext_tiny": "convnext_t",
            "regnet_y_400mf": "regnety400"}


def table(batch: int) -> str:
    lines = [f"# Grouped and depthwise convolutions of {', '.join(NETWORKS)}",
             f"# at batch {batch}, bare: one entry per distinct problem (python tools/make_grouped_table.py --batch {batch}).",
             LAYERS_DEFAULTS, "layers:"]
    seen = set()
    for network, key in NETWORKS.items():
        for layer in from_torchvision(network, batch).layers:
            problem = dataclasses.replace(layer.problem, epilogue=Epilogue())
            if problem.groups == 1 or problem in seen:
                continue
            seen.add(problem)
            kind = "depthwise" if problem.groups == problem.c else f"{problem.groups} groups"
            lines.append(f"  # {network}: {layer.nodes[0]} ({kind}, x{layer.count})")
            lines.append(layer_entry(layer_name(f"{key}_{layer.nodes[0]}_b{batch}"), problem))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="the batch size (default 8)")
    parser.add_argument("--output", type=Path, help="the file to write (default search_spaces/networks/grouped_b<N>.yaml)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    output = args.output or REPO / "search_spaces" / "networks" / f"grouped_b{args.batch}.yaml"
    try:
        text = table(args.batch)
    except NetworkError as error:  # torch or torchvision missing: one line, as tune.py says it
        print(f"make_grouped_table.py: {error}", file=sys.stderr)
        return 2
    atomic_write(output, text)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
