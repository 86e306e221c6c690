"""Dashboard benchmark: a synthetic ~1M-event run built from a real trace (the trace's events repeated
with shifted times and correlation ids), imported into a store; then, server-side and cold:

- first timeline render: the /timeline page for the whole run (store queries, level of detail, the
  figure, and its JSON encoding), on a fresh app state (empty caches);
- zoom: the relayout callback for windows from 1/2 down to 1/10000 of the run.

    .venv/bin/python benchmarks/bench_dashboard.py [--trace PATH] [--events 1000000] [--db PATH]

Targets (DESIGN / issue 6): first render < 2 s, zoom callback < 300 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import plotly

from tracelab.model.timeline import EVENT_COLUMNS, build_timeline
from tracelab.store import Store

DEFAULT_TRACE = (
    ROOT.parent / "shared" / "corpus" / "param" / "et_replay__tests__inputs__resnet_kineto.json.gz"
)


def load(path: Path):
    try:
        from tracelab.parsers import load_trace  # type: ignore[attr-defined]

        return load_trace(path)
    except ImportError:
        from tracelab.parsers.kineto import load_kineto

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


def encoded_size(component) -> int:
    return len(json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder))


def zoom_over_http(db: Path, rid: str) -> list[float]:
    """The same zooms as the browser sends them: POSTs to the app's callback endpoint (Flask test
    client, no network), after the page was rendered once (the run's columns are cached)."""
    from app import create_app
    from app.pages import timeline
    from app.state import current_state

    app = create_app(Store(db))
    client = app.server.test_client()
    client.get("/")
    dep = next(d for d in client.get("/_dash-dependencies").get_json() if "tl-graph.figure" in d["output"])
    with app.server.test_request_context():
        page = timeline.timeline_layout(current_state(), rid)
    view = next(c for c in page.children if getattr(c, "id", None) == "tl-view").data
    lo, hi, origin = int(view["lo"]), int(view["hi"]), int(view["origin"])
    from tracelab.render.figures import axis_unit

    unit, _ = axis_unit(hi - lo)
    times = []
    for frac in (0.5, 0.1, 0.01, 0.001):
        mid, w = lo + (hi - lo) * 0.47, (hi - lo) * frac
        values = {
            "tl-xrange.data": {"xaxis.range": [(mid - w / 2 - origin) / unit, (mid + w / 2 - origin) / unit]},
            "tl-graph.clickData": None,
            "tl-show.value": view["show"],
        }
        body = {
            "output": dep["output"],
            "outputs": [
                dict(zip(("id", "property"), o.split("."))) for o in dep["output"].strip(".").split("...")
            ],
            "inputs": [
                {
                    "id": i["id"],
                    "property": i["property"],
                    "value": values.get(f"{i['id']}.{i['property']}", 0),
                }
                for i in dep["inputs"]
            ],
            "changedPropIds": ["tl-xrange.data"],
            "state": [{"id": "tl-view", "property": "data", "value": view}],
        }
        t = time.perf_counter()
        r = client.post("/_dash-update-component", json=body)
        times.append(time.perf_counter() - t)
        assert r.status_code == 200, r.data[:300]
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--db", type=Path, default=ROOT / ".scratch" / "bench" / "bench_dashboard.db")
    args = ap.parse_args()

    from app.pages import timeline
    from app.state import AppState

    args.db.parent.mkdir(parents=True, exist_ok=True)
    store = Store(args.db)
    fp = f"bench-dashboard:{args.trace.name}:{args.events}"
    rid = store.find_fingerprint(fp)
    if rid is None:
        t = time.perf_counter()
        big = replicate(load(args.trace), args.events)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        rid = store.import_timeline(big, source_path=args.trace, fingerprint=fp, name=f"bench-{args.events}")
        print(
            f"built {len(big.events):,} events in {t_build:.1f} s, imported in {time.perf_counter() - t:.1f} s"
        )
    rec = store.get_run(rid)
    print(f"run {rid}: {rec.events:,} events, span {rec.span_ns / 1e9:.3f} s, from {args.trace.name}")

    # first render, cold: a fresh state (no cached lanes, strings, timeline or SM lanes)
    state = AppState(store=Store(args.db))
    t = time.perf_counter()
    page = timeline.timeline_layout(state, rid)
    size = encoded_size(page)
    first = time.perf_counter() - t
    view = next(c for c in page.children if getattr(c, "id", None) == "tl-view").data
    info = next(c for c in page.children if getattr(c, "id", None) == "tl-info").children
    print(f"first render (whole run, cold): {first * 1e3:.0f} ms, {size / 1e6:.2f} MB JSON; {info}")

    # zooms: the relayout callback for windows of decreasing width around the middle of the run
    from tracelab.render.figures import axis_unit

    times = []
    for frac in (0.5, 0.1, 0.01, 0.001, 0.0001, 0.3, 0.05):
        lo, hi, origin = int(view["lo"]), int(view["hi"]), int(view["origin"])
        mid = lo + (hi - lo) * 0.47
        w = (hi - lo) * frac
        unit, _ = axis_unit(int(view["t1"]) - int(view["t0"]))
        relayout = {
            "xaxis.range[0]": (mid - w / 2 - origin) / unit,
            "xaxis.range[1]": (mid + w / 2 - origin) / unit,
        }
        t = time.perf_counter()
        new_view, outputs = timeline.on_timeline_event(state, "graph.relayoutData", view, relayout=relayout)
        size = encoded_size(outputs[0])
        dt = time.perf_counter() - t
        times.append(dt)
        print(f"zoom to {frac:>7.2%} of the run: {dt * 1e3:6.0f} ms, {size / 1e6:.2f} MB JSON; {outputs[2]}")
        view = new_view
    http_times = zoom_over_http(args.db, rid)
    print(
        f"zoom through HTTP (POST /_dash-update-component, Dash's own serialization): median "
        f"{statistics.median(http_times) * 1e3:.0f} ms, max {max(http_times) * 1e3:.0f} ms"
    )
    print(
        f"zoom callback: median {statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms "
        f"(target < 300 ms); first render {first:.2f} s (target < 2 s)"
    )


if __name__ == "__main__":
    main()
