"""Issue 29: the dashboard's idle lane shows input_wait gaps in their own colour, with their evidence (a
hand-made Kineto trace with a DataLoader op covering the GPU gap, stored and served by the real app)."""

from __future__ import annotations

from test_golden_input_wait import LOADER, ab

from tracelab.io import load_trace
from tracelab.render.timeline.data import IDLE_COLORS
from tracelab.store import Store


def test_idle_lane_legend_and_colour(tmp_path, monkeypatch):
    from app import create_app

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.user_range(LOADER, 105, 170)
    tl = load_trace(p.kineto(tmp_path / "t.json"))
    store = Store(tmp_path / "store.db")
    run = store.import_timeline(tl, source_path="t.json", fingerprint="c" * 64, name="loader")
    meta = create_app(store).server.test_client().get(f"/api/timeline/meta?run={run}").get_json()
    assert meta["causes_present"] == ["input_wait"]
    (style,) = [c for c in meta["style"]["causes"] if c["cause"] == "input_wait"]
    assert style["legend"] == "idle (input_wait)" and style["color"] == IDLE_COLORS["input_wait"]
    assert len({c["color"] for c in meta["style"]["causes"]}) == len(meta["style"]["causes"])  # one colour each
