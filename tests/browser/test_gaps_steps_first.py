"""Issue 24: the dashboard's Gaps page leads with the steps' gaps, the set-up's after them and marked, as the
CLI's gap list does. In a real headless Chromium over a real store holding the recorded input-copy loop
(tests/data/multigpu/copy_pageable_torch, an H200: 20 iterations, tens of ms of set-up idle before the loop,
longer than any gap inside it). Expected gaps come from the raw Kineto file: the idle time between the
merged GPU intervals (kernels, copies, memsets) of at least the analysis's gap threshold; a gap is the
set-up's when it ends at or before the first step's start (the loop is marker-free: the step finder's
first step, whose count and GPU time tests/test_gpu_steps.py checks against the raw trace)."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import threading
from pathlib import Path

import pytest
from test_pages import HAVE_BROWSER, css, open_page, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _ns(us: float) -> int:
    return round(us * 1000)


def _raw_gaps(path: Path, threshold_ns: int, first_steps: dict[int, int]) -> list[tuple[int, int, bool]]:
    """(rank, duration ns, in set-up) of every GPU idle gap of at least the threshold."""
    out = []
    for f in sorted((path / "ranks").glob("rank*.json.gz")) or [path / "trace.json.gz"]:
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        rank = (doc.get("distributedInfo") or {}).get("rank", 0)
        ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        first_step = first_steps[rank]
        merged: list[list[int]] = []
        for a, b in sorted((_ns(e["ts"]), _ns(e["ts"] + e.get("dur", 0))) for e in ev if e.get("cat") in GPU_CATS):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for (_, prev_end), (nxt, _) in itertools.pairwise(merged):
            if nxt - prev_end >= threshold_ns:
                out.append((rank, nxt - prev_end, nxt <= first_step))
    return out


@pytest.fixture(scope="module")
def run_server(tmp_path_factory):
    from multigpu_util import run_dir
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.io import load_trace, trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("gaps-dashboard")
    path = run_dir("copy_pageable_torch", root)
    store = Store(root / "store.db")
    rid = store.import_timeline(load_trace(path), source_path=str(path), fingerprint=trace_fingerprint(path), name="co")
    app = create_app(store, import_dir=root / "imports")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "run": rid, "path": path}
    srv.shutdown()
    store.close()


def _rows(browser) -> list[dict[str, str]]:
    """The listed gaps: each cell by its column, and the gap's length from the row's start / end (ns)."""
    out = []
    for tr in css(browser, "#gaps-table tbody tr"):
        start, end = tr.get_attribute("data-start-ns"), tr.get_attribute("data-end-ns")
        if not start:
            continue
        cells = {td.get_attribute("data-col"): td.text for td in tr.find_elements("css selector", "td")}
        cells["duration_ns"] = str(int(end) - int(start))
        out.append(cells)
    return out


def test_gaps_page_leads_with_the_steps_gaps(browser, run_server):
    from tracelab.analyses.results import AnalysisOptions
    from tracelab.api import analyze
    from tracelab.io import load_trace

    first: dict[int, int] = {}
    for st in analyze(load_trace(run_server["path"])).steps:
        first[st.rank] = min(first.get(st.rank, st.start_ns), st.start_ns)
    raw = _raw_gaps(run_server["path"], AnalysisOptions().gap_threshold_ns, first)
    steps = sorted((g for g in raw if not g[2]), key=lambda g: -g[1])
    setup = sorted((g for g in raw if g[2]), key=lambda g: -g[1])
    # the order matters here: the set-up holds the run's longest gaps
    assert steps and setup and setup[0][1] > steps[0][1] > 0
    open_page(browser, run_server, f"/gaps?run={run_server['run']}", "#gaps-table td")
    assert "The steps' gaps come first" in css(browser, "#gaps-order-hint")[0].text
    rows = _rows(browser)
    parts = [r["part"] for r in rows]
    # steps' gaps first (longest first), then the set-up's, marked
    assert parts == ["steps"] * min(len(steps), len(rows)) + ["set-up"] * (len(rows) - min(len(steps), len(rows)))
    n = min(len(steps), len(rows))
    assert [int(r["duration_ns"]) for r in rows[:n]] == pytest.approx([g[1] for g in steps[:n]], abs=2)
    assert [int(r["rank"]) for r in rows[:n]] == [g[0] for g in steps[:n]]
    # the set-up's gaps, filtered in the table's own filter row: the barrier wait leads them
    button = next(b for b in css(browser, ".gaps-controls button") if b.text == "set-up")
    button.click()
    wait_for(browser, lambda: _rows(browser) and all(r["part"] == "set-up" for r in _rows(browser)),
             what="the set-up filter")
    first = _rows(browser)[0]
    assert int(first["duration_ns"]) == pytest.approx(setup[0][1], abs=2) and int(first["rank"]) == setup[0][0]
