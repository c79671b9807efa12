"""What a layer's study queues before the search: the reference, the landscapes' and the bare twin's fastest,
the cost model's picks (no GPU needed)."""
from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from tuner.search.costmodel import PRIOR_PICKS, Ceilings, prior_picks
from tuner.families.sm80.space import REFERENCE_PARAMS, make_config
from tuner.search.space import JointSpace, joint_params
from tuner.search.study import open_study
from tuner.search.seeds import landscape_seeds, seed_study, twin_seeds


@pytest.mark.slow
def test_seed_study_queues_reference_and_prior_once(conv_1, sm80_space, h100):
    study = open_study("seed", optuna.storages.InMemoryStorage(), seed=0)
    joint = JointSpace((sm80_space,))
    seed_study(study, conv_1, joint, h100, PRIOR_PICKS, Ceilings())
    seed_study(study, conv_1, joint, h100, PRIOR_PICKS, Ceilings())  # a later run adds nothing twice
    queued = [t.system_attrs["fixed_params"] for t in study.trials]
    picks = [joint_params(c) for c in prior_picks(sm80_space, conv_1, h100, PRIOR_PICKS, Ceilings())]
    reference = joint_params(make_config(conv_1, REFERENCE_PARAMS))
    assert queued[0] == reference
    assert queued[1:] == [p for p in picks if p != reference]


def test_landscape_seeds_are_the_fastest_recorded_of_each_family(layers, h100):
    from pathlib import Path

    from tuner.search.space import default_space_file, layer_space, load_space

    folder = Path(__file__).resolve().parents[1] / "results" / "nvidia-h100-80gb-hbm3"
    spaces = tuple(load_space(default_space_file(f)) for f in ("sm80", "sm90_conv", "sm90_gemm"))
    layer = layers["r50_s4_1x1_512to256_b32"]
    joint = layer_space(spaces, layer.problem, h100)
    seeds = landscape_seeds(folder, layer.name, layer.problem, joint, h100, per_family=2)
    assert sorted(c.family for c in seeds) == ["sm80", "sm80", "sm90_conv", "sm90_conv", "sm90_gemm", "sm90_gemm"]
    assert all(joint.contains(c) for c in seeds)
    assert landscape_seeds(None, layer.name, layer.problem, joint, h100) == []
    assert landscape_seeds(folder, "no_such_layer", layer.problem, joint, h100) == []


def test_a_seed_an_interrupted_run_asked_but_never_measured_is_queued_again(conv_1, sm80_space, h100):
    from optuna.trial import TrialState

    study = open_study("seed-again", optuna.storages.InMemoryStorage(), seed=0)
    joint = JointSpace((sm80_space,))
    seed_study(study, conv_1, joint, h100, 2, Ceilings())
    queued = [t.system_attrs["fixed_params"] for t in study.trials]
    first = study.ask()  # a run takes the first seed, then is interrupted: its trial FAILs
    study.tell(first, state=TrialState.FAIL)
    seed_study(study, conv_1, joint, h100, 2, Ceilings())
    waiting = [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))]
    assert sorted(map(str, waiting)) == sorted(map(str, queued))  # every seed queued once, the failed one again


def recorded_twin(folder, storage, problem, ranked: list[tuple[str, str, float]]) -> None:
    """A best.yaml entry in `folder` for `problem`, whose sm90_conv study in `storage` measured the
    (tile, epilogue, µs) of `ranked`."""
    import yaml
    from optuna.distributions import CategoricalDistribution

    from tuner.core.problem import problem_to_dict

    twin = open_study("twin", storage, seed=0)
    for tile, epilogue, us in ranked:
        params = {"family": "sm90_conv", "sm90_conv.tile": tile, "sm90_conv.cluster": "1x1x1",
                  "sm90_conv.stages": 0, "sm90_conv.epilogue": epilogue}
        twin.add_trial(optuna.trial.create_trial(
            value=us, params=params, user_attrs={"status": "ok"},
            distributions={k: CategoricalDistribution([v]) for k, v in params.items()}))
    (folder / "best.yaml").write_text(yaml.safe_dump({"layer_count": 1, "layers": {"twin_layer": {
        "problem": problem_to_dict(problem), "family": "sm90_conv", "params": {"tile": ranked[0][0]}, "kernel": "k",
        "runtime_us": min(us for _, _, us in ranked), "study": {"name": "twin"}}}}))


def test_a_fused_layer_is_seeded_with_its_bare_twins_fastest_configs(tmp_path, h100):
    """The bare twin's study ranks its configurations; the fused layer gets the fastest that can carry
    the epilogue (the no-smem epilogue cannot), built for the fused problem."""
    from tuner.core.epilogue import parse_epilogue
    from tuner.core.problem import ConvProblem
    from tuner.search.space import default_space_file, load_space

    bare = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    fused = replace(bare, epilogue=parse_epilogue("scale+bias+relu"))
    joint = JointSpace((load_space(default_space_file("sm90_conv")),))
    storage = optuna.storages.InMemoryStorage()
    recorded_twin(tmp_path, storage, bare, [("64x64x64", "tma", 13.0), ("128x128x64", "tma", 12.0),
                                            ("64x128x64", "tma", 11.0), ("128x128x64", "nosmem", 10.0)])
    seeds = twin_seeds(tmp_path, storage, fused, joint, h100, count=2)
    assert [(s.tile.text, s.epilogue.value) for s in seeds] == [("64x128x64", "tma"), ("128x128x64", "tma")]
    assert all(s.fusion == fused.epilogue for s in seeds)
    assert twin_seeds(tmp_path, storage, bare, joint, h100) == []  # a bare layer has no twin to learn from
    other = replace(fused, k=512)
    assert twin_seeds(tmp_path, storage, other, joint, h100) == []


def test_a_bf16_layer_is_seeded_with_its_f16_twins_fastest_configs(tmp_path, h100):
    """The same convolution in the other 16-bit type: what the f16 study found fastest, built in bf16; an f32 or
    e4m3 layer has no type twin."""
    from tuner.core.dtypes import DataType
    from tuner.core.problem import ConvProblem
    from tuner.search.seeds import twin_problems
    from tuner.search.space import default_space_file, load_space

    f16 = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    bf16 = replace(f16, input_type=DataType.bf16, filter_type=DataType.bf16, output_type=DataType.bf16)
    joint = JointSpace((load_space(default_space_file("sm90_conv")),))
    storage = optuna.storages.InMemoryStorage()
    recorded_twin(tmp_path, storage, f16, [("64x64x64", "tma", 13.0), ("128x128x64", "tma", 12.0),
                                           ("64x128x64", "tma", 11.0)])
    seeds = twin_seeds(tmp_path, storage, bf16, joint, h100, count=2)
    assert [s.tile.text for s in seeds] == ["64x128x64", "128x128x64"]
    assert all(s.input_type is DataType.bf16 and s.output_type is DataType.bf16 for s in seeds)
    assert twin_problems(bf16) == [f16] and twin_problems(f16) == [bf16]
    tf32 = replace(f16, input_type=DataType.tf32, filter_type=DataType.tf32, output_type=DataType.f32)
    assert twin_problems(tf32) == []
    assert twin_seeds(tmp_path, storage, replace(bf16, k=512), joint, h100) == []  # no twin measured


def sibling_best(root, slug, capability, entries: dict) -> None:
    """results/<slug>/best.yaml recording a GPU of `capability` and `entries`: layer -> (problem, tile)."""
    import yaml

    from tuner.core.problem import problem_to_dict

    folder = root / slug
    folder.mkdir(parents=True)
    (folder / "best.yaml").write_text(yaml.safe_dump({
        "device": {"name": slug, "slug": slug, "compute_capability": capability},
        "layer_count": len(entries),
        "layers": {layer: {"problem": problem_to_dict(problem), "family": "sm90_conv",
                           "params": {"tile": tile, "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
                           "kernel": f"k_{tile}", "runtime_us": 10.0}
                   for layer, (problem, tile) in entries.items()}}))


def test_a_layer_is_seeded_with_the_kernels_other_gpus_of_its_capability_keep(tmp_path, h100):
    """Another sm_90 GPU's best.yaml entry for the layer's problem seeds the study; a GPU of another capability, this
    GPU's own folder, a damaged best.yaml and a kernel outside the study's space give nothing. A fused layer that
    another GPU tuned only bare gets that kernel with its own epilogue."""
    from tuner.core.epilogue import parse_epilogue
    from tuner.core.problem import ConvProblem
    from tuner.search.seeds import seed_configs, sibling_seeds
    from tuner.search.space import default_space_file, load_space

    bare = ConvProblem(n=32, h=14, w=14, c=256, k=256, r=3, s=3, pad=1)
    fused = replace(bare, epilogue=parse_epilogue("scale+bias+relu"))
    other = replace(bare, k=512)
    sibling_best(tmp_path, "gpu-h200", "9.0", {"a": (bare, "64x128x64"), "b": (other, "64x256x64")})
    sibling_best(tmp_path, "gpu-ampere", "8.0", {"a": (bare, "128x64x64")})
    sibling_best(tmp_path, "gpu-here", "9.0", {"a": (bare, "128x128x64")})
    (tmp_path / "gpu-damaged").mkdir()
    (tmp_path / "gpu-damaged" / "best.yaml").write_text("layers: [cut short")
    joint = JointSpace((load_space(default_space_file("sm90_conv")),))

    [seed] = sibling_seeds(tmp_path, "gpu-here", bare, joint, h100)
    assert (seed.family, seed.tile.text) == ("sm90_conv", "64x128x64") and seed.fusion == bare.epilogue
    [fused_seed] = sibling_seeds(tmp_path, "gpu-here", fused, joint, h100)
    assert fused_seed.tile.text == "64x128x64" and fused_seed.fusion == fused.epilogue
    assert sibling_seeds(tmp_path, "gpu-h200", bare, joint, h100)[0].tile.text == "128x128x64"  # the other way
    assert sibling_seeds(tmp_path, "gpu-here", replace(bare, c=128), joint, h100) == []  # no GPU kept it
    assert sibling_seeds(None, "gpu-here", bare, joint, h100) == []
    sm80_only = JointSpace((load_space(default_space_file("sm80")),))
    assert sibling_seeds(tmp_path, "gpu-here", bare, sm80_only, h100) == []  # sm90_conv is not searched
    order = [why for _, why in seed_configs(bare, joint, h100, 1, Ceilings(), siblings=[seed])]
    assert order[0] == "sibling" and order[-1] == "prior"
