"""Does the GPU's clock state explain a kernel that the C++ example times faster than the tuner?
Times best.yaml's kernels of the given layers the tuner's way (GpuEvaluator) after the GPU idled for
two seconds, then three times back to back, printing NVML's SM clock before each. A gap between the
first and the later figures is warm-up the timing loop does not give; none says the cause is elsewhere.
usage: python scripts/clock_check.py [LAYER ...]   (default conv_1)"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tuner.compile import Compiler  # noqa: E402
from tuner.device import query_device  # noqa: E402
from tuner.evaluate import GpuEvaluator, WorkerProcess  # noqa: E402
from tuner.families import registry  # noqa: E402
from tuner.problem import load_layers  # noqa: E402
from tuner.results import best_entries, gpu_dir  # noqa: E402
from tuner.space import entry_config  # noqa: E402


def sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - a figure to print, not one to rely on
        return None


def main(names: list[str]) -> None:
    device = query_device()
    entries = best_entries(gpu_dir(REPO / "results", device.slug))
    table = load_layers(REPO / "search_spaces" / "layers.yaml")
    worker = WorkerProcess()
    evaluator = GpuEvaluator(device.l2_bytes, worker)
    compiler = Compiler(device)
    for name in names:
        problem = table[name].problem
        config = entry_config(entries[name], name, problem)
        [result] = compiler.compile_many([config])
        launch = registry.family_of(config).launch_args(config, problem)
        figures = []
        for attempt in range(4):
            if attempt == 0:
                time.sleep(2.0)
            clock = sm_clock_mhz()
            evaluation = evaluator.evaluate(result.binary, problem, launch)
            figures.append(f"{evaluation.measurement.median_us:.3f} µs (SM {clock} MHz before)")
        print(f"{name} {config.name}: after 2 s idle {figures[0]}; back to back " + ", ".join(figures[1:]),
              flush=True)
    worker.close()


if __name__ == "__main__":
    main(sys.argv[1:] or ["conv_1"])
