"""Pictures of what the studies found, from the storage and best.yaml alone (no GPU; `tune.py plots`,
tuner/cli/plots.py). Per layer: Optuna's optimisation history and parameter importances; per GPU: µs and the
share of the modelled floor of every layer, and a journal for optuna-dashboard with one study per layer. All of
it goes to results/<gpu>/plots/, which git ignores. Needs matplotlib (pip install -e '.[plots]')."""
from __future__ import annotations

import datetime as dt
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.search.costmodel import measured_ceilings
from tuner.families import registry
from tuner.store.journal import check_storage_url, journal_backend, readable_journal
from tuner.store.best import best_entries, read_best
from tuner.store.results import JOURNAL_FILE, ResultsError, layer_file_stem
from tuner.store.schema import BestEntry
from tuner.search.trials import METRIC_NAME, label_values, params_key, problem_of_study

MIN_TRIALS_FOR_IMPORTANCE = 10
ROUGH_BELOW_TRIALS = 30  # the fastest 10 % of fewer trials is two or three of them
TITLE_CHARS = 80  # a title line's characters at 11 pt on the 9-inch figure, with a margin
DASHBOARD_FILE = "dashboard.journal"


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


def _retitle(axes, subject: str, what: str) -> None:
    """Optuna's plots carry a centred title of their own: replace it rather than draw over it. The subject (a
    layer name, up to 120 characters) and what is drawn are wrapped to the figure's width, never cut."""
    for location in ("center", "left", "right"):
        axes.set_title("", loc=location)
    lines = textwrap.wrap(subject, TITLE_CHARS, break_on_hyphens=False) + textwrap.wrap(what, TITLE_CHARS)
    axes.set_title("\n".join(lines), fontsize=11, parse_math=False)  # a '$' in a name is no TeX


def _relabel_legend(axes, names: dict[str, str]) -> None:
    legend = axes.get_legend()
    if legend is None:
        return
    for text in legend.get_texts():
        text.set_text(names.get(text.get_text(), text.get_text()))


def family_study(study: optuna.Study, family: str) -> optuna.Study:
    """The completed trials of one family, its knobs under their own names, in a study of their own:
    the knobs of other families are absent from these trials, so importances over the whole study only
    ever see the family parameter."""
    from optuna.distributions import CategoricalDistribution

    prefix = family + "."
    sub = optuna.create_study(direction="minimize")
    label_values(sub)
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
    measured = [t for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna marks its matplotlib backend experimental
        axes = optuna_plots.plot_optimization_history(study, target_name=METRIC_NAME)
        _retitle(axes, layer, f"optimisation history: the {len(measured)} measured trials of {len(study.trials)} "
                              "(pruned ones: impossible, failed or wrong, are not drawn); lower is better")
        axes.set_ylabel(f"{METRIC_NAME} of the kernel (axis from 0)")
        axes.set_ylim(bottom=0)
        axes.set_xlabel("trial, in the order the study asked for it")
        _relabel_legend(axes, {METRIC_NAME: "a trial's median", "Best Value": "fastest so far"})
        stem = layer_file_stem(layer)
        written.append(save_figure(plt, axes.figure, folder / f"{stem}_history.png"))
        ranked = family_study(study, family) if family else study
        complete = [t for t in ranked.trials if t.state is optuna.trial.TrialState.COMPLETE]
        if len(complete) >= MIN_TRIALS_FOR_IMPORTANCE:
            # PED-ANOVA needs no scikit-learn, unlike Optuna's default fANOVA.
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            axes = optuna_plots.plot_param_importances(ranked, evaluator=evaluator, target_name=METRIC_NAME)
            within = f"within {family}'s {len(complete)} measured trials" if family else \
                f"over {len(complete)} measured trials"
            few = f"; under {ROUGH_BELOW_TRIALS} trials, a rough guide" if len(complete) < ROUGH_BELOW_TRIALS else ""
            _retitle(axes, layer, f"knob importances {within} (PED-ANOVA{few})")
            axes.set_xlabel("\n".join(textwrap.wrap(
                "share of the importance (sums to 1): how far each knob's values among the fastest 10 % of "
                "trials differ from its values over all", TITLE_CHARS + 20)), fontsize=9)
            axes.set_ylabel("knob")
            if axes.get_legend() is not None:
                axes.get_legend().remove()  # one series, named by the axis
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
    top.set_title(f"{gpu_name}: tuned conv2d fprop per layer", parse_math=False)
    # Neutral grey: no family's colour. Above 100 %: the floor counts every operand byte once from DRAM at the
    # measured copy rate, while the kernel reads a filter or input reused from the 50 MB L2 faster than that.
    bottom.bar(range(len(names)), shares, color="tab:gray")
    bottom.axhline(100, color="black", linestyle="--", linewidth=0.8)
    bottom.set_ylabel("% of the modelled floor")
    bottom.set_title(f"modelled floor: the longer of the f16 matmul at {ceilings.matmul_tflops:.0f} TFLOP/s and every "
                     f"operand byte copied once at {ceilings.copy_gbps:.0f} GB/s (both measured here); above the "
                     "dashed 100 % line a kernel beat that model (operands served from L2)", fontsize=8)
    bottom.set_xticks(range(len(names)), names, rotation=90, fontsize=7, parse_math=False)
    return save_figure(plt, figure, path, size=None)


def dashboard_journal(storage, path: Path, layers: set[str] | None = None) -> int:
    """A journal for optuna-dashboard at `path`, written anew: one study per layer (of `layers`, default every
    layer with a study), named after it, its values labelled METRIC_NAME. The tuner keeps a study per search
    space (families, space file), so one layer's trials are spread over several; here they are one, the newest
    measurement of each configuration (as carry_over takes them). Returns how many studies it holds."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import FrozenTrial, TrialState

    kept: dict[str, dict[tuple, FrozenTrial]] = {}
    sources: dict[str, list[str]] = {}
    oldest = dt.datetime.min
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        layer = name.split("/")[1] if problem_of_study(name) else name
        if layers is not None and layer not in layers:
            continue
        sources.setdefault(layer, []).append(name)
        trials = kept.setdefault(layer, {})
        for trial in optuna.load_study(study_name=name, storage=storage).get_trials(
                deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if "from_record" in trial.user_attrs:  # a repeat answered from the record: the original is here
                continue
            held = trials.get(key := params_key(trial.params))
            if held is None or (trial.datetime_complete or oldest) > (held.datetime_complete or oldest):
                trials[key] = trial
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    target = optuna.storages.JournalStorage(journal_backend(path))
    for layer, trials in sorted(kept.items()):
        ordered = sorted(trials.values(), key=lambda trial: trial.datetime_complete or oldest)
        choices: dict[str, list] = {}  # each knob's values over every study of the layer: one distribution
        for trial in ordered:
            for knob, value in trial.params.items():
                if value not in choices.setdefault(knob, []):
                    choices[knob].append(value)
        study = optuna.create_study(study_name=layer, storage=target, direction="minimize")
        label_values(study)
        study.set_user_attr("merged_from", sources[layer])
        for trial in ordered:
            study.add_trial(FrozenTrial(
                number=0, trial_id=0, state=trial.state, value=trial.value, datetime_start=trial.datetime_start,
                datetime_complete=trial.datetime_complete, params=trial.params,
                distributions={knob: CategoricalDistribution(choices[knob]) for knob in trial.params},
                user_attrs=trial.user_attrs, system_attrs={}, intermediate_values={}))
    return len(kept)


@dataclass(frozen=True)
class LeftOut:
    layer: str
    reason: str


@dataclass(frozen=True)
class Drawn:
    """What `plots` wrote for one GPU, as --json prints it."""

    gpu: str
    folder: str
    files: tuple[str, ...]           # every picture, the summary last
    dashboard: str | None            # the journal for optuna-dashboard, where the studies could be read
    left_out: tuple[LeftOut, ...]    # layers drawn without their per-layer plots, and why
    notes: tuple[str, ...]           # what was read only in part


# What draw_gpu says as it goes, for the command to print.
@dataclass(frozen=True)
class NoJournal:
    """The folder has no journal (and no storage was named): the summary only."""
    path: Path


@dataclass(frozen=True)
class JournalCut:
    """The journal was read up to a damaged line."""
    note: str


@dataclass(frozen=True)
class StudyMissing:
    """A layer's study is not in the storage: no per-layer plots."""
    layer: str


@dataclass(frozen=True)
class Written:
    """A file written; for the dashboard's journal, the studies it holds."""
    path: str
    studies: int | None = None


PlotsEvent = NoJournal | JournalCut | StudyMissing | Written


def draw_gpu(folder: Path, slug: str, layers: list[str] | None, storage_url: str | None,
             emit: Callable[[PlotsEvent], None]) -> Drawn:
    """One GPU's per-layer plots (of `layers`, default every layer of best.yaml) and dashboard journal, where its
    studies are in the storage (`storage_url`, default the folder's journal), and its summary."""
    best = best_entries(folder)
    wanted = layers or sorted(best)
    for layer in wanted:
        if layer not in best:
            raise ResultsError(f"layer {layer!r} is not in {folder / 'best.yaml'}")
    files, left_out, notes, dashboard = [], [], [], None
    if storage_url is None and not (folder / JOURNAL_FILE).is_file():  # reading must not create one
        emit(NoJournal(folder / JOURNAL_FILE))
        left_out = [LeftOut(layer, f"no {JOURNAL_FILE}") for layer in wanted]
        wanted = []
    elif storage_url:
        check_storage_url(storage_url)
        storage = storage_url
    else:
        storage, damaged = readable_journal(folder / JOURNAL_FILE)
        if damaged:
            notes.append(f"{folder / JOURNAL_FILE} line {damaged} is not a journal record: the {damaged - 1} lines "
                         "before it are drawn, the rest is left out")
            emit(JournalCut(notes[-1]))
    for layer in wanted:
        entry = best[layer]
        try:
            study = optuna.load_study(study_name=str(entry.study_name), storage=storage)
        except KeyError:
            emit(StudyMissing(layer))
            left_out.append(LeftOut(layer, "its study is not in the storage"))
            continue
        except Exception as error:  # noqa: BLE001 - an RDB that cannot be reached: SQLAlchemy's errors are many
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ResultsError(f"--storage cannot be read: {first[:200]}") from None
        for path in layer_plots(study, layer, folder / "plots", entry.family):
            emit(Written(str(path)))
            files.append(str(path))
    if wanted:
        path = folder / "plots" / DASHBOARD_FILE
        count = dashboard_journal(storage, path, set(wanted) if layers else None)
        dashboard = str(path)
        emit(Written(dashboard, count))
    gpu_name = (read_best(folder).get("device") or {}).get("name", "unknown GPU")
    summary = summary_plot(best, measured_ceilings(folder), folder / "plots" / "summary.png", gpu_name)
    emit(Written(str(summary)))
    return Drawn(slug, str(folder), (*files, str(summary)), dashboard, tuple(left_out), tuple(notes))
