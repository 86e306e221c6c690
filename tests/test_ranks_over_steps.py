"""Issue 24: the per-rank table (Ranks section of `analyze`, the Ranks page, `ranks[]` of the JSON) covers
the steps, set-up apart. On the bundled comm_overlap torch runs (2 H200s) rank 1 waits ~58 ms in the set-up's
barrier before the first step; its "coll. wait" over the steps is the wait in the collectives inside the
steps' GPU span only. Expected numbers come from the raw Kineto files: NCCL kernels matched across ranks by
operation and sequence, each call's wait = last arrival − own arrival, clipped to the rank's steps' GPU span
(tests/raw_steps.py: first step's GPU start to last step's GPU end)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from raw_steps import GPU_CATS, kineto_step_windows

from tracelab.analyses.ranks.rank_document import rank_document_of
from tracelab.analyses.ranks.view import rank_analysis
from tracelab.api import analyze
from tracelab.demo import demo_run
from tracelab.io.detect import load_run_dir

OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def _ns(us: float) -> int:
    return round(us * 1000)


def _raw(path: Path) -> dict[int, dict[str, int]]:
    """rank -> steps' GPU span, wait in collectives (whole run / inside the span) and GPU busy in the span."""
    calls: dict[int, dict[tuple[str, int], int]] = {}
    info: dict[int, dict[str, int]] = {}
    for f in sorted((path / "ranks").glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        rank = doc["distributedInfo"]["rank"]
        wins = kineto_step_windows(f)
        lo, hi = _ns(min(w[0] for w in wins)), _ns(max(w[1] for w in wins))
        gpu = sorted(
            (max(_ns(e["ts"]), lo), min(_ns(e["ts"] + e.get("dur", 0)), hi))
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in GPU_CATS
            and _ns(e["ts"] + e.get("dur", 0)) > lo and _ns(e["ts"]) < hi
        )
        busy, cur = 0, None
        for a, b in gpu:  # union length
            if cur is None or a > cur[1]:
                busy += 0 if cur is None else cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        busy += 0 if cur is None else cur[1] - cur[0]
        seq: dict[str, int] = {}
        mine = {}
        for e in sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and OP.search(e.get("name", ""))),
                        key=lambda e: e["ts"]):
            op = OP.search(e["name"]).group(1)
            mine[(op, seq.get(op, 0))] = _ns(e["ts"])
            seq[op] = seq.get(op, 0) + 1
        calls[rank] = mine
        info[rank] = {"lo": lo, "hi": hi, "busy": busy}
    for rank, mine in calls.items():
        whole = inside = 0
        lo, hi = info[rank]["lo"], info[rank]["hi"]
        for key, t in mine.items():
            others = [c[key] for r, c in calls.items() if key in c]
            if len(others) < 2:
                continue
            last = max(others)
            whole += last - t
            inside += max(0, min(last, hi) - max(t, lo))
        info[rank].update(whole=whole, inside=inside)
    return info


@pytest.mark.parametrize("variant", ["sequential", "streams"])
def test_rank_table_covers_the_steps(tmp_path, variant):
    path = demo_run(f"comm_overlap-{variant}-torch", tmp_path)
    raw = _raw(path)
    tl = load_run_dir(path)
    ra = rank_analysis(tl, analyze(tl))
    assert {r.rank for r in ra.ranks} == set(raw) == {0, 1}
    for r in ra.ranks:
        want = raw[r.rank]
        assert r.scope == "steps"
        assert r.span_ns == pytest.approx(want["hi"] - want["lo"], abs=2)
        assert r.busy_ns == pytest.approx(want["busy"], abs=50)
        assert r.collective_wait_ns == pytest.approx(want["inside"], abs=50)
        assert r.whole_collective_wait_ns == pytest.approx(want["whole"], abs=50)
    if variant == "streams":  # rank 1's set-up barrier (~58 ms before the first step): the whole run's wait only
        assert raw[1]["whole"] - raw[1]["inside"] > 50_000_000
    doc = rank_document_of(ra)
    assert [x["scope"] for x in doc["ranks"]] == ["steps", "steps"]
    assert [x["collective_wait_ns"] for x in doc["ranks"]] == [r.collective_wait_ns for r in ra.ranks]


def test_cli_ranks_section_says_the_steps(tmp_path):
    """`tracelab analyze` (a subprocess): the Ranks section's rank 1 "coll. wait" is the steps' figure, and
    a line says the figures cover the steps with the set-up's wait apart."""
    path = demo_run("comm_overlap-streams-torch", tmp_path)
    raw = _raw(path)
    env = {"TRACELAB_DB": str(tmp_path / "t.db"), "PATH": "/usr/bin:/bin", "COLUMNS": "120",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path), "--json"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    ranks = {x["rank"]: x for x in json.loads(res.stdout)["ranks"]}
    for rank, want in raw.items():
        assert ranks[rank]["collective_wait_ns"] == pytest.approx(want["inside"], abs=50)
    text = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False).stdout
    assert "Ranks (over the steps" in text
