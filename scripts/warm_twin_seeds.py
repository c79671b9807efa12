"""Compile, in one parallel batch, the configurations `tune.py --prior 0` queues first for layers with an
epilogue (each layer's reference configuration, landscape and bare-twin seeds), into the tuner's compile cache.
The tuner works through layers one at a time, and a handful of seeds compile in one round that leaves
most cores idle; done for all the layers at once they take a few rounds in all. Needs the GPU (for the
device facts) and the layers' bare twins in results/<gpu>/best.yaml. Timing nothing.

usage: python scripts/warm_twin_seeds.py 'r50f_*_b32' [more patterns...] [--jobs N] [--first N]
(--first N: only the first N configurations each layer queues, the ones `tune.py --trials N` measures)"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.choices import chosen_spaces, matching_layers  # noqa: E402
from tuner.compile import Compiler, default_cache_dir  # noqa: E402
from tuner.device import device_from_dict  # noqa: E402
from tuner.evaluate import WorkerProcess, query_device_facts  # noqa: E402
from tuner.problem import load_layers  # noqa: E402
from tuner.results import gpu_dir, study_storage  # noqa: E402
from tuner.space import layer_space  # noqa: E402
from tuner.costmodel import Ceilings  # noqa: E402
from tuner.tuning import device_spaces, landscape_seeds, seed_configs, twin_seeds  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="+")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--first", type=int, help="compile only each layer's first N queued configurations")
    args = parser.parse_args()
    table = load_layers(REPO / "search_spaces" / "layers.yaml")
    layers = {layer.name: layer for pattern in args.patterns for layer in matching_layers(table, pattern)}
    worker = WorkerProcess(timeout_s=120)
    device = device_from_dict(query_device_facts(worker))
    worker.close()
    results = REPO / "results"
    folder, storage = gpu_dir(results, device.slug), study_storage(None, results, device.slug)
    spaces = device_spaces(chosen_spaces(None, None), device)
    configs = []
    for layer in layers.values():
        joint = layer_space(spaces, layer.problem, device)
        # What `tune.py --prior 0` queues first for the layer, in its order (tuning.seed_configs).
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
