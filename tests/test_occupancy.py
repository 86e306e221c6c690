"""Occupancy calculation against the CUDA occupancy calculator (cuda_occupancy.h) for cc 8.0 / 9.0.

Expected values worked out by hand from the calculator's rules (register allocation per warp in
units of 256, 4 sub-partitions, shared-memory granularity 128 B + 1 KB reserved per block on cc >= 8.0).
"""

import numpy as np
import pytest

from tracelab.analyses.sm.occupancy import (
    CC_LIMITS,
    device_sm_count,
    limits_for,
    occupancy,
)
from tracelab.model import DeviceInfo

A100 = CC_LIMITS[(8, 0)]
H100 = CC_LIMITS[(9, 0)]


def blocks_per_sm(threads: int, regs: int, smem: int, limits) -> int:
    """One launch configuration, like cudaOccupancyMaxActiveBlocksPerMultiprocessor."""
    return int(occupancy(threads, regs, smem, limits).blocks_per_sm[0])


@pytest.mark.parametrize("limits", [A100, H100], ids=["cc8.0", "cc9.0"])
@pytest.mark.parametrize(
    "threads, regs, smem, blocks, occ",
    [
        (256, 32, 0, 8, 1.0),  # full occupancy: 8 blocks x 8 warps = 64 warps
        (1024, 64, 0, 1, 0.5),  # registers: 2048 regs/warp -> 8 warps per sub-partition -> 32 warps
        (128, 64, 0, 8, 0.5),  # registers: 32 warps / 4 warps per block
        (128, 255, 0, 2, 0.125),  # 255 regs -> 8192 regs/warp -> 2 warps per sub-partition
        (96, 40, 0, 16, 0.75),  # 1280 regs/warp -> 12 warps per sub-partition = 48 warps / 3
        (32, 16, 0, 32, 0.5),  # max resident blocks per SM
        (64, 0, 0, 32, 1.0),  # unknown / zero registers: warps and blocks only
    ],
)
def test_known_configurations(limits, threads, regs, smem, blocks, occ):
    r = occupancy(threads, regs, smem, limits)
    assert int(r.blocks_per_sm[0]) == blocks
    assert float(r.occupancy[0]) == pytest.approx(occ)
    assert blocks_per_sm(threads, regs, smem, limits) == blocks


def test_shared_memory_limit_differs_by_cc():
    # 48 KB + 1 KB reserved = 50176 B per block: 164 KB / 50176 = 3 on A100, 228 KB / 50176 = 4 on H100
    assert blocks_per_sm(256, 32, 48 * 1024, A100) == 3
    assert blocks_per_sm(256, 32, 48 * 1024, H100) == 4
    # granularity: 100 B + 1 KB reserved rounds to 1152 B -> 228 KB / 1152 = 202, capped by 32 blocks
    assert blocks_per_sm(32, 16, 100, H100) == 32
    # 7 KB + 1 KB = 8 KB per block: 228 / 8 = 28 blocks
    assert blocks_per_sm(64, 16, 7 * 1024, H100) == 28


def test_invalid_configurations_fit_zero_blocks():
    r = occupancy([2048, 256, 256], [32, 300, 32], [0, 0, 300 * 1024], H100)
    assert r.blocks_per_sm.tolist() == [0, 0, 0]
    # per-block register limit: 1024 threads x 128 regs = 131072 > 65536
    assert blocks_per_sm(1024, 128, 0, H100) == 0


def test_vectorized_matches_scalar():
    rng = np.random.default_rng(0)
    threads = rng.choice([32, 64, 96, 128, 256, 512, 768, 1024], 500)
    regs = rng.integers(0, 256, 500)
    smem = rng.integers(0, 100_000, 500)
    r = occupancy(threads, regs, smem, H100)
    for i in range(0, 500, 25):
        assert r.blocks_per_sm[i] == blocks_per_sm(
            int(threads[i]), int(regs[i]), int(smem[i]), H100
        )
    assert ((r.occupancy >= 0) & (r.occupancy <= 1)).all()


def test_limits_from_trace_and_defaults():
    h200 = DeviceInfo(rank=0, device=0, name="NVIDIA H200", cc_major=9, cc_minor=0)
    lim = limits_for(h200)
    assert (lim.sm_count, lim.max_threads_per_sm, lim.max_blocks_per_sm) == (132, 2048, 32)
    assert lim.shared_mem_per_sm == 228 * 1024 and lim.reserved_shared_mem_per_block == 1024
    # recorded values win over defaults; the per-block 48 KB default does not shrink the opt-in limit
    rec = DeviceInfo(0, 0, "x", sm_count=114, cc_major=9, max_shared_mem_per_block=48 * 1024)
    assert limits_for(rec).sm_count == 114
    assert limits_for(rec).max_shared_mem_per_block == 227 * 1024
    # name only (no cc): A100 -> cc 8.0, 108 SMs; Volta has no reserved smem and 256 B granularity
    a100 = limits_for(DeviceInfo(0, 0, "NVIDIA A100-SXM4-80GB"))
    assert (a100.cc_major, a100.sm_count) == (8, 108)
    v100 = limits_for(DeviceInfo(0, 0, "Tesla V100-SXM2-32GB"))
    assert (v100.cc_major, v100.reserved_shared_mem_per_block, v100.shared_mem_granularity) == (7, 0, 256)
    assert limits_for(DeviceInfo(0, 0, "", cc_major=10, cc_minor=0)).sm_count == 148
    # cc 8.6: 1536 threads, 16 blocks -> 256 threads x 32 regs fits 6 blocks (48 warps)
    assert blocks_per_sm(256, 32, 0, CC_LIMITS[(8, 6)]) == 6
    assert device_sm_count(DeviceInfo(0, 0, "NVIDIA H100 PCIe")) == 114
    assert device_sm_count(DeviceInfo(0, 0, "mystery")) == 0
