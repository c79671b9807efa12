"""`tune.py bench` on the GPU: the search proven on one GPU, every kernel family side by side.

1. The exhaustive landscape of each family (tuner/pipeline/landscape.py).
2. The tuner at several budgets and seeds, replayed on those landscapes (tuner/pipeline/replayed_search.py; CPU).
3. cuDNN through PyTorch, and cuBLAS on the GEMM of each 1x1 stride-1 layer, timed the same way
   (tuner/pipeline/one_run.py), and best.yaml's kernels timed beside them in one run.
4. The tuner as `tune.py --trials 32` runs it, on the GPU: every family's whole space
   (search_spaces/<family>.yaml), the reference and the cost model's picks queued first, every kernel
   compiled into an empty cache: best found, kernels compiled and wall seconds per layer.
The GPU steps run here, through one worker, and keep bench.yaml after every layer; tuner/pipeline/bench_summary.py
holds the figures bench shows of them."""
from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.core.device import DeviceFacts, device_from_dict
from tuner.core.layers import Layer
from tuner.core.status import Status
from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.pipeline.landscape import LANDSCAPE_REPEATS, LandscapeEvent, measure_landscape
from tuner.pipeline.one_run import OneRunEvent, measure_tuned, time_baselines, with_library_times
from tuner.search.costmodel import PRIOR_PICKS, Ceilings
from tuner.search.space import JointSpace, layer_space
from tuner.search.study import StudyRunner, open_study
from tuner.search.trials import ranked, recorded_trials
from tuner.store.bench_record import BenchRecord, GpuTunerRun, MeasuredCeilings, read_bench, write_bench
from tuner.store.results import gpu_dir

SUITE = ("conv_1", "r50_s2_3x3_b1", "r50_s5_3x3_b1", "r50_s3_1x1_256to128_b32", "r50_s4_3x3_b32", "r50_s5_3x3_b32")
PRODUCT_TRIALS = 32
STEPS = ("landscape", "cudnn", "search", "tuned")
DEFAULT_STEPS = ("landscape", "cudnn", "search")


@dataclass(frozen=True)
class ProductSearch:
    """One layer tuned the way `tune.py` tunes it, measured on the GPU."""
    best_us: float
    kernel: str
    family: str
    kernels_compiled: int
    wall_s: float


@dataclass(frozen=True)
class NoValidKernel:
    """The 'search' step found no valid kernel for the layer."""
    layer: str


@dataclass(frozen=True)
class GpuTunerFound:
    layer: str
    families: tuple[str, ...]  # the families the GPU runs, of those benched
    found: ProductSearch


BenchEvent = LandscapeEvent | OneRunEvent | NoValidKernel | GpuTunerFound


@dataclass(frozen=True)
class GpuSteps:
    """What the GPU measures, and where."""
    steps: tuple[str, ...]     # of STEPS
    results_dir: Path
    cache_dir: Path | None     # the landscape and 'tuned' steps' compile cache (None: the tuner's)
    jobs: int | None           # parallel nvcc jobs (None: the cores)
    product_trials: int = PRODUCT_TRIALS


def bench_ceilings(record: BenchRecord) -> Ceilings:
    """The cost model's rates from the ceilings measured on the GPU."""
    return Ceilings(record.ceilings.matmul_tflops, record.ceilings.copy_gbps)


def product_search(layer: Layer, joint: JointSpace, device: DeviceFacts, make_compiler, evaluator,
                   ceilings: Ceilings, trials: int) -> ProductSearch | None:
    """`trials` candidates of the joint space with the product's seeding; `make_compiler(cache_dir)`
    is given an empty cache, so that the wall time is a cold start's."""
    from tuner.search.seeds import seed_study

    study = open_study("bench-product", optuna.storages.InMemoryStorage(), seed=0)
    seed_study(study, layer.problem, joint, device, PRIOR_PICKS, ceilings)
    with tempfile.TemporaryDirectory(prefix="bench-cold-cache-") as cache:
        started = time.monotonic()
        StudyRunner(study, layer.problem, joint, device, make_compiler(Path(cache)), evaluator, run_id="bench").run(trials)
        wall_s = time.monotonic() - started
    best = ranked(study, layer.problem)
    if not best:
        return None
    kernels = {t.config.compiled for t in recorded_trials(study, layer.problem).values()
               if t.status is not Status.invalid}
    return ProductSearch(best[0].median_us, best[0].config.name, best[0].config.family, len(kernels), wall_s)


def measured_ceilings(worker) -> MeasuredCeilings:
    from tuner.measure.evaluate import GpuUnavailable

    answer = worker.request({"op": "ceilings"})
    if "status" in answer:
        raise GpuUnavailable(f"the matrix and copy ceilings could not be measured: {answer.get('reason')}")
    return MeasuredCeilings(answer["matmul_tflops"], answer["copy_gbps"], answer.get("torch_version"))


def measure_on_gpu(layers: list[Layer], landscape_spaces: dict[str, SearchSpace],
                   product_spaces: tuple[SearchSpace, ...], settings: GpuSteps,
                   emit: Callable[[BenchEvent], None]) -> tuple[DeviceFacts, BenchRecord]:
    """Steps that need the GPU, all through one worker; earlier layers' figures in bench.yaml are kept, each
    library's map among them (a run that times some layers must not drop the others' PyTorch figures)."""
    from tuner.build.compile import Compiler
    from tuner.measure.evaluate import GpuEvaluator, WorkerProcess, query_device_facts

    worker = WorkerProcess(timeout_s=120)
    device = device_from_dict(query_device_facts(worker))
    folder = gpu_dir(settings.results_dir, device.slug)
    kept = read_bench(folder)
    record = BenchRecord(device, measured_ceilings(worker), dict(kept.cudnn), dict(kept.cublas),
                         dict(kept.product_search), dict(kept.one_run), kept.cudnn_version, dict(kept.eager),
                         dict(kept.compiled))
    ceilings = bench_ceilings(record)
    evaluator = GpuEvaluator(device.l2_bytes, worker, repeats=LANDSCAPE_REPEATS)
    steps = settings.steps

    def compiler(cache: Path | None = settings.cache_dir) -> Compiler:
        return Compiler(device, cache, settings.jobs)

    try:
        for space in landscape_spaces.values() if "landscape" in steps else ():
            if registry.get(space.family).device_problem(device) is None:
                measure_landscape(layers, space, device, compiler(), evaluator, folder, emit)
        for layer in layers if "cudnn" in steps else []:
            record = with_library_times(record, layer.name, time_baselines(worker, layer, device, emit))
            write_bench(folder, record)  # after every layer, so that a kill keeps what was measured
        tuner_evaluator = GpuEvaluator(device.l2_bytes, worker)  # the tuner's repeats; shares the worker
        runnable = tuple(s for s in product_spaces if registry.get(s.family).device_problem(device) is None)
        for layer in layers if "search" in steps else []:
            joint = layer_space(runnable, layer.problem, device)
            found = product_search(layer, joint, device, compiler, tuner_evaluator, ceilings, settings.product_trials)
            if found is None:
                emit(NoValidKernel(layer.name))
                continue
            run = GpuTunerRun(round(found.best_us, 3), found.kernel, settings.product_trials, found.kernels_compiled,
                              round(found.wall_s, 1), found.family, tuple(joint.families))
            record = dataclasses.replace(record, product_search={**record.product_search, layer.name: run})
            emit(GpuTunerFound(layer.name, tuple(s.family for s in runnable), found))
            write_bench(folder, record)
        if "tuned" in steps:
            record = measure_tuned(layers, folder, device, compiler(), tuner_evaluator, worker, record, emit,
                                   lambda done: write_bench(folder, done))
    finally:
        evaluator.close()
    write_bench(folder, record)
    return device, record
