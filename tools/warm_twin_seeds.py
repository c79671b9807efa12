"""Compile, in one parallel batch, the configurations `tune.py --prior 0` queues first for layers with an
epilogue (each layer's reference configuration, landscape and bare-twin seeds), into the tuner's compile cache.
The tuner works through layers one at a time, and a handful of seeds compile in one round that leaves
most cores idle; done for all the layers at once they take a few rounds in all. Needs the GPU (for the
device facts) and the layers' bare twins in results/<gpu>/best.yaml. Timing nothing.

usage: python tools/warm_twin_seeds.py 'r50f_*_b32' [more patterns...] [--jobs N] [--first N]"""
from __future__ import annotations

import argparse
import sys
import time

from repository import LAYERS_FILE, RESULTS_DIR, this_gpu

from tuner.search.space import chosen_spaces
from tuner.core.errors import ProblemError, UsageError
from tuner.build.compile import Compiler
from tuner.build.compile_cache import default_cache_dir
from tuner.search.costmodel import Ceilings
from tuner.core.layers import load_layers, matching_layers
from tuner.store.journal import study_storage
from tuner.store.results import gpu_dir
from tuner.search.space import layer_space
from tuner.pipeline.tuning import device_spaces
from tuner.search.seeds import landscape_seeds, seed_configs, twin_seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="+", help="layer names or patterns (e.g. 'r50f_*_b32')")
    parser.add_argument("--jobs", type=int, help="parallel nvcc jobs (default: cores, capped by free memory)")
    parser.add_argument("--first", type=int, help="compile only each layer's first N queued configurations, the "
                                                  "ones `tune.py --trials N` measures (default: all of them)")
    args = parser.parse_args()
    for option, value in (("--jobs", args.jobs), ("--first", args.first)):
        if value is not None and value < 1:
            parser.error(f"{option} must be at least 1, got {value}")
    try:
        table = load_layers(LAYERS_FILE)
        layers = {layer.name: layer for pattern in args.patterns for layer in matching_layers(table, pattern)}
    except (UsageError, ProblemError) as error:
        parser.error(str(error))
    device = this_gpu()
    folder, storage = gpu_dir(RESULTS_DIR, device.slug), study_storage(None, RESULTS_DIR, device.slug)
    spaces = device_spaces(chosen_spaces(None, None), device)
    configs = []
    for layer in layers.values():
        joint = layer_space(spaces, layer.problem, device)
        # What `tune.py --prior 0` queues first for the layer, in its order (seeds.seed_configs).
        queued = seed_configs(layer.problem, joint, device, 0, Ceilings(),
                              landscape_seeds(folder, layer.name, layer.problem, joint, device),
                              twin_seeds(folder, storage, layer.problem, joint, device))
        configs += [config for config, _ in queued[:args.first]]
    kernels = sorted({config.compiled for config in configs}, key=lambda c: c.name)
    started = time.monotonic()
    compiled = Compiler(device, default_cache_dir(), args.jobs).compile_many(kernels)
    failed = [r.config.name for r in compiled if not r.ok]
    print(f"{len(layers)} layers: {len(kernels)} kernels compiled in {time.monotonic() - started:.0f} s"
          f"{'; failed: ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
