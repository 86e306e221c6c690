"""nsys CUDA memory usage events (`nsys profile --cuda-memory-usage=true`: CUDA_GPU_MEMORY_USAGE_EVENTS): one
row per device allocation / free (cudaMalloc, cudaFree, memory pools), `bytes`, `memoryOperationType`
(0 allocation, 1 deallocation), `correlationId` of the CUDA call. The bytes allocated over time per device are
their running sum (what CUDA allocated: for PyTorch the caching allocator's reserved memory). Rows of host
memory kinds (`memKind` pageable / pinned: cudaHostAlloc, pin_memory()) are not GPU memory and are left out.
Kept in
`RunMeta.extra["memory"]` with the Kineto reader's columns (allocated = the running sum; reserved unknown)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracelab.io.nsys.db import NsysDb

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
MAX_EVENTS = 1_000_000
HOST_KINDS = ("CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "CUDA_MEMOPR_MEMORY_KIND_PINNED")
HOST_KIND_IDS = (0, 1)  # their ids in ENUM_CUDA_MEM_KIND, when an export lacks the enum table


def _host_kinds(db: NsysDb) -> tuple[int, ...]:
    """The memKind ids of host memory (pageable, pinned) in this export."""
    if db.has("ENUM_CUDA_MEM_KIND", "id", "name"):
        ids = tuple(int(i) for (i, n) in db.rows("SELECT id, name FROM ENUM_CUDA_MEM_KIND") if str(n) in HOST_KINDS)
        if ids:
            return ids
    return HOST_KIND_IDS


def read_memory(db: NsysDb) -> dict[str, Any] | None:
    if not db.has(TABLE, "start", "deviceId", "bytes", "memoryOperationType"):
        return None
    corr = "correlationId" if db.has(TABLE, "correlationId") else "-1"
    addr = "address" if db.has(TABLE, "address") else "0"
    device_only = (f" AND memKind NOT IN ({', '.join(str(i) for i in _host_kinds(db))})"
                   if db.has(TABLE, "memKind") else "")
    rows = db.rows(
        f"SELECT start, deviceId, bytes, memoryOperationType, {addr}, {corr} FROM {TABLE} "
        f"WHERE start IS NOT NULL{device_only} ORDER BY start LIMIT {MAX_EVENTS}"
    )
    if not rows:
        return None
    a = np.array([[int(x) if x is not None else -1 for x in r] for r in rows], dtype=np.int64)
    t, dev, size, op = a[:, 0], a[:, 1], np.maximum(a[:, 2], 0), a[:, 3]
    signed = np.where(op == 1, -size, size)
    order = np.lexsort((t, dev))
    running = np.empty_like(signed)
    sd = dev[order]
    cs = np.cumsum(signed[order])
    first = np.r_[True, sd[1:] != sd[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(sd.size), 0))
    offset = np.where(base > 0, cs[np.maximum(base - 1, 0)], 0)
    running[order] = cs - offset
    return {"t": t.tolist(), "device": dev.tolist(), "bytes": signed.tolist(), "allocated": running.tolist(),
            "reserved": [-1] * int(t.size), "addr": a[:, 4].tolist(), "tid": [-1] * int(t.size),
            "correlation": a[:, 5].tolist(), "source": "nsys CUDA_GPU_MEMORY_USAGE_EVENTS",
            "truncated": len(rows) >= MAX_EVENTS}
