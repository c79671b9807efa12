"""Count, for each network, the share of its convolutions and their FLOPs that a family can tune (issue 24's
coverage goal), at each batch size and data type: one line a (network, batch, dtype), the reasons of what is
not tunable, and a totals line. Needs torch and torchvision; no GPU (the families' static layer checks decide).

usage: python tools/coverage_networks.py [--batch 1,32] [--dtype f16,bf16] [names...]"""
from __future__ import annotations

import argparse
import sys
import warnings

import repository  # noqa: F401 - puts the repository on sys.path

from tuner.core.dtypes import DTYPE_CHOICES
from tuner.importers.frontend import NetworkError
from tuner.importers.torch_import import from_torchvision
from tuner.pipeline.network_report import NOT_TUNABLE, TOTAL, TUNABLE, coverage

# the networks of the coverage issue: those it found short of 100 % and those it found complete
NETWORKS = ("convnext_tiny", "inception_v3", "regnet_y_400mf", "efficientnet_b0", "mobilenet_v3_large",
            "mobilenet_v2", "deeplabv3_mobilenet_v3_large", "resnet50", "resnext50_32x4d", "densenet121", "vgg16",
            "fcn_resnet50")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"torchvision model names (default: {', '.join(NETWORKS)})")
    parser.add_argument("--batch", default="1,32", help="comma-separated batch sizes (default 1,32)")
    parser.add_argument("--dtype", default="f16,bf16", help="comma-separated data types (default f16,bf16)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # torchvision's note on inception_v3's init
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        parser.error(f"--batch takes whole numbers separated by commas, got {args.batch!r}")
    if min(batches) < 1:
        parser.error(f"--batch sizes must be at least 1, got {args.batch}")
    dtypes = args.dtype.split(",")
    if unknown := [dtype for dtype in dtypes if dtype not in DTYPE_CHOICES]:
        parser.error(f"--dtype {', '.join(unknown)} is not one of {', '.join(DTYPE_CHOICES)}")
    all_flops = tunable_flops = all_convs = tunable_convs = 0
    print(f"{'network':30} {'batch':>5} {'dtype':>5} {'convs':>6} {'tunable':>7} {'FLOPs tunable':>13}  not tunable")
    for name in args.names or NETWORKS:
        for batch in batches:
            for dtype in dtypes:
                try:
                    rows = coverage(from_torchvision(name, batch, dtype=dtype))
                except NetworkError as error:  # no such model, or torchvision missing: one line, as tune.py says it
                    print(f"coverage_networks.py: {error}", file=sys.stderr)
                    return 2
                total = next(row for row in rows if row.state == TOTAL)
                tunable = next(row for row in rows if row.state == TUNABLE)
                missing = [f"{row.reason} x{row.convolutions}"
                           + (f" ({row.flops_unknown} of unknown FLOPs)" if row.flops_unknown else "")
                           for row in rows if row.state == NOT_TUNABLE]
                share = tunable.flops / total.flops if total.flops else 1.0
                print(f"{name:30} {batch:5} {dtype:>5} {total.convolutions:6} {tunable.convolutions:7} "
                      f"{100 * share:12.2f}%  {', '.join(missing) or '-'}")
                all_flops, tunable_flops = all_flops + total.flops, tunable_flops + tunable.flops
                all_convs, tunable_convs = all_convs + total.convolutions, tunable_convs + tunable.convolutions
    print(f"total: {tunable_convs} of {all_convs} convolutions tunable, "
          f"{100 * tunable_flops / max(all_flops, 1):.2f}% of their FLOPs")
    return 0 if tunable_convs == all_convs else 1


if __name__ == "__main__":
    sys.exit(main())
