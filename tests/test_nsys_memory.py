"""nsys CUDA memory usage events (CUDA_GPU_MEMORY_USAGE_EVENTS, `--cuda-memory-usage=true`): no export in the
corpus has rows in that table, so a bundled nsys export is copied and given allocation / free rows in nsys'
own column layout (the saxpy corpus export's), each on the correlation id of a real CUDA call of the trace
(device memory, memKind 2; a pinned host allocation among them is left out).
Expected: the running sum per device (computed here), its peak, the allocation that reached it, and the
innermost NVTX range around the CUDA call with that correlation id (read with sqlite3 here)."""

from __future__ import annotations

import shutil
import sqlite3

from tracelab import api
from tracelab.demo import demo_run

RUN = "sync_pitfalls-item_every_step-nsys"
DDL = ("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER, "
       "contextId INTEGER, address INTEGER, pc INTEGER, bytes INTEGER, memKind INTEGER, memoryOperationType INTEGER, "
       "name INTEGER, correlationId INTEGER)")


def test_nsys_memory_events(tmp_path):
    src = demo_run(RUN) / "trace.sqlite"
    path = tmp_path / "trace.sqlite"
    shutil.copy(src, path)
    con = sqlite3.connect(path)
    calls = con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start "
                        "LIMIT 40").fetchall()
    con.execute("DROP TABLE IF EXISTS CUDA_GPU_MEMORY_USAGE_EVENTS")
    con.execute(DDL)
    plan = []  # (start, bytes, op, corr)
    for i, (start, _tid, corr) in enumerate(calls):
        size = (i % 7 + 1) * 2**20
        op = 1 if i % 3 == 2 else 0  # every third a free of the one before
        plan.append((start + 5, size, op, corr))
    # memKind 2: device memory; one pinned host allocation (memKind 1, cudaHostAlloc) is not GPU memory
    con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, 0, 0, 1, ?, 0, ?, 2, ?, 0, ?)",
                    [(s, 1000 + i, b, op, c) for i, (s, b, op, c) in enumerate(plan)])
    con.execute("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, 0, 0, 1, 99, 0, ?, 1, 0, 0, ?)",
                (plan[0][0] + 1, 2**34, plan[0][3]))
    con.commit()
    level, levels = 0, []
    for _s, b, op, _c in plan:
        level += -b if op else b
        levels.append(level)
    peak = max(levels)
    k = levels.index(peak)
    call_start, call_tid, _ = calls[k]
    ranges = con.execute(
        "SELECT n.start, COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType = 59 AND n.globalTid = ? AND n.start <= ? AND n.end >= ?", (call_tid, call_start, call_start)
    ).fetchall()
    con.close()
    want_op = max(ranges)[1] if ranges else ""

    tl = api.load(path)
    m = api.memory(tl, api.analyze(tl))
    assert m is not None and m.source == "nsys CUDA_GPU_MEMORY_USAGE_EVENTS"
    assert m.allocated.tolist() == levels
    p = m.peaks[0]
    assert (p.device, p.peak_bytes, p.at_ns, p.allocation_bytes) == (0, peak, plan[k][0], plan[k][1])
    assert p.op == want_op and p.reserved_peak_bytes == -1
