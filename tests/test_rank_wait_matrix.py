"""Issue 28: "one rank × rank summary first" — who waited for whom in collectives (tracelab/analyses/ranks/
wait_matrix.py, `tracelab.api.rank_wait_matrix`, the Ranks page's first table). Expected numbers come from the
raw Kineto files of the recorded DDP runs (tests/data/multigpu: 2 and 4 H200s) and of the bundled comm_overlap
run: each rank's NCCL kernels matched across ranks by operation and sequence; in each collective every rank
waited from its own kernel's start to the last arrival, charged to the rank that arrived last."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from multigpu_util import MULTI, run_dir
from raw_steps import kineto_step_windows

from tracelab.analyses.ranks.wait_matrix import wait_matrix
from tracelab.api import analyze, rank_analysis, rank_wait_matrix
from tracelab.demo import demo_run
from tracelab.io import load_trace

OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def _ns(us: float) -> int:
    return round(us * 1000)


def _raw_calls(ranks_dir: Path) -> dict[int, dict[tuple[str, int], int]]:
    """rank -> {(operation, sequence): the kernel's start (ns)}, straight from the rank's Kineto file."""
    calls = {}
    for f in sorted(ranks_dir.glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        seq: dict[str, int] = defaultdict(int)
        mine = {}
        kernels = (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and OP.search(e.get("name", "")))
        for e in sorted(kernels, key=lambda e: e["ts"]):
            op = OP.search(e["name"]).group(1)
            mine[(op, seq[op])] = _ns(e["ts"])
            seq[op] += 1
        calls[doc["distributedInfo"]["rank"]] = mine
    return calls


def _raw_matrix(calls, spans=None) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """(wait, count) per (waiting rank, rank that arrived last), each wait clipped to the waiting rank's span."""
    wait: dict[tuple[int, int], int] = defaultdict(int)
    count: dict[tuple[int, int], int] = defaultdict(int)
    keys = {k for mine in calls.values() for k in mine}
    for key in keys:
        arrivals = {r: mine[key] for r, mine in calls.items() if key in mine}
        if len(arrivals) < 2:
            continue
        last_rank = max(arrivals, key=lambda r: (arrivals[r], r))
        last = arrivals[last_rank]
        for r, t in arrivals.items():
            lo, hi = spans[r] if spans else (t, last)
            w = max(0, min(last, hi) - max(t, lo))
            wait[(r, last_rank)] += w
            count[(r, last_rank)] += w > 0
    return wait, count


@pytest.mark.parametrize("name", ["ddp2_sleep_torch", "ddp4_sleep_torch"])
def test_who_waited_for_whom_over_the_whole_run(tmp_path, name):
    calls = _raw_calls(MULTI / name / "ranks")
    want_wait, want_count = _raw_matrix(calls)
    tl = load_trace(run_dir(name, tmp_path))
    ra = rank_analysis(tl, analyze(tl))
    m = wait_matrix(tl, ra.collectives, [r.rank for r in ra.ranks])
    assert m.ranks == tuple(sorted(calls)) and m.scope == "whole"
    n = len(m.ranks)
    for i, a in enumerate(m.ranks):
        for j, b in enumerate(m.ranks):
            assert m.wait_ns[i, j] == pytest.approx(want_wait.get((a, b), 0), abs=5 * n), (a, b)
            assert m.count[i, j] == want_count.get((a, b), 0), (a, b)
            assert m.waited(a, b) == m.wait_ns[i, j]
    # the straggler: the others waited for it most (rank 1 of ddp2; rank 2 of ddp4 here)
    straggler = max(calls, key=lambda b: sum(want_wait.get((a, b), 0) for a in calls))
    assert m.ranks[int(np.argmax(m.wait_ns.sum(axis=0)))] == straggler
    assert ra.collectives.stragglers[0].rank == straggler
    # a row is the rank's whole-run wait
    assert m.wait_ns.sum(axis=1).tolist() == [ra.collectives.wait_of(r) for r in m.ranks]
    with pytest.raises(ValueError):
        m.wait_ns[0, 0] = 1  # a frozen result


def test_who_waited_for_whom_over_the_steps(tmp_path):
    """The bundled comm_overlap run (2 H200s, `step N` markers): every wait clipped to its rank's steps'
    GPU span, as the Ranks table's "waited in collectives" is; a row sums to that figure."""
    path = demo_run("comm_overlap-streams-torch", tmp_path)
    calls = _raw_calls(path / "ranks")
    spans = {}
    for f in sorted((path / "ranks").glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            rank = json.load(fh)["distributedInfo"]["rank"]
        wins = kineto_step_windows(f)
        spans[rank] = (_ns(min(w[0] for w in wins)), _ns(max(w[1] for w in wins)))
    want_wait, want_count = _raw_matrix(calls, spans)
    whole, _ = _raw_matrix(calls)
    tl = load_trace(path)
    an = analyze(tl)
    ra = rank_analysis(tl, an)
    m = rank_wait_matrix(tl, an, ra)
    assert m.scope == "steps" and m.ranks == (0, 1)
    for i, a in enumerate(m.ranks):
        for j, b in enumerate(m.ranks):
            assert m.wait_ns[i, j] == pytest.approx(want_wait.get((a, b), 0), abs=50), (a, b)
            assert m.count[i, j] == want_count.get((a, b), 0), (a, b)
    assert m.wait_ns.sum(axis=1).tolist() == [r.collective_wait_ns for r in ra.ranks]
    # rank 1's set-up barrier (~58 ms before the first step) is in the whole run's figure only
    assert whole[(1, 0)] - m.waited(1, 0) > 50_000_000


def test_the_ranks_page_shows_the_matrix_first(tmp_path):
    """The Ranks page's first table is the matrix: one row per rank, its cells the raw waits."""
    from app.pages.ranks import ranks_layout
    from app.state import AppState
    from tracelab.store import Store

    name = "ddp4_sleep_torch"
    want_wait, want_count = _raw_matrix(_raw_calls(MULTI / name / "ranks"))
    store = Store(tmp_path / "s.db")
    path = run_dir(name, tmp_path)
    rid = store.import_timeline(load_trace(path), source_path=str(path), fingerprint="d" * 64, name=name)
    page = ranks_layout(AppState(store=store), rid)
    flat = []

    def walk(c):
        flat.append(c)
        kids = getattr(c, "children", None)
        for k in kids if isinstance(kids, list) else [kids] if kids is not None else []:
            walk(k)

    walk(page)
    ids = [getattr(c, "id", None) for c in flat if getattr(c, "id", None) in ("wait-matrix", "ranks-table")]
    assert ids == ["wait-matrix", "ranks-table"]
    rows = [c for c in flat if type(c).__name__ == "Tr" and getattr(c, "data-rank", None) is not None]
    assert [int(getattr(r, "data-rank")) for r in rows] == [0, 1, 2, 3]
    # whole-run raw waits bound the steps' ones (the page shows the steps, set-up left out); the straggler's
    # column is where the waits are
    for r in rows:
        a = int(getattr(r, "data-rank"))
        cells = [c for c in r.children if getattr(c, "data-wait-ns", None) is not None]
        for b, c in enumerate(cells):
            assert 0 <= int(getattr(c, "data-wait-ns")) <= want_wait.get((a, b), 0) + 20
            assert int(getattr(c, "data-count")) <= want_count.get((a, b), 0)
    col = np.array([[int(getattr(c, "data-wait-ns")) for c in r.children if getattr(c, "data-wait-ns", None)]
                    for r in rows]).sum(axis=0)
    raw_col = [sum(want_wait.get((a, b), 0) for a in range(4)) for b in range(4)]
    assert int(np.argmax(col)) == int(np.argmax(raw_col))
