"""Figures read straight from the raw bundled traces (sqlite3 on the nsys export, json on the Kineto
file), never through tracelab's parsers: the oracle of tests/test_sql.py, tests/test_ranges.py and
tests/test_mcp.py."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def union_length(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _ns(us: float) -> int:
    return round(float(us) * 1000)


def raw(run: Path) -> dict:
    """kernels [(start, end, name)], gpu ops [(start, end, is_kernel, corr)], launches [(thread, start, corr)],
    ranges [(thread, start, end, name)] (NVTX / user_annotation only)."""
    sqlite = run / "trace.sqlite"
    if sqlite.exists():
        con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            kernels = [(int(s), int(e), str(n)) for s, e, n in con.execute(
                "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")]
            ops = [(int(s), int(e), 1, int(c)) for s, e, c in con.execute(
                "SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL")]
            for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
                if t in tables:
                    ops += [(int(s), int(e), 0, int(c)) for s, e, c in con.execute(f"SELECT start, end, correlationId FROM {t}")]
            launches = [(int(g), int(s), int(c)) for g, s, c in con.execute(
                "SELECT globalTid, start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")]
            ranges = [(int(g), int(s), int(e), str(t)) for g, s, e, t in con.execute(
                "SELECT n.globalTid, n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL AND n.eventType = 59")]
        finally:
            con.close()
    else:
        with gzip.open(run / "trace.json.gz", "rt") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        kernels = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]) for e in events if e.get("cat") == "kernel"]
        ops = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), int(e.get("cat") == "kernel"), int(e["args"]["correlation"]))
               for e in events if e.get("cat") in GPU_CATS]
        launches = [((e["pid"], e["tid"]), _ns(e["ts"]), int(e["args"]["correlation"]))
                    for e in events if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})]
        ranges = [((e["pid"], e["tid"]), _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"])
                  for e in events if e.get("cat") == "user_annotation"]
    return {"kernels": kernels, "ops": ops, "launches": launches, "ranges": ranges}


def projected(run: Path, name: str) -> list[tuple[int, int, int]]:
    """Per instance of host range `name` (by start): (ops launched inside on its thread, union of their GPU
    time, kernel time) — a plain loop over the raw records."""
    r = raw(run)
    by_corr: dict[int, list[tuple[int, int, int]]] = {}
    for s, e, k, c in r["ops"]:
        by_corr.setdefault(c, []).append((s, e, k))
    out = []
    for thread, s, e, n in sorted(r["ranges"], key=lambda x: x[1]):
        if n != name:
            continue
        mine = [op for t, ls, c in r["launches"] if t == thread and s <= ls < e for op in by_corr.get(c, [])]
        out.append((len(mine), union_length([(a, b) for a, b, _ in mine]), sum(b - a for a, b, k in mine if k)))
    return out


def projected_by_name(run: Path, name: str) -> dict[str, int]:
    """Per range name: calls, distinct ops, union of their GPU time, kernel time, summed projected span."""
    r = raw(run)
    by_corr: dict[int, list[tuple[int, int, int]]] = {}
    for s, e, k, c in r["ops"]:
        by_corr.setdefault(c, []).append((s, e, k))
    calls, ops, span = 0, set(), 0
    for thread, s, e, n in r["ranges"]:
        if n != name:
            continue
        calls += 1
        mine = [op for t, ls, c in r["launches"] if t == thread and s <= ls < e for op in by_corr.get(c, [])]
        ops.update(mine)
        if mine:
            span += max(b for _, b, _ in mine) - min(a for a, _, _ in mine)
    return {"calls": calls, "gpu_ops": len(ops), "gpu_ns": union_length([(a, b) for a, b, _ in ops]),
            "kernel_ns": sum(b - a for a, b, k in ops if k), "span_ns": span}


def projected_spans(run: Path, name: str) -> list[tuple[int, int]]:
    """Per instance of `name` (by start) that launched GPU work: (first op start, last op end)."""
    r = raw(run)
    by_corr: dict[int, list[tuple[int, int]]] = {}
    for s, e, _k, c in r["ops"]:
        by_corr.setdefault(c, []).append((s, e))
    out = []
    for thread, s, e, n in sorted(r["ranges"], key=lambda x: x[1]):
        if n == name:
            mine = [op for t, ls, c in r["launches"] if t == thread and s <= ls < e for op in by_corr.get(c, [])]
            if mine:
                out.append((min(a for a, _ in mine), max(b for _, b in mine)))
    return out
