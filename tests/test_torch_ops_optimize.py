"""tuner.torch_ops.optimize on the CPU, with stand-in kernels (tests/torch_standins.py) in place of the GPU's:
which nodes it replaces, the batch norm folded, the graph rewritten, the result equal to eager, each fallback
with its reason, a planted wrong kernel caught, and the rewritten model under torch.compile."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_standins import SLUG, CpuKernels, net, write_best  # noqa: E402
from tuner.torch_ops.eager_check import relative_l2  # noqa: E402
from tuner.torch_ops.fold import batch_norm_affine  # noqa: E402
from tuner.torch_ops.optimize import OptimizeError, TunedConv2d, optimize  # noqa: E402
from tuner.importers.plan import Fallback  # noqa: E402

SHAPE = (2, 3, 8, 8)


def example(dtype=torch.float16):
    torch.manual_seed(1)
    return torch.randn(*SHAPE).to(dtype)


def run(tmp_path, model=None, x=None, skip=(), **options):
    model = net() if model is None else model
    results = tmp_path / "results"
    write_best(results, net(), SHAPE, skip)
    options.setdefault("kernel_source", CpuKernels())
    return optimize(model, example() if x is None else x, gpu=SLUG, results_dir=results, **options)


def decisions(optimized) -> dict:
    return {d.node: d for d in optimized.tuner_report.decisions}


def test_tuned_convs_with_their_epilogues_become_one_module_each(tmp_path):
    model, x = net(), example()
    source = CpuKernels()
    optimized = run(tmp_path, model, x, kernel_source=source)
    found = decisions(optimized)
    assert [n for n, d in found.items() if d.replaced] == ["stem", "conv", "head", "grouped"]
    assert "input padded from 3 to 4 channels" in found["stem"].note
    assert found["grouped"].note.startswith("dsl_direct")
    tuned = {name: m for name, m in optimized.named_modules() if isinstance(m, TunedConv2d)}
    assert set(tuned) == {"tuned_stem", "tuned_conv", "tuned_head", "tuned_grouped"}
    # the grouped conv's filter as the kernel reads it: K x C/groups x R x S, not padded
    assert tuple(tuned["tuned_grouped"].weight.shape) == (32, 8, 3, 3) and tuned["tuned_grouped"].groups == 4
    # the batch norms, the add and the activations went with their convs
    assert {n.target for n in optimized.graph.nodes if n.op == "call_module"} == \
        {"tuned_stem", "tuned_conv", "tuned_head", "tuned_grouped", "pool"}
    residual_call = next(n for n in optimized.graph.nodes if n.target == "tuned_conv")
    assert [a.target for a in residual_call.args] == ["tuned_stem", "tuned_stem"]  # x and the residual
    with torch.no_grad():
        assert relative_l2(optimized(x), model(x)) < 1e-2
    assert all(kernel.launches for kernel in source.loaded.values())
    report = optimized.tuner_report
    assert report.network_error < report.tolerance
    lines = report.lines()
    assert lines[0].startswith("4 of 4 convolutions replaced by tuned kernels")


class Nested(torch.nn.Module):
    """The stand-in network one module down, as torchvision's blocks are: its batch norms' graph nodes
    (inner_bn0) are no longer their module paths (inner.bn0)."""

    def __init__(self):
        super().__init__()
        self.inner = net()

    def forward(self, x):
        return self.inner(x)


def test_the_batch_norms_of_nested_modules_are_folded(tmp_path):
    model, x, source = Nested().eval(), example(), CpuKernels()
    optimized = run(tmp_path, model, x, kernel_source=source)
    assert [n for n, d in decisions(optimized).items() if d.replaced] == \
        ["inner.stem", "inner.conv", "inner.head", "inner.grouped"]
    tuned = {name: m for name, m in optimized.named_modules() if isinstance(m, TunedConv2d)}
    # the stand-in's batch norms have statistics far from (0, 1): folded, the kernel's scale is theirs
    scale, _ = batch_norm_affine(model.inner.bn)
    assert torch.allclose(tuned["tuned_inner_conv"].scale, scale)
    with torch.no_grad():
        assert relative_l2(optimized(x), model(x)) < 1e-2


def test_the_original_model_is_left_as_it_was(tmp_path):
    model = net()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    run(tmp_path, model)
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())
    assert type(model.stem) is torch.nn.Conv2d


@pytest.mark.parametrize("case, fallback, says", [
    ("training", Fallback.training, "model.eval()"),
    ("float32", Fallback.wrong_dtype, "the model runs f32; tuned for f16"),
    ("batch 4", Fallback.other_shape, "tuned at batch 2, not 4"),
    ("untuned head", Fallback.not_tuned, "tune.py --shape 2,8,8,16,32,3,3,1,1,1 --epilogue bias+silu"),
])
def test_each_fallback_says_why(tmp_path, case, fallback, says):
    model, x, skip = net(), example(), ()
    if case == "training":
        model.train()
    elif case == "float32":
        model, x = net(torch.float32), example(torch.float32)
    elif case == "batch 4":
        x = torch.cat([x, x])
    else:
        skip = ("head",)
    found = decisions(run(tmp_path, model, x, skip))
    node = "head" if case == "untuned head" else "stem"
    assert found[node].fallback is fallback and says in found[node].note, found[node].text


@pytest.mark.parametrize("which", ["first", "grouped"])
def test_a_planted_wrong_kernel_falls_back_and_the_rest_stays(tmp_path, which):
    model, x = net(), example()
    best = write_best(tmp_path / "r", model, SHAPE) / "best.yaml"
    layers = __import__("yaml").safe_load(best.read_text())["layers"]
    layer = next(name for name, entry in layers.items() if which == "first" or entry["family"] == "dsl_direct")
    optimized = run(tmp_path, model, x, kernel_source=CpuKernels(planted=[layer]))
    found = decisions(optimized)
    wrong = [d for d in found.values() if d.fallback is Fallback.wrong_result]
    assert len(wrong) == 1 and "against eager on the example input" in wrong[0].note
    assert (wrong[0].node == "grouped") == (which == "grouped")
    assert sum(d.replaced for d in found.values()) == 3
    with torch.no_grad():
        assert relative_l2(optimized(x), model(x)) < 1e-2


def test_a_kernel_that_cannot_be_had_falls_back(tmp_path):
    model = net()
    names = list(__import__("yaml").safe_load((write_best(tmp_path / "r", model, SHAPE) / "best.yaml")
                                              .read_text())["layers"])
    found = decisions(run(tmp_path, model, kernel_source=CpuKernels(broken=names)))
    assert all(d.fallback in (Fallback.kernel_failed, Fallback.unsupported) for d in found.values())
    assert "planted" in found["stem"].note


def test_another_input_shape_runs_the_same_layers_in_pytorch(tmp_path):
    model, x = net(), example()
    source = CpuKernels()
    optimized = run(tmp_path, model, x, kernel_source=source)
    launches = sum(k.launches for k in source.loaded.values())
    bigger = torch.randn(3, 3, 16, 16).half()
    with torch.no_grad():
        assert relative_l2(optimized(bigger), model(bigger)) < 1e-2
    assert sum(k.launches for k in source.loaded.values()) == launches  # no kernel met a shape it was not built for


@pytest.mark.slow
def test_the_optimized_model_compiles_whole(tmp_path):
    """torch.compile traces the custom op through its fake implementation: one graph, no break."""
    model, x = net(), example()
    optimized = run(tmp_path, model, x)
    torch._dynamo.reset()
    compiled = torch.compile(optimized, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert relative_l2(compiled(x), model(x)) < 1e-2


@pytest.mark.parametrize("arguments, says", [
    ((object(), torch.zeros(1)), "model must be a torch.nn.Module"),
    (("net", torch.zeros(2, 3)), "example_input must be one 4-D tensor"),
    (("net", "x"), "example_input must be one 4-D tensor [N, C, H, W] the model runs on, got str"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, arguments, says):
    model, x = arguments
    with pytest.raises(OptimizeError) as caught:
        optimize(net() if model == "net" else model, x, gpu=SLUG, results_dir=tmp_path)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_results_of_another_gpu_are_a_one_line_error(tmp_path):
    write_best(tmp_path / "results", net(), SHAPE)
    with pytest.raises(OptimizeError, match="no .*best.yaml: GPUs with one are test-gpu"):
        optimize(net(), example(), gpu="nvidia-a100", results_dir=tmp_path / "results")
    with pytest.raises(OptimizeError, match="tune must be a whole number"):
        optimize(net(), example(), gpu=SLUG, results_dir=tmp_path / "results", tune=-1)


def test_with_pdl_a_family_that_has_a_chained_build_gets_it_and_the_others_keep_theirs(tmp_path):
    """optimize(pdl=True) asks for each kernel its family's build for programmatic dependent launch (sm90_dsl's);
    sm80 has none and keeps its kernel."""
    from torch_standins import SM80_PARAMS
    from tuner.store.best import best_entries
    from tuner.torch_ops.optimize import CompiledKernels

    dsl = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
           "swizzle": 1, "tile_q": 0, "split_k": 1}
    for family, params in (("sm90_dsl", dsl), ("sm80", SM80_PARAMS)):
        folder = write_best(tmp_path / family, net(), SHAPE, dense=(family, params))
        name, entry = next((n, e) for n, e in best_entries(folder).items() if e.problem.groups == 1)
        plain = CompiledKernels(folder).launched(CompiledKernels(folder).tuned_config(name, entry))
        chained = CompiledKernels(folder, pdl=True).launched(CompiledKernels(folder).tuned_config(name, entry))
        if family == "sm90_dsl":
            assert chained.pdl and chained.build_spec().pdl and chained.name == plain.name + "_pdl"
            assert chained.compiled != plain.compiled and not plain.pdl
        else:
            assert chained == plain
    with pytest.raises(OptimizeError, match="pdl must be True or False"):
        optimize(net(), example(), gpu=SLUG, results_dir=tmp_path / "sm80", pdl="yes")


def test_optimize_builds_for_programmatic_dependent_launch_unless_told_not_to(tmp_path, monkeypatch):
    """PDL is the default: on an H200 it took ResNet-50 from 0.639 to 0.613 of torch.compile at batch 32 and from
    0.636 to 0.551 at batch 1 (docs/torch.md)."""
    import tuner.torch_ops.optimize as optimize_module

    asked = []

    class Recording(optimize_module.CompiledKernels):
        def __init__(self, folder, cache_dir=None, pdl=False):
            asked.append(pdl)
            super().__init__(folder, cache_dir, pdl)

    monkeypatch.setattr(optimize_module, "CompiledKernels", Recording)
    write_best(tmp_path / "results", net(), SHAPE)
    for flag in ({}, {"pdl": False}):
        optimize(net(), example(), gpu=SLUG, results_dir=tmp_path / "results", check=False, **flag)
    assert asked == [True, False]


def test_a_kernel_whose_pdl_build_fails_is_loaded_in_the_build_the_tuner_timed(tmp_path, monkeypatch):
    """PDL is only a launch overlap: where a kernel's build for it fails, the layer keeps its tuned build rather
    than falling back to PyTorch; where both fail, the layer says why the PDL one did."""
    import tuner.build.compile as compile_module
    from tuner.build.compile_cache import CompileResult
    from tuner.store.best import best_entries
    from tuner.torch_ops import kernels
    from tuner.torch_ops.optimize import CompiledKernels

    dsl = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
           "swizzle": 1, "tile_q": 0, "split_k": 1}
    folder = write_best(tmp_path / "results", net(), SHAPE, dense=("sm90_dsl", dsl))
    wanted = {name: (entry, entry.problem) for name, entry in best_entries(folder).items() if entry.problem.groups == 1}
    builds = {"fails": lambda config: config.pdl}

    class Builder:
        def __init__(self, device, cache_dir=None, jobs=None):
            pass

        def compile_many(self, configs):
            return [CompileResult(c, "key", None if builds["fails"](c) else tmp_path / f"{c.name}.so", 0.1, False,
                                  "error: no" if builds["fails"](c) else None, None) for c in configs]

        def close(self):
            pass

    monkeypatch.setattr(compile_module, "Compiler", Builder)
    monkeypatch.setattr(kernels, "LoadedKernel", lambda binary, *rest: binary.path.name)
    loaded = CompiledKernels(folder, pdl=True).load(wanted, "cuda")
    assert loaded and all(not name.endswith("_pdl.so") and name.endswith(".so") for name in loaded.values())
    builds["fails"] = lambda config: True
    loaded = CompiledKernels(folder, pdl=True).load(wanted, "cuda")
    assert all(why.endswith("_pdl did not build: error: no") for why in loaded.values()), loaded


def test_load_builds_what_tuned_config_gives_so_a_planted_source_reaches_the_compiler(tmp_path, monkeypatch):
    """tests/test_torch_ops_gpu.py plants a wrong kernel by overriding tuned_config; load must compile that
    config (and its PDL build), not read best.yaml again behind the hook, or the plant is never checked."""
    import dataclasses
    import tuner.build.compile as compile_module
    from tuner.build.compile_cache import CompileResult
    from tuner.core.epilogue import Activation
    from tuner.search.space import make_config
    from tuner.store.best import best_entries
    from tuner.torch_ops import kernels
    from tuner.torch_ops.optimize import CompiledKernels

    dsl = {"tile": "128x64x64", "cluster": "1x1x1", "schedule": "cooperative", "stages": 0, "raster": "m",
           "swizzle": 1, "tile_q": 0, "split_k": 1}
    folder = write_best(tmp_path / "results", net(), SHAPE, dense=("sm90_dsl", dsl))
    wanted = {name: (entry, entry.problem) for name, entry in best_entries(folder).items() if entry.problem.groups == 1}
    compiled = []

    class Builder:
        def __init__(self, device, cache_dir=None, jobs=None):
            pass

        def compile_many(self, configs):
            compiled.extend(configs)
            return [CompileResult(c, "key", tmp_path / f"{c.name}.so", 0.1, False, None, None) for c in configs]

        def close(self):
            pass

    class Planted(CompiledKernels):
        def tuned_config(self, name, entry):
            problem = entry.problem
            wrong = dataclasses.replace(problem, epilogue=dataclasses.replace(problem.epilogue,
                                                                              activation=Activation.gelu))
            return make_config(wrong, entry.family, entry.knobs)

    monkeypatch.setattr(compile_module, "Compiler", Builder)
    monkeypatch.setattr(kernels, "LoadedKernel", lambda binary, *rest: binary.path.name)
    for pdl in (False, True):
        compiled.clear()
        Planted(folder, pdl=pdl).load(wanted, "cuda")
        assert compiled and all(c.fusion.activation is Activation.gelu for c in compiled)
        assert all(c.pdl is pdl for c in compiled)
