"""The trace health section against the raw traces: nsys PROFILER_OVERHEAD / DIAGNOSTIC_EVENT read with
sqlite3, GPU gaps rebuilt from the raw GPU records, Kineto orphans counted in the raw JSON; and the section in
`analyze` (text first, `health` in --json) through the real CLI."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sql_oracle import raw

from tracelab import api
from tracelab.demo import demo_run

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
NSYS_RUN = "sync_pitfalls-item_every_step-nsys"


def merged(intervals):
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(union, a, b) -> int:
    return sum(max(0, min(e, b) - max(s, a)) for s, e in union)


def raw_overhead(sqlite: Path) -> list[tuple[int, int]]:
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        return [(int(s), int(e)) for s, e in con.execute("SELECT start, end FROM PROFILER_OVERHEAD")]
    finally:
        con.close()


def test_nsys_overhead_and_the_gaps_it_covers():
    run = demo_run(NSYS_RUN)
    tl = api.load(run)
    h = api.health(tl, api.analyze(tl))
    o = h.check("profiler_overhead")
    ov = raw_overhead(run / "trace.sqlite")
    union = merged(ov)
    assert o.data["intervals"] == len(ov)
    assert o.data["total_ns"] == sum(e - s for s, e in union)
    gpu = merged((s, e) for s, e, _, _ in raw(run)["ops"])
    gaps = [(a[1], b[0]) for a, b in itertools.pairwise(gpu) if b[0] - a[1] >= 10_000]
    hit = [(a, b) for a, b in gaps if 2 * covered(union, a, b) >= b - a]
    assert o.data["gaps_covered"] == len(hit) and o.data["gaps_covered_ns"] == sum(b - a for a, b in hit)
    assert (o.status == "warn") == bool(hit)
    # diagnostics: the export's warnings, none about lost events
    con = sqlite3.connect(f"file:{run / 'trace.sqlite'}?mode=ro&immutable=1", uri=True)
    warnings = {" ".join(t.split()) for (t,) in con.execute("SELECT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3)")}
    con.close()
    d = h.check("dropped")
    assert set(d.data["warnings"]) == warnings and d.data["dropped"] == [] and d.status == "ok"
    c = h.check("correlation")
    assert c.status == "ok" and c.data["launches"] == len(raw(run)["ops"])  # one launch call per GPU op here


def test_kineto_run_has_no_profiler_records_and_links_every_op():
    run = demo_run("sync_pitfalls-item_every_step-torch")
    tl = api.load(run)
    h = api.health(tl, api.analyze(tl))
    assert h.check("dropped").status == "n/a" and h.check("profiler_overhead").status == "n/a"
    r = raw(run)
    launched = {c for _, _, c in r["launches"]}
    assert h.check("correlation").data["orphan_gpu_ops"] == sum(1 for *_, c in r["ops"] if c not in launched) == 0


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not present")
def test_corpus_kineto_orphans_and_nsys_overhead():
    path = CORPUS / "tracelens" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    orphans = sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e.get("args", {}).get("correlation") not in launched)
    tl = api.load(path)
    c = api.health(tl, api.analyze(tl)).check("correlation")
    assert c.data["orphan_gpu_ops"] == orphans > 0 and c.status == "warn"
    sqlite = CORPUS / "nvfuser" / "report1.sqlite"
    tl = api.load(sqlite)
    o = api.health(tl, api.analyze(tl)).check("profiler_overhead")
    ov = raw_overhead(sqlite)
    assert o.data["intervals"] == len(ov) and o.data["total_ns"] == sum(e - s for s, e in merged(ov))


def test_analyze_prints_health_first_and_puts_it_in_json():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": "/nonexistent/t.db"}
    run = str(demo_run(NSYS_RUN))
    t = subprocess.run([sys.executable, "-m", "tracelab", "analyze", run], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    assert t.returncode == 0 and t.stdout.startswith("Trace health")
    assert "profiler_overhead" in t.stdout and "is weakened" in t.stdout
    j = subprocess.run([sys.executable, "-m", "tracelab", "analyze", run, "--json"], capture_output=True, text=True,
                       env=env, timeout=300, check=False)
    doc = json.loads(j.stdout)
    names = [c["name"] for c in doc["health"]["checks"]]
    assert names == ["dropped", "profiler_overhead", "graphs", "correlation", "clocks", "window"]
    assert doc["health"]["weakened_findings"] == [{"rule": f["rule"], "why": "profiler overhead covers some of the idle time"}
                                                  for f in doc["findings"]]
