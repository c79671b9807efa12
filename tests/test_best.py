"""best.yaml: written one entry at a time from its records, read back checked against them."""
import dataclasses
import re

import pytest
import yaml

from tuner.store.best import read_best, update_best
from tuner.store.results import BEST_FILE, ResultsError
from tuner.store.schema import BestEntry, BestHeader

HEADER = BestHeader.parse({
    "device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3", "sm_count": 132},
    "toolchain": {"nvcc": "13.0.48", "cutlass": "4.2.0.0", "driver": "13.0"}})


CONV_1_PROBLEM = {"n": 1, "h": 32, "w": 32, "c": 32, "k": 32, "r": 3, "s": 3, "pad": 1, "stride": 1, "dilation": 1,
                  "input_type": "f16", "filter_type": "f16", "output_type": "f32", "accumulator_type": "f32"}


def entry(runtime_us: float, tile: str = "64x64x32") -> dict:
    return {"problem": CONV_1_PROBLEM, "family": "sm80", "params": {"tile": tile, "stages": 4},
            "kernel": f"{tile}_s4", "runtime_us": runtime_us, "tflops": 4.49}


def tuned(layer: str, runtime_us: float, tile: str = "64x64x32") -> BestEntry:
    return BestEntry.parse(layer, entry(runtime_us, tile))


def test_update_best_keeps_other_layers_and_rewrites_the_header(tmp_path):
    folder = tmp_path / "nvidia-h100-80gb-hbm3"
    update_best(folder, "r50_s4_3x3_b32", tuned("r50_s4_3x3_b32", 23.3, "128x128x32"), HEADER)
    newer = dataclasses.replace(HEADER, toolchain=dataclasses.replace(HEADER.toolchain, driver="13.1"))
    path = update_best(folder, "conv_1", tuned("conv_1", 4.2), newer)
    assert path == folder / BEST_FILE
    document = yaml.safe_load(path.read_text())
    assert list(document) == ["device", "toolchain", "layer_count", "layers"] and document["layer_count"] == 2
    assert document["toolchain"]["driver"] == "13.1"
    assert list(document["layers"]) == ["conv_1", "r50_s4_3x3_b32"]  # sorted
    assert document["layers"]["r50_s4_3x3_b32"] == entry(23.3, "128x128x32")
    assert document["layers"]["conv_1"] == entry(4.2)
    # a layer tuned again replaces its own entry only
    update_best(folder, "conv_1", tuned("conv_1", 4.1), newer)
    document = read_best(folder)
    assert document["layers"]["conv_1"]["runtime_us"] == 4.1
    assert document["layers"]["r50_s4_3x3_b32"]["runtime_us"] == 23.3
    assert sorted(p.name for p in folder.iterdir()) == sorted([BEST_FILE, ".lock"])


def test_read_best_of_a_new_folder(tmp_path):
    assert read_best(tmp_path / "nothing-yet") == {"layers": {}}


def test_corrupted_best_yaml_raises(tmp_path):
    (tmp_path / BEST_FILE).write_text("device: {name: H100\nlayers:\n  conv_1: [\n")
    with pytest.raises(ResultsError, match="not valid YAML"):
        read_best(tmp_path)
    with pytest.raises(ResultsError):
        update_best(tmp_path, "conv_1", tuned("conv_1", 4.2), HEADER)
    assert (tmp_path / BEST_FILE).read_text().startswith("device: {name: H100")  # left for the user to restore


def test_best_yaml_without_a_layers_mapping_raises(tmp_path):
    (tmp_path / BEST_FILE).write_text("layers: [conv_1]\n")
    with pytest.raises(ResultsError, match="'layers' mapping"):
        read_best(tmp_path)


@pytest.mark.parametrize("text", ["- conv_1\n- r50_s4_3x3_b32\n", "just some text\n"])
def test_best_yaml_that_is_not_a_mapping_raises(tmp_path, text):
    (tmp_path / BEST_FILE).write_text(text)
    with pytest.raises(ResultsError):
        read_best(tmp_path)


def test_a_best_yaml_cut_short_at_an_entry_boundary_is_refused(tmp_path):
    """It still parses; the layer count it states does not match what it holds."""
    update_best(tmp_path, "conv_1", tuned("conv_1", 4.2), HEADER)
    update_best(tmp_path, "r50_s4_3x3_b32", tuned("r50_s4_3x3_b32", 23.3), HEADER)
    text = (tmp_path / BEST_FILE).read_text()
    (tmp_path / BEST_FILE).write_text(text[:text.index("  r50_s4_3x3_b32:")])
    with pytest.raises(ResultsError, match="states 2 layers but holds 1: it was cut short"):
        read_best(tmp_path)


@pytest.mark.parametrize("damage, says", [
    (lambda e: e.pop("problem"), "missing problem"),
    (lambda e: e.update(runtime_us=-3), "runtime_us -3 is not a positive number"),
    (lambda e: e.update(runtime_us=".nan"), "runtime_us '.nan' is not a positive number"),
    (lambda e: e.update(family="sm80; evil"), "is not a family name"),
    (lambda e: e.update(params=[1, 2]), "params is not a mapping"),
    (lambda e: e["problem"].update(k=0), "k=0 must be at least 1"),
    (lambda e: e.update(kernel=None), "kernel None is not a kernel name"),
])
def test_an_entry_that_does_not_fit_the_schema_is_refused_with_its_layer(tmp_path, damage, says):
    damaged = {**entry(4.2), "problem": dict(CONV_1_PROBLEM)}
    damage(damaged)
    (tmp_path / BEST_FILE).write_text(yaml.safe_dump({"layer_count": 1, "layers": {"conv_1": damaged}}))
    with pytest.raises(ResultsError, match=re.escape(says)) as refused:
        read_best(tmp_path)
    assert "layer 'conv_1'" in str(refused.value) and "restore it" in str(refused.value)


def test_an_entry_the_schema_refuses_is_never_written(tmp_path):
    from tuner.core.problem import ConvProblem

    problem = ConvProblem(n=1, h=8, w=8, c=8, k=8, r=1, s=1)
    with pytest.raises(ResultsError, match="runtime_us -1.0 is not a positive number"):
        update_best(tmp_path, "conv_1", BestEntry(problem, "sm80", (("tile", "64x64x32"),), "k", -1.0), BestHeader())
    assert not (tmp_path / BEST_FILE).exists()


@pytest.mark.parametrize("dtype", ["f16", "bf16", "tf32"])
def test_a_typed_entry_round_trips_through_best_yaml(tmp_path, dtype):
    from tuner.core.dtypes import dtype_fields
    from tuner.core.problem import ConvProblem, problem_to_dict
    from tuner.search.space import entry_config, make_config
    from tuner.store.best import best_entries

    problem = ConvProblem(n=2, h=14, w=14, c=64, k=64, r=3, s=3, pad=1, **dtype_fields(dtype))
    config = make_config(problem, "sm80", {"tile": "64x64x32", "warps": "2x2x1", "stages": 3, "swizzle": 1,
                                           "iterator": "optimized", "split_k": 1})
    update_best(tmp_path, f"layer_{dtype}", BestEntry.parse(f"layer_{dtype}", {
        "problem": problem_to_dict(problem), "family": "sm80", "params": config.search_params, "kernel": config.name,
        "runtime_us": 5.0}), HEADER)
    entry = best_entries(tmp_path)[f"layer_{dtype}"]
    assert entry.problem == problem and entry.problem.dtype_key in config.name
    assert entry_config(entry, f"layer_{dtype}", entry.problem) == config
    # another type of the same shape is another problem
    assert dataclasses.replace(problem, **dtype_fields("f16" if dtype != "f16" else "bf16")) != entry.problem


def test_an_e4m3_entry_round_trips_through_best_yaml_without_its_scales(tmp_path):
    """An e4m3 layer's entry (sm90_dsl's, the one family that runs it) keeps its types; its per-tensor scales are
    run-time operands, in neither the entry nor the kernel's name."""
    from tuner.core.dtypes import dtype_fields
    from tuner.core.problem import ConvProblem, problem_to_dict
    from tuner.search.space import entry_config, make_config
    from tuner.store.best import best_entries

    problem = ConvProblem(n=2, h=14, w=14, c=64, k=64, r=3, s=3, pad=1, **dtype_fields("e4m3"))
    config = make_config(problem, "sm90_dsl", {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative",
                                               "stages": 0, "raster": "m", "swizzle": 1, "tile_q": 8, "split_k": 1})
    update_best(tmp_path, "layer_e4m3", BestEntry.parse("layer_e4m3", {
        "problem": problem_to_dict(problem), "family": "sm90_dsl", "params": config.search_params,
        "kernel": config.name, "runtime_us": 5.0}), HEADER)
    entry = best_entries(tmp_path)["layer_e4m3"]
    assert entry.problem == problem and "e4m3_e4m3_f16_f32" in config.name
    assert entry_config(entry, "layer_e4m3", entry.problem) == config
    assert "scale" not in (tmp_path / "best.yaml").read_text().split("layer_e4m3", 1)[1]


def test_problems_are_found_by_their_canonical_fused_form(tmp_path):
    """A conv tuned with its batch norm (scale+bias+relu) answers for the same conv with the norm folded
    (bias+relu) and the other way round; a different epilogue or batch does not."""
    from tuner.core.epilogue import parse_epilogue
    from tuner.core.problem import ConvProblem
    from tuner.store.best import names_by_problem

    base = ConvProblem(n=32, h=56, w=56, c=64, k=64, r=3, s=3, pad=1)
    norm, folded = (dataclasses.replace(base, epilogue=parse_epilogue(text)) for text in ("scale+bias+relu", "bias+relu"))
    named = names_by_problem({"tuned_with_norm": BestEntry(norm, "sm80", (("tile", "x"),), "k", 1.0)})
    assert named[folded] == named.get(norm) == "tuned_with_norm" and folded in named
    assert named.get(dataclasses.replace(folded, n=1)) is None and base not in named
    assert named.setdefault(folded, "other") == "tuned_with_norm" and len(named) == 1


def test_a_problem_several_layers_hold_is_found_as_the_fastest_of_them():
    """VGG-11's first layer (tuned before the DSL family, 336 µs) held the problem the suite's VGG-16 layer runs
    in 102 µs: a later VGG-16 import was told the slow one."""
    from tuner.core.problem import ConvProblem
    from tuner.store.best import names_by_problem

    problem = ConvProblem(n=32, h=224, w=224, c=3, k=64, r=3, s=3, pad=1)
    entries = {name: BestEntry(problem, "sm80", (("tile", "x"),), "k", us)
               for name, us in (("vgg11_first", 335.9), ("vgg16_first", 102.3), ("again", 180.0))}
    assert names_by_problem(entries)[problem] == "vgg16_first"


def test_a_best_yaml_read_again_is_the_files_latest_text_and_the_callers_own_copy(tmp_path):
    from tuner.store.best import best_entries
    from tuner.store.results import atomic_write

    update_best(tmp_path, "conv_1", tuned("conv_1", 4.2), HEADER)
    first = best_entries(tmp_path)
    first.pop("conv_1")  # a caller's change to what it was given is not what the next read returns
    assert best_entries(tmp_path)["conv_1"].runtime_us == 4.2
    update_best(tmp_path, "conv_1", tuned("conv_1", 4.1), HEADER)
    assert best_entries(tmp_path)["conv_1"].runtime_us == 4.1
    # another process's write of the same length (atomic_write, as every writer of results/ does) is read again
    path = tmp_path / BEST_FILE
    atomic_write(path, path.read_text().replace("runtime_us: 4.1", "runtime_us: 4.3"))
    assert best_entries(tmp_path)["conv_1"].runtime_us == 4.3
    # and so is an edit in place within the same tick of the file's clock (same inode, size and, often, time)
    path.write_text(path.read_text().replace("runtime_us: 4.3", "runtime_us: 4.4"))
    assert best_entries(tmp_path)["conv_1"].runtime_us == 4.4
    path.unlink()
    assert best_entries(tmp_path) == {}
