"""Issue 27: gaps that profiler overhead covers get cause `profiler`, and the dashboard's idle lane shows them in
their own colour with their evidence (a bundled nsys run stored and served by the real app; the gap is
rebuilt from the raw export in tests/test_health.py's oracle)."""

from __future__ import annotations

from test_health import nsys_profiler_gaps

from tracelab import api
from tracelab.demo import demo_run
from tracelab.render.timeline.data import IDLE_COLORS
from tracelab.store import Store

RUN = "sync_pitfalls-item_every_step-nsys"


def test_idle_lane_shows_profiler_gaps(tmp_path, monkeypatch):
    from app import create_app

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    run = demo_run(RUN)
    hit = nsys_profiler_gaps(run / "trace.sqlite")
    assert len(hit) == 1
    store = Store(tmp_path / "store.db")
    rid = store.import_timeline(api.load(run), source_path=str(run), fingerprint="d" * 64, name="prof")
    client = create_app(store).server.test_client()
    meta = client.get(f"/api/timeline/meta?run={rid}").get_json()
    assert "profiler" in meta["causes_present"]
    (style,) = [c for c in meta["style"]["causes"] if c["cause"] == "profiler"]
    assert style["legend"] == "idle (profiler)" and style["color"] == IDLE_COLORS["profiler"]
    assert len({c["color"] for c in meta["style"]["causes"]}) == len(meta["style"]["causes"])  # one colour each
    # the gap's tooltip: its cause, then the evidence naming the overhead interval
    an = api.analyze(api.load(run))
    causes = an.gaps.column("cause").tolist()
    i = next(k for k, c in enumerate(causes) if c == api_cause("profiler"))
    a, b = int(an.gaps.column("start")[i]), int(an.gaps.column("end")[i])
    assert (a, b) == hit[0]
    lines = client.get(f"/api/timeline/hover?run={rid}&gap={i}").get_json()["lines"]
    assert lines[0].startswith("idle (profiler)") and any("profiler overhead (" in ln for ln in lines)


def api_cause(name: str) -> int:
    from tracelab.analyses.results import CAUSES

    return CAUSES.index(name)
