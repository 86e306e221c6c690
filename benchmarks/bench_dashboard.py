"""Dashboard benchmark: a synthetic ~1M-event run built from a real trace (the trace's events repeated
with shifted times and correlation ids), imported into a store; then, server-side, through the app's
HTTP routes (Flask test client, no network) on a fresh app (empty caches):

- first timeline view: the page, the run's meta and its whole-run tile (a big run's are stored with it
  at import: `tracelab.render.timeline.overview`; the run's columns, analysis and steps load in the
  background after that, when the page says it has drawn: `meta?drawn=1`);
- zoom: the tiles of windows from 1/2 down to 1/10000 of the run (each at the level the canvas
  draws it with, none cached before).

Wall and CPU (user + system of this process) times, and bytes sent.

    .venv/bin/python benchmarks/bench_dashboard.py [--trace PATH] [--events 1000000] [--db PATH]

Targets (DESIGN / issue 6): first render < 2 s, zoom < 300 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracelab.api import store_timeline, store_views
from tracelab.model.timeline import EVENT_COLUMNS, build_timeline
from tracelab.render.timeline.overview import OVERVIEW_KEYS
from tracelab.store import Store

DEFAULT_TRACE = (
    ROOT.parent / "shared" / "corpus" / "param" / "et_replay__tests__inputs__resnet_kineto.json.gz"
)


def load(path: Path):
    try:
        from tracelab.io import load_trace  # type: ignore[attr-defined]

        return load_trace(path)
    except ImportError:
        from tracelab.io.kineto.load import load_kineto

        return load_kineto(path)


def replicate(tl, target_events: int):
    """The trace's events repeated k times, each copy shifted past the previous one (times and
    correlation ids), so the result looks like a long run of the same workload."""
    ev = tl.events
    k = max(1, -(-target_events // len(ev)))
    span = int(ev["end"].max() - ev["start"].min()) + 1_000_000
    corr_step = int(ev["correlation"].max()) + 1
    cols = {}
    for c in EVENT_COLUMNS:
        if c == "lane":
            continue
        a = ev[c].to_numpy()
        rep = np.tile(a, k)
        if c in ("start", "end"):
            rep = rep + np.repeat(np.arange(k, dtype=np.int64) * span, len(a))
        elif c == "correlation":
            rep = np.where(rep >= 0, rep + np.repeat(np.arange(k, dtype=np.int64) * corr_step, len(a)), -1)
        cols[c] = rep[:target_events]
    meta = tl.meta.__class__(**{**tl.meta.__dict__, "source": f"{tl.meta.source} x{k}"})
    return build_timeline(cols, tl.strings, meta, devices=tl.devices, contexts=tl.contexts, validate=False)


def ensure_overview(store: Store, rid: str) -> None:
    """A run imported before overviews were stored gets its overview now: what `tracelab import`
    stores with the run today (and what the dashboard stores after such a run's first view)."""
    if store.views(rid, OVERVIEW_KEYS):
        return
    t = time.perf_counter()
    store_views(store, rid)
    print(f"stored the run's overview (imported before overviews were stored): {time.perf_counter() - t:.1f} s")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(client, path: str) -> tuple[float, float, int]:
    """(wall s, CPU s, bytes) of one GET; the answer must be 200."""
    t, c = time.perf_counter(), cpu()
    r = client.get(path)
    assert r.status_code == 200, (path, r.get_data(as_text=True)[:300])
    return time.perf_counter() - t, cpu() - c, len(r.data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, default=ROOT / ".scratch" / "bench" / "bench_dashboard.db")
    args = ap.parse_args()


    args.db.parent.mkdir(parents=True, exist_ok=True)
    store = Store(args.db)
    fp = f"bench-dashboard:{args.trace.name}:{args.events}"
    rid = store.find_fingerprint(fp)
    if rid is None:
        t = time.perf_counter()
        big = replicate(load(args.trace), args.events)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        rid = store_timeline(big, store, source_path=args.trace, fingerprint=fp, name=f"bench-{args.events}")
        print(
            f"built {len(big.events):,} events in {t_build:.1f} s, imported in {time.perf_counter() - t:.1f} s"
        )
    rec = store.get_run(rid)
    print(f"run {rid}: {rec.events:,} events, span {rec.span_ns / 1e9:.3f} s, from {args.trace.name}")
    ensure_overview(store, rid)

    from app import create_app

    client = create_app(Store(args.db)).server.test_client()
    steps = [
        ("page", f"/timeline?run={rid}"),
        ("meta", f"/api/timeline/meta?run={rid}"),
        ("whole-run tile", f"/api/timeline/tile?run={rid}&level=0&index=0"),
    ]
    first = [0.0, 0.0]
    for what, path in steps:
        wall, used, size = timed(client, path)
        first[0] += wall
        first[1] += used
        print(f"first view, {what:<15} {wall * 1e3:6.0f} ms wall, {used * 1e3:6.0f} ms CPU, {size / 1e3:7.1f} kB")
    t = time.perf_counter()
    # the canvas says it has drawn its first view (drawn=1): the run's columns, analysis and steps
    # load in background threads
    while not (meta := client.get(f"/api/timeline/meta?run={rid}&drawn=1").get_json())["gaps_ready"]:
        time.sleep(0.2)
    print(f"gaps by cause ready {time.perf_counter() - t:.2f} s after the first view")
    show = ",".join(meta["show"])
    span, top = meta["span"], meta["max_level"]
    times, cpus = [], []
    for frac in (0.5, 0.1, 0.01, 0.001, 0.0001, 0.3, 0.05):
        a, w = span * 0.47 - span * frac / 2, span * frac
        level = max(0, min(top, math.floor(math.log2(span / w))))
        n = 2**level
        idx = range(max(0, int(a * n // span)), min(n - 1, int((a + w) * n // span)) + 1)
        wall = used = size = 0.0
        for i in idx:  # the tiles the canvas needs for that window
            dt, dc, sz = timed(client, f"/api/timeline/tile?run={rid}&show={show}&level={level}&index={i}")
            wall, used, size = wall + dt, used + dc, size + sz
        times.append(wall)
        cpus.append(used)
        print(f"zoom to {frac:>7.2%} of the run: level {level:>2}, {len(idx)} tile(s), {wall * 1e3:5.0f} ms wall, "
              f"{used * 1e3:5.0f} ms CPU, {size / 1e3:6.1f} kB")
    print(
        f"zoom: median {statistics.median(times) * 1e3:.0f} ms wall ({statistics.median(cpus) * 1e3:.0f} ms CPU), "
        f"max {max(times) * 1e3:.0f} ms (target < 300 ms); first view {first[0]:.2f} s wall, {first[1]:.2f} s CPU "
        f"(target < 2 s); peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
