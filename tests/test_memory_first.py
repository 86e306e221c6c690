"""Memory first on the biggest timelines (issue 26; `analyses/parallel.memory_first`): the allocator's free memory
is given back after each analysis task and the extras begin after the analysis, not beside it. Forced here on a
small real recording (threshold 0, two threads): the `analyze --json` document (analysis and extras) is the one
the normal path gives. And an analysis leaves no reference cycle that would keep its host views (the biggest
per-rank arrays) alive after it until the garbage collector's next full pass."""

from __future__ import annotations

import gc
import json
import lzma
from pathlib import Path

from tracelab import api
from tracelab.analyses import parallel
from tracelab.analyses.core.host import HostView
from tracelab.analyses.gaps.idle import Classification
from tracelab.io.nsys.load import load_nsys_sqlite

DATA = Path(__file__).parent / "data"


def _timeline(tmp_path: Path, name: str):
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    return load_nsys_sqlite(out)


def _json_document(timeline) -> tuple[str, bool]:
    """What `analyze --json` writes (the analysis, then its extras), and whether the extras began early."""
    context = api.AnalysisContext(timeline)
    api.start_extras(timeline, context)
    analysis = api.analyze(timeline, context=context)
    began = context.holds(("range projection",))  # begun on a helper thread (by now it has started)
    doc = api.to_json(analysis)
    doc.update(api.document_extras(timeline, analysis, None, context))
    return json.dumps(doc, sort_keys=True), began


def test_memory_first_gives_the_normal_document(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)  # two threads, as on a big timeline
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    normal, began = _json_document(_timeline(tmp_path, "host_blocked_nsys"))
    assert began  # the normal path begins the range projection beside the analysis

    released = []
    real = parallel.release_memory
    monkeypatch.setattr(parallel, "release_memory", lambda: released.append(1) or real())
    monkeypatch.setattr(parallel, "MEMORY_FIRST_EVENTS", 0)
    first, began = _json_document(_timeline(tmp_path, "host_blocked_nsys"))
    assert not began  # memory first: nothing begins beside the analysis
    assert len(released) >= 8  # after each task of the analysis and of the extras
    assert first == normal
    doc = json.loads(first)
    assert doc["gaps"] and doc["critical_path"] and doc["findings"]


def test_an_analysis_leaves_no_cycle_holding_its_host_views(tmp_path):
    timeline = _timeline(tmp_path, "host_blocked_nsys")
    gc.collect()
    gc.disable()
    try:
        analysis = api.analyze(timeline, context=api.AnalysisContext(timeline))
        alive = [type(o) for o in gc.get_objects() if isinstance(o, (HostView, Classification))]
    finally:
        gc.enable()
    assert analysis.gaps  # the host side did run
    assert alive == []  # freed by reference counting as the analysis returned
