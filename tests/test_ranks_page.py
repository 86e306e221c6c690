"""The Ranks page over a real store holding the corpus 8-rank DLRM run: the rank table, both heatmaps
and the collectives table carry the figures of the cross-rank analysis; a single-rank run says so."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tracelab.analyses import analyze
from tracelab.analyses.ranks.collectives import match_collectives
from tracelab.io import load_trace
from tracelab.store import Store

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRACELAB_CORPUS") or ROOT.parent / "shared" / "corpus")
DLRM = CORPUS / "param" / "dlrm_kineto_8rank"
SINGLE = CORPUS / "hta" / "trace_compare__base__base.json.gz"

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not DLRM.is_dir(), reason="needs ../shared/corpus")]


def find(component, cid):
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    if isinstance(children, (list, tuple)):
        for c in children:
            hit = find(c, cid)
            if hit is not None:
                return hit
    elif children is not None and hasattr(children, "to_plotly_json"):
        return find(children, cid)
    return None


@pytest.fixture
def state(tmp_path):
    from app.state import AppState

    store = Store(tmp_path / "s.db")
    multi = store.import_timeline(load_trace(DLRM), source_path=str(DLRM), fingerprint="d" * 64, name="dlrm")
    single = store.import_timeline(
        load_trace(SINGLE), source_path=str(SINGLE), fingerprint="e" * 64, name="one"
    )
    return AppState(store=store), multi, single


def test_ranks_page_shows_table_heatmaps_and_collectives(state):
    from app.pages.ranks import ranks_layout

    st, multi, single = state
    page = ranks_layout(st, multi)
    table = find(page, "ranks-table")
    assert [row["rank"] for row in table.data] == list(range(8))
    # independent of the page: the collective wait per rank from the matched collectives
    tl = load_trace(DLRM)
    c = match_collectives(tl)
    assert [row["waited (ns)"] for row in table.data] == [c.wait_of(r) for r in range(8)]
    assert [row["times last"] for row in table.data] == [0, 0, 0, 0, 1, 2, 0, 5]
    busy = find(page, "ranks-busy").figure
    z = np.array(busy.data[0].z)
    assert z.shape[0] == 8 and (z >= 0).all() and (z <= 100).all()
    assert list(busy.data[0].y) == [f"rank {r}" for r in range(8)]
    wait = np.array(find(page, "ranks-wait").figure.data[0].z)
    assert np.allclose(wait.sum(axis=1), [c.wait_of(r) / 1e6 for r in range(8)], atol=1e-3 * wait.shape[1])
    coll = find(page, "collectives-table").data
    assert len(coll) == 8 and coll[0]["collective"] == "SendRecv #0" and coll[0]["last rank"] == 7
    assert "stragglers: rank 7 last 5×" in find(page, "ranks-summary").children

    one = ranks_layout(st, single)
    assert find(one, "ranks-single") is not None and find(one, "ranks-table") is None
    # busy column: the GPU busy share of each rank's steps on the GPU (issue 24: set-up apart), from the
    # trace's GPU events clipped to the span of the steps' GPU windows (tests/test_ranks.py checks those
    # windows and the table against the raw JSON)
    a = analyze(tl)
    ev = tl.events
    gpu = ev[ev["kind"].isin([0, 1, 2])]
    want = []
    for r in range(8):
        rows = [x for x in a.step_rows if x.rank == r]
        lo, hi = min(x.gpu_start_ns for x in rows), max(x.gpu_end_ns for x in rows)
        g = gpu[(gpu["rank"] == r) & (gpu["end"] > lo) & (gpu["start"] < hi)]
        spans = sorted(zip(np.maximum(g["start"], lo).tolist(), np.minimum(g["end"], hi).tolist()))
        busy, cur = 0, None
        for s0, e0 in spans:
            if cur is None or s0 > cur[1]:
                busy += 0 if cur is None else cur[1] - cur[0]
                cur = [s0, e0]
            else:
                cur[1] = max(cur[1], e0)
        busy += cur[1] - cur[0]
        want.append(round(100.0 * busy / (max(x[1] for x in spans) - min(x[0] for x in spans)), 1))
    assert [row["busy %"] for row in table.data] == want
