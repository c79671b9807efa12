"""The command line behind tune.py: parse, check, then hand each stage its typed inputs."""
from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import asdict
import statistics
import sys
from pathlib import Path

import optuna
from rich.console import Console

from tuner import report
from tuner.compile import Compiler, CompileResult, ToolchainError, cutlass_version, nvcc_version
from tuner.diagnose import LaunchFacts, diagnose, diagnose_report, kernel_facts, occupancy, render_diagnosis
from tuner.device import DeviceFacts, device_from_dict
from tuner.evaluate import GpuEvaluator, GpuUnavailable, WorkerProcess, query_device_facts
from tuner.measure import Measurement
from tuner.ncu import LaunchStats, NcuReportError
from tuner.profile import Agreement, ProfilerUnavailable, agreement, profile_candidate
from tuner.problem import ConvProblem, Layer, ProblemError, find_layer, load_layers, parse_shape
from tuner.results import append_history, default_storage, gpu_dir, update_best
from tuner.space import (REFERENCE_PARAMS, KernelConfig, SearchSpace, SpaceError, load_space, make_config,
                         static_problems, valid_configs)
from tuner.status import Status
from tuner.study import Tuner, open_study, params_key, ranked, recorded_trials, study_name

REPO = Path(__file__).resolve().parents[1]
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 1


class UsageError(Exception):
    """Bad input: one line, exit code 2, nothing written."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py",
        description="Find the fastest correct CUTLASS sm80 conv2d fprop configuration for a layer on this GPU. "
                    "Other commands: `tune.py diagnose REPORT` (explain an ncu report).")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--layer", help="layer name from the layer table (see --list-layers)")
    target.add_argument("--shape", help="ad-hoc problem N,H,W,C,K,R,S[,pad,stride,dilation]; f16 in/out, f32 accumulation")
    target.add_argument("--list-layers", action="store_true", help="print the layer table and exit")
    parser.add_argument("--trials", type=int, default=64,
                        help="new candidates to compile and measure, added to the layer's existing study "
                             "(impossible and already-measured configurations do not count; default 64)")
    parser.add_argument("--storage", help="Optuna storage URL (e.g. sqlite:///s.db, postgresql://...); "
                                          "default: a journal file in results/<gpu>/")
    parser.add_argument("--seed", type=int, default=0, help="TPE sampler seed (default 0)")
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
    parser.add_argument("--space-file", type=Path, default=REPO / "search_spaces" / "sm80.yaml",
                        help="search space (default search_spaces/sm80.yaml)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                        help="where results/<gpu>/ lives (default results/ in the repository)")
    parser.add_argument("--cache-dir", type=Path, help="compile cache (default ~/.cache/cutlass-conv-tuner/compile "
                                                       "or $CUTLASS_TUNER_CACHE)")
    return parser


def positive(name: str, value: int) -> int:
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")
    return value


def resolve_target(args: argparse.Namespace, layers: dict[str, Layer]) -> Layer:
    if args.layer:
        return find_layer(layers, args.layer)
    if args.shape:
        problem = parse_shape(args.shape)
        name = (f"shape_{problem.n}x{problem.h}x{problem.w}x{problem.c}_k{problem.k}_{problem.r}x{problem.s}"
                f"_p{problem.pad}s{problem.stride}d{problem.dilation}")
        return Layer(name, problem)
    raise UsageError("say what to tune: --layer NAME, --shape N,H,W,C,K,R,S, or --list-layers")


def print_layers(console: Console, layers: dict[str, Layer]) -> None:
    from rich.table import Table

    table = Table(title="layers")
    for column in ("name", "N", "H", "W", "C", "K", "RxS", "pad", "stride", "types", "GFLOP"):
        table.add_column(column, no_wrap=True)
    for name, layer in layers.items():
        p = layer.problem
        table.add_row(name, str(p.n), str(p.h), str(p.w), str(p.c), str(p.k), f"{p.r}x{p.s}", str(p.pad),
                      str(p.stride), p.dtype_key, f"{p.flops / 1e9:.3f}")
    console.print(table)


def confirm(configs: list[tuple[str, KernelConfig]], compiled: dict[KernelConfig, CompileResult],
            evaluator: GpuEvaluator, problem: ConvProblem, rounds: int) -> list[report.Confirmed]:
    """Re-measure the finalists and the reference interleaved, so that their ratios are fair;
    each gets the median of its rounds."""
    runs: dict[str, list] = {label: [] for label, _ in configs}
    for _ in range(rounds):
        for label, config in configs:
            evaluation = evaluator.evaluate(compiled[config.compiled].library, problem, config.split_k)
            if evaluation.status is Status.ok:
                runs[label].append(evaluation)
    confirmed = []
    for label, config in configs:
        if not runs[label]:
            continue
        middle = sorted(runs[label], key=lambda e: e.measurement.median_us)[len(runs[label]) // 2]
        ptxas = compiled[config.compiled].ptxas
        confirmed.append(report.Confirmed(
            label, config, middle.measurement, max(e.error for e in runs[label]), middle.grid_blocks,
            middle.attributes, ptxas.spill_bytes if ptxas else None))
    return confirmed


def profile_finalists(rows: list[report.Confirmed], facts: dict[str, LaunchFacts],
                      compiled: dict[KernelConfig, CompileResult], problem: ConvProblem, top: int,
                      console: Console) -> dict[str, tuple[LaunchStats, list[Agreement]]]:
    """ncu on the fastest `top` rows; where ncu cannot run, say so once and go on without it."""
    profiles = {}
    for row in sorted(rows, key=lambda r: r.measurement.median_us)[:top]:
        try:
            stats = profile_candidate(compiled[row.config.compiled].library, problem, row.config.split_k)
        except ProfilerUnavailable as error:
            console.print(f"[yellow]ncu: {error}; the waste table is the static diagnosis alone[/]")
            break
        profiles[row.label] = (stats, agreement(facts[row.label], stats))
    return profiles


def best_entry(layer: Layer, winner: report.Confirmed, reference: report.Confirmed | None, study,
               device: DeviceFacts, measured: int, facts: LaunchFacts,
               profile: tuple[LaunchStats, list[Agreement]] | None) -> dict:
    m: Measurement = winner.measurement
    entry = {
        "problem": {k: (v.value if hasattr(v, "value") else v) for k, v in vars(layer.problem).items()},
        "family": "sm80",
        "params": winner.config.search_params,
        "kernel": winner.config.name,
        "runtime_us": round(m.median_us, 3),
        "spread": round(m.spread, 4),
        "p10_us": round(m.p10_us, 3),
        "p90_us": round(m.p90_us, 3),
        "tflops": round(m.tflops(layer.problem), 3),
        "gbps": round(m.gbps(layer.problem), 1),
        "rel_l2_error": float(f"{winner.error:.3e}"),
        "grid_blocks": winner.grid_blocks,
        "waves": round(winner.grid_blocks / (device.sm_count * max(1, winner.attributes.max_active_blocks_per_sm)), 3),
        "registers_per_thread": winner.attributes.registers_per_thread,
        "spill_bytes": winner.spill_bytes,
        "smem_bytes": winner.smem_bytes,
        "study": {"name": study.study_name, "trials": len(study.trials), "measured_this_run": measured},
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    occ = occupancy(facts)
    entry["occupancy"] = {"blocks_per_sm": occ.blocks_per_sm, "limited_by": list(occ.limited_by),
                          "theoretical_pct": round(occ.theoretical_pct, 2)}
    entry["waste"] = [{"code": f.code, "value": round(f.value, 4), "message": f.message} for f in diagnose(facts)]
    if profile is not None:
        stats, agreements = profile
        entry["ncu"] = {k: v for k, v in asdict(stats).items() if v is not None}
        entry["ncu"]["agrees_with_static"] = {a.fact: a.agrees for a in agreements}
    if reference is not None:
        entry["reference"] = {"params": reference.config.search_params,
                              "runtime_us": round(reference.measurement.median_us, 3),
                              "grid_blocks": reference.grid_blocks,
                              "speedup": round(reference.measurement.median_us / m.median_us, 3)}
    return entry


def table_header(device: DeviceFacts) -> dict:
    return {
        "device": {"name": device.name, "slug": device.slug, "compute_capability": f"{device.cc_major}.{device.cc_minor}",
                   "sm_count": device.sm_count, "l2_bytes": device.l2_bytes},
        "toolchain": {"nvcc": nvcc_version(), "cutlass": cutlass_version(), "driver": device.driver_version,
                      "cuda_runtime": device.runtime_version},
    }


def tune(args: argparse.Namespace, console: Console) -> int:
    layers = load_layers(args.layers_file)
    if args.list_layers:
        print_layers(console, layers)
        return 0
    layer = resolve_target(args, layers)
    space = load_space(args.space_file)
    for name in ("trials", "top", "confirm_rounds", "ncu_top"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    nvcc_version()  # fail before the GPU is touched if there is no compiler

    worker = WorkerProcess(timeout_s=args.timeout)
    device = device_from_dict(query_device_facts(worker))
    report.print_device(console, device)
    valid = valid_configs(space, layer.problem, device)
    report.print_space(console, layer.name, layer.problem, space.size, len(valid), len({c.compiled for c in valid}))

    storage = args.storage or default_storage(args.results_dir, device.slug)
    study = open_study(study_name(device, layer.name, layer.problem), storage, args.seed)
    reference = make_config(layer.problem, REFERENCE_PARAMS)
    if params_key(REFERENCE_PARAMS) not in recorded_trials(study, layer.problem) and not static_problems(reference, layer.problem, device):
        study.enqueue_trial(REFERENCE_PARAMS, user_attrs={"reference": True}, skip_if_exists=True)

    compiler = Compiler(device.arch_flag, args.cache_dir, args.jobs)
    evaluator = GpuEvaluator(device.l2_bytes, worker)
    try:
        with report.StudyDisplay(console, args.trials) as display:
            measured = Tuner(study, layer.problem, space, device, compiler, evaluator, display.callbacks()).run(args.trials)
        console.print(f"study {study.study_name}: {len(study.trials)} trials in all; this run: "
                      f"{report.outcome_line(display.outcomes)}")
        return finish(args, console, layer, device, study, compiler, evaluator, reference, measured)
    finally:
        evaluator.close()


def finish(args, console, layer: Layer, device: DeviceFacts, study, compiler: Compiler, evaluator: GpuEvaluator,
           reference: KernelConfig, measured: int) -> int:
    records = list(recorded_trials(study, layer.problem).values())
    console.print(report.failures_table(sorted(records, key=lambda r: r.number)))
    best = ranked(study, layer.problem)
    if not best:
        console.print("[red]no candidate passed validation; nothing recorded[/]")
        return EXIT_ENVIRONMENT
    finalists = [(f"#{i + 1}", r.config) for i, r in enumerate(best[:args.top])]
    if all(config != reference for _, config in finalists) and not static_problems(reference, layer.problem, device):
        finalists.append(("reference", reference))
    compiled = {r.config.compiled: r for r in compiler.compile_many([c for _, c in finalists])}
    rows = confirm(finalists, compiled, evaluator, layer.problem, args.confirm_rounds)
    if not rows:
        console.print("[red]the finalists failed when re-measured; nothing recorded[/]")
        return EXIT_ENVIRONMENT
    console.print(report.confirmed_table(rows, layer.problem, device))
    winner = min(rows, key=lambda r: r.measurement.median_us)
    reference_row = next((r for r in rows if r.config == reference), None)
    say_versus_reference(console, winner, reference_row, device)
    facts = {r.label: kernel_facts(r.config, layer.problem, device, r.grid_blocks, r.attributes, r.spill_bytes)
             for r in rows}
    profiles = {} if args.no_ncu else profile_finalists(rows, facts, compiled, layer.problem, args.ncu_top, console)
    console.print(report.waste_table([(r, facts[r.label]) for r in rows], profiles))
    folder = gpu_dir(args.results_dir, device.slug)
    entry = best_entry(layer, winner, reference_row, study, device, measured, facts[winner.label],
                       profiles.get(winner.label))
    path = update_best(folder, layer.name, entry, table_header(device))
    append_history(folder, {"layer": layer.name, "kernel": winner.config.name, "runtime_us": entry["runtime_us"],
                            "measured": measured, "study": study.study_name})
    console.print(f"wrote {path}")
    return 0


def say_versus_reference(console: Console, winner: report.Confirmed, reference: report.Confirmed | None,
                         device: DeviceFacts) -> None:
    if reference is None:
        console.print("reference configuration (128x128x64, 3 stages) cannot run this problem here")
        return
    ratio = reference.measurement.median_us / winner.measurement.median_us
    console.print(f"winner {winner.measurement.median_us:.2f} µs vs reference {reference.measurement.median_us:.2f} µs: "
                  f"{ratio:.2f}x faster; grid {winner.grid_blocks} blocks vs {reference.grid_blocks} on {device.sm_count} SMs")
    if winner.grid_blocks < device.sm_count:
        m, n, _ = winner.config.tile.m, winner.config.tile.n, None
        console.print(f"the winner launches fewer blocks than SMs: the problem holds only "
                      f"{winner.grid_blocks} tiles of {m}x{n} (times split-K {winner.config.split_k}); "
                      f"smaller tiles or more split-K measured slower")


def build_diagnose_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py diagnose",
        description="Explain the waste in an existing Nsight Compute report (text from `ncu` or "
                    "`ncu --csv --page details`): grid vs SMs, waves, occupancy limits, registers.")
    parser.add_argument("report", type=Path, help="the ncu report file")
    parser.add_argument("--sms", type=int, help="SM count of the GPU that was profiled (overrides the report's)")
    return parser


def diagnose_command(argv: list[str], console: Console) -> int:
    args = build_diagnose_parser().parse_args(argv)
    if args.sms is not None:
        positive("--sms", args.sms)
    render_diagnosis(diagnose_report(args.report, args.sms), console)
    return 0


def fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # rich wraps at 80 columns when not on a terminal; logs of a study want whole rows.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        if argv[:1] == ["diagnose"]:
            return diagnose_command(argv[1:], console)
        return tune(build_parser().parse_args(argv), console)
    except (UsageError, ProblemError, SpaceError, NcuReportError) as error:
        return fail(str(error), EXIT_USAGE)
    except (ToolchainError, GpuUnavailable) as error:
        return fail(str(error), EXIT_ENVIRONMENT)
    except KeyboardInterrupt:
        return fail("interrupted: everything measured so far is in the study; run again to resume", 130)
