"""GPU time by NVTX range against nsys's own projection (issue 27 item 1): `nsys stats --report
nvtx_gpu_proj_sum` / `nvtx_gpu_proj_trace` CSVs recorded by tests/data/record_nsys_stats.sh on a machine with
nsys (tests/data/nsys_stats/), compared with tracelab's range projection of the same SQLite export.

Per instance (nvtx_gpu_proj_trace: one row per projected NVTX range): the instance with the same name and host
start has the same projected start, projected end and number of GPU ops. Per name (nvtx_gpu_proj_sum): range
instances, total projected time (the sum of the instances' projected spans: tracelab's `span_ns`) and total GPU
ops. One definition differs: nsys counts a CUDA graph launch as one GPU op, tracelab its node ops (traced with
--cuda-graph-trace=node); the difference is computed from the raw export and checked to be exactly that.
Recorded with nsys 2025.3.1 on an H200 (tests/data/nsys_stats/, tests/data/record_nsys_stats.sh); skips with a
reason when the CSVs are absent (nsys is not on the development machine)."""

from __future__ import annotations

import csv
import io
import lzma
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracelab import api
from tracelab.analyses.device.range_projection import project_ranges
from tracelab.demo import demo_archives, demo_run

DATA = Path(__file__).resolve().parent / "data"
STATS = DATA / "nsys_stats"
SUFFIX = "_nvtx_gpu_proj_sum.csv"
NOT_YET = ("tests/data/nsys_stats/ not recorded yet: run tests/data/record_nsys_stats.sh on a machine with nsys "
           "(docs: the script's header) and unpack its nsys_stats.tar.xz into tests/data/")


def _names() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in STATS.glob(f"*{SUFFIX}")) if STATS.is_dir() else []


def read_report(path: Path) -> list[dict[str, str]]:
    """The CSV table of one nsys stats report (nsys may print NOTICE lines before the header)."""
    lines = path.read_text().splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.startswith(("Range,", "Name,"))), None)
    if head is None:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines[head:]))))


def num(row: dict[str, str], prefix: str) -> int:
    """The column whose header starts with `prefix` ("Total Proj Time" matches "Total Proj Time (ns)")."""
    key = next(k for k in row if k.startswith(prefix))
    return round(float(row[key]))


def nvtx_domains(sqlite: Path) -> list[str]:
    """The NVTX domains the export names (NVTX_EVENTS rows of eventType 75, NvtxDomainCreate), longest first."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        names = {str(t) for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 75 AND text IS NOT NULL")}
    finally:
        con.close()
    return sorted(names, key=len, reverse=True)


def range_name(s: str, domains: list[str]) -> str:
    """nsys writes a range as 'domain:name' (':name' in the default domain); tracelab keeps the name."""
    for d in (*domains, ""):
        if s.startswith(d + ":"):
            return s[len(d) + 1 :]
    return s


def graph_node_extra(sqlite: Path):
    """nsys counts a CUDA graph launch as ONE GPU op in NumGPUOps; tracelab counts the graph's node ops (kernels,
    copies, memsets traced with --cuda-graph-trace=node). Per range (thread tid, host [start, end)): the node ops
    beyond one per graph launch whose call starts inside it, from the raw export."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        nodes: dict[int, int] = {}
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({t})")} if t in tables else set()
            if "graphNodeId" in cols:
                for c, k in con.execute(f"SELECT correlationId, count(*) FROM {t} WHERE graphNodeId IS NOT NULL "
                                        "GROUP BY correlationId"):
                    nodes[c] = nodes.get(c, 0) + k
        calls = [(g & 0xFFFFFF, st, nodes[c]) for g, st, c in con.execute(
            "SELECT globalTid, start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME") if c in nodes]
    finally:
        con.close()

    def extra(tid: int, start: int, end: int) -> int:
        return sum(k - 1 for t, st, k in calls if t == tid and start <= st < end)

    return extra


def export_of(name: str, tmp: Path) -> Path:
    """The SQLite export nsys stats ran on."""
    if name == "recorded":
        out = tmp / "recorded.sqlite"
        with lzma.open(STATS / "recorded.sqlite.xz") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return out
    if name.startswith("nsys_mixed_small"):  # the bundled .sqlite.xz, and nsys's re-export of the .nsys-rep beside it
        out = tmp / "nsys_mixed_small.sqlite"
        with lzma.open(DATA / "nsys_mixed_small.sqlite.xz") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return out
    assert name in {a.name[: -len(".tar.xz")] for a in demo_archives()}, name
    return demo_run(name) / "trace.sqlite"


@pytest.mark.skipif(not _names(), reason=NOT_YET)
@pytest.mark.parametrize("name", _names() or ["none"])
def test_projection_matches_nsys_stats(name: str, tmp_path: Path) -> None:
    sqlite = export_of(name, tmp_path)
    domains = nvtx_domains(sqlite)
    tl = api.load(sqlite)
    p = project_ranges(tl)
    start = tl.col("start")[p.rows]
    names = np.array(tl.strings + ("",), dtype=object)[np.where(tl.col("name")[p.rows] >= 0, tl.col("name")[p.rows], -1)]
    mine: dict[tuple[str, int], int] = {(str(n), int(s)): i for i, (n, s) in enumerate(zip(names, start.tolist()))}

    # per instance: nvtx_gpu_proj_trace
    trace = read_report(STATS / f"{name}_nvtx_gpu_proj_trace.csv")
    assert trace, f"{name}: nvtx_gpu_proj_trace.csv has no rows"
    # a row without a range (empty Name and Orig Start) holds the GPU ops no range encloses: not a range
    trace = [row for row in trace if row.get("Orig Start (ns)", "").strip()]
    graph_extra = graph_node_extra(sqlite)
    graph_ops = 0
    by_name: dict[str, list[int]] = {}
    extra_of: dict[int, int] = {}
    for row in trace:
        n = range_name(row["Name"], domains)
        i = mine.get((n, num(row, "Orig Start")))
        assert i is not None, f"{name}: nsys projects {n!r} at {row['Orig Start (ns)']}, tracelab has no such range"
        ps, pd = num(row, "Projected Start"), num(row, "Projected Duration")
        assert (int(p.gpu_start[i]), int(p.gpu_end[i])) == (ps, ps + pd), (name, n, row)
        extra = graph_extra(int(row["TID"]), num(row, "Orig Start"), num(row, "Orig Start") + num(row, "Orig Duration"))
        assert int(p.gpu_ops[i]) == num(row, "NumGPUOps") + extra, (name, n, row, extra)
        graph_ops += extra
        extra_of[i] = extra
        by_name.setdefault(n, []).append(i)

    # the one difference, and where it shows: tests/data/nsys_mixed_small replays a CUDA graph each step
    assert (graph_ops > 0) == name.startswith("nsys_mixed_small"), (name, graph_ops)

    # per name: nvtx_gpu_proj_sum (instances, total projected time, GPU ops)
    summary = read_report(STATS / f"{name}{SUFFIX}")
    assert summary, f"{name}: nvtx_gpu_proj_sum.csv has no rows"
    for row in (r for r in summary if r["Range"].strip() and r["Range"].strip() != "None"):
        n = range_name(row["Range"], domains)
        rows = np.array(by_name.get(n, []), dtype=np.int64)
        assert num(row, "Range Instances") == rows.size, (name, n)
        assert num(row, "Total Proj Time") == int((p.gpu_end[rows] - p.gpu_start[rows]).sum()), (name, n)
        assert num(row, "Total GPU Ops") == int(p.gpu_ops[rows].sum()) - sum(extra_of[i] for i in rows.tolist()), (name, n)
        stat = next(s for s in p.stats if s.name == n)
        # every instance of the name that tracelab projects is one nsys projects too
        assert stat.span_ns == num(row, "Total Proj Time"), (name, n)
    # and tracelab projects no range nsys leaves out
    projected = {(str(names[i]), int(start[i])) for i in np.flatnonzero(p.gpu_ops > 0).tolist()}
    assert projected == {(range_name(r["Name"], domains), num(r, "Orig Start")) for r in trace}, name
