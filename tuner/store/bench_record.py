"""results/<gpu>/bench.yaml as one typed record: what `tune.py bench` measured on the GPU (its facts, the
matrix and copy ceilings, cuDNN, cuBLAS and PyTorch per layer, the tuner's run on the whole spaces, and the
one run that timed best.yaml's kernels beside the libraries). Every reader gets the record, checked when
read; the writer takes only a record, and writes the file as it has always been written.

The file has no version line: version 1 is the format it has always had. A later format states
`version: N`, which this reader refuses rather than half reads."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from tuner.core.device import DeviceFacts, device_from_dict
from tuner.core.yamlfile import brief, dump_yaml
from tuner.store.results import ResultsError, atomic_write, read_results_yaml

BENCH_FILE = "bench.yaml"
BENCH_VERSION = 1
MAX_BENCH_BYTES = 8 << 20  # the H100's bench.yaml of 190 layers is 80 KB
# The figures of a one-run row, in the order the row is written.
ONE_RUN_FIGURES = ("tuned_us", "bare_kernel_us", "relu_kernel_us", "cudnn_us", "cublas_us", "eager_us", "compiled_us")
LAYER_TIMES = ("cudnn", "cublas", "eager", "compiled")  # the record's maps of a library's µs per layer


@dataclass(frozen=True)
class MeasuredCeilings:
    """The f16 matrix-product rate and the device-to-device copy bandwidth measured on the GPU."""
    matmul_tflops: float
    copy_gbps: float
    torch_version: str | None = None

    def to_dict(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@dataclass(frozen=True)
class GpuTunerRun:
    """One layer tuned the way `tune.py` tunes it (bench's 'search' step), as recorded."""
    best_us: float
    kernel: str
    trials: int
    kernels_compiled: int
    wall_s: float
    family: str | None = None               # the winner's, recorded since there are families
    families: tuple[str, ...] | None = None  # those searched, recorded since there are families

    @property
    def searched_families(self) -> tuple[str, ...]:
        """The families searched (a run recorded before there were families searched the sm80 space alone)."""
        return self.families or ("sm80",)

    def to_dict(self) -> dict:
        values = {"best_us": self.best_us, "kernel": self.kernel, "family": self.family,
                  "families": list(self.families) if self.families is not None else None, "trials": self.trials,
                  "kernels_compiled": self.kernels_compiled, "wall_s": self.wall_s}
        return {key: value for key, value in values.items() if value is not None}


@dataclass(frozen=True)
class OneRunLayer:
    """One layer of the one run: best.yaml's kernel and the libraries timed right after it (µs; None where the
    run did not time it). `status` says why the tuned kernel has no figure, and `reason` what the run reported."""
    kernel: str | None = None
    family: str | None = None
    epilogue: str | None = None
    tuned_us: float | None = None
    status: str | None = None
    bare_kernel_us: float | None = None
    relu_kernel_us: float | None = None  # a SiLU or GELU layer's kernel with ReLU for its activation
    cudnn_us: float | None = None
    cublas_us: float | None = None
    eager_us: float | None = None
    compiled_us: float | None = None
    reason: str | None = None

    def us(self, figure: str) -> float | None:
        """A figure by its name in ONE_RUN_FIGURES."""
        return getattr(self, figure)

    def to_dict(self) -> dict:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@dataclass(frozen=True)
class BenchRecord:
    """The whole of bench.yaml. Maps are by layer name, in the file's order; a record is never changed in
    place (dataclasses.replace makes the next one)."""
    device: DeviceFacts | None = None
    ceilings: MeasuredCeilings | None = None
    cudnn: dict[str, float] = field(default_factory=dict)
    cublas: dict[str, float] = field(default_factory=dict)
    product_search: dict[str, GpuTunerRun] = field(default_factory=dict)
    one_run: dict[str, OneRunLayer] = field(default_factory=dict)
    cudnn_version: int | None = None
    eager: dict[str, float] = field(default_factory=dict)
    compiled: dict[str, float] = field(default_factory=dict)

    def to_document(self) -> dict:
        """The file's mapping, in the order its keys have always been written."""
        document: dict = {}
        if self.device is not None:
            document["device"] = self.device.to_dict()
        if self.ceilings is not None:
            document["ceilings"] = self.ceilings.to_dict()
        document |= {"cudnn": dict(self.cudnn), "cublas": dict(self.cublas),
                     "product_search": {name: run.to_dict() for name, run in self.product_search.items()},
                     "one_run": {name: row.to_dict() for name, row in self.one_run.items()}}
        if self.cudnn_version is not None:
            document["cudnn_version"] = self.cudnn_version
        document |= {key: dict(times) for key in ("eager", "compiled") if (times := getattr(self, key))}
        return document


def read_bench(folder: Path) -> BenchRecord:
    """bench.yaml as a record (an empty one where there is none), every part checked: a file that is not
    YAML, or holds what the tool never writes, is refused in one line."""
    path = folder / BENCH_FILE
    if not path.is_file():
        return BenchRecord()
    document = read_results_yaml(path, MAX_BENCH_BYTES) or {}
    try:
        return _parse(document)
    except _Refused as refused:
        raise ResultsError(f"{path}{refused}; restore it from version control") from None


def write_bench(folder: Path, record: BenchRecord) -> Path:
    """Write the record as results/<gpu>/bench.yaml, atomically."""
    atomic_write(folder / BENCH_FILE, dump_yaml(record.to_document()))
    return folder / BENCH_FILE


class _Refused(ValueError):
    """What in the document is wrong, as ': where: what' after the file's path."""


def _mapping(value: object, where: str | None) -> dict:
    """A mapping, or {} for None; `where` None: the whole file."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Refused(f": {where} is not a mapping" if where else " is not a mapping")
    return value


def _us(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise _Refused(f": {where}: {brief(value)} is not a positive number of µs")
    return value


def _text(value: object, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Refused(f": {where}: {brief(value)} is not text")
    return value


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Refused(f": {where}: {brief(value)} is not a count")
    return value


def _times(value: object, where: str) -> dict[str, float]:
    return {str(name): _us(us, f"{where} {name}") for name, us in _mapping(value, where).items()}


def _known(values: dict, keys, where: str) -> None:
    unknown = [str(key) for key in values if key not in keys]
    if unknown:
        raise _Refused(f": {where} holds {', '.join(unknown)}, which bench never writes")


def _parse(document: object) -> BenchRecord:
    document = _mapping(document, None)
    version = document.get("version", BENCH_VERSION)
    if version != BENCH_VERSION:
        raise _Refused(f" is bench.yaml version {brief(version)}; this tuner reads version {BENCH_VERSION}: "
                       "update the tuner")
    _known(document, {field.name for field in dataclasses.fields(BenchRecord)} | {"version"}, "the file")
    device = None
    if document.get("device") is not None:
        try:
            device = device_from_dict(_mapping(document["device"], "device"))
        except TypeError as error:
            raise _Refused(f": device: {error}") from None
    ceilings = None
    if document.get("ceilings") is not None:
        values = _mapping(document["ceilings"], "ceilings")
        _known(values, {"matmul_tflops", "copy_gbps", "torch_version"}, "ceilings")
        ceilings = MeasuredCeilings(_rate(values.get("matmul_tflops"), "ceilings matmul_tflops"),
                                    _rate(values.get("copy_gbps"), "ceilings copy_gbps"),
                                    _text(values.get("torch_version"), "ceilings torch_version"))
    cudnn_version = document.get("cudnn_version")
    if cudnn_version is not None:
        _count(cudnn_version, "cudnn_version")
    return BenchRecord(
        device, ceilings, product_search={str(name): _tuner_run(run, f"product_search {name}") for name, run
                                          in _mapping(document.get("product_search"), "product_search").items()},
        one_run={str(name): _one_run_layer(row, f"one_run {name}")
                 for name, row in _mapping(document.get("one_run"), "one_run").items()},
        cudnn_version=cudnn_version, **{key: _times(document.get(key), key) for key in LAYER_TIMES})


def _rate(value: object, where: str) -> float:
    if value is None:
        raise _Refused(f": {where} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise _Refused(f": {where}: {brief(value)} is not a positive number")
    return value


def _tuner_run(value: object, where: str) -> GpuTunerRun:
    values = _mapping(value, where)
    _known(values, {"best_us", "kernel", "family", "families", "trials", "kernels_compiled", "wall_s"}, where)
    missing = [key for key in ("best_us", "kernel", "trials", "kernels_compiled", "wall_s") if key not in values]
    if missing:
        raise _Refused(f": {where} lacks {', '.join(missing)}")
    families = values.get("families")
    if families is not None and (not isinstance(families, list) or not all(isinstance(f, str) for f in families)):
        raise _Refused(f": {where} families: {brief(families)} is not a list of family names")
    wall_s = values["wall_s"]
    if isinstance(wall_s, bool) or not isinstance(wall_s, (int, float)) or not 0 <= wall_s < math.inf:
        raise _Refused(f": {where} wall_s: {brief(wall_s)} is not a number of seconds")
    return GpuTunerRun(_us(values["best_us"], f"{where} best_us"), _text(values["kernel"], f"{where} kernel"),
                       _count(values["trials"], f"{where} trials"),
                       _count(values["kernels_compiled"], f"{where} kernels_compiled"), wall_s,
                       _text(values.get("family"), f"{where} family"),
                       tuple(families) if families is not None else None)


def _one_run_layer(value: object, where: str) -> OneRunLayer:
    values = _mapping(value, where)
    _known(values, {field.name for field in dataclasses.fields(OneRunLayer)}, where)
    return OneRunLayer(**{key: _text(values.get(key), f"{where} {key}")
                          for key in ("kernel", "family", "epilogue", "status", "reason")},
                       **{key: _us(values.get(key), f"{where} {key}") for key in ONE_RUN_FIGURES})
