"""CUDA occupancy: how many blocks of a kernel fit on one SM at once.

The same calculation as `cudaOccupancyMaxActiveBlocksPerMultiprocessor` / the CUDA occupancy
calculator (`cuda_occupancy.h`, partitioned global caching off, default shared-memory carveout),
vectorized over arrays of launch configurations:

- warps:    warps/block = ceil(threads / warp size); blocks <= (max threads per SM / warp size) // warps/block
- blocks:   blocks <= max resident blocks per SM
- registers (allocated per warp): regs/warp = roundup(regs/thread x warp size, 256); each of the 4 SM
  sub-partitions holds (regs per SM / 4) // regs/warp warps, so warps/SM = that x 4 and
  blocks <= warps/SM // warps/block. A block whose registers exceed the per-block limit (the hardware
  check rounds warps/block up to a multiple of the 4 sub-partitions — the "warp allocation
  granularity") cannot launch: 0 blocks.
- shared memory: per block = roundup(static + dynamic + reserved (1 KB on cc >= 8.0), granularity
  (256 B on cc 7.x, 128 B on cc >= 8.0)); blocks <= shared mem per SM // that. More than the per-block
  opt-in limit: 0 blocks.

Device limits come from `DeviceInfo` where the trace gave them, else from the defaults of the
device's compute capability (`limits_for`), else (no compute capability) from the GPU name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from tracelab.model import DeviceInfo, EventKind, Timeline

if TYPE_CHECKING:
    import pandas as pd

KB = 1024


class DeviceLimits(msgspec.Struct, frozen=True):
    """Per-SM limits an occupancy calculation needs (one compute capability)."""

    cc_major: int
    cc_minor: int
    sm_count: int  # typical SM count of the flagship part (0 = unknown); only a fallback
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_block: int
    max_registers_per_thread: int
    shared_mem_per_sm: int  # largest carveout, bytes
    max_shared_mem_per_block: int  # opt-in limit, bytes
    reserved_shared_mem_per_block: int  # the driver's per-block reservation, bytes
    warp_size: int = 32
    register_granularity: int = 256  # registers, allocated per warp
    shared_mem_granularity: int = 128  # bytes
    sub_partitions: int = 4  # register file split; warps/block rounded up to this in the hardware check
    max_threads_per_block: int = 1024

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def _limits(major: int, minor: int, sms: int, threads: int, blocks: int, smem_sm_kb: int, smem_block_kb: int,
            reserved: int, smem_gran: int) -> DeviceLimits:
    return DeviceLimits(major, minor, sms, threads, blocks, 64 * KB, 64 * KB, 255, smem_sm_kb * KB, smem_block_kb * KB,
                        reserved, shared_mem_granularity=smem_gran)


# CUDA C Programming Guide, "Technical Specifications per Compute Capability"; granularities from
# cuda_occupancy.h. sm_count = the flagship part (V100, T4, A100, RTX 3090, Orin, L40, H100 SXM/H200,
# B200, RTX 5090).
CC_LIMITS: dict[tuple[int, int], DeviceLimits] = {
    (7, 0): _limits(7, 0, 80, 2048, 32, 96, 96, 0, 256),
    (7, 2): _limits(7, 2, 8, 2048, 32, 96, 96, 0, 256),
    (7, 5): _limits(7, 5, 40, 1024, 16, 64, 64, 0, 256),
    (8, 0): _limits(8, 0, 108, 2048, 32, 164, 163, KB, 128),
    (8, 6): _limits(8, 6, 82, 1536, 16, 100, 99, KB, 128),
    (8, 7): _limits(8, 7, 16, 2048, 16, 164, 163, KB, 128),
    (8, 9): _limits(8, 9, 142, 1536, 24, 100, 99, KB, 128),
    (9, 0): _limits(9, 0, 132, 2048, 32, 228, 227, KB, 128),
    (10, 0): _limits(10, 0, 148, 2048, 32, 228, 227, KB, 128),
    (12, 0): _limits(12, 0, 170, 1536, 32, 100, 99, KB, 128),
}

# GPU names -> (cc, SM count) for traces that name the GPU but give no limits. First match wins.
_NAME_TABLE: tuple[tuple[re.Pattern[str], tuple[int, int], int], ...] = (
    (re.compile(r"H100.*PCIe", re.IGNORECASE), (9, 0), 114),
    (re.compile(r"\b(GH200|H200|H100|H800|H20)\b", re.IGNORECASE), (9, 0), 132),
    (re.compile(r"\b(GB200|B200|B100)\b", re.IGNORECASE), (10, 0), 148),
    (re.compile(r"\b(A100|A800)\b", re.IGNORECASE), (8, 0), 108),
    (re.compile(r"\bA30\b", re.IGNORECASE), (8, 0), 56),
    (re.compile(r"V100", re.IGNORECASE), (7, 0), 80),
    (re.compile(r"\bT4\b|RTX 20\d0|Quadro RTX", re.IGNORECASE), (7, 5), 40),
    (re.compile(r"RTX 3080", re.IGNORECASE), (8, 6), 68),
    (re.compile(r"RTX 3090|\bA40\b|\bA10\b|RTX A6000", re.IGNORECASE), (8, 6), 82),
    (re.compile(r"\bL40S?\b", re.IGNORECASE), (8, 9), 142),
    (re.compile(r"\bL4\b", re.IGNORECASE), (8, 9), 58),
    (re.compile(r"RTX 4090", re.IGNORECASE), (8, 9), 128),
    (re.compile(r"RTX 5090", re.IGNORECASE), (12, 0), 170),
)


def guess_from_name(name: str) -> tuple[tuple[int, int], int] | None:
    """(compute capability, SM count) for a known GPU name, or None."""
    for pattern, cc, sms in _NAME_TABLE:
        if pattern.search(name or ""):
            return cc, sms
    return None


def _cc_defaults(major: int, minor: int) -> DeviceLimits | None:
    if (major, minor) in CC_LIMITS:
        return CC_LIMITS[(major, minor)]
    same_major = sorted(k for k in CC_LIMITS if k[0] == major)
    if same_major:  # e.g. 8.x not listed: the closest lower minor of that major
        lower = [k for k in same_major if k[1] <= minor] or same_major
        return msgspec.structs.replace(CC_LIMITS[lower[-1]], cc_minor=minor)
    if major > 12:
        return msgspec.structs.replace(CC_LIMITS[(12, 0)], cc_major=major, cc_minor=minor)
    return None


def limits_for(device: DeviceInfo | None) -> DeviceLimits:
    """The device's limits: what the trace recorded, defaults of its compute capability (or of its
    name) for the rest. Unknown devices get cc 9.0 defaults with sm_count 0."""
    if device is None:
        return msgspec.structs.replace(CC_LIMITS[(9, 0)], sm_count=0)
    base = _cc_defaults(device.cc_major, device.cc_minor) if device.cc_major > 0 else None
    guess = guess_from_name(device.name)
    sm_guess = guess[1] if guess is not None else 0
    if base is None:
        base = CC_LIMITS[guess[0]] if guess is not None else msgspec.structs.replace(CC_LIMITS[(9, 0)], sm_count=0)
    recorded = ("max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm", "max_registers_per_block",
                "shared_mem_per_sm", "warp_size")  # what the trace gives wins over the defaults
    return msgspec.structs.replace(
        base, sm_count=device.sm_count or sm_guess or base.sm_count,
        **{f: getattr(device, f) or getattr(base, f) for f in recorded},
        # traces often record the 48 KB default per-block limit, not the opt-in one: keep the larger
        max_shared_mem_per_block=max(device.max_shared_mem_per_block, base.max_shared_mem_per_block),
    )


def device_sm_count(device: DeviceInfo | None) -> int:
    """SM count from the trace, else from the GPU name, else 0 (unknown)."""
    if device is None:
        return 0
    if device.sm_count > 0:
        return device.sm_count
    guess = guess_from_name(device.name)
    return guess[1] if guess else 0


class Occupancy(msgspec.Struct, frozen=True):
    """Per-configuration results, arrays aligned with the inputs."""

    blocks_per_sm: np.ndarray  # int64, 0 = the configuration cannot launch
    occupancy: np.ndarray  # float64, active warps (blocks x warps per block) / max warps per SM


def _round_up(x: np.ndarray, unit: int) -> np.ndarray:
    return -(-x // unit) * unit


def occupancy(threads_per_block: np.ndarray | int, registers_per_thread: np.ndarray | int,
              shared_mem_per_block: np.ndarray | int, limits: DeviceLimits) -> Occupancy:
    """Theoretical occupancy of each launch configuration (numpy arrays or scalars).

    Unknown registers (< 0) count as 0 (no register limit); unknown shared memory (< 0) as 0.
    """
    threads = np.atleast_1d(np.asarray(threads_per_block, dtype=np.int64))
    regs = np.atleast_1d(np.asarray(registers_per_thread, dtype=np.int64))
    smem = np.atleast_1d(np.asarray(shared_mem_per_block, dtype=np.int64))
    threads, regs, smem = np.broadcast_arrays(threads, regs, smem)
    regs = np.maximum(regs, 0)
    smem = np.maximum(smem, 0)
    big = np.iinfo(np.int64).max // 4
    ws = limits.warp_size

    warps_pb = -(-threads // ws)
    safe_warps = np.maximum(warps_pb, 1)
    by_warps = limits.max_warps_per_sm // safe_warps
    by_blocks = np.full(threads.shape, limits.max_blocks_per_sm, dtype=np.int64)

    regs_per_warp = _round_up(regs * ws, limits.register_granularity)
    safe_rpw = np.maximum(regs_per_warp, 1)
    warps_per_sub = (limits.registers_per_sm // limits.sub_partitions) // safe_rpw
    by_regs = np.where(regs_per_warp > 0, (warps_per_sub * limits.sub_partitions) // safe_warps, big)
    regs_hw = regs_per_warp * _round_up(warps_pb, limits.sub_partitions)
    regs_sw = regs_per_warp * warps_pb
    regs_fail = (regs_hw > limits.max_registers_per_block) | (regs_sw > limits.max_registers_per_block)
    by_regs = np.where(regs_fail, 0, by_regs)

    smem_alloc = _round_up(smem + limits.reserved_shared_mem_per_block, limits.shared_mem_granularity)
    smem_fail = smem > limits.max_shared_mem_per_block
    by_smem = np.where(smem_alloc > 0, limits.shared_mem_per_sm // np.maximum(smem_alloc, 1), big)
    by_smem = np.where(smem_fail, 0, by_smem)

    invalid = (threads <= 0) | (threads > limits.max_threads_per_block) | (regs > limits.max_registers_per_thread)
    blocks = np.where(invalid, 0, np.minimum.reduce([by_warps, by_blocks, by_regs, by_smem]))
    return Occupancy(blocks.astype(np.int64), (blocks * warps_pb) / float(limits.max_warps_per_sm))


def launch_occupancy(timeline: Timeline) -> pd.Series:
    """Theoretical occupancy (0..1) of each kernel launch, indexed like timeline.events (kernels
    only); NaN where the block size or registers are unknown. One vectorized call per device."""
    import pandas as pd

    ev = timeline.events
    k = ev[ev["kind"].to_numpy() == int(EventKind.KERNEL)]
    out = pd.Series(np.nan, index=k.index, dtype=float)
    if k.empty:
        return out
    threads = (k["block_x"].clip(lower=0) * k["block_y"].clip(lower=1) * k["block_z"].clip(lower=1)).to_numpy()
    known = (k["block_x"].to_numpy() > 0) & (k["registers"].to_numpy() >= 0)
    keys = k[["rank", "device"]].drop_duplicates().itertuples(index=False)
    for rank, device in keys:  # per device: one vectorized call
        m = known & (k["rank"].to_numpy() == rank) & (k["device"].to_numpy() == device)
        if not m.any():
            continue
        limits = limits_for(timeline.device_info(int(rank), int(device)))
        occ = occupancy(threads[m], k["registers"].to_numpy()[m], k["shared_mem"].to_numpy()[m], limits)
        out.iloc[np.flatnonzero(m)] = occ.occupancy
    return out
