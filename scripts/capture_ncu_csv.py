"""Record a real `ncu --csv --page details` report of one tuned candidate, for the parser tests.
Run on a GPU machine: python scripts/capture_ncu_csv.py OUT.csv"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compile import Compiler  # noqa: E402
from tuner.device import query_device  # noqa: E402
from tuner.problem import ConvProblem, DataType, problem_to_dict  # noqa: E402
from tuner.profile import ncu_command  # noqa: E402
from tuner.space import reference_config  # noqa: E402
from tuner.worker import worker_env  # noqa: E402

conv_1 = ConvProblem(n=1, h=32, w=32, c=32, k=32, r=3, s=3, pad=1, output_type=DataType.f32)
result = Compiler(query_device().arch_flag).compile(reference_config(conv_1))
request = {"op": "evaluate", "library": str(result.library), "problem": problem_to_dict(conv_1),
           "split_k": 1, "seed": 1, "validate_only": True}
subprocess.run(ncu_command(shutil.which("ncu"), Path(sys.argv[1]), request), env=worker_env(dict(os.environ)),
               check=True)
