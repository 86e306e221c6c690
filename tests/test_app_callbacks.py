"""Dashboard callbacks and layouts, called as plain functions on a real SQLite store."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import plotly
import pytest

from tracelab.errors import BadInput
from tracelab.model import ContextInfo, DeviceInfo, EventKind, RunMeta, StringInterner, build_timeline
from tracelab.model.api_names import classify_api_ids
from tracelab.model.kinds import CopyKind
from tracelab.render.figures import axis_unit
from tracelab.render.lod import busy_bins, level_of_detail
from tracelab.store import Store

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HOSTILE_KERNEL = "<script>alert('k')</script>"
HOSTILE_NVTX = "<img src=x onerror=alert(1)>"


# ---- a small synthetic run with known structure ------------------------------------------------------


EPOCH_NS = 1_700_000_000_000_000_000  # trace clocks are often epoch nanoseconds: beyond 2^53


def synthetic_timeline(
    steps: int = 8, step_ns: int = 2_000_000, source: str = "synthetic", base: int = EPOCH_NS
):
    """Per step: an NVTX range; 5 kernels on stream 7 (each launched by cudaLaunchKernel, correlated);
    an async HtoD copy on stream 13 (right after them) overlapping a kernel on stream 21 (green context 5); then a
    cudaStreamSynchronize, so the GPU idles until the next step (a gap of ~step_ns - 300 µs)."""
    s = StringInterner()
    cols: dict[str, list] = {
        c: []
        for c in (
            "kind",
            "start",
            "end",
            "device",
            "context",
            "green_context",
            "stream",
            "pid",
            "tid",
            "name",
            "category",
            "correlation",
            "bytes",
            "copy_kind",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "registers",
        )
    }

    def add(**kw):
        for c, values in cols.items():
            default = 0 if c in ("kind", "copy_kind") else -1
            values.append(kw.get(c, default))

    us = 1_000
    corr = 0
    dom = s.intern("default")
    for i in range(steps):
        t = base + i * step_ns
        add(
            kind=EventKind.NVTX_RANGE,
            start=t,
            end=t + 1_500 * us,
            pid=100,
            tid=1,
            category=dom,
            name=s.intern(HOSTILE_NVTX if i == 0 else f"step {i}"),
        )
        for j in range(5):
            corr += 1
            launch = t + j * 20 * us
            add(
                kind=EventKind.RUNTIME,
                start=launch,
                end=launch + 5 * us,
                pid=100,
                tid=1,
                name=s.intern("cudaLaunchKernel"),
                correlation=corr,
            )
            kname = HOSTILE_KERNEL if (i == 0 and j == 2) else f"gemm_kernel_{j % 2}"
            add(
                kind=EventKind.KERNEL,
                start=launch + 10 * us,
                end=launch + 25 * us,
                device=0,
                context=1,
                stream=7,
                name=s.intern(kname),
                correlation=corr,
                grid_x=128,
                grid_y=1,
                grid_z=1,
                block_x=256,
                block_y=1,
                block_z=1,
                registers=32,
            )
        corr += 1
        add(
            kind=EventKind.RUNTIME,
            start=t + 103 * us,
            end=t + 106 * us,
            pid=100,
            tid=1,
            name=s.intern("cudaMemcpyAsync"),
            correlation=corr,
        )
        add(
            kind=EventKind.MEMCPY,
            start=t + 108 * us,
            end=t + 208 * us,
            device=0,
            context=1,
            stream=13,
            name=s.intern("Memcpy HtoD"),
            correlation=corr,
            bytes=1 << 20,
            copy_kind=CopyKind.HTOD,
        )
        corr += 1
        add(
            kind=EventKind.RUNTIME,
            start=t + 116 * us,
            end=t + 119 * us,
            pid=100,
            tid=1,
            name=s.intern("cudaLaunchKernel"),
            correlation=corr,
        )
        add(
            kind=EventKind.KERNEL,
            start=t + 120 * us,
            end=t + 300 * us,
            device=0,
            context=3,
            green_context=5,
            stream=21,
            name=s.intern("attention_kernel"),
            correlation=corr,
            grid_x=64,
            grid_y=2,
            grid_z=1,
            block_x=128,
            block_y=1,
            block_z=1,
            registers=64,
        )
        add(
            kind=EventKind.RUNTIME,
            start=t + 305 * us,
            end=t + step_ns - 20 * us,
            pid=100,
            tid=1,
            name=s.intern("cudaStreamSynchronize"),
        )
    kind = np.array(cols["kind"], dtype=np.int8)
    names = np.array(cols["name"], dtype=np.int32)
    sync, flags = classify_api_ids(s.strings, names)
    host = np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER])
    columns = {c: np.array(v) for c, v in cols.items()}
    columns["sync_kind"] = np.where(host, sync, 0).astype(np.int8)
    columns["flags"] = np.where(host, flags, 0).astype(np.int16)
    return build_timeline(
        columns,
        s.strings,
        RunMeta(source=source, format="nsys", workload="synthetic", variant=source),
        devices=[DeviceInfo(0, 0, name="NVIDIA H100 80GB HBM3", sm_count=132, cc_major=9, cc_minor=0)],
        contexts=[
            ContextInfo(0, 0, 1),
            ContextInfo(0, 0, 3, is_green=True, parent_context=1, green_context=5, sm_count=16),
        ],
    )


def make_store(path: Path) -> tuple[Store, str, str]:
    store = Store(path)
    a = store.import_timeline(
        synthetic_timeline(source="baseline"),
        source_path="baseline.nsys-rep",
        fingerprint="a" * 64,
        name="baseline",
    )
    b = store.import_timeline(
        synthetic_timeline(step_ns=1_000_000, source="variant"),
        source_path="variant.nsys-rep",
        fingerprint="b" * 64,
        name="variant",
    )
    return store, a, b


@pytest.fixture
def env(tmp_path):
    from app.state import AppState

    store, a, b = make_store(tmp_path / "store.db")
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=64 * 1024)
    return state, a, b


def as_json(component) -> str:
    return json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder)


def find(component, cid):
    """The component with id `cid` inside a Dash component tree."""
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


# ---- URLs and windows -----------------------------------------------------------------------------------


def test_parse_window(env):
    from app.urls import parse_window

    state, a, _ = env
    rec = state.record(a)
    assert parse_window(rec) == (rec.start_ns, rec.end_ns)
    assert parse_window(rec, rec.start_ns + 10, str(rec.start_ns + 5_000)) == (
        rec.start_ns + 10,
        rec.start_ns + 5_000,
    )
    # clamped to the run
    assert parse_window(rec, rec.start_ns - 10**9, rec.end_ns + 10**9) == (rec.start_ns, rec.end_ns)
    for bad in (("abc", None), (rec.start_ns + 500, rec.start_ns + 100), (rec.end_ns + 1, rec.end_ns + 10)):
        with pytest.raises(BadInput):
            parse_window(rec, *bad)


def test_bad_run_id_and_window_give_clear_pages(env):
    from app.pages import gaps, kernels, overlap, timeline

    state, a, _ = env
    for page in (
        timeline.timeline_layout(state, "nope"),
        gaps.gaps_layout(state, "nope"),
        overlap.overlap_layout(state, "nope"),
        kernels.kernels_layout(state, "nope"),
    ):
        assert page.id == "error"
        assert "no run with id or name 'nope'" in as_json(page)
    page = timeline.timeline_layout(state, a, "12abc", "x")
    assert page.id == "error" and "Bad time window" in as_json(page)
    rec = state.record(a)
    page = timeline.timeline_layout(state, a, rec.end_ns + 100, rec.end_ns + 200)
    assert page.id == "error" and "outside run" in as_json(page)


# ---- timeline ----------------------------------------------------------------------------------------------


def test_timeline_lanes_labels_and_escaping(env):
    from app.pages import timeline

    state, a, _ = env
    page = timeline.timeline_layout(state, a)
    assert page.id == "timeline-page"
    fig = find(page, "tl-graph").figure
    labels = " | ".join(fig.layout.yaxis.ticktext)
    assert "stream 7 · ctx 1" in labels
    assert "stream 21 · ctx 3 · green ctx 5" in labels
    assert "NVTX default" in labels and "pid 100 · tid 1" in labels
    assert "SM" in labels and "estimated" in labels  # per-SM lanes from the SM analysis, marked
    text = as_json(fig)
    assert "<script>" not in text and "<img" not in text
    # hover text carries the escaped names, the duration and the launch configuration
    hovers = [h for tr in fig.data if tr.hovertext is not None for h in tr.hovertext]
    if any("gemm_kernel" in h for h in hovers):
        kh = next(h for h in hovers if "gemm_kernel" in h)
        assert "duration 15.0 µs" in kh and "grid (128,1,1) block (256,1,1)" in kh
    view = find(page, "tl-view").data
    assert (view["t0"], view["t1"]) == (str(state.record(a).start_ns), str(state.record(a).end_ns))


def test_zoom_requeries_store_window_and_updates_link(env):
    from app.pages import timeline

    state, a, _ = env
    rec = state.record(a)
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    # zoom to the first 200 µs (step 0's kernels), in the unit of the whole-run figure's x axis
    unit, _ = axis_unit(int(view["t1"]) - int(view["t0"]))
    new_view, outputs = timeline.on_timeline_event(
        state, "graph.relayoutData", view, relayout={"xaxis.range[0]": 0.0, "xaxis.range[1]": 200_000 / unit}
    )
    assert new_view is not None
    assert (new_view["t0"], new_view["t1"]) == (str(rec.start_ns), str(rec.start_ns + 200_000))
    fig, link, _info, _ = outputs
    q = parse_qs(urlparse(link).query)
    assert q == {"run": [a], "t0": [str(rec.start_ns)], "t1": [str(rec.start_ns + 200_000)]}
    # at this zoom every kernel of step 0 is drawn individually, with its hover text
    hovers = [h for tr in fig.data if tr.hovertext is not None and tr.name == "kernels" for h in tr.hovertext]
    assert sum("gemm_kernel" in h for h in hovers) == 4
    assert any("&lt;script&gt;" in h for h in hovers)
    assert fig.layout.xaxis.title.text.startswith("time (µs")
    # a relayout without an x range (autosize) changes nothing; autorange returns to the whole run
    assert timeline.on_timeline_event(state, "graph.relayoutData", new_view, relayout={"autosize": True}) == (
        None,
        None,
    )
    full, _ = timeline.on_timeline_event(
        state, "graph.relayoutData", new_view, relayout={"xaxis.autorange": True}
    )
    assert (int(full["t0"]), int(full["t1"])) == (rec.start_ns, rec.end_ns)


def _points(fig, kind: int):
    """(trace index, point index, customdata) of drawn events of one kind."""
    for ti, tr in enumerate(fig.data):
        if tr.customdata is None:
            continue
        for pi, cd in enumerate(tr.customdata):
            if int(cd[4]) == kind:
                yield ti, pi, list(cd)


def test_click_gpu_op_highlights_host_launch_and_back(env):
    from app.pages import timeline

    state, a, _ = env
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    unit, _ = axis_unit(int(view["t1"]) - int(view["t0"]))
    view, (fig, *_rest) = timeline.on_timeline_event(
        state, "graph.relayoutData", view, relayout={"xaxis.range[0]": 0.0, "xaxis.range[1]": 200_000 / unit}
    )
    _, _, cd = next(_points(fig, int(EventKind.KERNEL)))
    sel_view, (fig2, _, _, panel) = timeline.on_timeline_event(
        state, "graph.clickData", view, click={"points": [{"customdata": cd}]}
    )
    assert sel_view["selected"]["correlation"] == int(cd[3])
    linked = timeline.correlated_events(state, a, sel_view["selected"])
    assert sorted(linked["kind"].tolist()) == [int(EventKind.KERNEL), int(EventKind.RUNTIME)]
    hl = [tr for tr in fig2.data if tr.name == "selected (correlated)"]
    assert len(hl) == 1 and np.isfinite(np.asarray(hl[0].y, dtype=float)).sum() == 4  # two segments
    assert "cudaLaunchKernel" in as_json(panel)
    # and back: clicking the host launch links the same kernel
    _, _, host_cd = next(p for p in _points(fig, int(EventKind.RUNTIME)) if int(p[2][3]) == int(cd[3]))
    back, _ = timeline.on_timeline_event(
        state, "graph.clickData", view, click={"points": [{"customdata": host_cd}]}
    )
    linked_back = timeline.correlated_events(state, a, back["selected"])
    assert set(linked_back["start"]) == set(linked["start"])


def test_lane_toggles_hide_rows(env):
    from app.pages import timeline

    state, a, _ = env
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    new_view, (fig, *_r) = timeline.on_timeline_event(state, "show", view, show=["stream"])
    labels = " ".join(fig.layout.yaxis.ticktext)
    assert "stream 7" in labels and "tid 1" not in labels and "SM" not in labels
    assert new_view["show"] == ["stream"]


# ---- gaps --------------------------------------------------------------------------------------------------


def test_gap_click_opens_timeline_at_gap(env):
    from app.pages import gaps, timeline

    state, a, _ = env
    page = gaps.gaps_layout(state, a)
    assert page.id == "gaps-page"
    table = find(page, "gaps-table")
    rows = table.data
    assert len(rows) == 7  # one idle stretch between each of the 8 steps
    assert rows[0]["duration_ns"] >= rows[-1]["duration_ns"]  # longest first
    assert isinstance(rows[0]["start_ns"], str)  # epoch ns must survive the browser's numbers
    run_info = find(page, "gaps-run").data
    link = gaps.gap_click_href(
        run_info, active_cell={"row": 2, "column": 0, "row_id": rows[2]["id"]}, rows=rows
    )
    q = parse_qs(urlparse(link).query)
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert t0 < int(rows[2]["start_ns"]) and int(rows[2]["end_ns"]) < t1
    tl_page = timeline.timeline_layout(state, q["run"][0], q["t0"][0], q["t1"][0])
    view = find(tl_page, "tl-view").data
    assert (int(view["t0"]), int(view["t1"])) == (t0, t1)
    # the scatter of gaps carries [start, end] too
    fig = find(page, "gaps-graph").figure
    cd = next(tr.customdata[0] for tr in fig.data if tr.customdata is not None)
    point = gaps.gap_click_href(run_info, click={"points": [{"customdata": cd}]})
    pq = parse_qs(urlparse(point).query)
    gap = next(r for r in rows if int(r["start_ns"]) == int(run_info["lo"]) + cd[0])
    assert int(pq["t0"][0]) < int(gap["start_ns"]) < int(gap["end_ns"]) < int(pq["t1"][0])
    assert gaps.gap_click_href(run_info, click={"points": [{}]}) is None


# ---- overlap, kernels ----------------------------------------------------------------------------------------


def test_overlap_matrix_and_kernel_table(env):
    from app.data import stream_overlap_matrix
    from app.pages import kernels, overlap

    state, a, _ = env
    tl = state.timeline(a)
    m = stream_overlap_matrix(tl, 0, 0)
    assert list(m.columns) == ["stream 7", "stream 13", "stream 21"]
    # per step: copy [108, 208) µs overlaps the green-context kernel [120, 300) µs for 88 µs
    assert m.loc["stream 13", "stream 21"] == 8 * 88_000
    assert m.loc["stream 7", "stream 7"] == 8 * 5 * 15_000
    assert m.loc["stream 7", "stream 13"] == 0
    page = overlap.overlap_layout(state, a)
    assert page.id == "overlap-page" and find(page, "overlap-matrix-0-0") is not None
    kt = kernels.kernels_frame(state, a)
    by_name = kt.groupby("name")["count"].sum().to_dict()
    assert by_name == {"gemm_kernel_0": 23, "gemm_kernel_1": 16, HOSTILE_KERNEL: 1, "attention_kernel": 8}
    att = kt[kt["name"] == "attention_kernel"].iloc[0]
    assert att["grid"] == "64×2×1" and att["block"] == "128×1×1" and att["total_ns"] == 8 * 180_000
    assert 0 < att["occupancy"] <= 100


# ---- compare --------------------------------------------------------------------------------------------------


def test_compare_shows_deltas(env):
    from app.data import compare_runs, comparison_tables
    from app.pages import compare

    state, a, b = env
    cmp = compare_runs(state.analysis(a), state.analysis(b), state.timeline(a), state.timeline(b))
    t = comparison_tables(cmp)["devices"]
    idle = t[t["metric"] == "idle"].iloc[0]
    assert idle["delta"] == idle["variant"] - idle["baseline"] < 0  # the variant's steps are shorter
    busy = t[t["metric"] == "busy"].iloc[0]
    assert busy["delta"] == 0
    content = compare.compare_content(state, a, b)
    text = as_json(content)
    assert "baseline" in text and "variant" in text and "idle" in text
    assert find(content, "compare-devices") is not None
    bad = compare.compare_content(state, a, "nope")
    assert "no run with id or name 'nope'" in as_json(bad)
    page = compare.compare_layout(state, a, b)
    assert find(page, "compare-a").value == a and find(page, "compare-b").value == b


# ---- level of detail --------------------------------------------------------------------------------------------


def test_busy_bins_match_brute_force():
    rng = np.random.default_rng(1)
    n, n_rows, n_bins, t0, t1 = 300, 3, 17, 1_000, 91_000
    start = rng.integers(0, 95_000, n)
    end = start + rng.integers(0, 20_000, n)
    rows = rng.integers(0, n_rows, n)
    covered, counts = busy_bins(rows, start, end, t0, t1, n_rows, n_bins)
    edges = t0 + (t1 - t0) * np.arange(n_bins + 1) / n_bins
    expect = np.zeros((n_rows, n_bins))
    for r, s, e in zip(rows, start, end):
        lo, hi = max(s, t0), min(e, t1)
        for b in range(n_bins):
            expect[r, b] += max(0.0, min(hi, edges[b + 1]) - max(lo, edges[b]))
    np.testing.assert_allclose(covered, expect, atol=1e-6)
    # events spread over a range of rows (an SM-lane interval over several SMs)
    last = np.minimum(rows + rng.integers(0, 3, n), n_rows - 1)
    covered_r, counts_r = busy_bins(rows, start, end, t0, t1, n_rows, n_bins, rows_last=last)
    expect_r = np.zeros((n_rows, n_bins))
    for r, r2, s, e in zip(rows, last, start, end):
        lo, hi = max(s, t0), min(e, t1)
        for rr in range(r, r2 + 1):
            for b in range(n_bins):
                expect_r[rr, b] += max(0.0, min(hi, edges[b + 1]) - max(lo, edges[b]))
    np.testing.assert_allclose(covered_r, expect_r, atol=1e-6)
    assert counts_r.sum() == (last - rows + 1).sum()
    inside = (end >= t0) & (start < t1)
    assert counts.sum() == n  # every event counted once (clipped to the window edges)
    assert inside.sum() <= n


def test_lod_caps_drawn_items():
    rng = np.random.default_rng(2)
    n = 400_000
    start = np.sort(rng.integers(0, 10**10, n))
    end = start + (rng.pareto(1.2, n) * 200_000).astype(np.int64) + 100  # mostly short, some very long
    ev = pd.DataFrame({"start": start, "end": end, "row": rng.integers(0, 12, n).astype(np.int32)})
    for width in (400, 1600):
        view = level_of_detail(ev, 0, 10**10, 12, width_px=width, max_items=3000)
        assert view.n_drawn <= 3000
        assert view.events_in_window == n
        assert len(view.items) > 0 and len(view.bins) > 0
        # folded + drawn events are all accounted for
        assert int(view.bins["count"].sum()) + len(view.items) == n
    zoom = level_of_detail(ev, 5 * 10**9, 5 * 10**9 + 2 * 10**6, 12, max_items=3000)
    # the budget is shared between rows: one row full of long events does not take it all
    crowd = pd.DataFrame(
        {
            "start": np.arange(10_000) * 1_000_000,
            "end": np.arange(10_000) * 1_000_000 + 5_000_000,
            "row": np.zeros(10_000, dtype=np.int32),
        }
    )
    few = pd.DataFrame(
        {"start": [10**6, 5 * 10**9], "end": [10**6 + 10**7, 5 * 10**9 + 10**7], "row": [1, 1]}
    )
    fair = level_of_detail(
        pd.concat([crowd, few], ignore_index=True), 0, 10**10, 2, width_px=4000, max_items=1000
    )
    assert (fair.items["row"] == 1).sum() == 2 and (fair.items["row"] == 0).sum() == 750 - 2
    z0, z1 = 5 * 10**9, 5 * 10**9 + 2 * 10**6
    vis = (end >= z0) & (start < z1)
    wide = (np.minimum(end, z1) - np.maximum(start, z0))[vis] >= (z1 - z0) / 1600
    assert zoom.events_in_window == vis.sum() < 1_000
    assert len(zoom.items) == wide.sum()  # zoomed in, every event a pixel wide is drawn on its own


def test_render_view_on_store_caps_items(tmp_path):
    """A run of 120k events: every view of the timeline stays under the item budget."""
    from app import timeline_view
    from app.state import AppState

    store = Store(tmp_path / "big.db")
    rid = store.import_timeline(
        synthetic_timeline(steps=8000, step_ns=400_000), source_path="big", fingerprint="c" * 64
    )
    state = AppState(store=store, max_items=2000)
    rec = state.record(rid)
    assert rec.events > 100_000
    for t0, t1 in ((rec.start_ns, rec.end_ns), (rec.start_ns, rec.start_ns + 50_000_000)):
        r = timeline_view.render_view(state, rec, t0, t1)
        assert r.n_drawn <= 2000 + 1000  # stream/host budget + SM budget (max_items // 2)
        assert r.view.events_in_window > 0


# ---- upload -----------------------------------------------------------------------------------------------------


def _data_url(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode()


def test_upload_rejects_bad_files_and_writes_only_in_import_dir(env, tmp_path):
    from app.pages import runs

    state, _, _ = env
    before = len(state.runs())
    ok, msg, rid = runs.import_upload(state, _data_url(b"x" * (70 * 1024)), "big.json")
    assert not ok and "too large" in msg and "big.json" in msg
    ok, msg, rid = runs.import_upload(state, _data_url(b'{"traceEvents": [ truncated'), "../../evil.json")
    assert not ok and rid is None and "evil.json" in msg and "\n" not in msg
    ok, msg, _ = runs.import_upload(state, "data:;base64,@@@", "x.json")
    assert not ok and "base64" in msg
    assert len(state.runs()) == before
    # nothing escaped the import directory, and failed uploads left nothing behind
    assert not (tmp_path.parent / "evil.json").exists() and not (tmp_path / "evil.json").exists()
    imports = tmp_path / "imports"
    assert not imports.exists() or not any(p.is_file() for p in imports.rglob("*"))
    assert runs.safe_filename("../../a b<c>.json.gz") == "a_b_c_.json.gz"
    message, _listing = runs.on_upload(state, _data_url(b"garbage"), "trace.sqlite")
    assert "upload-error" in as_json(message)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not present at {CORPUS}")
def test_upload_real_trace_then_pages(env):
    from app.pages import gaps, runs, timeline

    state, _, _ = env
    state.max_upload_bytes = 2**20
    src = CORPUS / "hta" / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    ok, msg, rid = runs.import_upload(state, _data_url(src.read_bytes()), src.name)
    assert ok, msg
    assert rid in [r.id for r in state.runs()]
    stored = list((state.import_dir).rglob("*.json.gz"))
    assert len(stored) == 1 and stored[0].resolve().is_relative_to(state.import_dir.resolve())
    again = runs.import_upload(state, _data_url(src.read_bytes()), src.name)
    assert not again[0] and "already imported" in again[1] and again[2] == rid
    assert timeline.timeline_layout(state, rid).id == "timeline-page"
    assert gaps.gaps_layout(state, rid).id == "gaps-page"


# ---- the app itself -------------------------------------------------------------------------------------------


def test_create_app_serves_pages(env, tmp_path):
    from app import create_app

    state, a, _ = env
    app = create_app(state.store, import_dir=tmp_path / "up", max_upload_bytes=1024)
    client = app.server.test_client()
    assert client.get(f"/timeline?run={a}").status_code == 200
    assert client.get("/_dash-layout").status_code == 200
    deps = client.get("/_dash-dependencies").get_json()
    outputs = " ".join(d["output"] for d in deps)
    assert (
        "tl-graph.figure" in outputs
        and "nav-location.href" in outputs
        and "upload-message.children" in outputs
    )
    assert app.server.config["MAX_CONTENT_LENGTH"] < 10 * 1024 * 1024


def test_timeline_shades_gaps_once_analysed(env):
    from app import timeline_view

    state, a, _ = env
    rec = state.record(a)
    before = timeline_view.render_view(state, rec, rec.start_ns, rec.end_ns).figure
    assert not [tr for tr in before.data if tr.name == "idle gaps (shaded)"]  # never waits for an analysis
    gaps = state.analysis(a).gaps
    after = timeline_view.render_view(state, rec, rec.start_ns, rec.end_ns).figure
    marks = [tr for tr in after.data if tr.name == "idle gaps (shaded)"]
    assert len(marks) == 1 and len(marks[0].x) == len(gaps) == 7
    assert len([sh for sh in after.layout.shapes if sh.type == "rect"]) == 7
    assert all("host_sync" in h for h in marks[0].hovertext)


def test_store_window_and_in_memory_cut_give_the_same_view(env, monkeypatch):
    """Wide views are cut from the run's columns in memory, narrow ones queried with Store.window:
    both paths draw exactly the same items and bins."""
    from app import timeline_view
    from tracelab.render.figures import lane_to_row, timeline_rows

    state, a, _ = env
    rec = state.record(a)
    rows = timeline_rows(state.lanes(a), state.strings(a))
    table = lane_to_row(rows, len(state.lanes(a)))
    shown = rows.loc[rows["lane"] >= 0, "lane"].to_numpy()
    for t0, t1 in ((rec.start_ns, rec.end_ns), (rec.start_ns + 150_000, rec.start_ns + 2_400_000)):
        views = []
        for limit in (10**9, -1):  # everything through Store.window, then everything in memory
            monkeypatch.setattr(timeline_view, "STORE_WINDOW_MAX_EVENTS", limit)
            views.append(timeline_view.window_view(state, a, t0, t1, table, shown, len(rows)))
        store_view, memory_view = views
        assert store_view.events_in_window == memory_view.events_in_window > 0
        cols = ["start", "end", "row", "kind", "name", "correlation"]
        pd.testing.assert_frame_equal(
            store_view.items[cols].reset_index(drop=True), memory_view.items[cols].reset_index(drop=True)
        )
        pd.testing.assert_frame_equal(store_view.bins, memory_view.bins)


def test_internal_errors_give_a_clear_page(env, monkeypatch):
    from app import timeline_view
    from app.pages import overlap, timeline

    state, a, _ = env

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(state, "analysis", broken)
    page = overlap.overlap_layout(state, a)
    assert page.id == "error" and "RuntimeError: boom" in as_json(page)
    monkeypatch.setattr(timeline_view, "level_of_detail", broken)
    page = timeline.timeline_layout(state, a)
    assert page.id == "error" and "Internal error" in as_json(page)


def test_every_finding_link_opens_its_window(env):
    """Each rule puts its first / worst occurrence in data (start_ns, end_ns): the link opens it."""
    from app.pages import gaps

    state, a, _ = env
    findings = state.analysis(a).findings
    assert {f.rule for f in findings} >= {"sync_per_iteration", "idle_partition"}
    page = gaps.gaps_layout(state, a)
    for i, f in enumerate(findings):
        q = parse_qs(urlparse(find(page, f"finding-link-{i}").href).query)
        assert int(q["t0"][0]) <= f.data["start_ns"] < f.data["end_ns"] <= int(q["t1"][0]), f.rule
