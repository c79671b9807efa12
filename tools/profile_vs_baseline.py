"""Profile a layer's best.yaml kernel and the library it is judged against (cuDNN through torch's conv2d,
or cuBLAS through torch.matmul on a 1x1 stride-1 layer) under Nsight Compute with the same sections, and
print them side by side: every kernel each one launches, its time, grid, cluster, throughputs and pipes.
For a layer with an epilogue, also the same kernel without it (what the fused kernel is judged against).
For the closing notes of layers that miss a goal ("what limits it, from a profile"). Needs the GPU, ncu
and a compiled kernel (it compiles into the tuner's cache when missing). Never time anything with this.

usage: python tools/profile_vs_baseline.py LAYER [LAYER...] [--out DIR] [--warp-states] [--params JSON]"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from repository import this_gpu, tuned_layers

from tuner.pipeline.one_run import is_gemm_layer
from tuner.core.dtypes import DataType
from tuner.core.problem import ConvProblem
from tuner.measure.baseline import TORCH_DTYPE_NAMES, torch_problem
from tuner.build.compile import Compiler
from tuner.core.epilogue import Epilogue
from tuner.families import registry
from tuner.measure.protocol import EvaluateRequest
from tuner.analysis.profile import KERNEL_FILTER
from tuner.analysis.ncu import NcuReportError
from tuner.analysis.ncu_csv import parse_csv_report
from tuner.search.space import make_config
from tuner.measure.worker import worker_env

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis")
# --warp-states: where the warps wait and how many instructions they issue (fused against bare, e.g.)
WARP_SECTIONS = ("WarpStateStats", "InstructionStats", "SchedulerStats")
SHOWN = ("Duration", "Grid Size", "Cluster Size", "Block Size", "Registers Per Thread", "Compute (SM) Throughput",
         "Memory Throughput", "DRAM Throughput", "Achieved Occupancy", "Waves Per SM", "Issue Slots Busy",
         "SM Busy", "L2 Hit Rate", "Mem Busy", "Max Bandwidth")
BASELINE = """
import torch
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = {tf32}
dtype = torch.{dtype}
n, h, w, c, k, r, s, pad, stride, dilation, groups, gemm = {args}  # pad, stride, dilation: (h, w)
if gemm:
    a = torch.randn(n * h * w, c, device="cuda", dtype=dtype)
    b = torch.randn(k, c, device="cuda", dtype=dtype)
    run = lambda: torch.matmul(a, b.t())
else:
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    wt = torch.randn(k, c // groups, r, s, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    run = lambda: torch.nn.functional.conv2d(x, wt, stride=stride, padding=pad, dilation=dilation, groups=groups)
for _ in range(3):
    run()  # cuDNN's heuristics and workspace settle outside the profiled range
torch.cuda.synchronize()
torch.cuda.profiler.start()
run()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def baseline_snippet(problem: ConvProblem) -> str:
    """The library's call on the problem in the type the bench times it in (tuner.measure.baseline.torch_problem:
    an e4m3 layer's f16 twin), TF32 math on for a tf32 layer and off otherwise: without it a bf16 or TF32 layer's
    profile set an f16 kernel of cuDNN's beside this family's."""
    twin = torch_problem(problem)
    return BASELINE.format(args=(problem.n, problem.h, problem.w, problem.c, problem.k, problem.r, problem.s,
                                 problem.pads, problem.strides, problem.dilations, problem.groups,
                                 is_gemm_layer(problem)),
                           dtype=TORCH_DTYPE_NAMES[twin.input_type], tf32=twin.input_type is DataType.tf32)


def ncu(command: list[str], report: Path, *options: str, sections: tuple[str, ...] = SECTIONS,
        every_metric: bool = False) -> list[dict]:
    full = [shutil.which("ncu") or "ncu", "--csv", "--page", "details", *(f"--section={s}" for s in sections),
            "--clock-control", "none", "--kernel-name-base", "demangled", *options, "--log-file", str(report),
            *command]
    subprocess.run(full, capture_output=True, text=True, env=worker_env(dict(os.environ)), timeout=600)
    return launches(report.read_text() if report.exists() else "", every_metric)


def launches(text: str, every_metric: bool = False) -> list[dict]:
    """Each kernel launch of an ncu --csv details report, with the metrics SHOWN (value and unit), or
    every metric the report holds."""
    try:
        found = parse_csv_report(text)
    except NcuReportError:  # ncu wrote nothing it measured (no report, or no launch matched)
        return []
    shown = []
    for index, launch in enumerate(found):
        names = [metric.name for metric in launch.metrics] if every_metric else SHOWN
        metrics = {name: f"{metric.value:g} {metric.unit}".strip() if isinstance(metric.value, float)
                   else f"{metric.value} {metric.unit}".strip()
                   for name in names if (metric := launch.metric(name)) is not None}
        advice = {"rules": [rule.text for rule in launch.rules]} if every_metric else {}
        shown.append({"kernel": f"{index} {launch.kernel_name[:150]}", "grid": launch.grid, "block": launch.block,
                      **metrics, **advice})
    return shown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layers", nargs="+", help="layers by name, each with a best.yaml entry on this GPU")
    parser.add_argument("--out", type=Path, default=Path("profiles"),
                        help="folder for the ncu CSV reports and profiles.json (default ./profiles)")
    parser.add_argument("--warp-states", action="store_true",
                        help="add the warp-state, instruction and scheduler sections and keep every metric")
    parser.add_argument("--params", type=json.loads,
                        help="a JSON object of the best.yaml family's knobs to profile in place of its kernel (e.g. "
                             "the library's own tile and cluster, to compare implementations of one tiling)")
    args = parser.parse_args()
    if args.params is not None and not isinstance(args.params, dict):
        parser.error("--params must be a JSON object of knob names and values, e.g. '{\"tile\": \"128x224x64\"}'")
    sections = SECTIONS + WARP_SECTIONS if args.warp_states else SECTIONS
    args.out.mkdir(parents=True, exist_ok=True)
    device = this_gpu()
    layers = tuned_layers(parser, args.layers, device.slug)
    found = {}

    def config_of(problem, entry):
        return make_config(problem, entry.family, {**entry.knobs, **(args.params or {})})

    wanted = [config_of(problem, entry) for problem, entry in layers.values()]
    wanted += [config_of(replace(problem, epilogue=Epilogue()), entry) for problem, entry in layers.values()
               if problem.epilogue.fused]
    compiled_all = {result.config: result for result in Compiler(device).compile_many(wanted)}  # one parallel batch

    def profiled(problem, entry, report: Path) -> dict:
        config = config_of(problem, entry)
        compiled = compiled_all[config]
        launch = registry.family_of(config).rules.launch_args(config, problem)
        request = EvaluateRequest(str(compiled.binary.path), compiled.binary.index, problem, launch, seed=1,
                                  validate_only=True).to_dict()
        return {"kernel": config.name, "launches": ncu([sys.executable, "-m", "tuner.measure.worker", "--once",
                                                        json.dumps(request)], report,
                                                       "-k", KERNEL_FILTER + "|Implicit|fold", "--launch-count", "2",
                                                       sections=sections, every_metric=args.warp_states)}

    for name, (p, entry) in layers.items():
        gemm = is_gemm_layer(p)
        snippet = baseline_snippet(p)
        found[name] = {
            "tuned": {**profiled(p, entry, args.out / f"{name}.tuned.csv"),
                      "runtime_us": None if args.params else entry.runtime_us},
            "cuBLAS" if gemm else "cuDNN": {
                "launches": ncu([sys.executable, "-c", snippet], args.out / f"{name}.baseline.csv",
                                "--profile-from-start", "off", sections=sections, every_metric=args.warp_states)},
        }
        if p.epilogue.fused:
            found[name]["bare kernel"] = profiled(replace(p, epilogue=Epilogue()), entry, args.out / f"{name}.bare.csv")
        print(json.dumps({name: found[name]}, indent=1), flush=True)
    (args.out / "profiles.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
