"""The long-lived dsl_direct builder (tuner/families/dsl_common/serve.py, with this family's build)."""
from __future__ import annotations

import sys

from tuner.families.dsl_common.serve import serve
from tuner.families.dsl_direct.build import import_toolchain, run_build

if __name__ == "__main__":
    sys.exit(serve(run_build, import_toolchain))
