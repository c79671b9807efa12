"""results/<gpu>/best.yaml -> results/<gpu>/best_configs.h: the tuned kernels for a C++ build.
One header per GPU, each in its own namespace; a build includes the header of the GPU it targets
(or several, and picks at run time with matches_device). Every string from best.yaml reaches C++
as an escaped literal and every number as a checked integer or float; names become identifiers
only through cpp_identifier. sm90_dsl layers are CuTe DSL objects, built beside the header into
dsl/libtuned_dsl.a (tuner/pipeline/dsl_export.py) and declared in it against their C entry points."""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

from tuner.core import gpus
from tuner.build.codegen import TEMPLATES, include_lines, problem_struct
from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.pipeline import dsl_export
from tuner.families.base import CppPieces, KernelConfig, read_template
from tuner.core.problem import ConvProblem
from tuner.store.best import read_best
from tuner.store.results import BEST_FILE, ResultsError, atomic_write, replacing
from tuner.store.schema import BestEntry
from tuner.search.space import entry_config, static_problems
from tuner.measure.validate import tolerance
from tuner.core.yamlfile import brief

HEADER_FILE = "best_configs.h"
_SAFE_CHARS = re.compile(r"[A-Za-z0-9 _.,:;+\-=/()\[\]@#%^&*!~|<>{}]")


# C++ keywords a layer or GPU name could spell; such a name gets a trailing underscore.
CPP_KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char class const constexpr continue
decltype default delete do double else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not nullptr operator or private protected public register return short signed sizeof
static struct switch template this throw true try typedef typeid typename union unsigned using virtual void volatile
while xor""".split())
# What the header declares for each layer besides its alias: <alias>_runner, and <alias>_detail (3.x kernels).
ALIAS_SUFFIXES = ("", "_runner", "_detail")


@functools.cache
def template_names() -> frozenset[str]:
    """Every identifier the header's templates spell unqualified: its types, tables and functions, the families'
    runners and helpers, the namespaces it reaches (cutlass, cute, std). A layer or GPU named like one would
    redeclare or hide it in the header's namespace, and the header would not compile: it gets a trailing underscore."""
    files = [*TEMPLATES.iterdir(), *Path(registry.__file__).parent.glob("*/templates/*")]
    code = (re.sub(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"", " ", path.read_text(), flags=re.DOTALL)
            for path in files if path.is_file())  # comments and strings declare nothing
    # a name after '::', '.' or '->' is looked up in its scope, where no layer alias can hide it
    return frozenset(word for text in code for word in re.findall(r"(?<!::)(?<!\.)(?<!->)\b[A-Za-z_]\w*", text))


def cpp_identifier(name: str) -> str:
    identifier = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    identifier = identifier if not identifier[0].isdigit() else "_" + identifier
    return identifier + "_" if identifier in CPP_KEYWORDS or identifier in template_names() else identifier


def layer_aliases(names: list[str]) -> dict[str, str]:
    """Each layer's C++ alias; two layers whose names would declare one C++ name (conv-1 and conv_1,
    or conv and conv_runner) are refused with both names."""
    aliases = {name: cpp_identifier(name) for name in names}
    declared: dict[str, str] = {}
    for name, alias in aliases.items():
        for suffix in ALIAS_SUFFIXES:
            other = declared.setdefault(alias + suffix, name)
            if other != name:
                raise ResultsError(f"best.yaml layers {other!r} and {name!r} both become the C++ name "
                                   f"{alias + suffix!r} in the header: rename one of them")
    return aliases


def cpp_string(text: object) -> str:
    """A C++ string literal holding `text`: anything but plain characters as a 3-digit octal
    escape of its UTF-8 bytes, so no quote, backslash, newline or trigraph survives."""
    out = []
    for char in str(text):
        if _SAFE_CHARS.fullmatch(char) and char != "?":
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8"))
    return '"' + "".join(out) + '"'


def cpp_int(value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise ResultsError(f"best.yaml: {what} must be a whole number, got {brief(value)}")
    return str(value)


def cpp_double(value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ResultsError(f"best.yaml: {what} must be a finite number, got {brief(value)}")
    return f"{float(value):.3f}"


def _row(name: str, entry: BestEntry, problem: ConvProblem, config: KernelConfig) -> str:
    family = registry.family_of(config)
    launch = family.rules.launch_args(config, problem)
    ints = [problem.n, problem.h, problem.w, problem.c, problem.k, problem.r, problem.s, *problem.pads,
            *problem.strides, *problem.dilations, problem.groups, launch.kernel_channels]
    values = [cpp_string(name), *(cpp_int(v, f"layer {name!r} problem") for v in ints), cpp_string(family.name),
              *(cpp_int(v, f"layer {name!r} run-time argument") for v in (launch.split_k, launch.raster, launch.swizzle)),
              *(cpp_int(v, f"layer {name!r} tile") for v in (config.tile.m, config.tile.n, config.tile.k)),
              cpp_double(entry.runtime_us, f"layer {name!r} runtime_us"),
              cpp_string(config.name), cpp_string(entry.date),
              cpp_string(problem.epilogue.key),
              *("true" if on else "false" for on in (problem.epilogue.scale, problem.epilogue.bias,
                                                      problem.epilogue.residual)),
              repr(float(problem.epilogue.residual_scale)),  # finite: Epilogue checks it
              cpp_string(problem.epilogue.activation.value),
              cpp_string(problem.dtype_key), f"{tolerance(problem):.3e}",
              "true" if problem.transposed else "false",
              *(cpp_int(v, f"layer {name!r} output padding") for v in problem.output_paddings)]
    return "    {" + ", ".join(values) + "},"


def recorded_device(device: dict, major: int, minor: int) -> DeviceFacts:
    """The facts the static checks take, for the GPU best.yaml names: the table's figures for a known GPU,
    else its compute capability's limits (the nearest known one of its major version, or the smallest)."""
    sm_count = device.get("sm_count")
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or not 0 < sm_count < 100_000:
        raise ResultsError(f"best.yaml: device sm_count {brief(sm_count)} is not a count of SMs")
    try:
        known = gpus.device_facts(gpus.lookup(str(device.get("name", ""))[:200]))
        if known.cc_major * 10 + known.cc_minor == major * 10 + minor:
            return dataclasses.replace(known, sm_count=sm_count)
    except gpus.UnknownGpu:
        pass
    arches = (gpus.SM80, gpus.SM86, gpus.SM89, gpus.SM90)
    same = [a for a in arches if a.cc_major == major and a.cc_minor <= minor]
    arch = same[-1] if same else gpus.SM86
    return DeviceFacts(str(device.get("name", "")), major, minor, sm_count, arch.smem_optin_per_block_bytes,
                       arch.smem_per_sm_bytes, arch.registers_per_sm, 0, arch.max_warps_per_sm * 32,
                       arch.max_blocks_per_sm)


def best_device(document: dict) -> DeviceFacts:
    """The facts of the GPU a best.yaml document was tuned on (recorded_device)."""
    device = document.get("device")
    if not isinstance(device, dict):
        raise ResultsError("best.yaml: device must be a mapping")
    try:
        major, minor = (int(part) for part in str(device["compute_capability"]).split("."))
    except (KeyError, ValueError):
        raise ResultsError(f"best.yaml: device compute_capability {brief(device.get('compute_capability'))} "
                           "is not MAJOR.MINOR") from None
    return recorded_device(device, major, minor)


def checked_config(name: str, entry: BestEntry, facts: DeviceFacts) -> KernelConfig:
    """The entry's kernel, checked as the study checked it before measuring: no knob the family does not
    have, the kernel name the parameters make, and none of the family's static problems on this GPU
    (a hand-edited tile 8x8x8 would otherwise fail a CUTLASS static_assert in the user's build)."""
    config = entry_config(entry, name, entry.problem)
    unknown = sorted(set(entry.knobs) - set(config.search_params))
    if unknown:
        raise ResultsError(f"best.yaml layer {name!r}: {entry.family} has no knob {brief(', '.join(unknown))}")
    if config.name != entry.kernel:
        raise ResultsError(f"best.yaml layer {name!r}: its parameters and problem make kernel {config.name}, not "
                           f"the recorded {brief(entry.kernel)} (edited by hand?)")
    problems = static_problems(config, entry.problem, facts)
    if problems:
        raise ResultsError(f"best.yaml layer {name!r}: kernel {config.name} cannot run on {facts.name}: "
                           f"{brief(problems[0], 200)}")
    return config


def node_rows(nodes: list[tuple[str, ConvProblem]], layers: list[tuple[str, ConvProblem]]) -> list[str]:
    """One row per network node: its name and the index in kLayers of the layer with its problem, or -1."""
    index_of: dict[ConvProblem, int] = {}
    for index, (_, problem) in enumerate(layers):
        index_of.setdefault(problem, index)
    return [f"    {{{cpp_string(node)}, {index_of.get(problem, -1)}}}," for node, problem in nodes]


def render_header(document: dict, nodes: list[tuple[str, ConvProblem]] = (), network: str = "",
                  dsl_version: str | None = None) -> str:
    """The header's text. A layer of an object family (sm90_dsl) is declared against its entry-point table in
    dsl/libtuned_dsl.a, which export_header builds; `dsl_version` names the DSL that builds it (default: the
    installed one)."""
    device, toolchain, layers = document.get("device"), document.get("toolchain") or {}, document["layers"]
    if not device or not layers:
        raise ResultsError("best.yaml has no device or no layers: tune a layer first")
    if not isinstance(device, dict) or not isinstance(toolchain, dict):
        raise ResultsError("best.yaml: device and toolchain must be mappings")
    facts = best_device(document)
    major, minor = facts.cc_major, facts.cc_minor
    aliases, rows, for_each, families, configs, problems = [], [], [], {}, {}, []
    dsl_layers = scaled_dsl_layers = 0
    alias_of = layer_aliases(sorted(map(str, layers)))
    namespace = cpp_identifier(str(device.get("slug", "")))
    for index, (name, raw) in enumerate(sorted(layers.items())):
        entry = BestEntry.parse(str(name), raw)
        problem = entry.problem
        problems.append((name, problem))
        config = checked_config(str(name), entry, facts)
        family = registry.family_of(config)
        alias = alias_of[str(name)]
        if dsl_export.is_object_family(config):  # a CuTe DSL kernel: an object in dsl/, not a template
            dsl_layers += 1
            scaled_dsl_layers += dsl_export.takes_scales(config)
            aliases.append(dsl_export.kernel_declaration(config, alias, dsl_export.dsl_symbol(namespace, alias)))
        else:
            families[family.name] = family
            configs.setdefault(family.name, []).append(config)
            aliases.append(family.emitter.kernel_alias(config, alias))
            aliases.append(f"using {alias}_runner = {family.emitter.cpp().runner_class}<{alias}>;\n")
        rows.append(_row(name, entry, problem, config))
        for_each.append(f"  X({alias}_runner, {index})")
    pieces = [family.emitter.cpp(configs[name]) for name, family in families.items()]
    if dsl_layers:
        runner = dsl_export.runner_source(dsl_version or dsl_export.installed_dsl_version(), scaled_dsl_layers > 0)
        pieces.append(CppPieces(dsl_export.INCLUDES, (runner,), "DslRunner"))
    includes = tuple(dict.fromkeys(header for piece in pieces for header in piece.includes))
    return read_template(TEMPLATES / "best_configs.h.in").substitute(
        gpu_name=re.sub(r"[^A-Za-z0-9 ._-]", "?", str(device.get("name", ""))),
        slug=re.sub(r"[^A-Za-z0-9._-]", "?", str(device.get("slug", ""))),
        gpu_name_literal=cpp_string(device.get("name", "")),
        namespace=namespace, upper_namespace=namespace.upper(),
        cc=cpp_int(major * 10 + minor, "compute capability"), sm_count=cpp_int(device.get("sm_count"), "sm_count"),
        nvcc=cpp_string(toolchain.get("nvcc", "")), cutlass=cpp_string(toolchain.get("cutlass", "")),
        driver=cpp_string(toolchain.get("driver", "")),
        includes=include_lines(includes), problem=problem_struct(),
        preamble="\n".join(dict.fromkeys(source for piece in pieces for source in piece.preamble)),
        runners="\n".join(dict.fromkeys(source for piece in pieces for source in piece.runners)),
        aliases="\n".join(aliases), rows="\n".join(rows), layer_count=len(rows),
        for_each=" \\\n".join(for_each),
        network=re.sub(r"[^A-Za-z0-9 ._,:-]", "?", network) or "None was.",
        node_rows="\n".join(node_rows(list(nodes), problems)) or "    {nullptr, -1},  // no network: kNodeCount is 0",
        node_count=len(nodes),
    )


def object_layers(document: dict) -> list[dsl_export.ObjectLayer]:
    """The layers whose kernels reach the header as built objects (sm90_dsl), in kLayers' order."""
    layers = document.get("layers") or {}
    alias_of = layer_aliases(sorted(map(str, layers)))
    found = []
    for name, raw in sorted(layers.items()):
        entry = BestEntry.parse(str(name), raw)
        config = entry_config(entry, name, entry.problem)
        if dsl_export.is_object_family(config):
            found.append(dsl_export.ObjectLayer(str(name), alias_of[str(name)], config))
    return found


def export_header(folder: Path, nodes: list[tuple[str, ConvProblem]] = (), network: str = "",
                  cache_dir: Path | None = None, output: Path | None = None) -> Path:
    """The header of results/<gpu>/ `folder`'s best.yaml, written into `output` (default: `folder`) with the
    sm90_dsl layers' library beside it. `nodes`: a network's convolutions (node name, problem) for the header's
    node table. sm90_dsl layers' kernels are built again through the compile cache (`cache_dir`, default the
    tuner's) into dsl/libtuned_dsl.a beside the header. Everything is checked and built before anything is
    written: a layer that cannot be exported is one ResultsError naming it, and the header and library stay as
    they were."""
    if not (folder / BEST_FILE).exists():
        raise ResultsError(f"{folder / BEST_FILE} not found: tune a layer on this GPU first, or pass --gpu SLUG")
    document = read_best(folder)
    output = folder if output is None else output
    path = output / HEADER_FILE
    built = object_layers(document)
    if not built:
        text = render_header(document, nodes, network)
        atomic_write(path, text)
        dsl_export.install_library(None, output)
        return path
    dsl_export.check_toolchain(built)
    text = render_header(document, nodes, network, dsl_export.installed_dsl_version())
    namespace = cpp_identifier(str(document["device"].get("slug", "")))
    with dsl_export.scratch_folder(output) as scratch:
        archive = dsl_export.build_library(built, namespace, document, cache_dir, Path(scratch))
        with replacing(path) as handle:  # the header goes in right after its library
            handle.write(text)
            dsl_export.install_library(archive, output)
    return path
