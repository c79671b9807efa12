"""Build one sm90 CuTe DSL kernel into a self-contained candidate library.

    python -m tuner.families.sm90_dsl.build SPEC.json OUT_DIR

SPEC.json holds a BuildSpec (tuner/families/sm90_dsl/spec.py). OUT_DIR receives kernel.h and kernel.o (the
DSL's export_to_c: host launch code plus the sm_90a cubin), entry.c (the tuner's C entry points, from
entry.c.in), candidate.so (linked with gcc against the DSL's static runtime and static cudart), ptxas.txt
(ptxas's resource line, read from the cubin) and build.json (timings and launch facts).
Exit 0 on success; 1 with a one-line reason as the last stderr line when the kernel cannot be built."""
from __future__ import annotations

import json
import string
import sys
import time
from pathlib import Path

from tuner.families.dsl_common.build_tools import (BuildError, answer_build, build_main, compile_and_export,
                                                   dsl_lib_dir, dsl_version_text, link_candidate, preload_runtime,
                                                   ptxas_report, stage_seconds)

HERE = Path(__file__).resolve().parent
PREFIX = "k0"


def dynamic_smem_bytes(g) -> int:
    """The SharedStorage struct of kernel.py: stage barriers, then A, B, D buffers, each 1024-aligned."""
    def align(value: int) -> int:
        return -(-value // 1024) * 1024
    size = g.stages * 2 * 8
    size = align(size) + g.stages * g.tile_m * g.tile_k * g.operand_bytes
    size = align(size) + g.stages * g.tile_n * g.tile_k * g.operand_bytes
    size = align(size) + g.epi_stages * g.tile_m * g.epi_n * g.output_bytes
    return size


def import_toolchain() -> Path:
    """Load the DSL's runtime and import the DSL and the kernel module (seconds on a cold host: a
    long-lived builder does it once, before its first request). Returns the DSL's library folder."""
    lib_dir = dsl_lib_dir()
    preload_runtime(lib_dir)
    import cutlass.cute  # noqa: F401
    from . import kernel  # noqa: F401
    return lib_dir


def build(spec_text: str, out_dir: Path) -> dict:
    from .geometry import geometry
    from .spec import BuildSpec, SpecError
    started = time.perf_counter()
    try:
        spec = BuildSpec.from_json(spec_text)
        geometry(spec)  # a spec the kernel cannot take is refused before the DSL's seconds-long import
    except SpecError as error:
        raise BuildError(str(error)) from None
    lib_dir = import_toolchain()
    from .kernel import build_launcher
    imported = time.perf_counter()
    try:
        launcher, args, g = build_launcher(spec)
    except SpecError as error:
        raise BuildError(str(error)) from None

    resources, compiled_at, exported = compile_and_export(launcher, args, out_dir, PREFIX)

    p = spec.problem
    dyn_smem = getattr(launcher, "smem_bytes", None) or dynamic_smem_bytes(g)
    grid = (*g.grid, *g.launch_cluster, 1)
    attributes = (resources["registers"], resources["static_smem"], dyn_smem, resources["stack"], g.threads, 1)
    e = spec.epilogue
    fields = {
        "name": f"sm90_dsl {g.tile_m}x{g.tile_n}x{g.tile_k} {spec.tile.schedule} {g.cluster_m}x{g.cluster_n}",
        "prefix": PREFIX,
        "problem": ", ".join(str(v) for v in (p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h,
                                               p.stride_w, p.dilation_h, p.dilation_w, 1)),  # groups 1
        "p": p.p, "q": p.q,
        "grid": ", ".join(str(v) for v in grid),
        "attributes": ", ".join(str(v) for v in attributes),
        "has_scale": int(e.scale), "has_bias": int(e.bias), "has_residual": int(e.residual), "scaled": int(spec.scaled),
        "beta": repr(float(e.beta)),
        "split_k": g.split_k, "workspace": int(g.uses_workspace), "partial_bytes": g.partial_elements * 4,
        "counters": g.workspace_tiles,
    }
    entry = string.Template((HERE / "entry.c.in").read_text()).substitute(fields)
    (out_dir / "entry.c").write_text(entry)
    link_candidate(out_dir, lib_dir)
    linked = time.perf_counter()

    (out_dir / "ptxas.txt").write_text(ptxas_report(resources))
    info = {
        "spec": json.loads(spec.to_json()),
        "dsl_version": dsl_version_text(),
        "kernel_symbol": resources["kernel"],
        "entry_prefix": PREFIX,
        "grid_rule": "grid = (cluster_m, cluster_n, min(tiles * split_k, 132) // cluster clusters); tiles rounded "
                     "to clusters; stream-K: min(cluster tiles * k tiles, 132 // cluster) clusters",
        "grid": list(grid[:3]), "cluster": list(grid[3:]),
        "threads": g.threads, "registers": resources["registers"], "dynamic_smem_bytes": dyn_smem,
        "static_smem_bytes": resources["static_smem"], "stages": g.stages,
        "m_box": [g.tile_q, g.bp, g.bn], "tiles_mn": [g.m_tiles, g.n_tiles],
        "split_k": g.split_k, "stream_k": g.stream_k, "workspace_bytes": g.workspace_bytes,
        "seconds": stage_seconds(started, imported, compiled_at, exported, linked),
    }
    (out_dir / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def run_build(spec_text: str, out_dir: Path) -> tuple[int, str]:
    return answer_build(build, spec_text, out_dir)


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, "python -m tuner.families.sm90_dsl.build", __doc__.split("\n")[0], run_build)


if __name__ == "__main__":
    sys.exit(main())
