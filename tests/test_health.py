"""The trace health section against the raw traces: nsys PROFILER_OVERHEAD / DIAGNOSTIC_EVENT read with
sqlite3, GPU gaps rebuilt from the raw GPU records, Kineto orphans counted in the raw JSON; and the section in
`analyze` (text first, `health` in --json) through the real CLI."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sql_oracle import raw

from tracelab import api
from tracelab.analyses.results import CAUSES
from tracelab.demo import demo_run
from tracelab.render.text.gap_evidence import gap_evidence

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


def nsys_profiler_gaps(sqlite: Path, threshold: int = 10_000) -> list[tuple[int, int]]:
    """The gaps of cause `profiler`, from the raw export: per device, the idle intervals between the merged GPU
    records (>= threshold) that the PROFILER_OVERHEAD intervals of the device's process (globalTid >> 24 =
    globalPid >> 24) cover for at least half, unless the next op's launch call had returned before the gap."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        ops = []
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if t in tables:
                ops += con.execute(f"SELECT start, end, deviceId, globalPid >> 24, correlationId FROM {t}").fetchall()
        launch = {(p, c): e for p, c, e in con.execute(
            "SELECT globalTid >> 24, correlationId, end FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        over = con.execute("SELECT start, end, globalTid >> 24 FROM PROFILER_OVERHEAD").fetchall()
    finally:
        con.close()
    out = []
    for dev in sorted({o[2] for o in ops}):
        mine = sorted(o for o in ops if o[2] == dev)
        pids = {o[3] for o in mine}
        union = merged((s, e) for s, e, p in over if p in pids)
        end = mine[0][1]
        for s, e, _, pid, corr in mine[1:]:
            if s - end >= threshold:
                a, b = end, s
                queued = launch.get((pid, corr), b) <= a
                if 2 * covered(union, a, b) >= b - a and not queued:
                    out.append((a, b))
            end = max(end, e)
    return sorted(out)


def kineto_profiler_gaps(events: list[dict], threshold: int = 10_000) -> list[tuple[int, int]]:
    """The same from a raw Kineto trace: its "overhead" events (no process: they count for every one) against the
    idle intervals between the merged GPU ops of each device; a launch (by correlation) that returned before
    the gap leaves it to the queue."""
    ns = lambda us: round(float(us) * 1000)  # as the parser converts µs
    union = merged((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                   if e.get("cat") == "overhead" and e.get("ph") == "X")
    launch = {e["args"]["correlation"]: ns(e["ts"]) + ns(e["dur"]) for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["args"].get("device", 0), e["args"].get("correlation"))
           for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    out = []
    for dev in sorted({o[2] for o in ops}):
        mine = sorted(o for o in ops if o[2] == dev)
        end = mine[0][1]
        for s, e, _, corr in mine[1:]:
            if s - end >= threshold:
                a, b = end, s
                if 2 * covered(union, a, b) >= b - a and not launch.get(corr, b) <= a:
                    out.append((a, b))
            end = max(end, e)
    return sorted(out)


def profiler_gaps_of(an) -> list[tuple[int, int]]:
    g = an.gaps
    m = g.column("cause") == CAUSES.index("profiler")
    return sorted(zip(g.column("start")[m].tolist(), g.column("end")[m].tolist(), strict=True))


def test_nsys_overhead_and_the_gaps_it_covers():
    run = demo_run(NSYS_RUN)
    tl = api.load(run)
    an = api.analyze(tl)
    h = api.health(tl, an)
    o = h.check("profiler_overhead")
    ov = raw_overhead(run / "trace.sqlite")
    union = merged(ov)
    assert o.data["intervals"] == len(ov)
    assert o.data["total_ns"] == sum(e - s for s, e in union)
    hit = nsys_profiler_gaps(run / "trace.sqlite")
    assert hit and profiler_gaps_of(an) == hit  # issue 27: those gaps have cause profiler
    assert o.data["gaps_covered"] == len(hit) and o.data["gaps_covered_ns"] == sum(b - a for a, b in hit)
    assert o.status == "warn"
    ev = gap_evidence(an)
    k = next(i for i, c in enumerate(an.gaps.column("cause").tolist()) if CAUSES[c] == "profiler")
    assert ev[k].startswith("profiler overhead (") and "of the gap: the host was held up by the profiler" in ev[k]
    # diagnostics: the export's warnings, none about lost events
    con = sqlite3.connect(f"file:{run / 'trace.sqlite'}?mode=ro&immutable=1", uri=True)
    warnings = {" ".join(t.split()) for (t,) in con.execute("SELECT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3)")}
    con.close()
    d = h.check("dropped")
    assert set(d.data["warnings"]) == warnings and d.data["dropped"] == [] and d.status == "ok"
    c = h.check("correlation")
    assert c.status == "ok" and c.data["launches"] == len(raw(run)["ops"])  # one launch call per GPU op here


def test_kineto_run_overhead_events_and_links_every_op():
    """torch.profiler writes CUPTI's own work as "overhead" events (here two "Activity Buffer Request"s of
    about 2 ms); the gaps they cover for at least half are cause profiler. No log arrays: dropped n/a."""
    run = demo_run("sync_pitfalls-item_every_step-torch")
    tl = api.load(run)
    an = api.analyze(tl)
    h = api.health(tl, an)
    with gzip.open(run / "trace.json.gz", "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    assert "WARNING" not in doc and "ERROR" not in doc and h.check("dropped").status == "n/a"
    ov = [e for e in events if e.get("cat") == "overhead"]
    o = h.check("profiler_overhead")
    assert o.data["intervals"] == len(ov) > 0
    assert o.data["by_name"] == {n: sum(round(e["dur"] * 1000) for e in ov if e["name"] == n) for n in {e["name"] for e in ov}}
    hit = kineto_profiler_gaps(events)
    assert profiler_gaps_of(an) == hit and o.data["gaps_covered"] == len(hit)
    r = raw(run)
    launched = {c for _, _, c in r["launches"]}
    assert h.check("correlation").data["orphan_gpu_ops"] == sum(1 for *_, c in r["ops"] if c not in launched) == 0


def test_kineto_log_reports_dropped_records(tmp_path):
    """Kineto's log arrays (top-level "WARNING" / "ERROR", written by builds without glog until kineto#1460):
    no corpus trace reports lost records, so a bundled torch trace is given the line libkineto's
    CuptiActivityApi.cpp logs when CUPTI drops records ("Dropped N activity records"). Every finding is then
    weakened."""
    run = demo_run("sync_pitfalls-item_every_step-torch")
    with gzip.open(run / "trace.json.gz", "rt") as f:
        doc = json.load(f)
    line = "WARNING:2026-11-28 12:00:00 4242:4242 CuptiActivityApi.cpp:326] Dropped 1234 activity records"
    doc["WARNING"] = [line, "WARNING:2026-11-28 12:00:00 4242:4242 Logger.cpp:1] something else"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    tl = api.load(path)
    an = api.analyze(tl)
    d = api.health(tl, an).check("dropped")
    assert d.status == "warn" and d.data["dropped"] == [line] and d.data["dropped_records"] == 1234
    assert d.data["warnings"] == doc["WARNING"] and d.data["errors"] == []
    assert {r for r, _ in api.health(tl, an).weakened} == {f.rule for f in an.findings}


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


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not present")
def test_corpus_profiler_gaps_and_kineto_log():
    # nsys, two processes (one per GPU) in one export: each device's gaps against its own process's overhead
    sqlite = CORPUS / "nsys_ai" / "tests__fixtures__mfu_2gpu_before.sqlite"
    tl = api.load(sqlite)
    an = api.analyze(tl)
    hit = nsys_profiler_gaps(sqlite)
    assert hit and profiler_gaps_of(an) == hit
    o = api.health(tl, an).check("profiler_overhead")
    assert o.data["gaps_covered"] == len(hit) and o.data["gaps_covered_ns"] == sum(b - a for a, b in hit)
    # Kineto: CUPTI "overhead" events ("Lazy Function Loading" inside the first launches)
    path = CORPUS / "tracelens" / "b200__eager_trace.json.gz"
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    tl = api.load(path)
    an = api.analyze(tl)
    hit = kineto_profiler_gaps(events)
    assert hit and profiler_gaps_of(an) == hit
    assert api.health(tl, an).check("profiler_overhead").data["intervals"] == sum(e.get("cat") == "overhead" for e in events)
    # Kineto's log: an ERROR array (no lost records in it)
    path = CORPUS / "hta" / "mtia_trace_single_rank__mtia_rank_0.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    d = api.health(api.load(path)).check("dropped")
    assert d.status == "ok" and d.data["errors"] == doc["ERROR"] and d.data["dropped"] == []


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
