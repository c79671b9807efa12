"""The command line behind tune.py: the top-level parser (the tuning flags, each command listed), and each command
handed its arguments: tuning (cli/tune.py), export (cli/export.py) and the others."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import optuna
from rich.console import Console

from tuner.pipeline import nightly
from tuner.core.errors import UsageError
from tuner.build.nvcc import ToolchainError
from tuner.search.costmodel import PRIOR_PICKS
from tuner.cli.diagnose import diagnose_command
from tuner.measure.evaluate import GpuUnavailable, NoGpu
from tuner.measure.timing import ProfilerAttached
from tuner.families import registry
from tuner.families.base import SpaceError
from tuner.analysis.ncu import NcuReportError
from tuner.importers.network import NetworkError
from tuner.cli.export import export_command
from tuner.cli.network_args import add_network_arguments
from tuner.core.problem import ProblemError
from tuner.core.layers import LONG_SHAPE, SHORT_SHAPE, TRANSPOSED_HELP
from tuner.cli.tables import add_output_arguments
from tuner.store.journal import GRACE_S, MIN_GRACE_S
from tuner.store.results import ResultsError
from tuner.search.study import request_stop
from tuner.cli.tune import EXIT_ENVIRONMENT, tune

REPO = Path(__file__).resolve().parents[2]
EXIT_USAGE = 2


COMMAND_SUMMARIES = {
    "diagnose": "explain an Nsight Compute report (any form): the GPU, the bound, the waste",
    "export": "write results/<gpu>/best_configs.h for a C++ build",
    "bench": "prove the search against exhaustive landscapes; time best.yaml beside cuDNN, cuBLAS, PyTorch",
    "plots": "draw a GPU's results: optimisation history, importances, roofline share",
    "report": "a network's convolution time, tuned against cuDNN and PyTorch (--onnx / --torchvision)",
    "predict": "rank a layer's space for a GPU that need not be present, and show a configuration's waste",
    "e2e": "a whole network's forward with the tuned kernels in PyTorch against eager and torch.compile",
    "results": "pack or unpack results/<gpu>/'s untracked studies, history, logs and plots to move them between hosts",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py",
        description="Find the fastest correct CUTLASS conv2d fprop kernel per layer on this GPU, searching every "
                    "kernel family the GPU can run and the layer allows ("
                    + "; ".join(f"{family.name}: {family.summary}" for family in registry.families().values())
                    + ") in one study per layer. The commands below each take their own --help.")
    commands = parser.add_subparsers(title="commands", metavar="[COMMAND]", dest="command")
    for name, summary in COMMAND_SUMMARIES.items():
        # Listed here for --help; main() hands a command's arguments to its own parser.
        commands.add_parser(name, help=summary, add_help=False)
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--layer", help="layer name from the layer table (see --list-layers)")
    target.add_argument("--layers", help="comma-separated layer names or patterns (e.g. 'r50_*_b32'), "
                                         "tuned one after another")
    target.add_argument("--all", action="store_true", help="every layer of the layer table (the nightly retune)")
    target.add_argument("--shape", help=f"ad-hoc problem {SHORT_SHAPE} (pad, stride, dilation on both axes), or per "
                                        f"axis {LONG_SHAPE}; f16 in/out, f32 accumulation (--dtype: another type); "
                                        f"{TRANSPOSED_HELP}")
    target.add_argument("--list-layers", action="store_true", help="print the layer table and exit")
    add_network_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument("--write-layers", type=Path, help="with --onnx/--torchvision: write the imported "
                                                          "convolutions as a layers.yaml (for --layers-file) and exit")
    parser.add_argument("--epilogue", help="with --shape: what the layer does after the conv, parts joined by '+': "
                                           "scale, bias (per output channel), residual[*BETA] (a tensor shaped "
                                           "as the output), and one of relu, gelu, silu; e.g. "
                                           "scale+bias+residual+relu (default none; a layer table's layer takes "
                                           "an 'epilogue:' field)")
    parser.add_argument("--trials", type=int, default=64,
                        help="candidates to compile and measure per layer in this run, added to the layer's "
                             "study (impossible and already-measured configurations do not count; default 64)")
    parser.add_argument("--run-id", help="name of this run; a run started again under the same id only does what "
                                         "is left (default: unique per invocation, nightly-<UTC date> with --all/--layers)")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help=f"exit with status 3 if a layer's best got more than "
                             f"{nightly.REGRESSION_THRESHOLD * 100:.0f} %% slower than the previous best")
    parser.add_argument("--gpus", help="comma-separated GPU indices: one worker process per GPU on the same studies")
    parser.add_argument("--storage", help="Optuna storage URL (e.g. postgresql://user@host/db for several hosts); "
                                          "default: a journal file in results/<gpu>/ (several processes of one host)")
    parser.add_argument("--seed", type=int, default=0, help="TPE sampler seed, 0 to 2^32-1 (default 0)")
    parser.add_argument("--stale-after", type=int, default=GRACE_S, metavar="SECONDS",
                        help="with an RDB --storage shared by several hosts: seconds without a heartbeat after which "
                             f"a host's trials count as a dead host's and are measured again (default {GRACE_S}; "
                             f"at least {MIN_GRACE_S}; heartbeats come every 20 s or a third of this)"),
    parser.add_argument("--prior", type=int, default=PRIOR_PICKS,
                        help="queue this many of the cost model's best picks before the search, shared among the "
                             "layer's families (at least 3 each), each unless the study has it already "
                             "(default 8; 0: none)")
    parser.add_argument("--jobs", type=int, help="parallel nvcc jobs (default: cores, capped by free memory)")
    parser.add_argument("--top", type=int, default=3, help="configurations re-measured side by side at the end (default 3)")
    parser.add_argument("--confirm-rounds", type=int, default=3,
                        help="rounds of the side-by-side re-measurement; the median round counts (default 3)")
    parser.add_argument("--ncu-top", type=int, default=3,
                        help="profile this many of the fastest finalists with Nsight Compute (default 3)")
    parser.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute; the static diagnosis only")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a candidate may run on the GPU before it counts as hung (default 120)")
    parser.add_argument("--layers-file", type=Path, default=REPO / "search_spaces" / "layers.yaml",
                        help="layer table (default search_spaces/layers.yaml)")
    parser.add_argument("--family", help="comma-separated kernel families to search (default: every family this GPU "
                                         "and the layer allow, less those a family that runs the layer supersedes: "
                                         "sm90_dsl, where installed, in place of sm90_conv and sm90_gemm; known: "
                                         f"{', '.join(registry.names())})")
    parser.add_argument("--space-file", type=Path, action="append",
                        help="a family's search space, in place of search_spaces/<family>.yaml (repeatable, one "
                             "per family; the file's 'family:' key says whose)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where results/<gpu>/ lives (default results/ in the repository)")
    parser.add_argument("--cache-dir", type=Path, help="compile cache (default ~/.cache/cutlass-conv-tuner/compile "
                                                       "or $CUTLASS_TUNER_CACHE)")
    return parser


def fail(message: str, code: int) -> int:
    message = " ".join(str(message).split())  # one line whatever the message holds
    if len(message) > 1000:
        message = message[:1000] + f"... ({len(message)} characters)"
    print(f"error: {message}", file=sys.stderr)
    return code


def _interrupt(signum, frame) -> None:
    """SIGTERM or Ctrl-C: the candidate in hand is finished and recorded, then the run stops and the
    unstarted ones are marked for a retry. A second signal stops at once."""
    request_stop()


def bench_command(argv: list[str], console: Console) -> int:
    from tuner.cli import bench
    return bench.main(argv, console)


def plots_command(argv: list[str], console: Console) -> int:
    from tuner.cli import plots
    return plots.main(argv, console)


def report_command(argv: list[str], console: Console) -> int:
    from tuner.cli import report
    return report.main(argv, console)


def predict_command(argv: list[str], console: Console) -> int:
    from tuner.cli import predict
    return predict.main(argv, console)


def e2e_command(argv: list[str], console: Console) -> int:
    from tuner.cli import e2e
    return e2e.main(argv, console)


def results_command(argv: list[str], console: Console) -> int:
    from tuner.cli import results
    return results.main(argv, console)


COMMANDS = {"diagnose": diagnose_command, "export": export_command, "bench": bench_command, "plots": plots_command,
            "report": report_command, "predict": predict_command, "results": results_command, "e2e": e2e_command}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    from tuner.cli.tables import output_console

    # A JSON or CSV document owns stdout; what the command says besides goes to stderr. argparse takes a flag's
    # prefix too (--js, --cs).
    console = output_console(stderr=any(len(arg) > 2 and ("--json".startswith(arg) or "--csv".startswith(arg))
                                        for arg in argv))
    try:
        if argv[:1] and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:], console)
        return tune(build_parser().parse_args(argv), argv, console)
    except (UsageError, ProblemError, SpaceError, NcuReportError, ResultsError, NetworkError, NoGpu,
            ProfilerAttached) as error:
        return fail(str(error), EXIT_USAGE)
    except (ToolchainError, GpuUnavailable) as error:
        return fail(str(error), EXIT_ENVIRONMENT)
    except OSError as error:  # a results folder that is read-only, a file, or under a file
        where = f" {error.filename}" if error.filename else ""
        return fail(f"cannot write{where}: {error.strerror or type(error).__name__}", EXIT_USAGE)
    except KeyboardInterrupt:
        return fail("interrupted: everything measured so far is in the study; run again to resume", 130)
