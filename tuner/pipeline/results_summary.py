"""The results of each GPU in brief, from what results/<gpu>/ commits: bench.yaml's one run (`tune.py bench
--steps tuned`: best.yaml's kernel of each layer, then cuDNN, cuBLAS and PyTorch timed right after it) and
best.yaml. `tune.py bench --summary` (tuner/cli/results_doc.py) words them into docs/results.md and the
README's lines, so that no figure there is typed by hand."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.pipeline.bench_summary import ONE_RUN_BASELINES, RatioStats, ratio_stats
from tuner.store.bench_record import BENCH_FILE, BenchRecord, MeasuredCeilings, read_bench
from tuner.store.best import best_entries, read_best
from tuner.store.results import BEST_FILE, ResultsError, gpu_dir, gpu_slugs, recorded_gpu_dir
from tuner.store.schema import BestEntry


@dataclass(frozen=True)
class OneRunRow:
    """One layer of bench.yaml's one run; a time is None where that run did not take it."""
    layer: str
    family: str
    kernel: str
    batch: int | None  # N of the layer's problem in best.yaml
    epilogue: str | None
    times: tuple[tuple[str, float], ...]  # ("tuned_us" or a figure of ONE_RUN_BASELINES, µs)

    def us(self, key: str) -> float | None:
        return dict(self.times).get(key)

    def ratio(self, baseline: str) -> float | None:
        tuned, other = self.us("tuned_us"), self.us(baseline)
        return tuned / other if tuned and other else None

    @property
    def group(self) -> str:
        """The layers this one is summarised with: the name's first part ('r50f_*', 'vgg11_*'), as the layer
        table and the network importer name layers."""
        return self.layer.split("_", 1)[0] + "_*" if "_" in self.layer else self.layer


def ratio_summary(rows: list[OneRunRow], baseline: str) -> RatioStats | None:
    """tuned / `baseline` over the rows that have both, each layer at its batch in best.yaml."""
    return ratio_stats({row.layer: ratio for row in rows if (ratio := row.ratio(baseline))},
                       {row.layer: row.batch for row in rows})


def one_run_rows(bench: BenchRecord, entries: dict[str, BestEntry]) -> list[OneRunRow]:
    """bench.yaml's one run, with each layer's batch from best.yaml's entries where the layer is there."""
    rows = []
    for layer, row in bench.one_run.items():
        times = tuple((key, float(us)) for key in ("tuned_us", *(key for key, _, _ in ONE_RUN_BASELINES))
                      if (us := row.us(key)) is not None)
        entry = entries.get(layer)
        rows.append(OneRunRow(layer, row.family or "", row.kernel or "", entry.problem.n if entry else None,
                              row.epilogue or None, times))
    return rows


@dataclass(frozen=True)
class GpuResults:
    """What one GPU's results folder holds that the summary tells."""
    slug: str
    name: str
    nvcc: str | None      # best.yaml's toolchain
    cutlass: str | None
    cudnn_version: int | None
    ceilings: MeasuredCeilings | None
    entries: dict[str, BestEntry]
    rows: tuple[OneRunRow, ...]  # bench.yaml's one run (none without a bench.yaml)


def gpu_results(results_dir: Path, slug: str) -> GpuResults:
    folder = gpu_dir(results_dir, slug)
    best = read_best(folder)
    toolchain = best.get("toolchain") or {}
    bench, entries = read_bench(folder), best_entries(folder)
    return GpuResults(slug, str((best.get("device") or {}).get("name") or slug),
                      str(toolchain["nvcc"]) if toolchain.get("nvcc") else None,
                      str(toolchain["cutlass"]) if toolchain.get("cutlass") else None,
                      bench.cudnn_version, bench.ceilings, entries,
                      tuple(one_run_rows(bench, entries)) if (folder / BENCH_FILE).is_file() else ())


def summary_slugs(results_dir: Path, slugs: list[str] | None) -> list[str]:
    """The named GPUs, each of which must have a best.yaml, or every GPU that has one."""
    for slug in slugs or ():
        recorded_gpu_dir(results_dir, slug)
    found = slugs or gpu_slugs(results_dir)
    if not found:
        raise ResultsError(f"no results/<gpu>/{BEST_FILE} under {results_dir}: nothing to summarise")
    return found
