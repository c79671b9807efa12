"""A family added as a folder runs through the generic pipeline: the registry finds it, its space joins a
layer's study, the compile cache builds its kernels with its own builder, `tune.py bench`'s landscape records
them and a replayed study searches the record. The family is tests/fakefamily/fake/: no nvcc, no GPU."""
from __future__ import annotations

from collections import Counter

import optuna
import pytest

from fakefamily import FOLDER, NAME, FakeEvaluator, computes_garbage, fake_median_us, registered, write_space
from tuner.pipeline.landscape import exhaustive_best, measure_landscape, read_landscapes
from tuner.pipeline.replayed_search import search_results
from tuner.build.compile import Compiler
from tuner.search.costmodel import Ceilings
from tuner.families import registry
from tuner.search.space import layer_space, load_space, valid_configs
from tuner.core.status import Status
from tuner.search.study import StudyRunner, open_study
from tuner.search.trials import ranked, recorded_trials
from tuner.store.landscape import landscape_path

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def no_nvcc(tmp_path, monkeypatch):
    """A PATH without nvcc (or anything else): a build that needed it would fail."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_the_registry_finds_a_family_by_its_folder_alone():
    assert NAME not in registry.names()
    with registered() as family:
        assert NAME in registry.names() and registry.get(NAME) is family
        assert family.folder == FOLDER / NAME
    assert NAME not in registry.names()


def test_a_study_builds_and_evaluates_the_new_familys_kernels(tmp_path, conv_1, h100, no_nvcc):
    with registered() as family:
        space = load_space(write_space(tmp_path / "fake.yaml"))
        joint = layer_space((space,), conv_1, h100)
        compiler = Compiler(h100, cache_dir=tmp_path / "cache", jobs=2)
        study = open_study("fake-study", optuna.storages.InMemoryStorage(), seed=0)
        evaluator = FakeEvaluator()
        StudyRunner(study, conv_1, joint, h100, compiler, evaluator, run_id="fake").run(12)

        records = ranked(study, conv_1)
        assert records and all(r.config.family == NAME for r in records)
        assert [r.median_us for r in records] == sorted(fake_median_us(r.config, conv_1) for r in records)
        outcomes = {record.config: record.status for record in recorded_trials(study, conv_1).values()}
        for config, status in outcomes.items():
            expected = (Status.invalid if family.static_problems(config, conv_1, h100) else
                        Status.compile_failed if config.stages == family.failing_stages else
                        Status.wrong_result if computes_garbage(config) else Status.ok)
            assert status is expected, config.name
        assert {c.name for c in evaluator.evaluated} == {c.name for c, s in outcomes.items()
                                                          if s in (Status.ok, Status.wrong_result)}
        # what was built is cached: the same kernels again are answered without a build
        again = compiler.compile_many([r.config for r in records])
        assert all(result.cached and result.ok for result in again)


def test_a_replayed_study_searches_the_new_familys_recorded_landscape(tmp_path, layers, h100, no_nvcc):
    layer = layers["conv_1"]
    with registered() as family:
        space = load_space(write_space(tmp_path / "fake.yaml"))
        joint = layer_space((space,), layer.problem, h100)
        valid = valid_configs(space, layer.problem, h100)
        assert 0 < len(valid) < 32  # 256x128x64 at 5 stages does not fit

        # what `tune.py bench --steps landscape` records on a GPU: every valid candidate, timed
        compiler = Compiler(h100, cache_dir=tmp_path / "cache", jobs=2)
        measure_landscape([layer], space, h100, compiler, FakeEvaluator(), tmp_path, lambda event: None)
        assert landscape_path(tmp_path, NAME, layer.name).is_file()
        record = read_landscapes(tmp_path, layer, (NAME,))[NAME]
        assert sorted(record) == sorted(c.name for c in valid)
        outcomes = Counter(r.status for r in record.values())
        assert outcomes[Status.compile_failed] == sum(c.stages == family.failing_stages for c in valid)
        assert outcomes[Status.wrong_result] == sum(computes_garbage(c) for c in valid)
        ok = [c for c in valid if record[c.name].status is Status.ok]
        assert exhaustive_best(record) == min(fake_median_us(c, layer.problem) for c in ok)

        # what `tune.py bench --replay-only` does with it, without and with the cost model's picks
        results = search_results(layer, joint, h100, record, Ceilings(), budgets=(6, len(valid)), seeds=(0, 1))
        assert [(r.budget, r.with_prior) for r in results] == [(6, False), (len(valid), False), (6, True),
                                                               (len(valid), True)]
        for result in results:
            assert all(1.0 <= ratio < 3.0 for ratio in result.ratios), result
            assert all(0 < kernels <= len({c.compiled for c in valid}) for kernels in result.kernels)
        exhaustive = [result for result in results if result.budget == len(valid)]
        assert all(ratio == 1.0 for result in exhaustive for ratio in result.ratios)
