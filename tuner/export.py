"""results/<gpu>/best.yaml -> results/<gpu>/best_configs.h: the tuned kernels for a C++ build.
One header per GPU, each in its own namespace; a build includes the header of the GPU it targets
(or several, and picks at run time with matches_device)."""
from __future__ import annotations

import re
from pathlib import Path
from string import Template

from tuner.codegen import TEMPLATES, kernel_alias
from tuner.problem import ConvProblem, ProblemError, problem_from_dict
from tuner.results import BEST_FILE, ResultsError, atomic_write, read_best
from tuner.space import kernel_problem, make_config

HEADER_FILE = "best_configs.h"


def cpp_identifier(name: str) -> str:
    identifier = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return identifier if not identifier[0].isdigit() else "_" + identifier


def _problem(entry: dict, layer: str) -> ConvProblem:
    try:
        return problem_from_dict(entry["problem"])
    except (KeyError, ProblemError) as error:
        raise ResultsError(f"best.yaml layer {layer!r}: unreadable problem ({error})") from None


def _row(name: str, entry: dict, problem: ConvProblem) -> str:
    config = make_config(problem, entry["params"])
    values = [
        f'"{name}"', problem.n, problem.h, problem.w, problem.c, problem.k, problem.r, problem.s, problem.pad,
        problem.stride, problem.dilation, kernel_problem(problem).c, config.split_k,
        config.tile.m, config.tile.n, config.tile.k, config.warps.m, config.warps.n, config.warps.k,
        config.stages, config.swizzle, f'"{config.iterator.value}"', f"{float(entry['runtime_us']):.3f}",
        f'"{config.name}"', f'"{entry.get("date", "")}"',
    ]
    return "    {" + ", ".join(str(v) for v in values) + "},"


def render_header(document: dict) -> str:
    device, toolchain, layers = document.get("device"), document.get("toolchain", {}), document["layers"]
    if not device or not layers:
        raise ResultsError("best.yaml has no device or no layers: tune a layer first")
    aliases, rows, for_each = [], [], []
    for index, (name, entry) in enumerate(sorted(layers.items())):
        problem = _problem(entry, name)
        alias = cpp_identifier(name)
        aliases.append(kernel_alias(make_config(problem, entry["params"]), alias))
        rows.append(_row(name, entry, problem))
        for_each.append(f"  X({alias}, {index})")
    namespace = cpp_identifier(device["slug"])
    major, minor = str(device["compute_capability"]).split(".")
    return Template((TEMPLATES / "best_configs.h.in").read_text()).substitute(
        gpu_name=device["name"], slug=device["slug"], namespace=namespace, upper_namespace=namespace.upper(),
        cc=int(major) * 10 + int(minor), sm_count=int(device["sm_count"]),
        nvcc=toolchain.get("nvcc", ""), cutlass=toolchain.get("cutlass", ""), driver=toolchain.get("driver", ""),
        aliases="\n".join(aliases), rows="\n".join(rows), layer_count=len(rows),
        for_each=" \\\n".join(for_each),
    )


def export_header(folder: Path) -> Path:
    if not (folder / BEST_FILE).exists():
        raise ResultsError(f"{folder / BEST_FILE} not found: tune a layer on this GPU first, or pass --gpu SLUG")
    path = folder / HEADER_FILE
    atomic_write(path, render_header(read_best(folder)))
    return path
