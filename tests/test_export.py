"""best.yaml -> best_configs.h: one alias and runner per layer for every family, each family's includes once,
one kLayers row per layer, every string as an escaped literal and every number checked."""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest

from tuner.build.codegen import include_lines
from tuner.pipeline.export import cpp_identifier, cpp_int, cpp_string, render_header
from tuner.families import registry
from tuner.core.dtypes import dtype_fields
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.store.results import ResultsError
from tuner.search.space import make_config
from tuner.measure.validate import tolerance

PROBLEMS = {
    "sm80": ConvProblem(n=1, h=32, w=32, c=3, k=32, r=3, s=3, pad=1),
    "sm80_dgrad": ConvProblem(n=1, h=16, w=16, c=64, k=32, r=3, s=3, pad=1, stride=2, output_padding=1, transposed=True),
    "sm90_conv": ConvProblem(n=32, h=28, w=28, c=3, k=128, r=3, s=3, pad=1),
    "sm90_gemm": ConvProblem(n=32, h=28, w=28, c=20, k=128, r=1, s=1),
    "sm90_s2d": ConvProblem(n=32, h=224, w=224, c=3, k=64, r=7, s=7, pad=3, stride=2),
    "sm80_group": ConvProblem(n=8, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, groups=8),
    "sm80_depthwise": ConvProblem(n=8, h=28, w=28, c=64, k=64, r=3, s=3, pad=1, stride=2, groups=64),
}
PARAMS = {
    "sm80": {"tile": "64x64x32", "warps": "2x2x1", "stages": 4, "swizzle": 2, "iterator": "optimized", "split_k": 3},
    "sm80_dgrad": {"tile": "64x64x32", "warps": "2x2x1", "stages": 4, "swizzle": 4, "iterator": "optimized",
                   "stride_support": "strided", "split_k": 1},
    "sm90_conv": {"tile": "128x64x64", "cluster": "2x1x1", "stages": 0, "epilogue": "nosmem"},
    "sm90_gemm": {"tile": "256x128x64", "cluster": "1x2x1", "schedule": "cooperative", "scheduler": "stream_k",
                  "epilogue": "tma", "stages": 4, "raster": 2, "swizzle": 4, "split_k": 2},
    "sm90_s2d": {"tile": "128x64x16", "cluster": "1x1x1", "stages": 0, "epilogue": "tma"},
    "sm80_group": {"tile": "64x32x32", "warps": "2x1x1", "stages": 3, "swizzle": 1, "iterator": "analytic",
                   "group_mode": "multiple"},
    "sm80_depthwise": {"output_tile": "8x8", "channels": 64, "warps": 4, "stages": 3, "split": 8},
}
LAYER_OF = {"sm80": "layer_sm80", "sm80_dgrad": "layer_up", "sm90_conv": "layer-sm90-conv",
            "sm90_gemm": "layer.sm90.gemm", "sm90_s2d": "stem", "sm80_group": "grouped", "sm80_depthwise": "depthwise"}
RUNNERS = {"sm80": "Sm80Runner", "sm80_dgrad": "Sm80DgradRunner", "sm90_conv": "Sm90ConvRunner",
           "sm90_gemm": "Sm90GemmRunner", "sm90_s2d": "Sm90S2dRunner", "sm80_group": "Sm80Runner",
           "sm80_depthwise": "Sm80DepthwiseRunner"}
# The families whose kernels the header holds as C++; sm90_dsl's are objects (tests/test_export_dsl.py).
CPP_FAMILIES = tuple(f for f in registry.names() if registry.get(f).emits_cpp)
EVIL = 'x"; int evil = 1; //\n#error injected \\'
# The families whose kernels the header takes (sm90_dsl's are DSL-exported objects).
CPP_FAMILIES = tuple(f for f in registry.names() if registry.get(f).emits_cpp)


def config_of(family: str):
    return make_config(PROBLEMS[family], family, PARAMS[family])


def entry(family: str, **changes) -> dict:
    config = config_of(family)
    return {"problem": problem_to_dict(PROBLEMS[family]), "family": family, "params": config.search_params,
            "kernel": config.name, "runtime_us": 12.5, "date": "2025-06-01", **changes}


def document(**layers) -> dict:
    return {
        "device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3", "compute_capability": "9.0",
                   "sm_count": 132, "l2_bytes": 52428800},
        "toolchain": {"nvcc": "13.0.88", "cutlass": "4.2.0.0", "driver": "13.0"},
        "layers": layers or {LAYER_OF[f]: entry(f) for f in CPP_FAMILIES},
    }


def strip_literals(line: str) -> tuple[str, list[str]]:
    """(the line with each string literal replaced by S, the literals' bodies); a literal that does not end on
    its line fails the test."""
    code, literals, index = [], [], 0
    while index < len(line):
        char = line[index]
        if char == '"':
            end = index + 1
            while end < len(line) and line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            assert end < len(line), f"unterminated literal in {line!r}"
            literals.append(line[index + 1:end])
            code.append("S")
            index = end + 1
        else:
            code.append(char)
            index += 1
    return "".join(code), literals


ROW = re.compile(r"^    \{S, (-?\d+, ){15}S, (-?\d+, ){6}\d+\.\d{3}, S, S, S, (true|false), (true|false), (true|false), "
                 r"-?\d+\.\d+(e-?\d+)?, S, S, \d\.\d{3}e-\d\d, (true|false), \d+, \d+\},$")


def rows_of(header: str) -> list[str]:
    body = header[header.index("constexpr TunedLayer kLayers[] = {"):header.index("constexpr int kLayerCount")]
    return [line for line in body.splitlines()[1:] if line.strip() not in ("", "};")]


@pytest.fixture(scope="module")
def header() -> str:
    return render_header(document())


# --- one entry per family -----------------------------------------------------------------------

def test_every_family_gets_its_alias_and_runner(header):
    for family, layer in LAYER_OF.items():
        alias = cpp_identifier(layer)
        assert f"using {alias}_runner = {RUNNERS[family]}<{alias}>;" in header, family
        assert header.count(f"using {alias} = ") == 1, family
        assert f"class {RUNNERS[family]}" in header
        assert header.count(f"class {RUNNERS[family]} {{") == 1, family
        assert f"// Config: {config_of(family).compiled.name}" in header, family
    assert "using layer_sm90_gemm = cutlass::gemm::device::GemmUniversalAdapter<layer_sm90_gemm_detail::GemmKernel>;" \
        in header
    assert "using layer_sm90_conv = cutlass::conv::device::ConvUniversalAdapter<layer_sm90_conv_detail::Kernel>;" \
        in header
    assert "using layer_sm80 = cutlass::conv::device::ImplicitGemmConvolution<" in header
    assert "$" not in header


def test_the_pytorch_op_and_the_header_bind_a_kernel_with_one_runner(header):
    """The candidate library tuner.torch_ops loads (the tuner's own, tuner/build/codegen.py) and the exported header
    hold the same runner class, verbatim, around the same kernel: one binding of kernel to problem for both."""
    from tuner.build.codegen import candidate_source

    for family in CPP_FAMILIES:
        candidate = candidate_source(config_of(family))
        assert f"using Runner0 = {RUNNERS[family]}<TunedConv0>;" in candidate, family
        for source in registry.get(family).cpp([config_of(family).compiled]).runners:
            assert source in candidate and source in header, family


def test_each_familys_includes_once(header):
    lines = [line for line in header.splitlines() if line.startswith("#include")]
    assert len(lines) == len(set(lines))
    for family in CPP_FAMILIES:
        for include in registry.get(family).cpp().includes:
            assert header.count(include_lines((include,))) == 1, include


def test_one_row_per_layer_with_its_family(header):
    rows = rows_of(header)
    assert len(rows) == len(LAYER_OF)
    assert f"constexpr int kLayerCount = {len(LAYER_OF)};" in header
    by_name = {strip_literals(row)[1][0]: row for row in rows}
    assert set(by_name) == set(LAYER_OF.values())
    for family, layer in LAYER_OF.items():
        code, literals = strip_literals(by_name[layer])
        assert ROW.match(code), by_name[layer]
        assert literals == [layer, family, config_of(family).name, "2025-06-01", "none", "none", "f16_f16_f16_f32"]
        assert "12.500" in code


def test_rows_carry_the_launch_arguments(header):
    rows = {strip_literals(row)[1][0]: strip_literals(row)[0] for row in rows_of(header)}
    numbers = {layer: [int(n) for n in re.findall(r"(?<![\d.e+-])-?\d+(?![\d.])", code)] for layer, code in rows.items()}
    # n h w c k r s | pad stride dilation, each (h, w) | groups kernel_c | split_k raster swizzle | tile m n k
    assert numbers["layer_sm80"][:21] == [1, 32, 32, 3, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 3, 0, 1, 64, 64, 32]
    assert numbers["layer-sm90-conv"][:21] == [32, 28, 28, 3, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, 1, 0, 1, 128, 64, 64]
    assert numbers["layer.sm90.gemm"][:21] == [32, 28, 28, 20, 128, 1, 1, 0, 0, 1, 1, 1, 1, 1, 24, 2, 2, 4, 256, 128, 64]
    assert numbers["stem"][:21] == [32, 224, 224, 3, 64, 7, 7, 3, 3, 2, 2, 1, 1, 1, 3, 1, 0, 1, 128, 64, 16]  # fold pads C
    # ... | transposed output_padding_h output_padding_w, at the row's end
    assert numbers["layer_up"][:21] == [1, 16, 16, 64, 32, 3, 3, 1, 1, 2, 2, 1, 1, 1, 64, 1, 0, 1, 64, 64, 32]
    assert rows["layer_up"].endswith(", true, 1, 1},") and rows["stem"].endswith(", false, 0, 0},")


def test_a_per_axis_layer_carries_each_axis_in_its_row():
    wide = ConvProblem(n=8, h=17, w=17, c=64, k=64, r=1, s=7, pad_h=0, pad_w=3, stride_h=1, stride_w=2)
    config = make_config(wide, "sm80", PARAMS["sm80"])
    layer = {"problem": problem_to_dict(wide), "family": "sm80", "params": config.search_params,
             "kernel": config.name, "runtime_us": 1.0, "date": "2025-06-01"}
    [row] = rows_of(render_header(document(inception_1x7=layer)))
    code, _ = strip_literals(row)
    numbers = [int(n) for n in re.findall(r"(?<![\d.e+-])-?\d+(?![\d.])", code)]
    # n h w c k r s | pad_h pad_w stride_h stride_w dilation_h dilation_w | groups kernel_c
    assert numbers[:15] == [8, 17, 17, 64, 64, 1, 7, 0, 3, 1, 2, 1, 1, 1, 64]


def test_for_each_layer_macro(header):
    assert re.findall(r"X\((\w+)_runner, (\d+)\)", header) == [
        ("depthwise", "0"), ("grouped", "1"), ("layer_sm90_conv", "2"), ("layer_sm90_gemm", "3"), ("layer_sm80", "4"),
        ("layer_up", "5"), ("stem", "6")]  # by layer name
    assert "namespace nvidia_h100_80gb_hbm3 {" in header
    assert "CUTLASS_CONV_TUNER_NVIDIA_H100_80GB_HBM3_FOR_EACH_LAYER(X)" in header
    assert "constexpr int kComputeCapability = 90;" in header and "constexpr int kSmCount = 132;" in header
    assert 'constexpr char kNvccVersion[] = "13.0.88";' in header


def test_matches_device_takes_the_device_name_besides_the_numbers(header):
    # An H100 SXM and an H200 are both 9.0 with 132 SMs (tests/test_docs_cpp.py compiles the check).
    assert "constexpr bool matches_device(int compute_capability, int sm_count, const char *device_name)" in header
    assert "sm_count == kSmCount && same_name(device_name, kGpuName)" in header
    assert 'constexpr char kGpuName[] = "NVIDIA H100 80GB HBM3";' in header


def test_the_sm90_families_share_one_preamble_at_global_scope(header):
    # sm90_conv, sm90_gemm and sm90_s2d name the same fused-epilogue extension of CUTLASS: emitted once,
    # before the tuner's namespace (it specializes a template in CUTLASS's own)
    assert header.count("#define CUTLASS_CONV_TUNER_PREFETCH_FUSION") == 1
    assert header.index("namespace cutlass::epilogue::fusion {") < header.index("namespace cutlass_conv_tuner {")
    assert "CUTLASS_CONV_TUNER_PREFETCH_FUSION" not in render_header(document(only=entry("sm80")))


def test_a_single_family_header_has_only_its_pieces():
    header = render_header(document(only=entry("sm90_gemm")))
    assert "class Sm90GemmRunner" in header
    assert "class Sm80Runner" not in header and "class Sm90ConvRunner" not in header
    assert "cutlass/conv/device/conv_universal_adapter.hpp" not in header


# --- strings from best.yaml reach C++ only as escaped literals -----------------------------------

def test_cpp_string_escapes():
    assert cpp_string("conv_1") == '"conv_1"'
    assert cpp_string('a"b') == '"a\\042b"'
    assert cpp_string("a\\b") == '"a\\134b"'
    assert cpp_string("a\nb") == '"a\\012b"'
    assert cpp_string("??=") == '"\\077\\077="'   # no trigraph
    assert cpp_string("µ") == '"\\302\\265"'


@pytest.fixture(scope="module")
def evil_header() -> str:
    evil = document(**{EVIL: entry("sm90_gemm", date=EVIL), "plain": entry("sm90_conv", date=EVIL)})
    evil["device"] = {**evil["device"], "name": EVIL, "slug": EVIL}
    evil["toolchain"] = {"nvcc": EVIL, "cutlass": EVIL, "driver": EVIL}
    return render_header(evil)


def test_injected_text_stays_in_literals(evil_header):
    header = evil_header
    assert '"; int evil' not in header
    assert not any(line.lstrip().startswith("#error") for line in header.splitlines())
    assert cpp_string(EVIL) in header
    assert header.count(cpp_string(EVIL)) == 1 + 3 + 2 + 1  # gpu name, toolchain, two dates, one layer name


def test_injected_text_leaves_every_literal_terminated(evil_header):
    for line in evil_header.splitlines():
        if line.lstrip().startswith("//"):
            assert not line.endswith("\\"), line   # a comment that would swallow the next line
            continue
        code, literals = strip_literals(line)
        assert "int evil" not in code and "#error" not in code, line
        for literal in literals:
            if "evil" in literal:
                assert '"' + literal + '"' == cpp_string(EVIL), literal
    rows = rows_of(evil_header)
    assert len(rows) == 2
    for row in rows:
        assert ROW.match(strip_literals(row)[0]), row
    for name in ("kGpuName", "kNvccVersion", "kCutlassVersion", "kDriverVersion"):
        line = next(line for line in evil_header.splitlines() if f"constexpr char {name}[]" in line)
        assert strip_literals(line)[0] == f"constexpr char {name}[] = S;", line


def test_injected_names_become_plain_identifiers(evil_header):
    alias = cpp_identifier(EVIL)
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", alias)
    assert f"using {alias}_runner = Sm90GemmRunner<{alias}>;" in evil_header
    namespace = cpp_identifier(EVIL)
    assert f"namespace {namespace} {{" in evil_header
    assert f"CUTLASS_CONV_TUNER_{namespace.upper()}_FOR_EACH_LAYER(X)" in evil_header


# --- what is refused ----------------------------------------------------------------------------

def broken(change) -> dict:
    doc = copy.deepcopy(document())
    change(doc)
    return doc


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d["device"].update(sm_count="132"), ["sm_count", "'132'"]),
        (lambda d: d["device"].update(sm_count=132.0), ["sm_count", "132.0"]),
        (lambda d: d["device"].update(sm_count=True), ["sm_count", "True"]),
        (lambda d: d["device"].pop("sm_count"), ["sm_count", "None"]),
        (lambda d: d["device"].update(compute_capability="9"), ["compute_capability", "'9'"]),
        (lambda d: d["layers"]["layer-sm90-conv"]["params"].update(stages=3.9), ["layer-sm90-conv", "stages=3.9"]),
        (lambda d: d["layers"]["layer.sm90.gemm"]["params"].update(split_k="2.5"), ["split_k='2.5'"]),
        (lambda d: d["layers"]["layer_sm80"]["params"].update(stages=True), ["layer_sm80", "stages=True"]),
        (lambda d: d["layers"]["layer.sm90.gemm"]["params"].pop("raster"), ["'raster' missing"]),
        (lambda d: d["layers"]["layer.sm90.gemm"]["problem"].pop("k"), ["layer.sm90.gemm", "unreadable problem"]),
        (lambda d: d["layers"]["layer_sm80"]["problem"].update(c="three"), ["layer_sm80", "unreadable problem"]),
        (lambda d: d["layers"]["layer_sm80"].pop("problem"), ["layer_sm80", "missing problem"]),
        (lambda d: d["layers"]["layer_sm80"].update(family="sm70"), ["layer_sm80", "unknown kernel family 'sm70'"]),
        (lambda d: d["layers"]["layer_sm80"].update(family="sm90_gemm"), ["layer_sm80"]),  # sm80 params
        (lambda d: d["layers"]["layer_sm80"].update(runtime_us="fast"), ["runtime_us", "'fast'"]),
        (lambda d: d["layers"]["layer_sm80"].update(runtime_us=float("nan")), ["runtime_us", "nan"]),
        (lambda d: d.update(layers={}), ["no device or no layers"]),
        (lambda d: d.pop("device"), ["no device or no layers"]),
    ],
)
def test_render_header_refuses(change, words):
    with pytest.raises(ResultsError) as error:
        render_header(broken(change))
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_cpp_int_bounds():
    assert cpp_int(2**31 - 1, "x") == "2147483647" and cpp_int(-(2**31), "x") == "-2147483648"
    for value in (2**31, 3.0, "3", None, False):
        with pytest.raises(ResultsError):
            cpp_int(value, "x")


@pytest.mark.parametrize("names", [("conv-1", "conv_1"), ("conv", "conv_runner"), ("conv", "conv_detail")])
def test_layer_names_that_clash_as_identifiers(names):
    doc = document(**{name: entry("sm80") for name in names})
    with pytest.raises(ResultsError, match="both become the C\\+\\+ name"):
        render_header(doc)


def test_a_layer_named_like_a_keyword_gets_an_identifier():
    header = render_header(document(**{"int": entry("sm80")}))
    assert "using int_ = " in header and "using int_runner = " not in header


# --- a network's node table ---------------------------------------------------------------------

def node_lines(header: str) -> list[str]:
    body = header[header.index("constexpr TunedNode kNodes[] = {"):header.index("constexpr int kNodeCount")]
    return [line.strip() for line in body.splitlines()[1:] if line.strip() not in ("", "};")]


def test_nodes_map_to_the_row_of_their_problem_or_minus_one():
    layers = sorted(LAYER_OF[f] for f in CPP_FAMILIES)
    other = ConvProblem(n=2, h=8, w=8, c=16, k=16, r=3, s=3, pad=1)
    nodes = [("layer1.0.conv1", PROBLEMS["sm90_gemm"]), (EVIL, PROBLEMS["sm80"]), ("untuned", other)]
    header = render_header(document(), nodes, "Network: net, batch 32, 3 nodes.")
    lines = node_lines(header)
    assert lines[0] == '{"layer1.0.conv1", ' + f'{layers.index(LAYER_OF["sm90_gemm"])}' + "},"
    assert lines[1] == "{" + cpp_string(EVIL) + f", {layers.index(LAYER_OF['sm80'])}" + "},"
    assert lines[2] == '{"untuned", -1},'
    assert "constexpr int kNodeCount = 3;" in header and "// (-1: none tuned on this GPU). Network: net" in header


def test_no_network_leaves_an_empty_node_table(header):
    assert "constexpr int kNodeCount = 0;" in header and node_lines(header) == ["{nullptr, -1},  // no network: kNodeCount is 0"]


@pytest.mark.parametrize("dtype, element", [("bf16", "cutlass::bfloat16_t")])
def test_a_layers_types_key_its_row_and_its_kernels_elements(dtype, element):
    problem = dataclasses.replace(PROBLEMS["sm90_conv"], **dtype_fields(dtype))
    config = make_config(problem, "sm90_conv", PARAMS["sm90_conv"])
    typed_entry = {**entry("sm90_conv"), "problem": problem_to_dict(problem), "kernel": config.name}
    header = render_header(document(typed=typed_entry))
    [row] = rows_of(header)
    code, literals = strip_literals(row)
    assert ROW.match(code) and literals[-1] == problem.dtype_key == f"{dtype}_{dtype}_{dtype}_f32"
    assert float(code.rsplit(", ", 4)[1]) == pytest.approx(tolerance(problem), rel=1e-3)  # then transposed, pads
    assert f"{element}, cutlass::layout::TensorNHWC" in header and "cutlass::half_t" not in header.split("kGpuName")[1]


# --- export on the command line: where the header goes, --json, a network's names -------------------------------

NETWORK_PROBLEM = ConvProblem(n=1, h=8, w=8, c=16, k=16, r=3, s=3, pad=1)
SLUG = "nvidia-h100-80gb-hbm3"


def tuned_results(root: Path) -> Path:
    """results/<slug>/best.yaml with one sm80 layer of NETWORK_PROBLEM, as the tuner writes it."""
    from conftest import write_best

    config = make_config(NETWORK_PROBLEM, "sm80", PARAMS["sm80"] | {"split_k": 1})
    header = {key: value for key, value in document().items() if key != "layers"}
    write_best(root / SLUG, "net_layer", {"problem": problem_to_dict(NETWORK_PROBLEM), "family": "sm80",
                                          "params": config.search_params, "kernel": config.name,
                                          "runtime_us": 12.5, "date": "2026-11-24"}, header)
    return root / SLUG


def scoped_model(path, module_names: list[str]):
    """An ONNX model of one conv per name, each named as the newer exporter names nodes (node_conv2d_<i>), with
    the module it came from in its name scopes: the name the importer shows and export writes."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, tensor = [], "x"
    for index, module in enumerate(module_names):
        output = "out" if index == len(module_names) - 1 else f"t{index}"
        node = helper.make_node("Conv", [tensor, "w"], [output], name=f"node_conv2d_{index}", pads=[1, 1, 1, 1])
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(["", module, f"conv2d_{index}"])
        nodes.append(node)
        tensor = output
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.ones((16, 16, 3, 3), np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def export_cli(capsys, *argv: str) -> tuple[int, str, str]:
    from tuner.cli import main as cli
    code = cli.main(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_networks_header_leaves_the_committed_one_alone(tmp_path, capsys):
    import subprocess

    folder = tuned_results(tmp_path / "results")
    model = scoped_model(tmp_path / "model.onnx", ["features.0", "features.1"])
    assert export_cli(capsys, "--results-dir", str(tmp_path / "results"))[0] == 0
    committed = (folder / "best_configs.h").read_bytes()
    code, out, err = export_cli(capsys, "--results-dir", str(tmp_path / "results"), "--onnx", str(model))
    assert code == 0, err
    written = folder / "networks" / "model_b1" / "best_configs.h"
    assert '{"features.0", 0},' in written.read_text() and (folder / "best_configs.h").read_bytes() == committed
    assert f"wrote{written}" in "".join(out.split())  # the console folds the long path
    repo = Path(__file__).resolve().parents[1]
    relative = Path("results") / written.relative_to(tmp_path / "results")
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", str(relative)], cwd=repo).returncode == 0
    asked = tmp_path / "elsewhere"
    code, _, err = export_cli(capsys, "--results-dir", str(tmp_path / "results"), "--onnx", str(model),
                              "--output-dir", str(asked))
    assert code == 0, err
    assert '{"features.1", 0},' in (asked / SLUG / "best_configs.h").read_text()


def test_export_json_says_what_was_written(tmp_path, capsys):
    import json

    tuned_results(tmp_path / "results")
    model = scoped_model(tmp_path / "model.onnx", ["a", "b"])
    code, out, err = export_cli(capsys, "--results-dir", str(tmp_path / "results"), "--onnx", str(model), "--json")
    assert code == 0, err
    [record] = json.loads(out)["exports"]  # stdout holds the document alone; the lines went to stderr
    assert record["gpu"] == SLUG and record["header"].endswith("networks/model_b1/best_configs.h")
    assert record["library"] is None  # no sm90_dsl layer: no library
    assert record["network"] == {"name": "model.onnx", "batch": 1, "nodes": 2, "without_tuned_kernel": []}
    assert "wrote" in err
    code, out, _ = export_cli(capsys, "--results-dir", str(tmp_path / "results"), "--json")
    assert json.loads(out)["exports"][0]["network"] is None


@pytest.mark.parametrize("module", [EVIL, 'a"b', "back\\slash", "end */ int x; /*", "line\nbreak",
                                    "}; int injected = 1; {", "??=trigraph"])
def test_module_names_from_onnx_metadata_stay_escaped_in_the_header(tmp_path, capsys, module):
    tuned_results(tmp_path / "results")
    model = scoped_model(tmp_path / "model.onnx", [module, "plain"])
    code, _, err = export_cli(capsys, "--results-dir", str(tmp_path / "results"), "--onnx", str(model),
                              "--output-dir", str(tmp_path / "out"))
    assert code == 0, err
    header = (tmp_path / "out" / SLUG / "best_configs.h").read_text()
    lines = node_lines(header)
    assert lines[0] == "{" + cpp_string(module) + ", 0}," and lines[1] == '{"plain", 0},'
    for line in header.splitlines():
        if line.lstrip().startswith("//"):
            assert not line.endswith("\\"), line
            continue
        code_part, _ = strip_literals(line)
        assert "injected" not in code_part and "evil" not in code_part and "*/" not in code_part, line
