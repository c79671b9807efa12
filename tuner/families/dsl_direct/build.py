"""Build one dsl_direct kernel into a self-contained candidate library.

    python -m tuner.families.dsl_direct.build SPEC.json OUT_DIR

SPEC.json holds a DirectBuildSpec (spec.py). OUT_DIR receives kernel.h and kernel.o (the DSL's export_to_c), entry.c
(the tuner's C entry points, from entry.c.in), candidate.so, ptxas.txt (the cubin's resource line) and build.json.
Exit 0 on success; 1 with a one-line reason as the last stderr line when the kernel cannot be built."""
from __future__ import annotations

import json
import string
import sys
import time
from pathlib import Path

from tuner.families.dsl_common.build_tools import (BuildError, answer_build, build_main, compile_and_export,
                                                   dsl_lib_dir, dsl_version_text, link_candidate, preload_runtime,
                                                   ptxas_report, sm90_blocks_per_sm, stage_seconds)

HERE = Path(__file__).resolve().parent
PREFIX = "k0"


def import_toolchain() -> Path:
    """Load the DSL's runtime and import the DSL and the kernel module (seconds on a cold host: the long-lived
    builder does it once). Returns the DSL's library folder."""
    lib_dir = dsl_lib_dir()
    preload_runtime(lib_dir)
    import cutlass.cute  # noqa: F401
    from . import launcher  # noqa: F401
    return lib_dir


def build(spec_text: str, out_dir: Path) -> dict:
    from .spec import DirectBuildSpec, SpecError
    started = time.perf_counter()
    try:
        spec = DirectBuildSpec.from_json(spec_text)
    except SpecError as error:
        raise BuildError(str(error)) from None
    lib_dir = import_toolchain()
    from .launcher import build_launcher
    imported = time.perf_counter()
    launcher, args = build_launcher(spec)

    resources, compiled_at, exported = compile_and_export(launcher, args, out_dir, PREFIX)

    p, t, e = spec.problem, spec.tile, spec.epilogue
    grid = (*spec.grid(), 1, 1, 1)
    blocks_per_sm = sm90_blocks_per_sm(resources["registers"], resources["static_smem"] + spec.smem_bytes(),
                                       t.threads())
    attributes = (resources["registers"], resources["static_smem"], spec.smem_bytes(), resources["stack"],
                  t.threads(), blocks_per_sm)
    fields = {
        "name": f"dsl_direct {t.mapping} {t.tile_p}x{t.tile_q} c{t.channels} x{t.columns} g{p.group_width}",
        "prefix": PREFIX,
        "problem": ", ".join(str(v) for v in (p.n, p.h, p.w, p.c, p.c, p.r, p.s, p.pad_h, p.pad_w, p.stride_h,
                                               p.stride_w, p.dilation_h, p.dilation_w, p.c // p.group_width)),
        "p": p.p, "q": p.q,
        "grid": ", ".join(str(v) for v in grid),
        "attributes": ", ".join(str(v) for v in attributes),
        "has_scale": int(e.scale), "has_bias": int(e.bias),
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
        "grid": list(grid[:3]), "cluster": [1, 1, 1],
        "threads": t.threads(), "registers": resources["registers"], "dynamic_smem_bytes": spec.smem_bytes(),
        "static_smem_bytes": resources["static_smem"],
        "seconds": stage_seconds(started, imported, compiled_at, exported, linked),
    }
    (out_dir / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def run_build(spec_text: str, out_dir: Path) -> tuple[int, str]:
    return answer_build(build, spec_text, out_dir)


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, "python -m tuner.families.dsl_direct.build", __doc__.split("\n")[0], run_build)


if __name__ == "__main__":
    sys.exit(main())
