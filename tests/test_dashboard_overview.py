"""The stored first view of a big run (`tracelab.render.timeline.overview`): computed at import from the
parsed Timeline, it is exactly the view the dashboard computes from the run's stored columns; the
dashboard serves it (page, meta, whole-run tile) without loading those columns, starts the run's
background work when the page says it has drawn it, and stores it for runs imported before it existed.

The synthetic run of test_app_callbacks (one GPU, 40 steps, each ending in a stream sync) counts as big
here: SYNC_ANALYSIS_MAX_EVENTS is lowered to 50 events on both sides (import and app)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from test_app_callbacks import as_json, synthetic_timeline

from tracelab.api import store_timeline
from tracelab.render.timeline import overview as timeline_overview
from tracelab.render.timeline.data import CLASS_CODES, unpack
from tracelab.render.timeline.overview import OVERVIEW_KEYS, decode_overview, overview_views
from tracelab.store import Store

STEPS = 40


@pytest.fixture
def big(monkeypatch):
    from app import timeline_view

    monkeypatch.setattr(timeline_overview, "SYNC_ANALYSIS_MAX_EVENTS", 50)
    monkeypatch.setattr(timeline_view, "SYNC_ANALYSIS_MAX_EVENTS", 50)
    return synthetic_timeline(steps=STEPS)


def _window_count(tl, t0: int, t1: int) -> int:
    """Events overlapping [t0, t1) by the store's window rule, by plain numpy over the raw columns."""
    s, e = tl.events["start"].to_numpy(), tl.events["end"].to_numpy()
    return int(((s < t1) & ((e > t0) | (s >= t0))).sum())


def _wait(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_small_runs_store_no_overview():
    """Runs up to SYNC_ANALYSIS_MAX_EVENTS (every bundled demo run) store nothing: no import cost."""
    assert overview_views(synthetic_timeline(steps=STEPS)) == {}


def test_stored_overview_is_the_view_the_dashboard_computes_from_the_columns(tmp_path, big):
    from app.pages.timeline import default_show
    from app.state import AppState
    from app.timeline_view import events_in_window, shown_rows, tile_bytes

    stored = Store(tmp_path / "new.db")
    rid = store_timeline(big, stored, source_path="big", fingerprint="a" * 64)
    ov = decode_overview(stored.views(rid, OVERVIEW_KEYS))
    assert ov is not None
    old = Store(tmp_path / "old.db")  # the same run imported without its overview: computed on request
    old_id = old.import_timeline(big, source_path="big", fingerprint="a" * 64)
    state = AppState(store=old)
    rec = state.record(old_id)
    show = default_show(rec)
    assert ov.show == tuple(show)
    rows = shown_rows(state, rec, show)
    pd.testing.assert_frame_equal(ov.rows, rows)
    assert ov.rows.attrs == rows.attrs
    assert ov.tile == tile_bytes(state, rec, show, 0, 0)
    # what the tile holds, against the raw columns
    header, arrays = unpack(ov.tile)
    span = rec.end_ns - rec.start_ns
    assert (header["level"], header["index"], header["t0"], header["t1"]) == (0, 0, 0, span)
    assert not header["gaps_ready"] and len(arrays["g.start"]) == 0  # causes come with the analysis
    assert header["events_in_window"] == len(big.events)  # every lane of this run is shown
    events = arrays["i.cls"] != CLASS_CODES["sm"]  # SM-lane items name their kernel, not an event
    assert events.sum() > 0
    assert np.array_equal(big.events["start"].to_numpy()[arrays["i.pos"][events]] - rec.start_ns, arrays["i.start"][events])
    idle = arrays["b.kind"] == 1  # the device's idle time is there without the analysis
    assert idle.any()
    # the page's info line: the whole run's events by the window rule
    n = _window_count(big, rec.start_ns, rec.end_ns)
    assert ov.run_window_events == n == events_in_window(state, rec, rec.start_ns, rec.end_ns)


def test_an_overview_of_another_format_version_is_ignored(tmp_path, big):
    store = Store(tmp_path / "s.db")
    rid = store_timeline(big, store, source_path="big", fingerprint="a" * 64)
    views = store.views(rid, OVERVIEW_KEYS)
    rows = views[timeline_overview.OVERVIEW_ROWS].replace(b'"version":1', b'"version":0')
    assert decode_overview({**views, timeline_overview.OVERVIEW_ROWS: rows}) is None
    assert decode_overview({timeline_overview.OVERVIEW_ROWS: views[timeline_overview.OVERVIEW_ROWS]}) is None
    assert decode_overview({**views, timeline_overview.OVERVIEW_ROWS: b"{not json"}) is None


def test_first_view_of_a_big_run_reads_no_columns_and_defers_its_background_work(tmp_path, big):
    from app import create_app
    from app.pages.timeline import timeline_layout
    from app.state import STATE_KEY

    store = Store(tmp_path / "s.db")
    rid = store_timeline(big, store, source_path="big", fingerprint="a" * 64)
    ov = decode_overview(store.views(rid, OVERVIEW_KEYS))
    app = create_app(store)
    state = app.server.config[STATE_KEY]
    client = app.server.test_client()
    rec = state.record(rid)

    def untouched() -> bool:
        return state._timelines.peek(rid) is None and not state._background and state.cached_analysis(rid) is None

    page = as_json(timeline_layout(state, rid))
    assert f"{_window_count(big, rec.start_ns, rec.end_ns):,} events in view" in page
    meta = client.get(f"/api/timeline/meta?run={rid}").get_json()
    assert meta["rows"]["label"] == ov.rows["label"].tolist() and not meta["gaps_ready"]
    assert meta["rows"]["kind"].count("steps") == 1 and meta["steps"]["start"] == []
    tile = client.get(f"/api/timeline/tile?run={rid}&level=0&index=0")
    assert tile.status_code == 200 and tile.data == ov.tile
    assert untouched()
    # the page has drawn: the columns, analysis and steps load in the background
    meta = client.get(f"/api/timeline/meta?run={rid}&drawn=1").get_json()
    _wait(lambda: client.get(f"/api/timeline/meta?run={rid}").get_json()["gaps_ready"], "the gaps")
    _wait(lambda: client.get(f"/api/timeline/meta?run={rid}").get_json()["steps_ready"], "the steps")
    meta = client.get(f"/api/timeline/meta?run={rid}").get_json()
    # the NVTX ranges "step 1" .. "step 39" (step 0's range has a hostile name, not a step's)
    assert [s // 2_000_000 for s in meta["steps"]["start"]] == list(range(1, STEPS))
    header, arrays = unpack(client.get(f"/api/timeline/tile?run={rid}&level=0&index=0").data)
    assert header["gaps_ready"] and len(arrays["g.start"]) == STEPS - 1  # one host_sync gap between steps
    assert meta["causes_present"] == ["host_sync"]
    # a zoomed tile is cut from the columns, on the stored rows
    header, arrays = unpack(client.get(f"/api/timeline/tile?run={rid}&level=3&index=2").data)
    assert header["events_in_window"] > 0 and set(arrays["i.row"].tolist()) <= set(range(len(ov.rows)))


def test_a_big_run_imported_before_overviews_gets_one_after_its_first_view(tmp_path, big):
    """Migration: a store written by an older tracelab has runs without an overview; the dashboard
    computes the first view as before, then stores it, and the next server reads it."""
    from app import create_app
    from app.state import STATE_KEY

    db = tmp_path / "s.db"
    store = Store(db)
    rid = store.import_timeline(big, source_path="big", fingerprint="a" * 64)  # no views
    client = create_app(store).server.test_client()
    first = client.get(f"/api/timeline/tile?run={rid}&level=0&index=0").data
    assert not unpack(first)[0]["gaps_ready"]
    _wait(lambda: bool(store.views(rid, OVERVIEW_KEYS)), "the overview to be stored")
    ov = decode_overview(store.views(rid, OVERVIEW_KEYS))
    assert ov is not None and ov.tile == first
    app = create_app(Store(db))
    state = app.server.config[STATE_KEY]
    assert app.server.test_client().get(f"/api/timeline/tile?run={rid}&level=0&index=0").data == first
    assert state._timelines.peek(rid) is None


def test_overview_is_not_used_for_other_lane_groups_or_sizes(tmp_path, big):
    from app import create_app
    from app.state import STATE_KEY

    store = Store(tmp_path / "s.db")
    rid = store_timeline(big, store, source_path="big", fingerprint="a" * 64)
    app = create_app(store)
    state = app.server.config[STATE_KEY]
    client = app.server.test_client()
    unpack(client.get(f"/api/timeline/tile?run={rid}&show=stream&level=0&index=0").data)  # a whole tile
    meta = client.get(f"/api/timeline/meta?run={rid}&show=stream").get_json()
    assert "nvtx" not in meta["rows"]["kind"] and "host" not in meta["rows"]["kind"]
    assert state._timelines.peek(rid) is not None  # computed from the columns
    state.width_px = 800  # another tile width: the stored tile does not fit
    data = client.get(f"/api/timeline/tile?run={rid}&level=0&index=0").data
    assert data != decode_overview(store.views(rid, OVERVIEW_KEYS)).tile and unpack(data)[0]["level"] == 0
