"""GPU step windows computed straight from raw traces (the Kineto JSON / the nsys SQLite), without
tracelab: for each step marker range, the first start and last end of the GPU work (kernels, memcpys,
memsets) whose launching runtime / driver call (same correlation id, same process) starts inside it.
Tests compare tracelab's step table and verdict with these numbers."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import defaultdict
from pathlib import Path
from statistics import median

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
API_CATS = {"cuda_runtime", "cuda_driver"}
STEP = re.compile(r"^step \d+$")


def _windows(steps, launches, gpu):
    """steps: [(start, end)], launches: {corr: start}, gpu: [(corr, start, end)] -> [(lo, hi)]."""
    steps = sorted(steps)
    out = [[None, None] for _ in steps]
    for corr, s, e in gpu:
        t = launches.get(corr)
        if t is None:
            continue
        for i, (a, b) in enumerate(steps):
            if a <= t < b:
                lo, hi = out[i]
                out[i] = [s if lo is None else min(lo, s), e if hi is None else max(hi, e)]
                break
    return [(lo, hi) for lo, hi in out]


def _top_level(ranges) -> list:
    """The ranges that no earlier range contains (sorted), as the step markers of one thread nest."""
    top = []
    for a, b in sorted(ranges):
        if not top or a >= top[-1][1]:
            top.append((a, b))
    return top


def _read_kineto(path: Path, step: re.Pattern[str] | None = None) -> tuple[dict, list, dict, list]:
    """(the document, [(start, end)] of the ranges named like `step` (none without it), {correlation: launch
    start}, [(correlation, start, end)] of GPU work) of one Kineto file, in µs (the trace's own unit)."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        doc = json.load(f)
    ranges, launches, gpu = [], {}, []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        cat, args = ev.get("cat", ""), ev.get("args") or {}
        ts, dur = float(ev["ts"]), float(ev.get("dur", 0))
        if cat in GPU_CATS and "correlation" in args:
            gpu.append((args["correlation"], ts, ts + dur))
        elif cat in API_CATS and "correlation" in args:
            launches.setdefault(args["correlation"], ts)
        elif step is not None and cat in ("user_annotation", "cpu_op") and step.match(str(ev.get("name", ""))):
            ranges.append((ts, ts + dur))
    return doc, ranges, launches, gpu


def _read_nsys(db: sqlite3.Connection) -> tuple[dict, dict]:
    """Per process id (globalPid >> 24): {correlation: launch start ns} of the runtime / driver calls, and
    [(correlation, start, end)] of GPU work (kernels, memcpys, memsets) of an nsys export."""
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    launches, gpu = defaultdict(dict), defaultdict(list)
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table in tables:
            for s, corr, gtid in db.execute(f"SELECT start, correlationId, globalTid FROM {table} ORDER BY start"):
                launches[(gtid >> 24) & 0xFFFFFF].setdefault(corr, s)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            for s, e, corr, gpid in db.execute(f"SELECT start, end, correlationId, globalPid FROM {table}"):
                gpu[(gpid >> 24) & 0xFFFFFF].append((corr, s, e))
    return launches, gpu


def kineto_step_windows(path: Path, step: re.Pattern[str] = STEP) -> list[tuple[float, float]]:
    """GPU windows (µs, the trace's own unit) of the top-level ranges named like `step` in one Kineto file."""
    _doc, ranges, launches, gpu = _read_kineto(path, step)
    return _windows(_top_level(ranges), launches, gpu)


def nsys_step_windows(path: Path, step: re.Pattern[str] = STEP) -> dict[int, list[tuple[int, int]]]:
    """GPU windows (ns) of the NVTX ranges named like `step`, per process id (globalPid >> 24)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    ranges = defaultdict(list)
    for s, e, text, tid, gtid in db.execute(
        "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL"
    ):
        name = text if text is not None else strings.get(tid, "")
        if step.match(name or ""):
            ranges[(gtid >> 24) & 0xFFFFFF].append((s, e))
    launches, gpu = _read_nsys(db)
    db.close()
    return {pid: _windows(_top_level(rs), launches[pid], gpu[pid]) for pid, rs in ranges.items()}


def steady(windows: list[tuple[float, float]]) -> float:
    """Median GPU window length of the steps after the first (the warm-up)."""
    lengths = [hi - lo for lo, hi in windows if lo is not None]
    later = lengths[1:] or lengths
    return float(median(later))


def windows_of_ranges(ranges, launches, gpu):
    """The GPU window of each given host range (`_windows`: the GPU work whose launch call starts in it),
    in the order of the sorted ranges; (None, None) for a range that launched none."""
    return _windows(list(ranges), launches, gpu)


def kineto_launches_gpu(path: Path) -> tuple[int, dict, list]:
    """(rank, {correlation: launch start µs}, [(correlation, start µs, end µs)] of GPU work) of one Kineto file."""
    doc, _ranges, launches, gpu = _read_kineto(path)
    return (doc.get("distributedInfo") or {}).get("rank", 0), launches, gpu


def nsys_launches_gpu(path: Path) -> dict[int, tuple[dict, list]]:
    """rank -> ({correlation: launch start ns}, [(correlation, start, end)] of GPU work) of an nsys export
    of several processes; a process's rank is the "Rank" of its ncclCommInitRank* payload (NVTX jsonText)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rank_of = {}
    for gtid, text in db.execute(
        "SELECT e.globalTid, e.jsonText FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE s.value LIKE 'ncclCommInitRank%' AND e.jsonText IS NOT NULL"
    ):
        rank_of[(gtid >> 24) & 0xFFFFFF] = json.loads(text)["Rank"]
    launches, gpu = _read_nsys(db)
    db.close()
    return {rank_of[p]: (launches[p], gpu[p]) for p in rank_of}
