"""Import every torchvision classification architecture (built without weights on the meta device) at one
batch size and print, per model, the seconds the import took, its distinct problems, its convolutions,
how many of them no family runs (with the first reason) and how many operators were left unfused: the
evidence for the importer's goal (any model in under 10 s, every conv tuned or listed with its reason).
Needs torch and torchvision; no GPU.

usage: python tools/import_torchvision_all.py [--batch N] [names...]"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import repository  # noqa: F401 - puts the repository on sys.path

from tuner.importers.torch_import import from_torchvision


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="torchvision model names (default: every classification model)")
    parser.add_argument("--batch", type=int, default=32, help="the batch size each model is imported at (default 32)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    import torchvision

    names = args.names or sorted(torchvision.models.list_models(module=torchvision.models))
    slowest, failed = (0.0, ""), []
    print(f"{'model':28} {'s':>6} {'problems':>8} {'convs':>6} {'not run':>7} {'unfused':>7}  first reason not run")
    for name in names:
        started = time.monotonic()
        try:
            network = from_torchvision(name, args.batch)
        except Exception as error:  # noqa: BLE001 - every model gets its line, whatever stops it
            failed.append(name)
            print(f"{name:28} {time.monotonic() - started:6.2f} error: {error}")
            continue
        seconds = time.monotonic() - started
        slowest = max(slowest, (seconds, name))
        convs = sum(layer.count for layer in network.layers)
        reasons = Counter(item.reason.split(":")[0] for item in network.unsupported)
        print(f"{name:28} {seconds:6.2f} {len(network.layers):8} {convs + len(network.unsupported):6} "
              f"{len(network.unsupported):7} {len(network.not_fused):7}  "
              + ", ".join(f"{reason} x{count}" for reason, count in reasons.most_common(2)))
    print(f"{len(names)} models, {len(failed)} not imported{': ' + ', '.join(failed) if failed else ''}; "
          f"slowest {slowest[1]} {slowest[0]:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
