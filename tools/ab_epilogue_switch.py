"""What a compile-time switch of the fused epilogue is worth, in one run: each layer's best.yaml kernel
built with the switch at 0 and at 1, and its bare twin, timed interleaved, round after round, the tuner's
way (graph replay, inputs rotated past L2). Prints each layer's medians and ratios to the bare kernel, and
their geometric means. Switches: CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH (prefetch_fusion.h: the scale and
bias vectors prefetched into L2), CUTLASS_CONV_TUNER_EARLY_RESIDUAL (early_residual.h: the residual
loaded under the MMAs), CUTLASS_CONV_TUNER_EARLY_VECTORS (prefetch_fusion.h: a ws kernel's threads load
their elements of the vectors into registers at kernel start).
Needs the GPU and the layers' best.yaml entries.

usage: python tools/ab_epilogue_switch.py [--macro NAME] [--rounds N] LAYER ..."""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from concurrent.futures import ThreadPoolExecutor

from repository import this_gpu, tuned_layers

from tuner.build.compile import Compiler
from tuner.core.epilogue import Epilogue
from tuner.measure.evaluate import GpuEvaluator, WorkerProcess
from tuner.families import registry
from tuner.search.space import entry_config
from tuner.core.status import Status

VARIANTS = (0, 1)


class VariantCompiler(Compiler):
    def __init__(self, device, macro: str, variant: int):
        super().__init__(device)
        self.macro, self.variant = macro, variant

    def flags(self, config):
        return [*super().flags(config), f"-D{self.macro}={self.variant}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layers", nargs="+", help="layers with an epilogue, by name (e.g. r50f_s4_1x1_512to256_b1)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the interleaved timing; each build's median over them counts (default 3)")
    parser.add_argument("--macro", default="CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH",
                        choices=("CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH", "CUTLASS_CONV_TUNER_EARLY_RESIDUAL",
                                 "CUTLASS_CONV_TUNER_EARLY_VECTORS"),
                        help="the switch built at 0 and at 1 (default CUTLASS_CONV_TUNER_EPILOGUE_PREFETCH)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    device = this_gpu()
    layers = tuned_layers(parser, args.layers, device.slug)
    problems = {name: problem for name, (problem, _) in layers.items()}
    configs = {name: entry_config(entry, name, problem) for name, (problem, entry) in layers.items()}
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
        forms = {"fused": problems[name], "bare": dataclasses.replace(problems[name], epilogue=Epilogue())}
        times = {key: [] for key in built}
        for _ in range(args.rounds):
            for key in built:
                result = built[key][name]
                if not result.ok:
                    continue
                kernel, problem = (bare[name], forms["bare"]) if key == "bare" else (config, forms["fused"])
                evaluation = evaluator.evaluate(result.binary, problem,
                                                registry.family_of(kernel).rules.launch_args(kernel, problem))
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
