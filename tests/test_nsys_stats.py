"""GPU time by NVTX range against nsys's own projection (issue 27 item 1): `nsys stats --report
nvtx_gpu_proj_sum` / `nvtx_gpu_proj_trace` CSVs recorded by tests/data/record_nsys_stats.sh on a machine with
nsys (tests/data/nsys_stats/), compared with tracelab's range projection of the same SQLite export.

Per instance (nvtx_gpu_proj_trace: one row per projected NVTX range): the instance with the same name and host
start has the same projected start, projected end and number of GPU ops. Per name (nvtx_gpu_proj_sum): range
instances, total projected time (the sum of the instances' projected spans: tracelab's `span_ns`) and total GPU
ops. Skips with a reason until the CSVs exist (nsys is not on the development machine)."""

from __future__ import annotations

import csv
import io
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest

from tracelab import api
from tracelab.analyses.range_projection import project_ranges
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


def range_name(s: str) -> str:
    """nsys may write a range of the default domain as ':name'; tracelab keeps the name."""
    return s.removeprefix(":")


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
    tl = api.load(export_of(name, tmp_path))
    p = project_ranges(tl)
    start = tl.col("start")[p.rows]
    names = np.array(tl.strings + ("",), dtype=object)[np.where(tl.col("name")[p.rows] >= 0, tl.col("name")[p.rows], -1)]
    mine: dict[tuple[str, int], int] = {(str(n), int(s)): i for i, (n, s) in enumerate(zip(names, start.tolist()))}

    # per instance: nvtx_gpu_proj_trace
    trace = read_report(STATS / f"{name}_nvtx_gpu_proj_trace.csv")
    assert trace, f"{name}: nvtx_gpu_proj_trace.csv has no rows"
    # a row without a range (empty Name and Orig Start) holds the GPU ops no range encloses: not a range
    trace = [row for row in trace if row.get("Orig Start (ns)", "").strip()]
    by_name: dict[str, list[int]] = {}
    for row in trace:
        n = range_name(row["Name"])
        i = mine.get((n, num(row, "Orig Start")))
        assert i is not None, f"{name}: nsys projects {n!r} at {row['Orig Start (ns)']}, tracelab has no such range"
        ps, pd = num(row, "Projected Start"), num(row, "Projected Duration")
        assert (int(p.gpu_start[i]), int(p.gpu_end[i])) == (ps, ps + pd), (name, n, row)
        assert int(p.gpu_ops[i]) == num(row, "NumGPUOps"), (name, n, row)
        by_name.setdefault(n, []).append(i)

    # per name: nvtx_gpu_proj_sum (instances, total projected time, GPU ops)
    summary = read_report(STATS / f"{name}{SUFFIX}")
    assert summary, f"{name}: nvtx_gpu_proj_sum.csv has no rows"
    for row in (r for r in summary if r["Range"].strip() and r["Range"].strip() != "None"):
        n = range_name(row["Range"])
        rows = np.array(by_name.get(n, []), dtype=np.int64)
        assert num(row, "Range Instances") == rows.size, (name, n)
        assert num(row, "Total Proj Time") == int((p.gpu_end[rows] - p.gpu_start[rows]).sum()), (name, n)
        assert num(row, "Total GPU Ops") == int(p.gpu_ops[rows].sum()), (name, n)
        stat = next(s for s in p.stats if s.name == n)
        # every instance of the name that tracelab projects is one nsys projects too
        assert stat.span_ns == num(row, "Total Proj Time"), (name, n)
    # and tracelab projects no range nsys leaves out
    projected = {(str(names[i]), int(start[i])) for i in np.flatnonzero(p.gpu_ops > 0).tolist()}
    assert projected == {(range_name(r["Name"]), num(r, "Orig Start")) for r in trace}, name
