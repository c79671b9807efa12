"""What limits one kernel of an ncu report: its bound (compute, memory or latency), its busiest pipe, whether it
runs on tensor cores, ncu's advice in a line each, and what a tuned implicit-GEMM kernel would take instead."""
from __future__ import annotations

import re
from dataclasses import dataclass

from tuner.analysis.diagnose import Occupancy, WasteFlag
from tuner.analysis.kernel_names import kernel_short_name
from tuner.analysis.ncu import SPEED_OF_LIGHT, LaunchGroup, LaunchStats, NcuLaunch, NcuRule, metric_number
from tuner.core import gpus
from tuner.core.gpus import GpuSpec
from tuner.core.problem import ConvProblem
from tuner.search.costmodel import LAUNCH_US

# ncu's SpeedOfLight rule calls a unit at 60 % of its peak or more well used, below it "latency issues".
HIGH_THROUGHPUT_PCT = 60.0
# Compute and memory within this many points of each other, both high, bound the kernel together.
BALANCED_POINTS = 10.0
MAX_WARNINGS = 6

_CONVOLUTION_NAME = re.compile(r"conv|implicit_?gemm|fprop|dgrad|wgrad", re.IGNORECASE)
# Kernel names that say tensor cores: CUTLASS's OpClassTensorOp / MmaTensorOp, cuDNN's and cuBLAS's
# xmma/hmma kernels, Hopper's wgmma, and this tuner's own kernels (every family is tensor-op).
_TENSOR_NAME = re.compile(r"tensor_?op|tensor_?core|wgmma|hmma|imma|xmma|cutlass_conv_tuner", re.IGNORECASE)
# Library kernels whose names may hide how they compute: without pipe figures, tensor use is unknown.
_LIBRARY_NAME = re.compile(r"cutlass|cudnn|cublas|implicit_?gemm|sm\d{2}_", re.IGNORECASE)
_BUSIEST_PIPE = re.compile(r"^(?P<pipe>[\w/+ -]+?) is the highest-utilized pipeline \((?P<pct>[\d.]+)%\)")
# Raw pipe metrics (`--metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active`, or the
# Compute Workload Analysis section's full set): utilisation in % of peak.
_PIPE_METRIC = re.compile(r"^sm__(?:inst_executed_)?pipe_(?P<pipe>[a-z0-9_]+?)(?:_cycles_active)?\.[\w.]*pct")


@dataclass(frozen=True)
class Bound:
    kind: str    # 'compute-bound', 'memory-bound', 'compute- and memory-bound' or 'latency-bound'
    detail: str  # the throughputs that say so


@dataclass(frozen=True)
class TunedEstimate:
    """What a tuned implicit-GEMM kernel would take for the problem on the GPU: a roofline estimate."""

    compute_us: float
    memory_us: float
    launch_us: float
    tflops: float
    gbps: float
    shape_arg: str  # the problem as --shape takes it, every field spelled out

    @property
    def total_us(self) -> float:
        return self.launch_us + max(self.compute_us, self.memory_us)

    @property
    def tune_command(self) -> str:
        return f"python tune.py --shape {self.shape_arg}"


@dataclass(frozen=True)
class KernelVerdict:
    group: LaunchGroup
    occupancy: Occupancy
    flags: tuple[WasteFlag, ...]
    time_share: float | None              # of the report's summed launch durations
    bound: Bound | None                   # None where the report has no SpeedOfLight throughputs
    busiest_pipe: tuple[str, float] | None
    tensor_cores: bool | None             # None: cannot tell
    tensor_evidence: str
    convolution: bool
    direct_convolution: bool              # a hand-written convolution (no library name) off tensor cores
    achieved_occupancy_pct: float | None
    warnings: tuple[str, ...]             # ncu's rule advice, one short line each
    estimate: TunedEstimate | None

    @property
    def name(self) -> str:
        return kernel_short_name(self.group.kernel_name)

    @property
    def cuda_core_convolution(self) -> bool:
        return self.convolution and self.tensor_cores is False

    @property
    def limiter(self) -> str:
        """The one thing to fix first, in a line."""
        parts = []
        if self.cuda_core_convolution:
            kind = "direct convolution" if self.direct_convolution else "convolution"
            parts.append(f"{kind} on CUDA cores, not using tensor cores")
        small = next((flag for flag in self.flags if flag.code == "small_grid"), None)
        if small is not None:
            parts.append(f"small grid: {small.message}")
        if self.bound is not None:
            parts.append(f"{self.bound.kind} ({self.bound.detail})")
        return "; ".join(parts) or "nothing the report shows"


def _bound(launch: NcuLaunch, stats: LaunchStats) -> Bound | None:
    sm, memory = stats.sm_throughput_pct, stats.memory_throughput_pct
    if sm is None or memory is None:
        return None
    units = [(unit, metric_number(launch, name, section=SPEED_OF_LIGHT)) for unit, name in
             (("L1/TEX", "L1/TEX Cache Throughput"), ("L2", "L2 Cache Throughput"), ("DRAM", "DRAM Throughput"))]
    memory_units = ", ".join(f"{unit} {pct:.1f} %" for unit, pct in units if pct is not None)
    detail = f"SM {sm:.1f} % and memory {memory:.1f} % of peak" + (f" ({memory_units})" if memory_units else "")
    high = max(sm, memory)
    if high < HIGH_THROUGHPUT_PCT:
        return Bound("latency-bound", f"{detail}: both under {HIGH_THROUGHPUT_PCT:.0f} %")
    if min(sm, memory) >= HIGH_THROUGHPUT_PCT and abs(sm - memory) <= BALANCED_POINTS:
        return Bound("compute- and memory-bound", detail)
    return Bound("compute-bound" if sm >= memory else "memory-bound", detail)


def _busiest_pipe(launch: NcuLaunch) -> tuple[str, float] | None:
    pipes = {}
    for metric in launch.metrics:
        match = _PIPE_METRIC.match(metric.name)
        if match and isinstance(metric.value, float):
            pipes[match["pipe"]] = max(metric.value, pipes.get(match["pipe"], 0.0))
    for rule in launch.rules:
        match = _BUSIEST_PIPE.match(rule.text)
        if match:
            pipes.setdefault(match["pipe"], float(match["pct"]))
    if not pipes:
        return None
    return max(pipes.items(), key=lambda item: item[1])


def _tensor_pipe_pct(launch: NcuLaunch) -> float | None:
    values = [metric.value for metric in launch.metrics
              if (match := _PIPE_METRIC.match(metric.name)) and match["pipe"].startswith("tensor")
              and isinstance(metric.value, float)]
    return max(values) if values else None


def tensor_core_use(launch: NcuLaunch) -> tuple[bool | None, str]:
    """Whether the launch runs on tensor cores, and what says so."""
    tensor_pct = _tensor_pipe_pct(launch)
    if tensor_pct is not None:
        return tensor_pct > 0, f"tensor pipe {tensor_pct:.1f} %"
    busiest = _busiest_pipe(launch)
    if busiest is not None and "tensor" in busiest[0].lower():
        return True, f"busiest pipe {busiest[0]} {busiest[1]:.1f} %"
    if _TENSOR_NAME.search(launch.kernel_name):
        return True, "the kernel's name"
    if busiest is not None:
        return False, f"busiest pipe {busiest[0]} {busiest[1]:.1f} %, no tensor-op name"
    if _LIBRARY_NAME.search(launch.kernel_name):
        return None, "no pipe figures in the report"
    return False, "a hand-written kernel with no tensor-op name"


# ncu's advice in a few words: (pattern over its text, the summary with the pattern's groups, or None to
# leave it out), the first that matches.
_RULE_SUMMARIES = (
    (r"uncoalesced global accesses resulting in a total of (\d+) excessive sectors \((\d+)%",
     "uncoalesced global accesses: {1} % of sectors are excess"),
    (r"uncoalesced shared accesses resulting in a total of (\d+) excessive wavefronts \((\d+)%",
     "shared-memory bank conflicts: {1} % of wavefronts are excess"),
    (r"global (loads|stores) (?:from|to) L1TEX might not be optimal\. On average, only ([\d.]+) of the 32 bytes",
     "global {0} use {1} of 32 bytes per sector (strided access)"),
    (r"only accesses an average of ([\d.]+) sectors out of the possible 4",
     "L1TEX-to-L2 loads use {0} of 4 sectors per cache line"),
    (r"grid is too small to fill the available resources on this device, resulting in only ([\d.]+) full waves",
     "grid too small: {0} full waves across the SMs"),
    (r"configured to execute only (\d+) blocks, which is less than the GPU's (\d+) multiprocessors",
     "grid of {0} blocks is less than the {1} SMs"),
    (r"tail effect|partial wave", "tail effect: the last wave leaves SMs idle"),
    (r"theoretical occupancy \(([\d.]+)%\) is limited by (?:the )?(?:number of )?(?:required )?(.+?)(?: See |\.|$)",
     "theoretical occupancy {0} % limited by {1}"),
    (r"warps per scheduler this kernel can issue according to its occupancy are below",
     "too few warps per scheduler to hide latency"),
    (r"theoretical \(([\d.]+)%\) and measured achieved occupancy \(([\d.]+)%\)",
     "achieved occupancy {1} % vs theoretical {0} % (imbalance or scheduling overhead)"),
    (r"stalled waiting for a scoreboard dependency on a L1TEX", "warps stall on global/local memory (L1TEX)"),
    (r"stalled waiting for a scoreboard dependency on a MIO", "warps stall on shared memory / MIO"),
    (r"stalled waiting for a math execution pipeline", "warps stall on a busy math pipeline"),
    (r"stalled waiting on a fixed latency execution dependency", "warps stall on dependent arithmetic"),
    (r"(\d+) fused and (\d+) non-fused FP32 instructions", "{1} FP32 adds/multiplies not fused into FMAs"),
    (r"achieves an average of ([\d.]+) threads being active per cycle", "divergence: {0} of 32 threads active"),
    (r"issues an instruction every ([\d.]+) cycles", "schedulers issue once every {0} cycles"),
    (r"All compute pipelines are under-utilized", "all compute pipelines under-utilized"),
    (r"Compute is more heavily utilized than Memory", "compute more heavily used than memory"),
    (r"Memory is more heavily utilized than Compute", "memory more heavily used than compute"),
    (r"is the highest-utilized pipeline", None),  # the busiest pipe has its own line
    (r"bank conflicts?", "shared-memory bank conflicts"),
)
_RULE_PATTERNS = tuple((re.compile(pattern, re.IGNORECASE), summary) for pattern, summary in _RULE_SUMMARIES)
_FIRST_SENTENCE_CHARS = 90


def summarise_rule(rule: NcuRule) -> str | None:
    """A rule's advice in one short line; None for information (INF) that advises nothing."""
    if rule.kind == "INF":
        return None
    for pattern, summary in _RULE_PATTERNS:
        match = pattern.search(rule.text)
        if match:
            if summary is None:
                return None
            text = summary.format(*match.groups())
            break
    else:
        sentence = rule.text.split(". ")[0].rstrip(".")
        text = sentence if len(sentence) <= _FIRST_SENTENCE_CHARS else sentence[:_FIRST_SENTENCE_CHARS - 3] + "..."
    return text + (f" (ncu est. speedup {rule.speedup_pct:.3g} %)" if rule.speedup_pct is not None else "")


def summarise_rules(rules: tuple[NcuRule, ...]) -> tuple[str, ...]:
    ranked = sorted(rules, key=lambda rule: -(rule.speedup_pct or 0.0))  # stable: ncu's order among equals
    lines = dict.fromkeys(line for rule in ranked if (line := summarise_rule(rule)) is not None)
    return tuple(lines)[:MAX_WARNINGS]


def tuned_estimate(problem: ConvProblem, gpu: GpuSpec) -> TunedEstimate:
    """A roofline for a tuned implicit-GEMM kernel of the tuner (f16 tensor cores, f32 accumulation):
    its multiply-adds at the achievable share of the tensor peak, or each tensor crossing DRAM once at the
    achievable bandwidth, whichever takes longer, plus the cost model's fixed launch cost."""
    tflops, gbps = gpus.achievable_tflops(gpu), gpus.achievable_gbps(gpu)
    return TunedEstimate(
        compute_us=problem.flops / (tflops * 1e12) * 1e6,
        memory_us=problem.bytes_moved / (gbps * 1e9) * 1e6,
        launch_us=LAUNCH_US,
        tflops=tflops,
        gbps=gbps,
        shape_arg=problem.shape_arg,
    )


def kernel_verdict(group: LaunchGroup, occ: Occupancy, flags: list[WasteFlag], time_share: float | None,
                   gpu: GpuSpec | None, problem: ConvProblem | None) -> KernelVerdict:
    """The verdict on one launch group; the estimate only for a convolution whose problem and GPU are known."""
    launch, stats = group.launches[0], group.stats
    tensor, evidence = tensor_core_use(launch)
    convolution = bool(_CONVOLUTION_NAME.search(group.kernel_name))
    estimate = tuned_estimate(problem, gpu) if convolution and problem is not None and gpu is not None else None
    return KernelVerdict(
        group=group,
        occupancy=occ,
        flags=tuple(flags),
        time_share=time_share,
        bound=_bound(launch, stats),
        busiest_pipe=_busiest_pipe(launch),
        tensor_cores=tensor,
        tensor_evidence=evidence,
        convolution=convolution,
        direct_convolution=convolution and tensor is False and not _LIBRARY_NAME.search(group.kernel_name),
        achieved_occupancy_pct=stats.achieved_occupancy_pct,
        warnings=summarise_rules(launch.rules),
        estimate=estimate,
    )
