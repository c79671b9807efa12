"""`tune.py diagnose`: explain an Nsight Compute report, as a waste table and a verdict per kernel, or as one
JSON document."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner.analysis.diagnose import Occupancy, WasteFlag, plural
from tuner.analysis.explain import GpuIdentity, ReportDiagnosis, explain_report
from tuner.analysis.kernel_names import kernel_short_name
from tuner.analysis.ncu import LaunchGroup, LaunchStats
from tuner.analysis.verdict import KernelVerdict
from tuner.cli.choices import positive
from tuner.cli.tables import add_output_arguments, csv_document, json_document, print_table
from tuner.core import gpus
from tuner.core.errors import UsageError
from tuner.core.problem import ConvProblem, problem_to_dict
from tuner.core.layers import LONG_SHAPE, SHORT_SHAPE, parse_shape

MAX_SMS = 10_000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py diagnose",
        description="Explain the waste in an existing Nsight Compute report (text from `ncu` or "
                    "`ncu --csv --page details`): grid vs SMs, waves, occupancy limits, registers.")
    parser.add_argument("report", type=Path, help="the ncu report file")
    parser.add_argument("--sms", type=int, help="SM count of the GPU that was profiled (overrides the report's)")
    parser.add_argument("--gpu", help="the GPU that was profiled, by name (e.g. rtx3060, h100-sxm; see tuner/core/gpus.py); "
                                      "default: the report's device name, else its SM count")
    parser.add_argument("--shape", help=f"the convolution the report ran, {SHORT_SHAPE} (or per axis, {LONG_SHAPE}): "
                                        "estimate what a tuned implicit-GEMM kernel would take and print the "
                                        "command that tunes it")
    add_output_arguments(parser, json_help="print one JSON document on stdout in place of the table and lines: "
                                           "the GPU, and per kernel its launch, occupancy, waste, limiter and "
                                           "estimate",
                         csv_help="print the waste table as CSV on stdout, a line per kernel (the longest-running "
                                  "first) with the flat fields of --json")
    return parser


def diagnose_command(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    if args.sms is not None:
        positive("--sms", args.sms)
        if args.sms > MAX_SMS:
            raise UsageError(f"--sms {args.sms} is more SMs than any GPU has (at most {MAX_SMS})")
    try:
        gpu = gpus.lookup(args.gpu) if args.gpu is not None else None
    except gpus.UnknownGpu as error:
        raise UsageError(f"--gpu: {error}") from None
    problem = parse_shape(args.shape) if args.shape is not None else None
    diagnosis = explain_report(args.report, args.sms, gpu, problem)
    if args.json:
        print(json_document({"report": str(args.report), **explanation_document(diagnosis)}))
    elif args.csv:
        print(csv_document(kernel_rows(explanation_document(diagnosis))), end="")
    else:
        render_explanation(diagnosis, console)
    return 0


# --- rendering -----------------------------------------------------------------------------------


def _dims_text(dims: tuple[int, int, int] | None, total: int | None, unit: str) -> str:
    if dims is not None:
        return "x".join(map(str, dims))
    return "?" if total is None else f"{total} {unit}"


def _smem_text(stats: LaunchStats) -> str:
    if stats.dynamic_smem_per_block_bytes is None:
        return "?"
    return f"{(stats.dynamic_smem_per_block_bytes + (stats.static_smem_per_block_bytes or 0)) / 1000:.1f} KB"


WASTE_NUMBERS = ("launches", "median µs", "grid", "block", "regs", "smem/block")  # never cut


def render_diagnosis(results: list[tuple[LaunchGroup, Occupancy, list[WasteFlag]]], console: Console) -> None:
    table = Table(title="Waste per kernel (Nsight Compute)", show_lines=True)
    for column in ("kernel", "launches", "median µs", "grid", "block", "regs", "smem/block", "occupancy", "waste"):
        table.add_column(column, overflow="fold")
    for group, occ, flags in results:
        stats = group.stats
        median = group.median_duration_us
        table.add_row(
            kernel_short_name(group.kernel_name),
            str(group.count),
            "?" if median is None else f"{median:.2f}",
            _dims_text(group.grid, stats.grid_blocks, "blocks"),
            _dims_text(group.block, stats.block_threads, "threads"),
            "?" if stats.registers_per_thread is None else str(stats.registers_per_thread),
            _smem_text(stats),
            f"{occ.theoretical_pct:.2f} % ({plural(occ.blocks_per_sm, 'block')}/SM, {occ.limited_by_text})",
            "\n".join(f"{flag.code}: {flag.message}" for flag in flags) or "none",
        )
    print_table(console, table, WASTE_NUMBERS)


def _kernel_lines(verdict: KernelVerdict, problem: ConvProblem | None, gpu: GpuIdentity) -> list[str]:
    group, occ = verdict.group, verdict.occupancy
    median = group.median_duration_us
    heading = f"{verdict.name}: {group.count} launch{'es' if group.count > 1 else ''}" + \
        ("" if median is None else f", median {median:.2f} µs") + \
        ("" if verdict.time_share is None else f", {verdict.time_share:.0%} of the profiled time")
    lines = [heading, f"  limiter: {verdict.limiter}"]
    if verdict.busiest_pipe is not None:
        lines.append(f"  busiest pipe: {verdict.busiest_pipe[0]} ({verdict.busiest_pipe[1]:.1f} % of its peak)")
    tensor = {True: "yes", False: "no", None: "cannot tell"}[verdict.tensor_cores]
    lines.append(f"  tensor cores: {tensor} ({verdict.tensor_evidence})")
    achieved = verdict.achieved_occupancy_pct
    lines.append("  occupancy: " + ("" if achieved is None else f"achieved {achieved:.2f} % of ") +
                 f"theoretical {occ.theoretical_pct:.2f} % ({plural(occ.blocks_per_sm, 'block')}/SM, limited by "
                 f"{occ.limited_by_text})")
    lines.extend(f"  ncu: {warning}" for warning in verdict.warnings)
    if verdict.estimate is not None:
        estimate = verdict.estimate
        measured = "" if median is None else \
            f" against {median:.2f} µs measured ({median / estimate.total_us:.3g}x)"
        lines.append(f"  a tuned implicit-GEMM kernel (f16 tensor cores, f32 accumulate) on {gpu.gpu.slug}: "
                     f"~{estimate.total_us:.2f} µs{measured}: {estimate.compute_us:.2f} µs of math at "
                     f"{estimate.tflops:.1f} TFLOP/s ({gpus.TENSOR_FRACTION:.0%} of peak), "
                     f"{estimate.memory_us:.2f} µs of DRAM traffic at {estimate.gbps:.0f} GB/s "
                     f"({gpus.DRAM_FRACTION:.0%}), {estimate.launch_us:g} µs launch; an estimate, not a measurement")
        lines.append(f"  tune it: {estimate.tune_command}   (predict first: python tune.py predict --gpu "
                     f"{gpu.gpu.slug} --shape {estimate.shape_arg})")
    elif verdict.cuda_core_convolution and problem is None:
        lines.append("  give --shape N,H,W,C,K,R,S[,pad,stride,dilation] for what a tuned implicit-GEMM kernel "
                     "would take, and the tune.py command")
    elif verdict.convolution and problem is not None and gpu.gpu is None:
        lines.append("  name the GPU with --gpu NAME for what a tuned implicit-GEMM kernel would take")
    return lines


def _ranked(diagnosis: ReportDiagnosis) -> list[KernelVerdict]:
    """The kernels, the longest-running first."""
    return sorted(diagnosis.kernels, key=lambda verdict: -(verdict.time_share or 0.0))


def explanation_document(diagnosis: ReportDiagnosis) -> dict:
    """What render_explanation prints, as `tune.py diagnose --json` gives it: the GPU, the problem given, and
    per kernel (the longest-running first) its launch shape, occupancy, waste flags, limiter and estimate."""
    identity = diagnosis.gpu
    kernels = []
    for verdict in _ranked(diagnosis):
        group, occ, stats, estimate = verdict.group, verdict.occupancy, verdict.group.stats, verdict.estimate
        kernels.append({
            "name": verdict.name, "kernel": group.kernel_name, "launches": group.count,
            "median_us": group.median_duration_us, "time_share": verdict.time_share,
            "grid": list(group.grid) if group.grid else None, "grid_blocks": stats.grid_blocks,
            "block": list(group.block) if group.block else None, "block_threads": stats.block_threads,
            "registers_per_thread": stats.registers_per_thread,
            "smem_per_block_bytes": None if stats.dynamic_smem_per_block_bytes is None else
            stats.dynamic_smem_per_block_bytes + (stats.static_smem_per_block_bytes or 0),
            "occupancy": {"theoretical_pct": occ.theoretical_pct, "achieved_pct": verdict.achieved_occupancy_pct,
                          "blocks_per_sm": occ.blocks_per_sm, "limited_by": list(occ.limited_by)},
            "waste": [{"code": flag.code, "value": flag.value, "message": flag.message} for flag in verdict.flags],
            "limiter": verdict.limiter,
            "bound": None if verdict.bound is None else {"kind": verdict.bound.kind, "detail": verdict.bound.detail},
            "busiest_pipe": None if verdict.busiest_pipe is None else
            {"pipe": verdict.busiest_pipe[0], "pct_of_peak": verdict.busiest_pipe[1]},
            "tensor_cores": verdict.tensor_cores, "tensor_evidence": verdict.tensor_evidence,
            "convolution": verdict.convolution, "ncu_warnings": list(verdict.warnings),
            "tuned_estimate": None if estimate is None else {
                "total_us": estimate.total_us, "compute_us": estimate.compute_us, "memory_us": estimate.memory_us,
                "launch_us": estimate.launch_us, "tflops": estimate.tflops, "gbps": estimate.gbps,
                "tune_command": estimate.tune_command}})
    return {"gpu": None if identity.gpu is None else {"slug": identity.gpu.slug, "name": identity.gpu.name,
                                                      "sm_count": identity.gpu.sm_count},
            "gpu_from": identity.how,
            "problem": None if diagnosis.problem is None else problem_to_dict(diagnosis.problem),
            "kernels": kernels}


def kernel_rows(document: dict) -> list[dict]:
    """explanation_document's kernels as `diagnose --csv` gives them: one flat row each."""
    rows = []
    for kernel in document["kernels"]:
        occupancy, estimate = kernel["occupancy"], kernel["tuned_estimate"] or {}
        pipe, bound = kernel["busiest_pipe"] or {}, kernel["bound"] or {}
        rows.append({"name": kernel["name"], "kernel": kernel["kernel"], "launches": kernel["launches"],
                     "median_us": kernel["median_us"], "time_share": kernel["time_share"],
                     "grid": "x".join(map(str, kernel["grid"] or ())), "grid_blocks": kernel["grid_blocks"],
                     "block": "x".join(map(str, kernel["block"] or ())), "block_threads": kernel["block_threads"],
                     "registers_per_thread": kernel["registers_per_thread"],
                     "smem_per_block_bytes": kernel["smem_per_block_bytes"],
                     "theoretical_occupancy_pct": occupancy["theoretical_pct"],
                     "achieved_occupancy_pct": occupancy["achieved_pct"], "blocks_per_sm": occupancy["blocks_per_sm"],
                     "limited_by": occupancy["limited_by"], "waste": [flag["code"] for flag in kernel["waste"]],
                     "limiter": kernel["limiter"], "bound": bound.get("kind"), "busiest_pipe": pipe.get("pipe"),
                     "busiest_pipe_pct_of_peak": pipe.get("pct_of_peak"), "tensor_cores": kernel["tensor_cores"],
                     "convolution": kernel["convolution"], "tuned_estimate_us": estimate.get("total_us"),
                     "tune_command": estimate.get("tune_command")})
    return rows


def render_explanation(diagnosis: ReportDiagnosis, console: Console) -> None:
    """The waste table, then the GPU and what limits each kernel, the longest-running first."""
    render_diagnosis(diagnosis.results, console)
    identity = diagnosis.gpu
    if identity.gpu is not None:
        gpu_line = f"GPU: {identity.gpu.summary}; from {identity.how}"
    else:
        gpu_line = f"GPU: not identified: {identity.how}"
    lines = [gpu_line]
    ranked = _ranked(diagnosis)
    if len(ranked) > 1 and ranked[0].time_share is not None:
        lines.append(f"Most of the time ({ranked[0].time_share:.0%}): {ranked[0].name}: {ranked[0].limiter}")
    for verdict in ranked:
        lines.extend(_kernel_lines(verdict, diagnosis.problem, identity))
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
