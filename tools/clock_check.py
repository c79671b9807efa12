"""Does the GPU's clock state explain a kernel that the C++ example times faster than the tuner?
Times best.yaml's kernels of the given layers the tuner's way (GpuEvaluator) after the GPU idled for
two seconds, then three times back to back, printing NVML's SM clock before each. A gap between the
first and the later figures is warm-up the timing loop does not give; none says the cause is elsewhere.
Needs the GPU (and pynvml for the clock; without it the clock prints as None).

usage: python tools/clock_check.py [LAYER ...]   (default conv_1)"""
from __future__ import annotations

import argparse
import time

from repository import this_gpu, tuned_layers

from tuner.build.compile import Compiler
from tuner.measure.evaluate import GpuEvaluator, WorkerProcess
from tuner.families import registry
from tuner.search.space import entry_config

IDLE_S = 2.0


def sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - a figure to print, not one to rely on
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layers", nargs="*", default=["conv_1"], help="layers by name (default conv_1)")
    args = parser.parse_args()
    device = this_gpu()
    worker = WorkerProcess()
    evaluator = GpuEvaluator(device.l2_bytes, worker)
    compiler = Compiler(device)
    for name, (problem, entry) in tuned_layers(parser, args.layers, device.slug).items():
        config = entry_config(entry, name, problem)
        [result] = compiler.compile_many([config])
        launch = registry.family_of(config).rules.launch_args(config, problem)
        figures = []
        for attempt in range(4):
            if attempt == 0:
                time.sleep(IDLE_S)
            clock = sm_clock_mhz()
            evaluation = evaluator.evaluate(result.binary, problem, launch)
            figures.append(f"{evaluation.measurement.median_us:.3f} µs (SM {clock} MHz before)")
        print(f"{name} {config.name}: after {IDLE_S:.0f} s idle {figures[0]}; back to back " + ", ".join(figures[1:]),
              flush=True)
    worker.close()


if __name__ == "__main__":
    main()
