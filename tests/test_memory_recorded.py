"""The GPU memory timeline on real memory-traced recordings (issue 27 item 2), against the raw traces:
- tests/data/multigpu/memory_{nsys,torch}: programs/train_plain.py recorded on an H200 with nsys
  `--cuda-memory-usage=true` and torch.profiler `profile_memory=True` (tests/data/README.md);
- the bundled demo runs sync_pitfalls-keep_outputs-{nsys,torch}: the memory-traced workload variant
  (`tracelab record sync_pitfalls --variant keep_outputs`, which keeps every step's logits on the GPU);
  skipped with a reason until they are bundled (tests/data/record_multigpu.sh JOBS=memwl).
nsys: the running sum of the device-memory rows of CUDA_GPU_MEMORY_USAGE_EVENTS (read with sqlite3; host kinds
pageable / pinned left out), its peak, when, the allocation that reached it, the innermost NVTX range around the
CUDA call with that correlation id, per step the highest level (the level carried into the step counts).
torch: the same from the `[memory]` instants' Total Allocated / Total Reserved (read with json)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from multigpu_util import run_dir

from tracelab import api
from tracelab.demo import demo_archives, demo_run

VARIANT_RUNS = ("sync_pitfalls-keep_outputs-nsys", "sync_pitfalls-keep_outputs-torch")
BUNDLED = {a.name[: -len(".tar.xz")] for a in demo_archives()}
NOT_BUNDLED = ("the memory-traced variant's demo runs are not bundled yet: record them with "
               "`JOBS=memwl tests/data/record_multigpu.sh` on a GPU machine, then tests/data/bundle_runs.py")


def raw_nsys(sqlite: Path) -> list[tuple[int, int, int, int]]:
    """(start, signed bytes, correlation id, running level) of the device-memory rows, in time order."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        host = [i for i, n in con.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND")
                if n in ("CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "CUDA_MEMOPR_MEMORY_KIND_PINNED")]
        rows = con.execute(
            "SELECT start, bytes, memoryOperationType, correlationId, memKind FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
            "ORDER BY start").fetchall()
    finally:
        con.close()
    out, level = [], 0
    for s, b, op, c, k in rows:
        if k in host:
            continue
        level += -b if op == 1 else b
        out.append((s, -b if op == 1 else b, c if c is not None else -1, level))
    return out


def nsys_range_around(sqlite: Path, corr: int) -> str:
    """The innermost NVTX push/pop range on the thread of the CUDA call `corr`, around its start."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        call = con.execute("SELECT start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?",
                           (corr,)).fetchone()
        if call is None:
            return ""
        ranges = con.execute(
            "SELECT n.start, COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType = 59 AND n.globalTid = ? AND n.start <= ? AND n.end >= ?", (call[1], call[0], call[0])
        ).fetchall()
    finally:
        con.close()
    return max(ranges)[1] if ranges else ""


def _ns(ts: float) -> int:
    whole = int(ts // 1)
    return whole * 1000 + round((ts - whole) * 1000)


def raw_torch(trace: Path) -> tuple[list[tuple[int, dict]], list[dict]]:
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    mem = sorted(((_ns(e["ts"]), e) for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1),
                 key=lambda x: x[0])
    return mem, events


def check_steps(m, steps, levels: list[tuple[int, int]]) -> None:
    """Per step: the level carried into it and the highest level while it runs (levels: (t, level) in order)."""
    assert len(m.steps) == len(steps) > 0
    bounds = {(s.rank, s.index): s for s in steps}
    for sm in m.steps:
        st = bounds[(sm.rank, sm.index)]
        before = [v for t, v in levels if t < st.start_ns]
        inside = [v for t, v in levels if st.start_ns <= t < st.end_ns]
        carried = before[-1] if before else 0
        assert (sm.start_bytes, sm.peak_bytes) == (carried, max([carried, *inside])), sm


def check_nsys(run: Path) -> list[tuple[int, int, int, int]]:
    sqlite = run / "trace.sqlite"
    raw = raw_nsys(sqlite)
    assert raw
    tl = api.load(run)
    an = api.analyze(tl)
    m = api.memory(tl, an)
    assert m is not None and m.source == "nsys CUDA_GPU_MEMORY_USAGE_EVENTS"
    peak = max(v for *_, v in raw)
    k = next(i for i, r in enumerate(raw) if r[3] == peak)
    p = m.peaks[0]
    assert (p.peak_bytes, p.at_ns, p.allocation_bytes, p.events) == (peak, raw[k][0], raw[k][1], len(raw))
    assert p.op == nsys_range_around(sqlite, raw[k][2])
    check_steps(m, an.steps, [(t, v) for t, _, _, v in raw])
    return raw


def check_torch(run: Path) -> list[tuple[int, dict]]:
    mem, events = raw_torch(run / "trace.json.gz")
    assert mem
    tl = api.load(run)
    an = api.analyze(tl)
    m = api.memory(tl, an)
    assert m is not None and m.source.startswith("kineto")
    top = max(e["args"]["Total Allocated"] for _, e in mem)
    t, first = next((t, e) for t, e in mem if e["args"]["Total Allocated"] == top)
    p = m.peaks[0]
    assert (p.peak_bytes, p.at_ns, p.allocation_bytes, p.events) == (top, t, first["args"]["Bytes"], len(mem))
    assert p.reserved_peak_bytes == max(e["args"]["Total Reserved"] for _, e in mem)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
           and e.get("tid") == first["tid"] and _ns(e["ts"]) <= t <= _ns(e["ts"]) + _ns(e["dur"])]
    assert p.op == (max(ops, key=lambda e: e["ts"])["name"] if ops else "")
    check_steps(m, an.steps, [(t, e["args"]["Total Allocated"]) for t, e in mem])
    return mem


def test_recorded_train_plain_nsys(tmp_path: Path) -> None:
    check_nsys(run_dir("memory_nsys", tmp_path))


def test_recorded_train_plain_torch(tmp_path: Path) -> None:
    check_torch(run_dir("memory_torch", tmp_path))


@pytest.mark.skipif(not set(VARIANT_RUNS) <= BUNDLED, reason=NOT_BUNDLED)
def test_memory_variant_torch_grows_by_the_kept_logits_each_step() -> None:
    run = demo_run("sync_pitfalls-keep_outputs-torch")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["profiler"]["profile_memory"] is True
    mem = check_torch(run)
    # the program keeps batch x classes float32 logits a step: the level carried into each step grows by that
    tl = api.load(run)
    m = api.memory(tl, api.analyze(tl))
    kept = int(meta["params"]["batch"]) * int(meta["params"]["classes"]) * 4
    carried = [s.start_bytes for s in m.steps]
    # on average over the measured steps (one step's boundary may still hold a batch whose free waits for its
    # stream: the caching allocator frees record_stream'ed blocks late; the loss blocks are 512 bytes a step)
    # the caching allocator hands out large blocks (> 1 MiB) in multiples of 2 MiB, and Total Allocated counts blocks
    block = -(-kept // 2**21) * 2**21
    growth = (carried[-1] - carried[1]) / (len(carried) - 2)
    assert len(carried) >= 4 and abs(growth - block) <= 0.01 * block, (carried, kept, block)
    assert max(e["args"]["Total Allocated"] for _, e in mem) >= carried[-1] + kept


@pytest.mark.skipif(not set(VARIANT_RUNS) <= BUNDLED, reason=NOT_BUNDLED)
def test_memory_variant_nsys_has_memory_events() -> None:
    run = demo_run("sync_pitfalls-keep_outputs-nsys")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["profiler"]["cuda_memory_usage"] is True
    check_nsys(run)
