"""A layer's tuning: what it re-measures after the search, and what it tells its sink (no GPU needed)."""
from __future__ import annotations

import contextlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

from conftest import params
from fakefamily import NAME, FakeEvaluator, registered, write_space
from tuner.store.schema import BestEntry
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.search.space import JointSpace
from tuner.core.status import Status
from tuner.measure.run import KernelAttributes
from tuner.search.trials import TrialRecord
from tuner.pipeline.tuning import finalist_configs

ATTRIBUTES = KernelAttributes(registers_per_thread=96, static_smem_bytes=0, dynamic_smem_bytes=49152,
                              local_bytes_per_thread=0, threads_per_block=128, max_active_blocks_per_sm=2)


def record(number: int, config, us: float) -> TrialRecord:
    return TrialRecord(number, config, Status.ok, us, {})


def previous_entry(problem, knobs: dict) -> BestEntry:
    return BestEntry(problem, "sm80", tuple(sorted(knobs.items())), "previous kernel", 5.0)


def test_previous_best_is_re_measured_beside_the_study_finalists(conv_1, h100):
    best = [record(0, make_config(conv_1, params("32x32x32", "2x1x1", stages=4)), 4.0),
            record(1, make_config(conv_1, params("64x32x32", "2x1x1", stages=4)), 4.5)]
    reference = make_config(conv_1, REFERENCE_PARAMS)
    previous = params("32x32x64", "2x1x1", stages=5, swizzle=2)
    finalists = finalist_configs(best, 2, reference, previous_entry(conv_1, previous), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "#2", "reference", "previous"]
    assert finalists[-1][1].config == make_config(conv_1, previous)


def test_previous_best_already_a_finalist_is_not_added_twice(conv_1, h100):
    first = make_config(conv_1, params("32x32x32", "2x1x1", stages=4))
    finalists = finalist_configs([record(0, first, 4.0)], 2, make_config(conv_1, REFERENCE_PARAMS),
                                 previous_entry(conv_1, first.search_params), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "reference"]


def test_previous_entry_from_an_unknown_space_is_skipped(conv_1, h100):
    first = make_config(conv_1, params("32x32x32", "2x1x1", stages=4))
    finalists = finalist_configs([record(0, first, 4.0)], 1, make_config(conv_1, REFERENCE_PARAMS),
                                 previous_entry(conv_1, {"tile": "128x128x64", "warps": "2x2x1", "stages": 3,
                                                         "swizzle": 1, "iterator": "no_such_iterator",
                                                         "split_k": 1}), conv_1, h100)
    assert [label for label, _ in finalists] == ["#1", "reference"]


def test_the_best_of_each_family_joins_the_finalists(conv_1, sm80_space, h100):
    best = [record(0, make_config(conv_1, params("32x32x32", "2x1x1", stages=4)), 4.0),
            record(1, make_config(conv_1, params("64x32x32", "2x1x1", stages=4)), 4.5)]
    finalists = finalist_configs(best, 1, None, None, conv_1, h100, JointSpace((sm80_space,)))
    assert [label for label, _ in finalists] == ["#1"]  # the fastest sm80 is #1 already








def test_an_imported_layer_whose_problem_is_tuned_under_another_name_is_skipped(tmp_path, conv_1):
    import yaml

    from tuner.core.problem import problem_to_dict
    from tuner.core.layers import Layer
    from tuner.pipeline.events import LayerTunedAs
    from tuner.pipeline.tuning import TuningOptions, TuningSession

    entry = {"problem": problem_to_dict(conv_1), "family": "sm80", "params": dict(REFERENCE_PARAMS),
             "kernel": "k", "runtime_us": 3.9}
    (tmp_path / "best.yaml").write_text(yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": entry}}))
    options = TuningOptions(trials=4, top=1, confirm_rounds=1, ncu_top=0, no_ncu=True, seed=0, storage=None,
                            results_dir=tmp_path, cache_dir=None, jobs=1, timeout_s=10, run_id="net",
                            skip_tuned_problems=True)
    session = object.__new__(TuningSession)  # no GPU worker: the skip happens before anything is tuned
    events = []
    session.folder, session.options, session.sink = tmp_path, options, SimpleNamespace(emit=events.append)
    outcome = session.tune_layer(Layer("net_b1_conv", conv_1))
    assert outcome.skipped and outcome.runtime_us == 3.9
    assert events == [LayerTunedAs("net_b1_conv", "conv_1")]


class RecordingSink:
    def __init__(self):
        self.events = []

    def emit(self, event) -> None:
        self.events.append(event)


class FakeGpuEvaluator(FakeEvaluator):
    """The fake family's evaluator with the launch facts a GPU worker reports (the finalists' waste needs them)."""

    def evaluate(self, binary, problem, launch, seed=None):
        evaluation = super().evaluate(binary, problem, launch, seed)
        return replace(evaluation, attributes=ATTRIBUTES) if evaluation.measurement else evaluation

    def close(self) -> None:
        pass


@pytest.fixture
def no_toolchain(tmp_path, monkeypatch):
    """A PATH with an nvcc that only tells its version (best.yaml's header records it) and no ncu."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    (folder / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))


@contextlib.contextmanager
def fake_session(tmp_path, h100, sink):
    """A tuning session of the fake family (registered by the caller) on a formula for a GPU, and its space."""
    from tuner.build.compile import Compiler
    from tuner.pipeline.tuning import TuningOptions, TuningSession
    from tuner.search.space import load_space

    options = TuningOptions(trials=12, top=2, confirm_rounds=2, ncu_top=1, no_ncu=False, seed=0, storage=None,
                            results_dir=tmp_path / "results", cache_dir=tmp_path / "cache", jobs=2, timeout_s=10,
                            run_id="events", skip_tuned_problems=True)
    space = load_space(write_space(tmp_path / "fake.yaml"))
    session = TuningSession(options, (space,), sink, h100, Compiler(h100, tmp_path / "cache", jobs=2),
                            FakeGpuEvaluator())
    try:
        yield session, space
    finally:
        session.close()


def test_a_layer_is_tuned_without_a_console_and_tells_its_sink_each_step_in_order(tmp_path, layers, h100, capsys,
                                                                                   no_toolchain):
    """The generic pipeline on the fake family (built by Python, timed by a formula): everything the run has to say
    reaches the sink as events, in the order it happens, and nothing is printed."""
    from tuner.analysis.report import blocks_of
    from tuner.pipeline.events import (BestWritten, CandidatesAsked, DeviceFound, FamilySpace, FinalistsConfirmed,
                                       KernelCompiled, LayerFinishedEarlier, LayerStarted, LayerTimed, LayerTunedAs,
                                       ProfilerMissing, StudyEnded, StudyStarted, TrialEvaluated, TrialsFailed,
                                       WasteFound, WinnerChosen)
    from tuner.core.layers import Layer
    from tuner.search.space import valid_configs
    from tuner.store.best import best_entries

    layer = layers["conv_1"]
    sink = RecordingSink()
    with registered(), fake_session(tmp_path, h100, sink) as (session, space):
        outcome = session.tune_layer(layer)
        assert session.tune_layer(layer).skipped and session.tune_layer(Layer("net_conv", layer.problem)).skipped
        valid = valid_configs(space, layer.problem, h100)
    assert capsys.readouterr() == ("", "")

    progress = (CandidatesAsked, KernelCompiled, TrialEvaluated)
    steps = [type(e) for e in sink.events if not isinstance(e, progress)]
    assert steps == [DeviceFound, LayerStarted, StudyStarted, StudyEnded, TrialsFailed, FinalistsConfirmed,
                     WinnerChosen, ProfilerMissing, WasteFound, LayerTimed, BestWritten, LayerFinishedEarlier,
                     LayerTunedAs]
    events = {type(e): e for e in sink.events}
    assert events[DeviceFound].device == h100
    assert events[LayerStarted] == LayerStarted("conv_1", layer.problem, (
        FamilySpace(NAME, space.size, len(valid), len({c.compiled for c in valid})),))

    study = sink.events[sink.events.index(events[StudyStarted]):sink.events.index(events[StudyEnded]) + 1]
    assert all(isinstance(e, progress) for e in study[1:-1])
    assert events[StudyStarted].trials == 12 and events[StudyEnded].study == events[StudyStarted].study
    evaluated = [e.record for e in study if isinstance(e, TrialEvaluated)]
    measured = [r for r in evaluated if r.status is not Status.invalid and "from_record" not in r.attrs]
    assert len(measured) == outcome.measured == 12
    assert sum(e.count for e in study if isinstance(e, CandidatesAsked)) == \
        sum(isinstance(e, KernelCompiled) for e in study)
    outcomes = events[StudyEnded].outcomes
    assert [name for name, _ in outcomes] == sorted(name for name, _ in outcomes)
    assert sum(count for _, count in outcomes) == len(evaluated)

    failed = events[TrialsFailed].records
    assert failed and all(r.status is Status.compile_failed and r.config.stages == 5 for r in failed)
    assert len({r.reason for r in failed}) == len(failed)  # the first of each reason

    rows = events[FinalistsConfirmed].rows
    winner = events[WinnerChosen]
    assert [r.label for r in rows][:2] == ["#1", "#2"] and winner.reference.label == "reference"
    assert winner.winner == min(rows, key=lambda r: r.measurement.median_us) and winner.sm_count == h100.sm_count
    assert winner.wider is None or blocks_of(winner.wider) > winner.winner.grid_blocks
    assert "ncu not found" in events[ProfilerMissing].reason
    assert [w.finalist for w in events[WasteFound].rows] == list(rows)
    assert all(w.profile is None and w.flags for w in events[WasteFound].rows)

    timed = events[LayerTimed]
    assert timed.layer == "conv_1" and timed.total_s >= timed.setup_s + timed.study_s
    written = events[BestWritten]
    assert written.path == tmp_path / "results" / h100.slug / "best.yaml"
    assert best_entries(written.path.parent)["conv_1"].kernel == outcome.kernel == winner.winner.config.name
    assert events[LayerFinishedEarlier] == LayerFinishedEarlier("conv_1", "events")
    assert events[LayerTunedAs] == LayerTunedAs("net_conv", "conv_1")


def test_a_layer_s_study_is_seeded_with_what_another_gpu_of_its_capability_keeps(tmp_path, layers, h100,
                                                                                  no_toolchain, monkeypatch):
    """The session hands seed_study the kernel a sibling GPU's best.yaml (results/<other gpu>/, same compute
    capability) keeps for the layer's problem."""
    import yaml

    from tuner.core.problem import problem_to_dict
    from tuner.pipeline import tuning
    from tuner.search.space import valid_configs

    layer = layers["conv_1"]
    seeded = []
    real_seed_study = tuning.seed_study
    monkeypatch.setattr(tuning, "seed_study", lambda *args, **kwargs: (seeded.append(args[-1]),
                                                                       real_seed_study(*args, **kwargs)))
    with registered(), fake_session(tmp_path, h100, RecordingSink()) as (session, space):
        kept = valid_configs(space, layer.problem, h100)[-1]
        sibling = tmp_path / "results" / "nvidia-h200"
        sibling.mkdir(parents=True)
        (sibling / "best.yaml").write_text(yaml.safe_dump({
            "device": {"name": "NVIDIA H200", "compute_capability": f"{h100.cc_major}.{h100.cc_minor}"},
            "layer_count": 1, "layers": {"other_name": {"problem": problem_to_dict(layer.problem), "family": NAME,
                                                        "params": kept.search_params, "kernel": kept.name,
                                                        "runtime_us": 5.0}}}))
        session.tune_layer(layer)
    assert seeded == [[kept]]


def test_a_layer_s_path_calls_back_into_a_higher_stage_at_most_5_times(tmp_path, layers, h100, no_toolchain):
    """Control flows down the stages: a call from a module into one of a later stage (the search calling the
    pipeline's progress callbacks, say) is a return to a higher module. Counted as distinct call sites while a
    layer is tuned on the fake family; each is a place where a lower stage depends on how it is driven."""
    import sys

    from test_layering import STAGES, stage_of

    upward: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        caller = frame.f_back
        if event != "call" or caller is None:
            return
        into, out_of = stage_of(frame.f_globals.get("__name__", "")), stage_of(caller.f_globals.get("__name__", ""))
        if into and out_of and STAGES.index(into) > STAGES.index(out_of):
            upward.add((f"{caller.f_globals['__name__']}.{caller.f_code.co_name}",
                        f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"))

    with registered(), fake_session(tmp_path, h100, RecordingSink()) as (session, _):
        sys.setprofile(profile)
        try:
            session.tune_layer(layers["conv_1"])
        finally:
            sys.setprofile(None)
    assert upward and len(upward) <= 5, sorted(upward)


def test_the_tuning_pipeline_prints_through_nothing_but_its_sink():
    """Neither the tuning pipeline nor what it reports imports rich: drawing its events is tune.py's."""
    import ast
    from pathlib import Path

    tuner = Path(__file__).resolve().parents[1] / "tuner"
    for module in ("pipeline/tuning.py", "pipeline/events.py", "pipeline/nightly.py", "analysis/report.py",
                   "search/seeds.py"):
        tree = ast.parse((tuner / module).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not {name for name in imported if name.split(".")[0] == "rich"}, module
        assert "print(" not in (tuner / module).read_text(), module


def test_after_a_tune_the_kept_kernels_are_built_as_the_pytorch_path_launches_them(tmp_path, layers, h100,
                                                                                     no_toolchain, monkeypatch):
    """Family.chained's build (sm90_dsl's for programmatic dependent launch, which optimize launches by default) of
    each kept kernel goes into the compile cache at the end of a run; one that fails is told with its reason."""
    from tuner.families import registry
    from tuner.pipeline.events import ChainedBuilt
    from tuner.search.space import entry_config
    from tuner.store.best import best_entries

    sink = RecordingSink()
    real_family_of = registry.family_of
    chain_to = {"stages": 6}

    def with_chained(config):
        return replace(real_family_of(config), chained=lambda c: replace(c, stages=chain_to["stages"]))

    with registered(), fake_session(tmp_path, h100, sink) as (session, _):
        session.tune_layer(layers["conv_1"])
        monkeypatch.setattr(registry, "family_of", with_chained)
        session.build_chained(["conv_1", "no_such_layer"])
        kept = best_entries(tmp_path / "results" / h100.slug)["conv_1"]
        chained = replace(entry_config(kept, "conv_1", kept.problem), stages=6)
        assert session.compiler.compile_many([chained])[0].cached
        chain_to["stages"] = 5  # the fake builder refuses 5 stages
        session.build_chained(["conv_1"])
    built = [e for e in sink.events if isinstance(e, ChainedBuilt)]
    assert [(e.built, len(e.failed)) for e in built] == [(1, 0), (0, 1)]
    assert built[1].failed[0].startswith(replace(chained, stages=5).name + ": ") and "refuses" in built[1].failed[0]


def test_a_family_without_a_chained_build_adds_nothing_to_the_run(tmp_path, layers, h100, no_toolchain):
    from tuner.pipeline.events import ChainedBuilt

    sink = RecordingSink()
    with registered(), fake_session(tmp_path, h100, sink) as (session, _):
        session.tune_layer(layers["conv_1"])
        session.build_chained(["conv_1"])
    assert not any(isinstance(e, ChainedBuilt) for e in sink.events)
