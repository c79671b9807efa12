"""`tune.py plots`: pictures of what the studies found, from the storage and best.yaml alone (no GPU).
Per layer: Optuna's optimisation history and parameter importances; per GPU: µs and the share of
the modelled floor of every layer. Needs matplotlib (pip install -e '.[plots]')."""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import optuna
from rich.markup import escape

from tuner.costmodel import measured_ceilings
from tuner.families import registry
from tuner.results import (JOURNAL_FILE, BestEntry, ResultsError, best_entries, check_storage_url, gpu_slugs,
                           layer_file_stem, read_best, readable_journal, recorded_gpu_dir, results_slug)

REPO = Path(__file__).resolve().parents[1]
MIN_TRIALS_FOR_IMPORTANCE = 10


def family_colour(family: str) -> str:
    return registry.get(family).plot_colour if family in registry.names() else "tab:gray"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ResultsError("matplotlib is not installed: pip install -e '.[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _retitle(axes, title: str) -> None:
    """Optuna's plots carry a centred title of their own: replace it rather than draw over it."""
    for location in ("center", "left", "right"):
        axes.set_title("", loc=location)
    axes.set_title(title)




def family_study(study: optuna.Study, family: str) -> optuna.Study:
    """The completed trials of one family, its knobs under their own names, in a study of their own:
    the knobs of other families are absent from these trials, so importances over the whole study only
    ever see the family parameter."""
    from optuna.distributions import CategoricalDistribution

    prefix = family + "."
    sub = optuna.create_study(direction="minimize")
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if trial.params.get("family") != family:
            continue
        params = {name[len(prefix):]: value for name, value in trial.params.items() if name.startswith(prefix)}
        distributions = {name[len(prefix):]: CategoricalDistribution(trial.distributions[name].choices)
                         for name in trial.params if name.startswith(prefix)}
        sub.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=trial.value))
    return sub


def layer_plots(study: optuna.Study, layer: str, folder: Path, family: str | None = None) -> list[Path]:
    """The optimisation history of the layer's study; the knob importances within `family` (the
    winner's), where it has enough measured trials."""
    plt = _pyplot()
    from optuna.visualization import matplotlib as optuna_plots

    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna marks its matplotlib backend experimental
        axes = optuna_plots.plot_optimization_history(study)
        _retitle(axes, f"{layer}: optimisation history (µs, lower is better)")
        stem = layer_file_stem(layer)
        written.append(save_figure(plt, axes.figure, folder / f"{stem}_history.png"))
        ranked = family_study(study, family) if family else study
        complete = [t for t in ranked.trials if t.state is optuna.trial.TrialState.COMPLETE]
        if len(complete) >= MIN_TRIALS_FOR_IMPORTANCE:
            # PED-ANOVA needs no scikit-learn, unlike Optuna's default fANOVA.
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            axes = optuna_plots.plot_param_importances(ranked, evaluator=evaluator)
            within = f" within {family}, {len(complete)} trials" if family else ""
            _retitle(axes, f"{layer}: parameter importances (PED-ANOVA{within})")
            written.append(save_figure(plt, axes.figure, folder / f"{stem}_importances.png"))
    return written


def save_figure(plt, figure, path: Path, size: tuple[float, float] | None = (9, 5), dpi: int = 90) -> Path:
    """Write the figure (at `size` inches; None keeps its own) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if size is not None:
        figure.set_size_inches(*size)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path


def summary_plot(best: dict[str, BestEntry], ceilings, path: Path, gpu_name: str) -> Path:
    """µs per layer and the share of the modelled floor (the longer of the matmul and the copy at the measured
    ceilings) it reaches."""
    plt = _pyplot()
    names = sorted(best)
    entries = [best[n] for n in names]
    runtime = [e.runtime_us for e in entries]
    shares = []
    for entry in entries:
        problem = entry.problem
        floor_us = max(problem.flops / (ceilings.matmul_tflops * 1e12),
                       problem.bytes_moved / (ceilings.copy_gbps * 1e9)) * 1e6
        shares.append(100 * floor_us / entry.runtime_us)
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(14, 8))
    families = [entry.family for entry in entries]
    colours = [family_colour(family) for family in families]
    top.bar(range(len(names)), runtime, color=colours)
    from matplotlib.patches import Patch

    top.legend(handles=[Patch(color=family_colour(family), label=family)
                        for family in sorted(set(families))], title="kernel family")
    top.set_ylabel("µs (tuned)")
    top.set_yscale("log")
    top.set_title(f"{gpu_name}: tuned conv2d fprop per layer")
    # Neutral grey: no family's colour. Above 100 %: the floor counts every operand byte once from DRAM at the
    # measured copy rate, while the kernel reads a filter or input reused from the 50 MB L2 faster than that.
    bottom.bar(range(len(names)), shares, color="tab:gray")
    bottom.axhline(100, color="black", linestyle="--", linewidth=0.8)
    bottom.set_ylabel("% of the modelled floor")
    bottom.set_title(f"modelled floor: the longer of the f16 matmul at {ceilings.matmul_tflops:.0f} TFLOP/s and every "
                     f"operand byte copied once at {ceilings.copy_gbps:.0f} GB/s (both measured here); above the "
                     "dashed 100 % line a kernel beat that model (operands served from L2)", fontsize=8)
    bottom.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    return save_figure(plt, figure, path, size=None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune.py plots", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", help="GPU slug under results/, or a GPU's name from tuner/gpus.py (h100); "
                                      "default: the only one with a best.yaml")
    parser.add_argument("--layers", help="comma-separated layers to draw (default: every layer in best.yaml)")
    parser.add_argument("--storage", help="Optuna storage URL (default: the journal in results/<gpu>/)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results")
    return parser


def main(argv: list[str], console) -> int:
    args = build_parser().parse_args(argv)
    slugs = [results_slug(args.results_dir, args.gpu)] if args.gpu else gpu_slugs(args.results_dir)
    if not slugs:
        raise ResultsError(f"no results/<gpu>/best.yaml under {args.results_dir}: tune a layer first")
    if len(slugs) > 1 and (args.layers or args.storage):
        raise ResultsError(f"--layers and --storage name one GPU's layers: say which with --gpu (found {slugs})")
    for slug in slugs:  # without --gpu, every GPU with results
        draw_gpu(recorded_gpu_dir(args.results_dir, slug), args, console)
    return 0


def draw_gpu(folder: Path, args: argparse.Namespace, console) -> None:
    """One GPU's per-layer plots (where its studies are in the storage) and its summary."""
    best = best_entries(folder)
    wanted = args.layers.split(",") if args.layers else sorted(best)
    for layer in wanted:
        if layer not in best:
            raise ResultsError(f"layer {layer!r} is not in {folder / 'best.yaml'}")
    if args.storage is None and not (folder / JOURNAL_FILE).is_file():  # reading must not create one
        console.print(f"[yellow]no {folder / JOURNAL_FILE}: the summary only, no per-layer plots[/]")
        wanted = []
    elif args.storage:
        check_storage_url(args.storage)
        storage = args.storage
    else:
        storage, damaged = readable_journal(folder / JOURNAL_FILE)
        if damaged:
            console.print(f"[yellow]{folder / JOURNAL_FILE} line {damaged} is not a journal record: the "
                          f"{damaged - 1} lines before it are drawn, the rest is left out[/]")
    for layer in wanted:
        entry = best[layer]
        try:
            study = optuna.load_study(study_name=str(entry.study_name), storage=storage)
        except KeyError:
            console.print(f"[yellow]{escape(layer)}: its study is not in the storage; no per-layer plots[/]")
            continue
        except Exception as error:  # noqa: BLE001 - an RDB that cannot be reached: SQLAlchemy's errors are many
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ResultsError(f"--storage cannot be read: {first[:200]}") from None
        for path in layer_plots(study, layer, folder / "plots", entry.family):
            console.print(f"wrote {escape(str(path))}")
    gpu_name = (read_best(folder).get("device") or {}).get("name", "unknown GPU")
    summary = summary_plot(best, measured_ceilings(folder), folder / "plots" / "summary.png", gpu_name)
    console.print(f"wrote {escape(str(summary))}")
