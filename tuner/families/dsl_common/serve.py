"""A long-lived CuTe DSL builder: imports the DSL once, then builds kernel after kernel. The compile cache
(tuner/build/builder_pool.py's BuilderPool) keeps a few of these instead of starting a process a kernel, whose
`import cutlass.cute` alone took 5 s on the H100 host against 0.5-2 s for a kernel's compile, export and
link. Protocol, one JSON object a line: in {"folder": PATH, "source_file": NAME}; out {"rc": 0 or 1,
"log": TEXT}. The answer goes to the stdout it started with; whatever the DSL prints goes to stderr. It
exits at the end of its input. Each DSL family's serve.py runs it with its own build."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from tuner.families.dsl_common.build_tools import BuildError

RunBuild = Callable[[str, Path], "tuple[int, str]"]


def answer(job: dict, run_build: RunBuild) -> dict:
    folder = Path(job["folder"])
    try:
        spec_text = (folder / job["source_file"]).read_text()
    except (OSError, KeyError, TypeError) as error:
        return {"rc": 1, "log": f"build failed: no spec to read ({error})"}
    rc, log = run_build(spec_text, folder)
    return {"rc": rc, "log": log}


def serve(run_build: RunBuild, import_toolchain: Callable[[], Path]) -> int:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the DSL's own prints stay off the answer channel
    try:
        import_toolchain()  # before the first request: a builder started ahead of time is warm when it comes
    except (BuildError, ImportError, OSError):
        pass  # each build then reports what is missing
    for line in sys.stdin:
        if line.strip():
            try:
                job = json.loads(line)
            except json.JSONDecodeError:
                replies.write(json.dumps({"rc": 1, "log": "build failed: a request that is not JSON"}) + "\n")
                continue
            replies.write(json.dumps(answer(job, run_build)) + "\n")
    return 0
