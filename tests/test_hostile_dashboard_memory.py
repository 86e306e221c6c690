"""Issue 30, class 7: the dashboard's memory stays under a documented bound. Its caches were bounded by
entry count only (3 timelines, 8 analyses, 64 derived values, 160 tiles), so a walk over 80 big runs
grew the server from 107 MB to 5.0 GB. They are now bounded in bytes too (TRACELAB_APP_CACHE_MB,
default 1536 MiB, shared as app.state.CACHE_SHARES says; docs/DECISIONS.md).

The test serves a store of every bundled demo run over real HTTP (threaded werkzeug) and lets 3
concurrent clients walk every page, the timeline meta, tiles, hovers and a search of every run three
times (tests/dashboard_walk.py), with a cache budget small enough that the walk must evict. It checks
the caches' accounted bytes never pass their budget, that no answer is a 500, and that the process
stops growing after the first round (it was 5 GB and still growing)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from dashboard_walk import walk

BUDGET_MB = 8
WORKING_MB = 512
CLIENTS = 3


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    from tracelab.api import store_timeline
    from tracelab.demo import demo_run_paths
    from tracelab.io import load_trace
    from tracelab.io.detect import trace_fingerprint
    from tracelab.store import Store

    root = tmp_path_factory.mktemp("dash-memory")
    import os

    os.environ.setdefault("TRACELAB_DEMO_CACHE", str(root / "demo-cache"))
    store = Store(root / "store.db")
    ids = [
        store_timeline(load_trace(p), store, source_path=str(p), fingerprint=trace_fingerprint(p))
        for p in demo_run_paths()
    ]
    return store, ids


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc for the RSS")
def test_cache_budget_holds_while_concurrent_clients_walk_every_run_three_times(demo_store, monkeypatch):
    from werkzeug.serving import make_server

    from app import create_app
    from app import state as app_state

    monkeypatch.setenv(app_state.CACHE_MB_ENV, str(BUDGET_MB))
    store, ids = demo_store
    assert len(ids) >= 50  # every bundled run
    app = create_app(store)
    state = app.server.config[app_state.STATE_KEY]
    budget = app_state.cache_budget_bytes()
    assert budget == BUDGET_MB * 2**20
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{srv.server_port}"

    peak = {"cache": 0, "rss": 0.0}
    stop = threading.Event()

    def sample() -> None:  # the caches' accounted bytes and the RSS, every 50 ms during the walk
        while not stop.is_set():
            peak["cache"] = max(peak["cache"], sum(state.cache_bytes().values()))
            peak["rss"] = max(peak["rss"], _rss_mb())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rss = [_rss_mb()]
    try:
        for _ in range(3):
            status = walk(base, ids, clients=CLIENTS, rounds=1)
            assert 500 not in status and status.get(200, 0) > 0, status
            rss.append(_rss_mb())
    finally:
        stop.set()
        sampler.join()
        srv.shutdown()
    caches = {
        "timelines": state._timelines, "analyses": state._analyses, "misc": state._misc, "tiles": state._tiles
    }
    for name, cache in caches.items():
        share = int(budget * app_state.CACHE_SHARES[name])
        # never above its share, except for one entry bigger than the share (the newest always stays)
        assert cache.peak_bytes <= max(share, max(cache._sizes.values(), default=0)) * 2, (name, cache.peak_bytes)
        assert cache.bytes <= max(share, max(cache._sizes.values(), default=0)), (name, cache.bytes, share)
    assert sum(state.cache_bytes().values()) <= budget * 1.5
    print(f"RSS MB by round: {[round(r) for r in rss]}, peak {peak['rss']:.0f} MB, cache peak {peak['cache'] >> 20} MiB")
    # the documented bound: the start, the caches' budget, and the working memory of the requests in
    # flight (measured ~250 MB for these clients; 512 MB allowed)
    assert peak["rss"] <= rss[0] + BUDGET_MB + WORKING_MB, (peak, rss)
    # rounds 2 and 3 walk the same runs again: they may not add what round 1 needed (was 5 GB, growing)
    assert rss[3] - rss[1] < (rss[1] - rss[0]) + 64, rss


def test_approx_bytes_counts_what_the_caches_hold():
    import numpy as np
    import pandas as pd

    from app.state import _Lru, approx_bytes

    assert approx_bytes(np.zeros(1000, dtype=np.int64)) == 8000
    assert approx_bytes(b"x" * 5000) == 5000
    frame = pd.DataFrame({"a": np.arange(10_000, dtype=np.int64)})
    assert approx_bytes(frame) >= 80_000
    assert approx_bytes({"k": np.zeros(100, dtype=np.int8), "j": [np.zeros(10)] * 1000}) >= 100 + 80_000
    from dash import html  # a page's content (the Gaps page's is cached per run): its strings count

    assert approx_bytes(html.Div([html.P("x" * 30_000), html.Div(**{"data-svg": "y" * 50_000})])) >= 80_000
    lru = _Lru(100, max_bytes=10_000)
    for i in range(10):
        lru.get(i, lambda: b"x" * 3000)
    assert lru.bytes <= 10_000 and len(lru._d) == 3
    big = lru.get("big", lambda: b"y" * 50_000)  # bigger than the bound: kept alone (the newest stays)
    assert len(big) == 50_000 and list(lru._d) == ["big"] and lru.bytes == 50_000
