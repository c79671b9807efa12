"""Bench's one run beside the libraries: cuDNN, cuBLAS on the GEMM of each 1x1 stride-1 layer, and PyTorch
eager and torch.compile on a layer with an epilogue, timed by the worker as the kernels are (the 'cudnn'
step); and best.yaml's kernel of each layer timed with those right after it (the 'tuned' step), the figures
the goals are judged by, free of the drift between runs on different days. Each adds to the bench record."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.core.device import DeviceFacts
from tuner.core.epilogue import Activation, Epilogue
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.core.layers import Layer
from tuner.core.status import Status
from tuner.core.yamlfile import brief_reason
from tuner.families.base import KernelConfig
from tuner.families.candidate import Candidate
from tuner.measure.baseline import library_dtype
from tuner.search.space import entry_config
from tuner.store.bench_record import BenchRecord, OneRunLayer
from tuner.store.best import best_entries
from tuner.store.results import ResultsError


@dataclass(frozen=True)
class LibraryTimes:
    """What the libraries took on one layer (µs; None where not timed)."""
    cudnn_us: float | None = None
    cudnn_version: int | None = None
    cublas_us: float | None = None
    eager_us: float | None = None
    compiled_us: float | None = None


@dataclass(frozen=True)
class NotTimed:
    """A library the worker could not time on a layer ('cuDNN', 'eager PyTorch', 'compiled PyTorch')."""
    library: str
    layer: str
    reason: str | None


@dataclass(frozen=True)
class NoBestEntry:
    """A layer of the 'tuned' step without a best.yaml entry to time."""
    layer: str


@dataclass(frozen=True)
class EntryRefused:
    """A best.yaml entry this checkout cannot build again (why, in a line)."""
    reason: str


@dataclass(frozen=True)
class TunedStarted:
    layers: int   # layers with a best.yaml kernel to time
    kernels: int  # distinct kernels to compile, bare twins of fused ones included


@dataclass(frozen=True)
class TunedTimed:
    """One layer of the 'tuned' step, timed and recorded."""
    layer: str
    row: OneRunLayer
    fused: bool  # the layer has an epilogue: PyTorch timed it too
    # the type cuDNN and PyTorch ran where it is not the layer's (an e4m3 layer's f16: CUDNN_FP8_ABSENT), or None
    library_dtype: str | None = None


OneRunEvent = NotTimed | NoBestEntry | EntryRefused | TunedStarted | TunedTimed


def is_gemm_layer(problem: ConvProblem) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped conv: in NHWC exactly a GEMM, which cuBLAS can run."""
    return ((problem.r, problem.s, problem.strides, problem.pads, problem.groups)
            == (1, 1, (1, 1), (0, 0), 1))


def relu_epilogue(epilogue: Epilogue) -> Epilogue:
    """The epilogue with ReLU for its activation, the rest unchanged."""
    return dataclasses.replace(epilogue, activation=Activation.relu)


@dataclass(frozen=True)
class Twin:
    """A layer's kernel built with another epilogue, and the layer's problem with that epilogue, to time it on."""
    config: KernelConfig
    problem: ConvProblem

    @classmethod
    def of(cls, config: KernelConfig, problem: ConvProblem, epilogue: Epilogue) -> "Twin":
        return cls(dataclasses.replace(config, fusion=epilogue), dataclasses.replace(problem, epilogue=epilogue))


def time_baselines(worker, layer: Layer, device: DeviceFacts, emit: Callable[[OneRunEvent], None]) -> LibraryTimes:
    """cuDNN (the bare conv), cuBLAS on a 1x1 stride-1 layer, and for a layer with an epilogue PyTorch
    eager and torch.compile running the whole layer, timed by the worker."""
    timed = {}
    answer = worker.request({"op": "cudnn", "problem": problem_to_dict(layer.problem), "l2_bytes": device.l2_bytes})
    if "cudnn_us" in answer:
        timed |= {"cudnn_us": answer["cudnn_us"], "cudnn_version": answer["cudnn_version"]}
    else:
        emit(NotTimed("cuDNN", layer.name, answer.get("reason")))
    if is_gemm_layer(layer.problem):
        answer = worker.request({"op": "cublas", "problem": problem_to_dict(layer.problem),
                                 "l2_bytes": device.l2_bytes})
        if "cublas_us" in answer:
            timed["cublas_us"] = answer["cublas_us"]
    if layer.problem.epilogue.fused:  # the layer as PyTorch runs it: eager, and torch.compile'd
        for compiled, key in ((False, "eager_us"), (True, "compiled_us")):
            answer = worker.request({"op": "pytorch", "problem": problem_to_dict(layer.problem),
                                     "l2_bytes": device.l2_bytes, "compiled": compiled})
            if key in answer:
                timed[key] = answer[key]
            else:
                emit(NotTimed(f"{key.removesuffix('_us')} PyTorch", layer.name, answer.get("reason")))
    return LibraryTimes(**timed)


def with_library_times(record: BenchRecord, layer: str, times: LibraryTimes) -> BenchRecord:
    """The record with the layer's library figures in its maps (each where it was timed)."""
    changes: dict = {key: {**getattr(record, key), layer: us} for key in ("cudnn", "cublas", "eager", "compiled")
                     if (us := getattr(times, f"{key}_us")) is not None}
    if times.cudnn_version is not None:
        changes["cudnn_version"] = times.cudnn_version
    return dataclasses.replace(record, **changes)


def measure_tuned(layers: list[Layer], folder: Path, device: DeviceFacts, compiler, evaluator, worker,
                  record: BenchRecord, emit: Callable[[OneRunEvent], None],
                  save: Callable[[BenchRecord], None]) -> BenchRecord:
    """best.yaml's kernel of each layer re-timed with the libraries right after it, in one run; the record
    with each layer's one-run row, saved after every layer."""
    entries = best_entries(folder)
    configs = {}
    for layer in layers:
        entry = entries.get(layer.name)
        if entry is None:
            emit(NoBestEntry(layer.name))
            continue
        try:
            configs[layer.name] = entry_config(entry, layer.name, layer.problem)
        except ResultsError as error:
            emit(EntryRefused(str(error)))
    # A layer with an epilogue also times its kernel built without one, on the bare conv: what the
    # epilogue costs that kernel. A SiLU or GELU layer also times it with ReLU in the activation's place: what
    # the activation costs beyond the cheapest one, on the same tile.
    problems = {layer.name: layer.problem for layer in layers}
    bare = {name: Twin.of(config, problems[name], Epilogue()) for name, config in configs.items()
            if problems[name].epilogue.fused}
    relu = {name: Twin.of(config, problems[name], relu_epilogue(problems[name].epilogue))
            for name, config in configs.items()
            if problems[name].epilogue.activation in (Activation.silu, Activation.gelu)}
    twins = [*bare.values(), *relu.values()]
    kernels = sorted({config.compiled for config in [*configs.values(), *(twin.config for twin in twins)]},
                     key=lambda c: c.name)
    emit(TunedStarted(len(configs), len(kernels)))
    compiled = {r.config.compiled: r for r in compiler.compile_many(kernels)}

    def timed(config, problem: ConvProblem, seed: int) -> tuple[float | None, Status, str | None]:
        """The kernel's median µs on the problem (None unless it compiled and validated), its status, and the
        reason the run gave where it has no figure."""
        result = compiled[config.compiled]
        if not result.ok:
            return None, Status.compile_failed, brief_reason(result.error)
        evaluation = evaluator.evaluate(result.binary, problem, Candidate.of(config, problem).launch, seed=seed)
        if evaluation.status is Status.ok:
            return round(evaluation.measurement.median_us, 3), evaluation.status, None
        return None, evaluation.status, brief_reason(evaluation.reason)

    for index, layer in enumerate(layers):
        config = configs.get(layer.name)
        if config is None:
            continue
        us, status, reason = timed(config, layer.problem, 2000 + index)
        bare_us, relu_us = (timed(twin.config, twin.problem, 2000 + index)[0]
                            if (twin := of_layer.get(layer.name)) else None for of_layer in (bare, relu))
        times = time_baselines(worker, layer, device, emit)
        row = OneRunLayer(config.name, config.family,
                          layer.problem.epilogue.key if layer.problem.epilogue.fused else None, us,
                          status.value if us is None else None, bare_kernel_us=bare_us, relu_kernel_us=relu_us,
                          cudnn_us=times.cudnn_us, cublas_us=times.cublas_us, eager_us=times.eager_us,
                          compiled_us=times.compiled_us, reason=reason)
        record = dataclasses.replace(with_library_times(record, layer.name, times),
                                     one_run={**record.one_run, layer.name: row})
        emit(TunedTimed(layer.name, row, layer.problem.epilogue.fused, library_dtype(layer.problem)))
        save(record)
    return record
