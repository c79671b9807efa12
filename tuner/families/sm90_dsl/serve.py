"""A long-lived sm90_dsl builder: imports the CuTe DSL once, then builds kernel after kernel. The compile
cache (tuner/build/builder_pool.py's BuilderPool) keeps a few of these instead of starting a process a kernel, whose
`import cutlass.cute` alone took 5 s on the H100 host against 0.5-2 s for a kernel's compile, export and
link. Protocol, one JSON object a line: in {"folder": PATH, "source_file": NAME}; out {"rc": 0 or 1,
"log": TEXT}. The answer goes to the stdout it started with; whatever the DSL prints goes to stderr. It
exits at the end of its input."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tuner.families.sm90_dsl.build import BuildError, import_toolchain, run_build


def answer(job: dict) -> dict:
    folder = Path(job["folder"])
    try:
        spec_text = (folder / job["source_file"]).read_text()
    except (OSError, KeyError, TypeError) as error:
        return {"rc": 1, "log": f"build failed: no spec to read ({error})"}
    rc, log = run_build(spec_text, folder)
    return {"rc": rc, "log": log}


def main() -> int:
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
            replies.write(json.dumps(answer(job)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
