"""The nvidia-cutlass package, imported without letting it read our command line: its generator
module parses sys.argv on import and would answer --help itself."""
from __future__ import annotations

import sys
from pathlib import Path


def _import_cutlass_library():
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        import cutlass_library
    finally:
        sys.argv = saved
    return cutlass_library


cutlass_library = _import_cutlass_library()
library = cutlass_library.library
source_path = Path(cutlass_library.source_path)
