"""A table of common GPUs, so that a report or a prediction can name the part without it being present:
occupancy limits, peak rates and memory bandwidth, each with where it was read.

Occupancy figures per compute capability are from the CUDA C++ Programming Guide, "Technical
Specifications per Compute Capability" (shared memory per SM / max per block opt-in, 32-bit registers
per SM, max resident warps and blocks per SM). Peak rates are the vendor's dense figures (datasheets
list tensor rates with sparsity too: those are halved here); "f16 tensor" is f16 inputs with f32
accumulation, the tuner's kernels' arithmetic (GeForce parts run it at half their f16-accumulate rate)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from tuner.core.device import DeviceFacts, slugify

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA C++ Programming Guide, Technical Specifications)."""

    cc_major: int
    cc_minor: int
    smem_per_sm_bytes: int
    smem_optin_per_block_bytes: int
    registers_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int


# CUDA C++ Programming Guide, Table "Technical Specifications per Compute Capability".
SM80 = ArchLimits(8, 0, 164 * KIB, 163 * KIB, 65536, 64, 32)   # A100
SM86 = ArchLimits(8, 6, 100 * KIB, 99 * KIB, 65536, 48, 16)    # GA10x: RTX 30xx, A10
SM89 = ArchLimits(8, 9, 100 * KIB, 99 * KIB, 65536, 48, 24)    # Ada: RTX 40xx, L4, L40S
SM90 = ArchLimits(9, 0, 228 * KIB, 227 * KIB, 65536, 64, 32)   # Hopper: H100, H200


@dataclass(frozen=True)
class GpuSpec:
    slug: str                        # the name --gpu takes, e.g. 'rtx3060'
    name: str                        # the device name the driver (and ncu) reports
    aliases: tuple[str, ...]         # other names --gpu accepts, and other device names of the same figures
    arch: ArchLimits
    sm_count: int
    l2_bytes: int
    f16_tensor_tflops: float         # dense, f16 in, f32 accumulate
    fp32_tflops: float               # non-tensor FP32 (CUDA cores)
    dram_gbps: float

    @property
    def cc(self) -> str:
        return f"{self.arch.cc_major}.{self.arch.cc_minor}"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.slug, self.name, *self.aliases)

    @property
    def summary(self) -> str:
        return (f"{self.name} ({self.slug}): {self.sm_count} SMs, CC {self.cc}, {self.f16_tensor_tflops:g} TFLOP/s "
                f"f16 tensor (f32 accumulate), {self.fp32_tflops:g} TFLOP/s fp32, {self.dram_gbps:g} GB/s")


GPUS: tuple[GpuSpec, ...] = (
    # GeForce RTX 3060 (GA106, 12 GB): 28 SMs, 3 MB L2, 360 GB/s (NVIDIA RTX 3060 family spec page; GA106
    # die). Tensor: 512 dense f16 FMA-with-f32-accumulate FLOPs per SM per clock on GeForce GA10x (NVIDIA
    # Ampere GA102 whitepaper, Table 9: RTX 3080 59.5 TFLOPS at 68 SMs, 1.71 GHz) x 28 SMs x 1.777 GHz boost
    # = 25.5; fp32 12.7 TFLOPS (spec page "Shader TFLOPS").
    GpuSpec("rtx3060", "NVIDIA GeForce RTX 3060", ("3060",), SM86, 28, 3 * MIB, 25.5, 12.7, 360.0),
    # GeForce RTX 4090 (AD102): NVIDIA Ada Lovelace whitepaper, Appendix Table 2: 128 SMs, 72 MB L2,
    # 1008 GB/s, "Peak FP16 Tensor TFLOPS with FP32 Accumulate" 165.2 (330.4 sparse), FP32 82.6.
    GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090", ("4090",), SM89, 128, 72 * MIB, 165.2, 82.6, 1008.0),
    # A10 (GA102): NVIDIA A10 datasheet: FP16 tensor 125 TFLOPS (250 sparse), FP32 31.2, 600 GB/s GDDR6;
    # 72 SMs, 6 MB L2 (GA102 whitepaper). Data-center GA102 runs f32 accumulate at the full f16 rate.
    GpuSpec("a10", "NVIDIA A10", ("a10-24gb",), SM86, 72, 6 * MIB, 125.0, 31.2, 600.0),
    # A100 (GA100): NVIDIA A100 datasheet: FP16 tensor 312 TFLOPS (624 sparse), FP32 19.5; 40 GB HBM2
    # 1555 GB/s, 80 GB HBM2e SXM 2039 GB/s. NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs,
    # 40 MB L2.
    GpuSpec("a100-40gb", "NVIDIA A100-SXM4-40GB", ("a100", "a100-sxm4-40gb", "NVIDIA A100-PCIE-40GB"),
            SM80, 108, 40 * MIB, 312.0, 19.5, 1555.0),
    GpuSpec("a100-80gb", "NVIDIA A100-SXM4-80GB", ("a100-sxm4-80gb",), SM80, 108, 40 * MIB, 312.0, 19.5, 2039.0),
    # L4 (AD104): NVIDIA L4 datasheet: FP16 tensor 242 TFLOPS with sparsity (121 dense), FP32 30.3,
    # 300 GB/s; 58 SMs, 48 MB L2 (Ada whitepaper / L4 product brief).
    GpuSpec("l4", "NVIDIA L4", (), SM89, 58, 48 * MIB, 121.0, 30.3, 300.0),
    # L40S (AD102): NVIDIA L40S datasheet: FP16 tensor 362.05 TFLOPS (733 with sparsity), FP32 91.6,
    # 864 GB/s; 142 SMs, 96 MB L2.
    GpuSpec("l40s", "NVIDIA L40S", (), SM89, 142, 96 * MIB, 362.05, 91.6, 864.0),
    # H100: NVIDIA H100 datasheet: SXM FP16 tensor 1979 TFLOPS with sparsity (989 dense), FP32 67,
    # 3.35 TB/s; PCIe 1513 with sparsity (756 dense), FP32 51, 2.0 TB/s. NVIDIA H100 Tensor Core GPU
    # Architecture whitepaper: SXM5 132 SMs, PCIe 114 SMs, 50 MB L2.
    GpuSpec("h100-sxm", "NVIDIA H100 80GB HBM3", ("h100", "h100-80gb-hbm3", "h100-sxm5"),
            SM90, 132, 50 * MIB, 989.0, 67.0, 3350.0),
    GpuSpec("h100-pcie", "NVIDIA H100 PCIe", (), SM90, 114, 50 * MIB, 756.0, 51.0, 2000.0),
    # H200 (SXM): NVIDIA H200 datasheet: FP16 tensor 1979 TFLOPS with sparsity (989 dense), FP32 67,
    # 4.8 TB/s HBM3e; 132 SMs; L2 60 MB as PyTorch's device properties report it on an H200.
    GpuSpec("h200", "NVIDIA H200", ("h200-sxm", "h200-141gb"), SM90, 132, 60 * MIB, 989.0, 67.0, 4800.0),
)


class UnknownGpu(ValueError):
    """A GPU name that is not in the table."""


def _key(text: str) -> str:
    return slugify(text).replace("-", "")


def known_names() -> str:
    return ", ".join(gpu.slug for gpu in GPUS)


def lookup(name: str) -> GpuSpec:
    """A GPU by its slug, an alias or its device name, ignoring case, spaces and dashes; a device name with a
    leading 'NVIDIA ' or 'NVIDIA GeForce ' may leave it out."""
    key = _key(name)
    for gpu in GPUS:
        keys = {_key(known) for known in gpu.names}
        keys |= {_key(known.removeprefix("NVIDIA GeForce ").removeprefix("NVIDIA ")) for known in gpu.names}
        if key and key in keys:
            return gpu
    raise UnknownGpu(f"unknown GPU {name!r}; known: {known_names()}")


# A device name stands alone: 'NVIDIA GeForce RTX 3060' must not match 'NVIDIA GeForce RTX 3060 Ti'.
def _name_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-]| [\w(])")


_DEVICE_NAMES = sorted(((name, gpu) for gpu in GPUS for name in (gpu.name, *gpu.aliases) if name.startswith("NVIDIA")),
                       key=lambda item: -len(item[0]))


def find_in_text(text: str) -> GpuSpec | None:
    """The GPU whose device name a report prints (ncu's session page, `--print-details`, a device
    attribute, a log line), when exactly one known name is there."""
    found = {gpu.slug: gpu for name, gpu in _DEVICE_NAMES if _name_pattern(name).search(text)}
    return next(iter(found.values())) if len(found) == 1 else None


def by_sm_count(sm_count: int, cc: str | None = None) -> tuple[GpuSpec, ...]:
    """The table's GPUs with this SM count (and compute capability, where known)."""
    return tuple(gpu for gpu in GPUS if gpu.sm_count == sm_count and (cc is None or gpu.cc == cc))


def device_facts(gpu: GpuSpec) -> DeviceFacts:
    """The facts the search space, cost model and diagnosis take, for a GPU that need not be present."""
    arch = gpu.arch
    return DeviceFacts(
        name=gpu.name,
        cc_major=arch.cc_major,
        cc_minor=arch.cc_minor,
        sm_count=gpu.sm_count,
        smem_optin_per_block=arch.smem_optin_per_block_bytes,
        smem_per_sm=arch.smem_per_sm_bytes,
        registers_per_sm=arch.registers_per_sm,
        l2_bytes=gpu.l2_bytes,
        max_threads_per_sm=arch.max_warps_per_sm * 32,
        max_blocks_per_sm=arch.max_blocks_per_sm,
    )


# What a tuned kernel sustains of the peaks: the cost model's default ceilings (tuner/search/costmodel.py, 600
# TFLOP/s and 3000 GB/s, measured by `tune.py bench` on an H100 SXM) are 61 % of its 989 TFLOP/s tensor
# peak and 90 % of its 3350 GB/s.
TENSOR_FRACTION = 0.6
DRAM_FRACTION = 0.9


def achievable_tflops(gpu: GpuSpec) -> float:
    return gpu.f16_tensor_tflops * TENSOR_FRACTION


def achievable_gbps(gpu: GpuSpec) -> float:
    return gpu.dram_gbps * DRAM_FRACTION
