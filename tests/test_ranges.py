"""GPU time by range (NVTX / record_function ranges projected through launch correlation) against the raw
traces: `analyze --json`'s `ranges` through the real CLI, each name's calls, distinct GPU ops, union of GPU
time, kernel time and projected span recomputed from the nsys SQLite / Kineto JSON records (tests/sql_oracle.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sql_oracle import projected_by_name

from tracelab.demo import demo_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("sync_pitfalls-item_every_step-nsys", "sync_pitfalls-item_every_step-torch", "graphs-eager-nsys")


def analyze_json(path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": "/nonexistent/t.db"}
    r = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path), "--json"], capture_output=True,
                       text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", RUNS)
def test_range_figures_match_the_raw_trace(name):
    run = demo_run(name)
    doc = analyze_json(run)
    rng = doc["ranges"]
    assert rng["nested_subtracted"] is False and rng["reference"] == "steps"
    steps_total = sum(s["end_ns"] - s["start_ns"] for s in doc["steps"])
    assert rng["reference_ns"] == steps_total
    by_name = {(r["name"], r["kind"]): r for r in rng["ranges"]}
    checked = 0
    for rname in ("forward", "h2d batch", "eager ops", "step 3"):
        got = by_name.get((rname, "nvtx"))
        want = projected_by_name(run, rname)
        if not want["calls"]:
            assert got is None
            continue
        checked += 1
        tol = 2 * want["gpu_ops"]  # Kineto's µs timestamps, rounded to ns per op
        assert got["calls"] == want["calls"] and got["gpu_ops"] == want["gpu_ops"]
        assert abs(got["gpu_ns"] - want["gpu_ns"]) <= tol and abs(got["kernel_ns"] - want["kernel_ns"]) <= tol
        assert abs(got["span_ns"] - want["span_ns"]) <= tol
        assert got["share"] == pytest.approx(got["gpu_ns"] / steps_total)
    assert checked >= 1
    # largest GPU time first
    times = [r["gpu_ns"] for r in rng["ranges"]]
    assert times == sorted(times, reverse=True)


def test_the_text_table_and_all_ranges():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": "/nonexistent/t.db", "COLUMNS": "140"}
    run = str(demo_run(RUNS[1]))
    top = subprocess.run([sys.executable, "-m", "tracelab", "analyze", run], capture_output=True, text=True, env=env,
                         timeout=300, check=False).stdout
    every = subprocess.run([sys.executable, "-m", "tracelab", "analyze", run, "--ranges"], capture_output=True, text=True,
                           env=env, timeout=300, check=False).stdout
    assert "GPU time by range (top 10 of" in top and "--ranges for all" in top
    n = analyze_json(Path(run))["ranges"]["names"]
    assert f"GPU time by range (all {n}" in every
    section = every.split("GPU time by range", 1)[1].splitlines()
    assert len([x for x in section[3:] if x.strip() and not x.startswith("(")]) >= n


@pytest.mark.parametrize("name", RUNS)
def test_ranges_started_before_the_analysis_equal_the_direct_projection(name, monkeypatch):
    """`api.start_extras` (a big timeline's projection on a helper thread, begun before the steps are known)
    then `api.ranges` gives what `project_ranges` gives with the steps' total as reference, share for share.
    Helper threads are forced on (they start from 200k events on 2+ cores) for these small runs."""
    from tracelab import api
    from tracelab.analyses import parallel
    from tracelab.analyses.device.range_projection import project_ranges

    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    timeline = api.load(demo_run(name))
    context = api.AnalysisContext(timeline)
    api.start_extras(timeline, context)
    analysis = api.analyze(timeline, context=context)
    got = api.ranges(timeline, analysis, context)
    ref = sum(s.end_ns - s.start_ns for s in analysis.steps)
    assert ref > 0
    want = project_ranges(timeline, ref, "steps")
    assert got.stats == want.stats and (got.reference_ns, got.reference) == (ref, "steps")
    assert [s.share for s in got.stats] == [s.gpu_ns / ref for s in want.stats]
    assert (got.rows == want.rows).all() and (got.gpu_ns == want.gpu_ns).all()


@pytest.mark.parametrize("name", [r for r in RUNS if r.endswith("nsys")])
def test_ranges_made_in_small_blocks_match_the_raw_trace(name, monkeypatch):
    """The (range, op) pairs are made a block at a time (`range_pairs.BLOCK`: ranges, names, pairs):
    with blocks of 2 every NVTX name's calls, distinct ops, GPU union, kernel time and span, and every
    instance's ops, GPU union and kernel time are what the raw nsys records give (exact ns), recomputed
    here in one pass over the SQLite rows (tests/sql_oracle.raw)."""
    import bisect

    from sql_oracle import raw, union_length

    from tracelab import api
    from tracelab.analyses.device import range_pairs
    from tracelab.analyses.device import range_projection as rp

    run = demo_run(name)
    r = raw(run)
    by_corr: dict[int, list[tuple[int, int, int, int]]] = {}
    for i, (s, e, k, c) in enumerate(r["ops"]):
        by_corr.setdefault(c, []).append((s, e, k, i))
    launches: dict[int, list[tuple[int, int]]] = {}
    for t, ls, c in sorted(r["launches"]):
        launches.setdefault(t, []).append((ls, c))
    want: dict[str, dict] = {}
    instances: dict[str, list[tuple[int, int, int]]] = {}
    for t, s, e, n in sorted(r["ranges"], key=lambda x: x[1]):
        mine_l = launches.get(t, [])
        lo, hi = bisect.bisect_left(mine_l, (s, -1)), bisect.bisect_left(mine_l, (e, -1))
        mine = [op for _ls, c in mine_l[lo:hi] for op in by_corr.get(c, [])]
        w = want.setdefault(n, {"calls": 0, "ops": set(), "span": 0})
        w["calls"] += 1
        w["ops"].update(mine)
        w["span"] += max(b for _, b, _, _ in mine) - min(a for a, _, _, _ in mine) if mine else 0
        instances.setdefault(n, []).append(
            (len(mine), union_length([(a, b) for a, b, _, _ in mine]), sum(b - a for a, b, k, _ in mine if k)))
    timeline = api.load(run)
    monkeypatch.setattr(range_pairs, "BLOCK", 2)
    p = rp.project_ranges(timeline)
    by_name = {s.name: s for s in p.stats if s.kind == "nvtx"}
    assert want and set(want) <= set(by_name)
    row_name = [timeline.strings[i] for i in timeline.col("name")[p.rows]]
    got_instances: dict[str, list[tuple[int, int, int]]] = {}
    for i, n in enumerate(row_name):  # rows in start order, as the instances above
        if n in want:
            got_instances.setdefault(n, []).append((int(p.gpu_ops[i]), int(p.gpu_ns[i]), int(p.kernel_ns[i])))
    for rname, w in want.items():
        got = by_name[rname]
        ops = w["ops"]
        assert (got.calls, got.gpu_ops, got.gpu_ns, got.kernel_ns, got.span_ns) == (
            w["calls"], len(ops), union_length([(a, b) for a, b, _, _ in ops]),
            sum(b - a for a, b, k, _ in ops if k), w["span"]), rname
    assert got_instances == instances
    assert sum(len(w["ops"]) > 0 for w in want.values()) >= 2
