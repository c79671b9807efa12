"""How the sm90_dsl family's kernels are built: a request to its own builder (build.py, or serve.py kept running),
keyed by the build spec and by the DSL's version and the builder's sources; and whether this machine has the DSL."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tuner.families.base import BuildRequest
from tuner.families.dsl_common.toolchain import builder_request, sources_digest
from tuner.families.dsl_common.toolchain import dsl_version, toolchain_problem  # noqa: F401 (the family's own)
from tuner.families.sm90_dsl.space import FAMILY, Sm90DslConfig

# What the compiled kernel depends on besides its build spec: a change to any of them is a new kernel.
BUILDER_SOURCES = ("kernel.py", "mainloop.py", "consumers.py", "producers.py", "epilogue.py", "geometry.py", "tf32.py",
                   "stream_k.py", "stream_plan.py", "cluster_split.py", "residency.py", "im2col.py", "box.py",
                   "build.py", "spec.py", "entry.c.in", "serve.py", "../dsl_common/build_tools.py",
                   "../dsl_common/serve.py")


@lru_cache(maxsize=1)
def builder_digest() -> str:
    return sources_digest(Path(__file__).parent, BUILDER_SOURCES)


def build_request(config: Sm90DslConfig) -> BuildRequest:
    return builder_request(FAMILY, config.build_spec().to_json(), "tuner.families.sm90_dsl", builder_digest())
