"""What a compile-time switch of the fused epilogue is worth, in one run: each layer's best.yaml kernel
built with the switch at 0 and at 1, and its bare twin, timed interleaved, round after round, the tuner's
way (graph replay, inputs rotated past L2). Prints each layer's medians and ratios to the bare kernel, and
their geometric means. Switches: CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH (prefetch_fusion.h: the scale and
bias vectors prefetched into L2), CUTLASS_CONV_TUNER_EARLY_RESIDUAL (early_residual.h: the residual
loaded under the MMAs), CUTLASS_CONV_TUNER_EARLY_VECTORS (prefetch_fusion.h: a ws kernel's threads load
their elements of the vectors into registers at kernel start).
usage: python scripts/ab_epilogue_prefetch.py [--macro NAME] [--rounds N] LAYER ..."""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.compile import Compiler  # noqa: E402
from tuner.device import query_device  # noqa: E402
from tuner.epilogue import Epilogue  # noqa: E402
from tuner.evaluate import GpuEvaluator, WorkerProcess  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.problem import load_layers  # noqa: E402
from tuner.results import best_entries, gpu_dir  # noqa: E402
from tuner.space import entry_config  # noqa: E402
from tuner.status import Status  # noqa: E402

VARIANTS = (0, 1)


class VariantCompiler(Compiler):
    def __init__(self, device, macro: str, variant: int):
        super().__init__(device)
        self.macro, self.variant = macro, variant

    def flags(self, config):
        return [*super().flags(config), f"-D{self.macro}={self.variant}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--macro", default="CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH",
                        choices=("CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH", "CUTLASS_CONV_TUNER_EARLY_RESIDUAL",
                                 "CUTLASS_CONV_TUNER_EARLY_VECTORS"))
    args = parser.parse_args()
    device = query_device()
    entries = best_entries(gpu_dir(REPO / "results", device.slug))
    table = load_layers(REPO / "search_spaces" / "layers.yaml")
    configs = {name: entry_config(entries[name], name, table[name].problem) for name in args.layers}
    bare = {name: dataclasses.replace(config, fusion=Epilogue()) for name, config in configs.items()}
    compilers = {variant: VariantCompiler(device, args.macro, variant) for variant in VARIANTS}
    with ThreadPoolExecutor(len(VARIANTS) + 1) as pool:
        fused = {variant: pool.submit(compilers[variant].compile_many, list(configs.values())) for variant in VARIANTS}
        plain = pool.submit(Compiler(device).compile_many, list(bare.values()))
        built = {variant: dict(zip(configs, future.result())) for variant, future in fused.items()}
        built["bare"] = dict(zip(configs, plain.result()))
    worker = WorkerProcess()
    evaluator = GpuEvaluator(device.l2_bytes, worker)
    ratios = {variant: [] for variant in VARIANTS}
    for name, config in configs.items():
        problems = {"fused": table[name].problem, "bare": dataclasses.replace(table[name].problem, epilogue=Epilogue())}
        times = {key: [] for key in built}
        for _ in range(args.rounds):
            for key in built:
                result = built[key][name]
                if not result.ok:
                    continue
                kernel, problem = (bare[name], problems["bare"]) if key == "bare" else (config, problems["fused"])
                evaluation = evaluator.evaluate(result.binary, problem,
                                                registry.family_of(kernel).launch_args(kernel, problem))
                if evaluation.status is Status.ok:
                    times[key].append(evaluation.measurement.median_us)
        medians = {key: statistics.median(values) for key, values in times.items() if values}
        line = "  ".join(f"{key}: {medians[key]:.2f}" for key in built if key in medians)
        if "bare" in medians:
            for variant in VARIANTS:
                if variant in medians:
                    ratios[variant].append(medians[variant] / medians["bare"])
            line += "  fused/bare " + " ".join(f"{v}: {medians[v] / medians['bare']:.3f}" for v in VARIANTS
                                               if v in medians)
        print(f"{name} ({config.name}): {line}", flush=True)
    for variant, values in ratios.items():
        if values:
            mean = math.exp(sum(map(math.log, values)) / len(values))
            print(f"{args.macro}={variant}: fused / bare geometric mean {mean:.3f} over {len(values)} layers")
    worker.close()


if __name__ == "__main__":
    main()
