"""Facts about the GPU at hand that the search space and the diagnosis depend on."""
from __future__ import annotations

import ctypes
import math
import re
from dataclasses import asdict, dataclass

# The CUDA occupancy rules: registers are given out per warp in units of 256, and every block
# costs the driver 1 KB of shared memory besides its own.
REGISTER_ALLOCATION_UNIT = 256
DRIVER_SMEM_PER_BLOCK = 1024


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    cc_major: int
    cc_minor: int
    sm_count: int
    smem_optin_per_block: int
    smem_per_sm: int
    registers_per_sm: int
    l2_bytes: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    driver_version: str = "unknown"
    runtime_version: str = "unknown"

    @property
    def cc(self) -> int:
        return self.cc_major * 10 + self.cc_minor

    @property
    def arch_flag(self) -> str:
        return f"sm_{self.cc}"

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32

    def to_dict(self) -> dict:
        return asdict(self)


def slugify(device_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def _cuda_version_text(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


def query_device(ordinal: int = 0) -> DeviceFacts:
    """Read the facts from the driver through CuPy (imported here: CPU-only paths never need it)."""
    import cupy

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(ordinal)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceFacts(
        name=name,
        cc_major=int(props["major"]),
        cc_minor=int(props["minor"]),
        sm_count=int(props["multiProcessorCount"]),
        smem_optin_per_block=int(props["sharedMemPerBlockOptin"]),
        smem_per_sm=int(props["sharedMemPerMultiprocessor"]),
        registers_per_sm=int(props["regsPerMultiprocessor"]),
        l2_bytes=int(props["l2CacheSize"]),
        max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
        max_blocks_per_sm=int(props.get("maxBlocksPerMultiProcessor", 32)),
        driver_version=_cuda_version_text(runtime.driverGetVersion()),
        runtime_version=_cuda_version_text(runtime.runtimeGetVersion()),
    )


# cuInit's answer where the host has the driver library but no device it may use (none installed, or none
# visible through CUDA_VISIBLE_DEVICES).
CUDA_ERROR_NO_DEVICE = 100
NO_DEVICE = "the NVIDIA driver sees no GPU: none is installed, or CUDA_VISIBLE_DEVICES hides them"


def missing_gpu() -> str | None:
    """Why this host cannot run a CUDA kernel at all (no driver, no device), or None where it has one. Asks the
    driver itself, not CuPy: without a driver CuPy's runtime reports cudaErrorInsufficientDriver, which reads as
    "update the driver"."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver: libcuda.so.1 not found"
    status = driver.cuInit(0)
    if status == CUDA_ERROR_NO_DEVICE:
        return NO_DEVICE
    if status != 0:
        return None  # a driver and a device that fail otherwise: CuPy's error says how, with its name
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value == 0:
        return NO_DEVICE
    return None


def device_from_dict(values: dict) -> DeviceFacts:
    return DeviceFacts(**values)


def block_limits(registers_per_thread: int, smem_per_block: int, warps_per_block: int,
                 device: DeviceFacts) -> dict[str, int]:
    """Blocks per SM that each resource allows, as ncu's Occupancy section reports them."""
    per_warp = math.ceil(registers_per_thread * 32 / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    warps_by_registers = device.registers_per_sm // per_warp if per_warp else device.max_warps_per_sm
    return {
        "registers": warps_by_registers // warps_per_block,
        "shared_mem": device.smem_per_sm // (smem_per_block + DRIVER_SMEM_PER_BLOCK),
        "warps": device.max_warps_per_sm // warps_per_block,
        "sm": device.max_blocks_per_sm,
    }


def volume(dims) -> int:
    """Blocks (or threads) of a launch dimension x, y, z."""
    x, y, z = dims
    return x * y * z
