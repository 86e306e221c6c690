"""Dashboard callbacks and layouts, called as plain functions on a real SQLite store."""

from __future__ import annotations

import base64
import json
import re
import time
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
from tracelab.render.timeline.data import CLASS_CODES, unpack
from tracelab.render.timeline.lod import busy_bins, level_of_detail
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


def tile_of(state, run_id: str, t0: int, t1: int, show=None):
    """The decoded tile the canvas draws [t0, t1) (ns from the run start) from: the level whose tiles
    are 1-2 windows wide, the tile holding t0. (header, arrays)."""
    from app.pages.timeline import default_show
    from app.timeline_view import max_level, tile_bytes

    rec = state.record(run_id)
    level = min(max(int(np.floor(np.log2(rec.span_ns / (t1 - t0)))), 0), max_level(rec))
    index = int(t0 * 2**level // rec.span_ns)
    header, arrays = unpack(tile_bytes(state, rec, show or default_show(rec), level, index))
    assert header["t0"] <= t0 and t1 <= header["t1"] or level == 0
    return header, arrays


def items_of(header, arrays, kind: str | None = None) -> list[dict]:
    """The events drawn one by one in a tile, as dicts (name from the tile's names)."""
    out = []
    for i in range(len(arrays["i.start"])):
        cls = int(arrays["i.cls"][i])
        if kind is not None and cls != CLASS_CODES[kind]:
            continue
        out.append({
            "start": float(arrays["i.start"][i]), "end": float(arrays["i.end"][i]), "row": int(arrays["i.row"][i]),
            "cls": cls, "pos": int(arrays["i.pos"][i]), "corr": float(arrays["i.corr"][i]),
            "name": header["names"].get(str(int(arrays["i.name"][i])), ""),
        })
    return out


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


def test_timeline_without_a_run_asks_which(env, tmp_path):
    """/timeline with no run (the nav link from the Runs page) lists the runs to open (the store's order),
    instead of silently opening one (issue 28); with a single run in the store it opens that one."""
    from app.pages import timeline
    from app.state import AppState

    state, a, b = env
    page = timeline.timeline_layout(state, None)
    assert page.id == "run-picker"
    links = [(x.children, x.href) for x in find(page, "run-picker-list").children for x in [x.children[0]]]
    assert sorted(h for _, h in links) == sorted([f"/timeline?run={a}", f"/timeline?run={b}"])
    assert [h for _, h in links] == [f"/timeline?run={r.id}" for r in state.store.runs()]
    assert {n for n, _ in links} == {"baseline", "variant"}
    one = Store(tmp_path / "one.db")
    only = one.import_timeline(synthetic_timeline(), source_path="x.nsys-rep", fingerprint="e" * 64, name="x")
    single = AppState(store=one, import_dir=tmp_path / "imports", max_upload_bytes=1024)
    assert find(timeline.timeline_layout(single, None), "tl-view").data["run"] == only


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
    from app.timeline_view import view_rows

    state, a, _ = env
    page = timeline.timeline_layout(state, a)
    assert page.id == "timeline-page"
    root = find(page, "tl-canvas-root").to_plotly_json()["props"]
    rec = state.record(a)
    assert (root["data-run"], root["data-t0"], root["data-t1"]) == (a, "0", str(rec.end_ns - rec.start_ns))
    rows, _ = view_rows(state, rec, root["data-show"].split(","))
    labels = " | ".join(rows["label"])
    assert "stream 7 · ctx 1" in labels
    assert "stream 21 · ctx 3 · green ctx 5" in labels
    assert "NVTX default" in labels and "pid 100 · tid 1" in labels
    assert "SM" in labels and "estimated" in labels  # per-SM lanes from the SM analysis, marked
    # names reach the canvas as plain text (drawn with fillText, never parsed as markup) ...
    header, _arrays = tile_of(state, a, 0, 200_000)
    names = set(header["names"].values())
    assert HOSTILE_KERNEL in names and HOSTILE_NVTX in names
    # ... and nothing in the canvas script turns text into markup
    js = (Path(__file__).resolve().parents[1] / "app" / "assets" / "timeline_canvas.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "outerHTML" not in js
    assert "<script>" not in as_json(page) and "<img" not in as_json(page)
    view = find(page, "tl-view").data
    assert (view["t0"], view["t1"]) == (str(rec.start_ns), str(rec.end_ns))


def test_hover_text_is_formatted_on_the_server(env):
    """An event's tooltip: its whole name, kind and place, length and start from the run start
    (tracelab.text_format), launch configuration; a gap's: cause, length, start, whole evidence."""
    from app import create_app

    state, a, _ = env
    client = create_app(state.store).server.test_client()
    header, arrays = tile_of(state, a, 0, 200_000)
    gemm = next(it for it in items_of(header, arrays, "kernel") if it["name"] == "gemm_kernel_1")
    lines = client.get(f"/api/timeline/hover?run={a}&event={gemm['pos']}").get_json()["lines"]
    assert lines[:3] == ["gemm_kernel_1", "kernel · GPU 0 · stream 7", "15.0 µs at +30.0 µs"]
    assert lines[3] == "grid (128,1,1) block (256,1,1)"
    from tracelab.render.text.gap_evidence import gap_evidence

    analysis = state.analysis(a)
    lines = client.get(f"/api/timeline/hover?run={a}&gap=0").get_json()["lines"]
    assert lines == ["idle (host_sync) · 1.71 ms at +300.0 µs", gap_evidence(analysis, [analysis.gaps[0]])[0]]
    assert "cudaStreamSynchronize" in lines[1]  # the wait that explains it, named


def test_zoom_requeries_store_window_and_updates_link(env):
    from app.pages import timeline

    state, a, _ = env
    rec = state.record(a)
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    # the canvas reports the first 200 µs (step 0's kernels), in ns from the run start
    new_view, info = timeline.on_window(state, view, {"t0": 0, "t1": 200_000})
    assert (new_view["t0"], new_view["t1"]) == (str(rec.start_ns), str(rec.start_ns + 200_000))
    link, matches = timeline.on_links(state, new_view, {"query": "", "match": -1})
    assert matches == ""
    q = parse_qs(urlparse(link).query)
    assert q == {"run": [a], "t0": [str(rec.start_ns)], "t1": [str(rec.start_ns + 200_000)]}
    assert info.startswith("window 200.0 µs at +0 ns")
    # at this zoom every kernel of step 0 is drawn individually, with its name
    header, arrays = tile_of(state, a, 0, 200_000)
    kernels = [it for it in items_of(header, arrays, "kernel") if it["start"] < 200_000]
    assert sum(it["name"].startswith("gemm_kernel") for it in kernels) == 4
    assert any(it["name"] == HOSTILE_KERNEL for it in kernels)
    # the same window again changes nothing; forged windows are clamped to the run
    assert timeline.on_window(state, new_view, {"t0": 0, "t1": 200_000}) is None
    full, *_ = timeline.on_window(state, new_view, {"t0": -(10**15), "t1": 10**15})
    assert (int(full["t0"]), int(full["t1"])) == (rec.start_ns, rec.end_ns)
    with pytest.raises(BadInput):
        timeline.on_window(state, new_view, {"t0": "abc", "t1": 5})


def test_ranks_unfolded_travel_in_the_url(env):
    """Issue 28: which ranks are unfolded (?open=1,3; none: all folded) reaches the canvas (data-open) and
    the permalink; a bad value is one clear error page."""
    from app.pages import timeline

    state, a, _ = env
    root = find(timeline.timeline_layout(state, a), "tl-canvas-root")
    assert "data-open" not in root.to_plotly_json()["props"]  # no parameter: the canvas' default
    page = timeline.timeline_layout(state, a, open_ranks="3,1,1")
    assert getattr(find(page, "tl-canvas-root"), "data-open") == "1,3"
    assert parse_qs(urlparse(find(page, "tl-permalink").href).query)["open"] == ["1,3"]
    assert getattr(find(timeline.timeline_layout(state, a, open_ranks=""), "tl-canvas-root"), "data-open") == "none"
    view = find(page, "tl-view").data
    link, _ = timeline.on_links(state, view, {"query": "", "match": -1}, None, "0,2")
    assert parse_qs(urlparse(link).query)["open"] == ["0,2"]
    link, _ = timeline.on_links(state, view, {"query": "", "match": -1}, None, None)
    assert "open" not in parse_qs(urlparse(link).query)
    for bad in ("1;2", "-1", "x", "1,,2"):
        page = timeline.timeline_layout(state, a, open_ranks=bad)
        assert page.id == "error" and "Bad ranks to unfold" in as_json(page), bad
    with pytest.raises(BadInput):
        timeline.on_links(state, view, {"query": "", "match": -1}, None, "<script>")


def test_search_state_steps_to_each_match(env):
    """39 gemm kernels (8 steps x 5 kernels, kernel j is gemm_kernel_{j % 2}, one hostile name): a new
    search has no current match; match 1 is step 0's kernel 1 (+30 µs .. +45 µs), shown in the middle
    of the window the page moves to; the permalink carries the query."""
    from app.pages import timeline

    state, a, _ = env
    rec = state.record(a)
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    found, highlight = timeline.on_search(state, view, "  GEMM_kernel ")
    assert found == {"query": "GEMM_kernel", "match": -1, "count": 39} and highlight == "GEMM_kernel"
    assert timeline.on_step(state, view, found) is None  # no match current: the view stays
    goto = timeline.on_step(state, view, dict(found, match=1))
    assert goto["t0"] < 30_000 and goto["t1"] > 45_000 and (goto["t0"] + goto["t1"]) / 2 == 37_500
    moved, _info = timeline.on_window(state, view, goto)
    link, text = timeline.on_links(state, moved, dict(found, match=1), ["stream"])
    assert text.startswith("2 / 39 matches (")
    assert parse_qs(urlparse(link).query)["q"] == ["GEMM_kernel"]
    assert int(parse_qs(urlparse(link).query)["t0"][0]) == rec.start_ns + goto["t0"]
    # the browser's count is not trusted, and an index past the matches is no match
    assert timeline.decode_find(state, rec, {"query": "GEMM_kernel", "match": 39, "count": 10**6})["count"] == 39
    assert timeline.decode_find(state, rec, {"query": "GEMM_kernel", "match": 39})["match"] == -1
    assert timeline.decode_find(state, rec, {"query": ["x"], "match": 3}) == {"query": "", "match": -1, "count": 0}
    with pytest.raises(BadInput):
        timeline.on_step(state, view, {"query": "GEMM_kernel", "match": "abc"})
    # the page opened from a kernel row (a query, no window) starts on the first match
    page = timeline.timeline_layout(state, a, q="GEMM_kernel")
    assert find(page, "tl-find").data == {"query": "GEMM_kernel", "match": 0, "count": 39}


def test_click_gpu_op_highlights_host_launch_and_back(env):
    from app.pages import timeline

    state, a, _ = env
    view = find(timeline.timeline_layout(state, a), "tl-view").data
    header, arrays = tile_of(state, a, 0, 200_000)
    kernel = items_of(header, arrays, "kernel")[0]
    sel_view, panel, highlight = timeline.on_select(state, view, {"pos": kernel["pos"]}, ["stream", "host"])
    assert sel_view["selected"]["correlation"] == int(kernel["corr"])
    linked = timeline.correlated_events(state, a, sel_view["selected"])
    assert sorted(linked["kind"].tolist()) == [int(EventKind.KERNEL), int(EventKind.RUNTIME)]
    assert len(highlight["start"]) == 2 and kernel["start"] in highlight["start"]  # both ends outlined
    assert "cudaLaunchKernel" in as_json(panel)
    # and back: clicking the host launch links the same kernel
    launch = next(it for it in items_of(header, arrays, "api") if it["corr"] == kernel["corr"])
    back, _, _ = timeline.on_select(state, view, {"pos": launch["pos"]}, ["stream", "host"])
    linked_back = timeline.correlated_events(state, a, back["selected"])
    assert set(linked_back["start"]) == set(linked["start"])
    # hidden rows are not outlined; a clear removes the selection; a forged position is refused
    _, _, only_gpu = timeline.on_select(state, sel_view, None, ["stream"])
    assert only_gpu["start"] == [kernel["start"]]
    cleared, panel, none = timeline.on_select(state, dict(sel_view, selected=None), None, ["stream"])
    assert cleared["selected"] is None and none is None and "Click a kernel" in as_json(panel)
    with pytest.raises(BadInput):
        timeline.on_select(state, view, {"pos": 10**9}, ["stream"])


def test_lane_toggles_hide_rows(env):
    from app import create_app

    state, a, _ = env
    client = create_app(state.store).server.test_client()
    meta = client.get(f"/api/timeline/meta?run={a}&show=stream").get_json()
    labels = " ".join(meta["rows"]["label"])
    assert "stream 7" in labels and "tid 1" not in labels and "SM" not in labels
    assert meta["show"] == ["stream"]
    full = client.get(f"/api/timeline/meta?run={a}").get_json()
    assert full["show"] == ["stream", "sm", "nvtx", "host"] and "tid 1" in " ".join(full["rows"]["label"])


# ---- gaps --------------------------------------------------------------------------------------------------


def test_gap_click_opens_timeline_at_gap(env):
    from app.pages import gaps, timeline

    state, a, _ = env
    page = gaps.gaps_layout(state, a)
    assert page.id == "gaps-page"
    # the table: plain HTML (no DataTable, issue 28), a page of rows, each row a link to the timeline
    rows = find(page, "gaps-rows").children
    assert len(rows) == 7  # one idle stretch between each of the 8 steps
    lengths = [int(getattr(r, "data-end-ns")) - int(getattr(r, "data-start-ns")) for r in rows]
    assert lengths == sorted(lengths, reverse=True)  # longest first
    run_info = find(page, "gaps-run").data
    third = rows[2]
    link = third.children[2].children.href  # the "at" cell's link
    q = parse_qs(urlparse(link).query)
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert t0 < int(getattr(third, "data-start-ns")) and int(getattr(third, "data-end-ns")) < t1
    tl_page = timeline.timeline_layout(state, q["run"][0], q["t0"][0], q["t1"][0])
    view = find(tl_page, "tl-view").data
    assert (int(view["t0"]), int(view["t1"])) == (t0, t1)
    # the chart: one SVG document (no plotly.js, issue 28's slow Gaps page); each gap a point linking to
    # the timeline around it, its tooltip saying cause, length, offset and evidence; axes written by the
    # one formatter (durations, offsets from the run start), never Plotly's "10k" or bare log ticks
    from html.parser import HTMLParser

    from tracelab.text_format import fmt_ns, fmt_rel

    class Svg(HTMLParser):
        def __init__(self):
            super().__init__()
            self.links, self.titles, self.texts, self.circles, self._title = [], [], [], 0, False

        def handle_starttag(self, tag, attrs):
            d = dict(attrs)
            self.links += [d["href"]] if tag == "a" else []
            self.circles += tag == "circle" and "href" not in d
            self._title = tag == "title"

        def handle_endtag(self, tag):
            self._title = False

        def handle_data(self, data):
            (self.titles if self._title else self.texts).append(data)

    doc = Svg()
    doc.feed(getattr(find(page, "gaps-graph"), "data-svg"))
    gaps_of_run = sorted(state.analysis(a).gaps, key=lambda g: g.start_ns)
    assert len(doc.links) == len(gaps_of_run) == len(rows)
    origin = int(run_info["lo"])
    windows = sorted((int(parse_qs(urlparse(x).query)["t0"][0]), int(parse_qs(urlparse(x).query)["t1"][0]))
                     for x in doc.links)
    for (t0, t1), g in zip(windows, gaps_of_run):
        assert t0 < g.start_ns < g.end_ns < t1
    for g in gaps_of_run:
        assert any(t.startswith(f"{g.cause} · {fmt_ns(g.duration_ns)} at {fmt_rel(g.start_ns - origin)}")
                   for t in doc.titles)
    labels = [t for t in doc.texts if t.strip()]
    assert "0" in labels and any(re.fullmatch(r"\+\d+\.\d+ ms", t) for t in labels), labels
    assert all(not re.fullmatch(r"[\d.]+k?", t) or t == "0" for t in labels), labels  # no bare numbers


def test_gaps_chart_escapes_names_and_links():
    """The SVG chart is a document of its own: evidence, causes and links are XML-escaped."""
    from tracelab.analyses.results import Gap
    from tracelab.render.figures.gaps_svg import gaps_svg

    evil = "</title></circle><script>alert(1)</script><b>x</b> & \"q\""
    g = Gap(rank=0, device=0, start_ns=1_000, end_ns=51_000, duration_ns=50_000, cause="host_sync")
    doc = gaps_svg([g], 0, [evil], ['/timeline?run=a&t0=1"><script>'])
    assert "<script>" not in doc and "<b>" not in doc
    assert "&lt;/title&gt;&lt;/circle&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert 'href="/timeline?run=a&amp;t0=1&quot;&gt;&lt;script&gt;"' in doc
    assert gaps_svg([], 0).count("no idle gaps") == 1


# ---- overlap, kernels ----------------------------------------------------------------------------------------


def test_overlap_matrix_and_kernel_table(env):
    from app.pages import kernels, overlap
    from tracelab.api import stream_overlap_matrix

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
    # only the streams that run at the same time as another are drawn (a DDP rank's ~30 copy streams of
    # "0 ns" made the page 4,857 px tall, issue 28); the first device's section is open
    v = m.to_numpy().copy()
    np.fill_diagonal(v, 0)
    overlapping = [c for c, row in zip(m.columns, v) if row.sum() > 0]
    shown = find(page, "overlap-matrix-0-0").figure
    assert list(shown.data[0].x) == overlapping and len(overlapping) < len(m.columns)
    section = find(page, "overlap-device-0-0")
    assert section.open is True
    assert section.children[0].children.startswith(f"rank 0 · GPU 0: {len(overlapping)} of {len(m)} streams")
    kt = kernels.kernels_frame(state, a)
    by_name = kt.groupby("name")["count"].sum().to_dict()
    assert by_name == {"gemm_kernel_0": 23, "gemm_kernel_1": 16, HOSTILE_KERNEL: 1, "attention_kernel": 8}
    att = kt[kt["name"] == "attention_kernel"].iloc[0]
    assert att["grid"] == "64×2×1" and att["block"] == "128×1×1" and att["total_ns"] == 8 * 180_000
    assert 0 < att["occupancy"] <= 100


def test_multi_rank_overlap_page_is_one_line_per_device(tmp_path):
    """Three ranks: a row per rank first, then every device collapsed to a summary line."""
    from test_ranks import AR, _run

    from app.pages import overlap
    from app.state import AppState

    tl = _run([(r, 0, AR, 1000 + 100 * r, 1500) for r in range(3)] + [(r, 0, "gemm", 1600, 1900) for r in range(3)])
    store = Store(tmp_path / "r.db")
    rid = store.import_timeline(tl, source_path="ranks.json", fingerprint="r" * 64, name="ranks")
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=1024)
    page = overlap.overlap_layout(state, rid)
    sections = [find(page, f"overlap-device-{r}-0") for r in range(3)]
    assert all(x is not None for x in sections)
    assert [x.open for x in sections] == [False, False, False]  # several devices: all collapsed (issue 28)
    for r, x in enumerate(sections):  # one stream per rank here: nothing overlaps, said in one line
        assert x.children[0].children.startswith(f"rank {r} · GPU 0: no two of its")
    # the ranks side by side first: one row per rank, busy / comm from the events (units of µs here)
    from tracelab.text_format import fmt_ns

    table = find(page, "overlap-ranks")
    head = [c.children for c in table.children[0].children.children]
    rows = [[c.children for c in tr.children] for tr in table.children[1].children]
    assert head[0] == "rank · GPU" and len(rows) == 3
    ev = tl.events
    for r, row in enumerate(rows):
        mine = ev[(ev["rank"] == r) & (ev["kind"] == int(EventKind.KERNEL))]
        busy = int((mine["end"] - mine["start"]).sum())  # the two kernels do not overlap
        comm = int((mine["end"] - mine["start"]).max())  # the all-reduce is the longer one here
        cell = dict(zip(head, row))
        assert cell["rank · GPU"] == f"rank {r} · GPU 0"
        assert cell["busy"].startswith(fmt_ns(busy)) and cell["comm"] == fmt_ns(comm)
        assert cell["streams with work"] == "1" and cell["streams overlapping"] == "0"
    assert page.children.index(table) < page.children.index(find(page, "overlap-bars"))


# ---- compare --------------------------------------------------------------------------------------------------


def test_compare_shows_deltas(env):
    from app.data import comparison_tables
    from app.pages import compare
    from tracelab.api import compare as compare_runs

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
    table = find(content, "compare-devices")
    assert table is not None
    # numbers written one way (issue 28): no change is a plain 0 (never "+0 ns"), count deltas are signed
    # like time deltas, headers are words (no raw `delta_pct`), a change under 0.05% is 0.0% (never -0%)
    shown = {(r["device"], r["metric"]): r for r in table.data}
    busy_row = next(r for (dev, m), r in shown.items() if m == "busy")
    assert busy_row["delta"] == "0" and busy_row["delta_pct"] == "0.0%"
    counts = {m: r for (dev, m), r in shown.items() if m.endswith("(count)")}
    for m, r in counts.items():
        raw = t[t["metric"] == m].iloc[0]
        d = int(raw["variant"] - raw["baseline"])
        assert r["delta"] == ("0" if d == 0 else f"{d:+,d}"), (m, r)
    headers = [c["name"] for c in table.columns]
    assert "Δ %" in headers and not any("_" in h for h in headers), headers
    gaps_table = find(content, "compare-gaps")
    assert {"count A", "count B", "time Δ (B − A)"} <= {c["name"] for c in gaps_table.columns}
    assert "+0 ns" not in text and "-0%" not in text and "+0.0%" not in text
    from tracelab.render.figures.dashboard import compare_bars_figure

    bars = compare_bars_figure(cmp).data[1].text  # the variant's bars carry the change
    assert all(re.fullmatch(r"[0-9.]+ (ns|µs|ms|s)( \((0\.0|[+-][0-9.]+)%\))?", x) for x in bars), bars
    assert any(x.endswith(" (0.0%)") for x in bars), bars  # busy does not change (asserted above)
    bad = compare.compare_content(state, a, "nope")
    assert "no run with id or name 'nope'" in as_json(bad)
    page = compare.compare_layout(state, a, b)
    assert find(page, "compare-a").value == a and find(page, "compare-b").value == b


def test_compare_preselects_no_unrelated_baseline(env):
    """A program's run (no workload: `tracelab record -- python ddp.py`, or an imported trace) has no
    related baseline among the synthetic workload's runs: Compare pre-selects nothing for the other side
    and asks, rather than comparing unrelated runs (issue 28: ddp against default_stream read "+63959 %").
    A run of the same trace file name, or of the same workload, is pre-selected."""
    from dataclasses import replace

    import msgspec

    from app.pages import compare

    state, a, b = env

    def program(source_path: str, fp: str) -> str:
        tl = synthetic_timeline(source="ddp")
        tl = replace(tl, meta=msgspec.structs.replace(tl.meta, workload="", variant=""))
        return state.store.import_timeline(tl, source_path=source_path, fingerprint=fp * 64, name=source_path)

    ddp = program("ddp.json", "c")
    for named, ask in (({"b": ddp}, "baseline (A)"), ({"a": ddp}, "variant (B)")):
        page = compare.compare_layout(state, named.get("a"), named.get("b"))
        picked = find(page, "compare-a").value, find(page, "compare-b").value
        assert picked == (named.get("a"), named.get("b")), picked
        text = as_json(find(page, "compare-result"))
        assert f"No run of the same workload or program to compare it with: pick the {ask}." in text, text
        assert find(page, "compare-devices") is None
    again = program("/elsewhere/ddp.json", "d")
    page = compare.compare_layout(state, None, again)
    assert (find(page, "compare-a").value, find(page, "compare-b").value) == (ddp, again)
    page = compare.compare_layout(state, None, b)  # the synthetic workload's variants pair up
    assert (find(page, "compare-a").value, find(page, "compare-b").value) == (a, b)


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
    # on an epoch-ns clock (float64 steps of 256 ns there) with bins of ~100 ns: still exact
    covered_e, _ = busy_bins(rows, start + EPOCH_NS, end + EPOCH_NS, t0 + EPOCH_NS, t0 + EPOCH_NS + 1_700, n_rows, n_bins)
    covered_0, _ = busy_bins(rows, start, end, t0, t0 + 1_700, n_rows, n_bins)
    np.testing.assert_allclose(covered_e, covered_0, atol=1e-6)


def test_idle_bins_leave_busy_time_alone_at_deep_zoom(env):
    """The idle row between step 0's kernels (stream 7: [10, 25), [30, 45), [50, 65) µs from the run
    start, nothing else busy before 100 µs) on a 62 µs tile of an epoch-ns clock: idle exactly in
    [25, 30) and [45, 50) (to a bin), none inside a kernel."""
    from app import timeline_view
    from app.pages.timeline import default_show

    state, a, _ = env
    rec = state.record(a)
    t0, t1 = timeline_view.tile_window(rec, 8, 0)
    rows, _ = timeline_view.view_rows(state, rec, default_show(rec))
    idle = timeline_view.idle_bins(state, a, rows, t0, t1)
    bin_ns = (t1 - t0) / 512
    s, e = idle["start"].to_numpy() - rec.start_ns, idle["end"].to_numpy() - rec.start_ns
    for k0, k1 in ((10_000, 25_000), (30_000, 45_000), (50_000, t1 - rec.start_ns)):
        inside = (s >= k0 + bin_ns) & (e <= k1 - bin_ns)
        assert not inside.any(), (k0, k1, s[inside])
    idle_ns = ((e - s) * idle["busy"].to_numpy()).sum()
    assert idle_ns == pytest.approx(10_000, abs=2 * bin_ns)


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


def test_every_tile_stays_under_the_item_budget(tmp_path):
    """A run of 120k events: every tile of the canvas stays under the item budget."""
    from app import timeline_view
    from app.state import AppState

    store = Store(tmp_path / "big.db")
    rid = store.import_timeline(
        synthetic_timeline(steps=8000, step_ns=400_000), source_path="big", fingerprint="c" * 64
    )
    state = AppState(store=store, max_items=2000)
    rec = state.record(rid)
    assert rec.events > 100_000
    for level, index in ((0, 0), (6, 17), (timeline_view.max_level(rec), 5)):
        parts = timeline_view.tile_parts(state, rec, ["stream", "sm", "nvtx", "host"], level, index)
        assert parts.view.n_drawn <= 2000 and parts.sm_view.n_drawn <= 1000  # streams/host + SM lanes
        header, arrays = unpack(timeline_view.tile_bytes(state, rec, ["stream", "sm", "nvtx", "host"], level, index))
        assert len(arrays["i.start"]) == len(parts.view.items) + len(parts.sm_view.items)
        assert header["events_in_window"] == parts.view.events_in_window > 0 or level > 6


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


def test_the_gaps_page_request_starts_the_analysis_before_dash_asks(env, tmp_path):
    """Issue 28 (a cold Gaps page was the server's first analysis, after Dash's start-up): the request for
    the page's HTML starts the run's analysis and the page's content in the background; an unknown run or a
    refused request starts nothing."""
    from app import create_app
    from app.pages.gaps import gaps_body
    from app.state import STATE_KEY

    state, a, b = env
    app = create_app(state.store, import_dir=tmp_path / "up", max_upload_bytes=1024)
    served = app.server.config[STATE_KEY]
    client = app.server.test_client()
    assert client.get(f"/gaps?run={b}", headers={"Host": "evil.example"}).status_code == 403
    assert client.get("/gaps?run=nope").status_code == 200
    assert client.get(f"/kernels?run={b}").status_code == 200  # a page that needs no analysis
    rec = served.record(a)
    assert client.get(f"/gaps?run={a}").status_code == 200  # the HTML only: no callback runs
    deadline = time.time() + 60
    while served.peek(("gaps-page", a, rec.created)) is None and time.time() < deadline:
        time.sleep(0.05)
    assert served.cached_analysis(a) is not None
    page = served.peek(("gaps-page", a, rec.created))
    assert page is not None and as_json(page) == as_json(gaps_body(served, rec))
    time.sleep(0.3)
    assert served.cached_analysis(b) is None  # neither the refused request nor the kernels page analysed b


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
        "tl-info.children" in outputs
        and "tl-range.children" in outputs
        and "nav-location.href" in outputs
        and "upload-message.children" in outputs
    )
    assert app.server.config["MAX_CONTENT_LENGTH"] < 10 * 1024 * 1024


def test_idle_lane_shows_gaps_by_cause_at_whole_run_zoom(env):
    """Each device has an idle row; its gaps are drawn there, by cause, at the whole-run zoom too (the
    synthetic run: 8 steps each ending in a stream sync -> 7 host_sync gaps of ~1.7 ms between the
    steps)."""
    from app import create_app
    from app.pages.timeline import default_show
    from app.timeline_view import view_rows
    from tracelab.render.timeline.data import CAUSES

    state, a, _ = env
    rec = state.record(a)
    rows, _ = view_rows(state, rec, default_show(rec))
    idle_rows = rows[rows["kind"] == "idle"]
    assert len(idle_rows) == 1 and idle_rows["label"].iloc[0].startswith("idle")
    header, arrays = tile_of(state, a, 0, rec.span_ns)
    assert header["level"] == 0 and header["gaps_ready"]
    assert len(arrays["g.start"]) == 7
    assert {CAUSES[c] for c in arrays["g.cause"].tolist()} == {"host_sync"}
    assert set(arrays["g.row"].tolist()) == {int(idle_rows["row"].iloc[0])}
    # each gap's drawn length is its real length: step i ends its work at +(i * 2 ms + ~300 µs)
    # and the next step starts at +((i + 1) * 2 ms)
    lengths_ms = (arrays["g.end"] - arrays["g.start"]) / 1e6
    assert np.all((lengths_ms > 1.5) & (lengths_ms < 2.0))
    meta = create_app(state.store).server.test_client().get(f"/api/timeline/meta?run={a}").get_json()
    assert meta["causes_present"] == ["host_sync"]
    assert "idle (host_sync)" in [c["legend"] for c in meta["style"]["causes"]]


def test_in_memory_cut_draws_what_the_store_window_holds(env):
    """Tiles are cut from the run's columns in memory: they draw exactly what `Store.window` returns
    for the same window (the same items and bins as a level of detail of the store's events)."""
    from app import timeline_view
    from tracelab.render.timeline.data import lane_to_row, timeline_rows

    state, a, _ = env
    rec = state.record(a)
    rows = timeline_rows(state.lanes(a), state.strings(a))
    table = lane_to_row(rows, len(state.lanes(a)))
    shown = rows.loc[rows["lane"] >= 0, "lane"].to_numpy()
    for t0, t1 in ((rec.start_ns, rec.end_ns), (rec.start_ns + 150_000, rec.start_ns + 2_400_000)):
        memory = timeline_view.window_view(state, a, t0, t1, table, shown, len(rows))
        events = state.store.window(a, t0, t1, lanes=shown.tolist())
        events = events.assign(row=table[events["lane"].to_numpy()])
        stored = level_of_detail(events, t0, t1, len(rows), width_px=state.width_px, max_items=state.max_items)
        assert memory.events_in_window == stored.events_in_window > 0
        cols = ["start", "end", "row", "kind", "name", "correlation"]
        pd.testing.assert_frame_equal(
            memory.items[cols].reset_index(drop=True), stored.items[cols].reset_index(drop=True)
        )
        pd.testing.assert_frame_equal(memory.bins, stored.bins)
        ev = state.timeline(a).events  # `pos` names each drawn event
        assert (ev["start"].to_numpy()[memory.items["pos"].to_numpy()] == memory.items["start"].to_numpy()).all()


def test_internal_errors_give_a_clear_page(env, monkeypatch):
    from app.pages import overlap, timeline

    state, a, _ = env

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr(state, "analysis", broken)
    page = overlap.overlap_layout(state, a)
    assert page.id == "error" and "RuntimeError: boom" in as_json(page)
    monkeypatch.setattr(timeline, "events_in_window", broken)
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


def test_run_header_says_trace_not_span(env):
    """The page header's length is the whole trace's (host events included), as `tracelab runs` names
    it; "span" is the GPU's span of the figures (issue 28: "span 62.30 ms" beside figures of 57.92 ms)."""
    from app.components import run_header
    from tracelab.text_format import fmt_ns

    state, a, _ = env
    rec = state.record(a)
    header = run_header(rec, "Gaps & findings")
    meta = "".join(c for c in header.children[1].children if isinstance(c, str))
    assert meta.endswith(f" · trace {fmt_ns(rec.end_ns - rec.start_ns)}"), meta
    assert "span" not in as_json(header)


def test_green_ctx_gaps_page_shows_the_idle_partition(tmp_path):
    """green_contexts/green_ctx/nsys: the whole GPU idles 209.8 µs, but the 116-SM partition is busy ~70%
    and leaves about a quarter of the GPU's SM-time idle. The Gaps page's findings say so (issue 28: it
    read "Findings (0)"), with the partition's numbers written one way (1,006.6 SM-ms, the span by
    text_format)."""
    from app.pages import gaps
    from app.state import AppState
    from tracelab.analyses.sm import summary as sm
    from tracelab.demo import demo_run
    from tracelab.io import load_trace

    path = demo_run("green_contexts-green_ctx-nsys", tmp_path / "c")
    store = Store(tmp_path / "g.db")
    rid = store.import_timeline(load_trace(path), source_path=str(path), fingerprint="g" * 64, name="green")
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=1024)
    page = gaps.gaps_layout(state, rid)
    text = as_json(page)
    assert "Findings (1)" in text and "idle_partition" in text
    tl = state.timeline(rid)
    (part,) = [p for p in sm.sm_summary(tl, 0, 0).partitions if p.sm_count == 116]
    assert sm.IDLE_PARTITION_THRESHOLD <= part.busy_fraction < sm.IDLE_PARTITION_INFO
    assert re.search(r"green-context partition \d+ \(116 of 132 SMs\) is busy \d+% of the \d+\.\d\d ms span", text)
    assert re.search(r"\d,\d{3}\.\d SM-ms idle", text), text


def test_big_runs_get_gaps_and_steps_after_their_first_tile(env, monkeypatch):
    """A run above SYNC_ANALYSIS_MAX_EVENTS: its first meta and tile wait for neither the analysis nor
    the steps (the steps lane is there, empty); both start after the first tile, in the background,
    and the next meta / tiles carry them (the same gaps and steps as the small-run path)."""
    import time as _time

    from app import create_app, timeline_view

    state, a, _ = env
    expected_steps = timeline_view.run_steps(state, a)  # computed here on another state
    expected_gaps = len(state.analysis(a).gaps)
    monkeypatch.setattr(timeline_view, "SYNC_ANALYSIS_MAX_EVENTS", 10)
    client = create_app(state.store).server.test_client()
    meta = client.get(f"/api/timeline/meta?run={a}").get_json()
    assert not meta["gaps_ready"] and not meta["steps_ready"] and meta["steps"]["start"] == []
    assert meta["rows"]["kind"].count("steps") == 1 and "steps" in meta["rows"]["label"]
    header, arrays = unpack(client.get(f"/api/timeline/tile?run={a}&level=0&index=0").data)
    assert not header["gaps_ready"] and len(arrays["g.start"]) == 0
    deadline = _time.time() + 60
    while not (meta["gaps_ready"] and meta["steps_ready"]) and _time.time() < deadline:
        _time.sleep(0.1)
        meta = client.get(f"/api/timeline/meta?run={a}").get_json()
    assert meta["gaps_ready"] and meta["steps_ready"]
    assert meta["steps"]["label"] == expected_steps["label"].tolist()
    header, arrays = unpack(client.get(f"/api/timeline/tile?run={a}&level=0&index=0").data)
    assert header["gaps_ready"] and len(arrays["g.start"]) == expected_gaps == 7


def test_gaps_page_states_the_set_up(tmp_path):
    """Issue 24: the Gaps page says what ran before the first step (the DDP recording's start-up), with the
    set-up's span computed here from the run's own steps and GPU events."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from multigpu_util import run_dir

    from app.pages import gaps
    from app.state import AppState
    from tracelab.api import import_trace

    store = Store(tmp_path / "s.db")
    got = import_trace(run_dir("ddp2_sleep_torch", tmp_path), store)
    rid = got.run_id
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=64 * 1024)
    page = gaps.gaps_layout(state, rid)
    text = find(page, "setup-line").children
    tl = store.load(rid)
    from tracelab.api import analyze as api_analyze

    an = api_analyze(tl)
    first = {}
    for s in an.steps:
        first[s.rank] = min(first.get(s.rank, s.start_ns), s.start_ns)
    ev = tl.events
    gpu = ev[ev["kind"].isin([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])]
    spans = [first[r] - int(gpu[gpu["rank"] == r]["start"].min()) for r in first]
    from tracelab.text_format import fmt_ns

    assert text.startswith("Set-up (before the first step): " + fmt_ns(max(spans)))


def _raw_gaps(tl, threshold_ns: int) -> list[tuple[int, int]]:
    """Idle stretches of each GPU computed here from the stored events (kernels, copies, memsets): where
    the next operation starts >= threshold after every earlier one ended."""
    ev = tl.events
    g = ev[ev["kind"].isin([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])]
    out = []
    for _, part in g.groupby(["rank", "device"]):
        s, e = part["start"].to_numpy(np.int64), part["end"].to_numpy(np.int64)
        o = np.argsort(s, kind="stable")
        s, reach = s[o], np.maximum.accumulate(e[o])
        out += [(int(reach[i]), int(s[i + 1])) for i in np.nonzero(s[1:] - reach[:-1] >= threshold_ns)[0]]
    return out


def test_gaps_table_pages_sorts_and_filters_on_the_server(tmp_path):
    """Issue 28: the Gaps page's table is plain HTML, PAGE_ROWS rows at a time; next / previous, the sort
    buttons and the cause buttons ask the server for the rows (no DataTable on the page)."""
    from app.pages import gaps
    from app.state import AppState
    from tracelab.api import import_trace
    from tracelab.demo import demo_run

    store = Store(tmp_path / "s.db")
    rid = import_trace(demo_run("sync_pitfalls-item_every_step-torch", tmp_path / "r"), store).run_id
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=64 * 1024)
    analysis = state.analysis(rid)
    raw = _raw_gaps(store.load(rid), analysis.options.gap_threshold_ns)
    assert len(raw) > 3 * gaps.PAGE_ROWS
    page = gaps.gaps_layout(state, rid)
    run_info, view = find(page, "gaps-run").data, find(page, "gaps-view").data

    def spans(rows):
        return [(int(getattr(r, "data-start-ns")), int(getattr(r, "data-end-ns"))) for r in rows]

    first = spans(find(page, "gaps-rows").children)
    longest = sorted(raw, key=lambda g: g[0] - g[1])  # longest first
    assert [e - s for s, e in first] == [e - s for s, e in longest[: gaps.PAGE_ROWS]]
    assert find(page, "gaps-page-label").children.startswith(f"gaps 1–{gaps.PAGE_ROWS} of {len(raw)}")
    rows, label, view = gaps.on_gaps_view(state, run_info, view, "gaps-next")
    assert [e - s for s, e in spans(rows)] == [e - s for s, e in longest[gaps.PAGE_ROWS: 2 * gaps.PAGE_ROWS]]
    assert label.startswith(f"gaps {gaps.PAGE_ROWS + 1}–{2 * gaps.PAGE_ROWS} of {len(raw)}")
    rows, label, view = gaps.on_gaps_view(state, run_info, view, "gaps-prev")
    rows, label, view = gaps.on_gaps_view(state, run_info, view, "gaps-prev")  # stays on the first page
    assert view["page"] == 0 and spans(rows) == first
    rows, label, view = gaps.on_gaps_view(state, run_info, view, "gaps-sort-start")
    assert spans(rows) == sorted(raw)[: gaps.PAGE_ROWS] and "earliest first" in label
    for _ in range(100):  # past the last page: stays there
        rows, label, view = gaps.on_gaps_view(state, run_info, view, "gaps-next")
    tail = len(raw) % gaps.PAGE_ROWS or gaps.PAGE_ROWS
    assert spans(rows) == sorted(raw)[-tail:] and label.startswith(f"gaps {len(raw) - tail + 1}–{len(raw)} of")
    cause = analysis.gaps[0].cause
    n_cause = sum(g.cause == cause for g in analysis.gaps)
    rows, label, view = gaps.on_gaps_view(state, run_info, view, {"type": "gaps-cause", "cause": cause})
    assert view["page"] == 0 and f"of {n_cause}" in label and f"cause {cause}" in label
    assert {r.children[4].children for r in rows} == {cause}
    # every row links to the timeline around its gap
    for r in rows:
        q = parse_qs(urlparse(r.children[2].children.href).query)
        assert int(q["t0"][0]) < int(getattr(r, "data-start-ns")) < int(getattr(r, "data-end-ns")) < int(q["t1"][0])
    # the page's payload: no DataTable, and only one page of rows' evidence
    assert not any(type(c).__name__ == "DataTable" for c in _walk(page))


def _walk(c):
    yield c
    kids = getattr(c, "children", None)
    for k in kids if isinstance(kids, (list, tuple)) else [kids] if kids is not None else []:
        if hasattr(k, "to_plotly_json"):
            yield from _walk(k)


def test_streams_with_no_work_get_no_timeline_row_and_are_counted(tmp_path):
    """Issue 28: a stream a library created and never used (no event in the run) gets no row; the meta
    says how many were hidden. The lanes with events are counted here from the events themselves."""
    from app import create_app
    from tracelab.model import Timeline

    tl = synthetic_timeline(source="baseline")
    lanes = tl.lanes
    gpu = lanes[lanes["lane_kind"] == 0].iloc[0]
    extra = pd.DataFrame([{**gpu.to_dict(), "lane": len(lanes) + i, "stream": 900 + i} for i in range(3)])
    extra = extra.astype(lanes.dtypes.to_dict())
    tl2 = Timeline(events=tl.events, strings=tl.strings, lanes=pd.concat([lanes, extra], ignore_index=True),
                   devices=tl.devices, meta=tl.meta, contexts=tl.contexts, sm_blocks=tl.sm_blocks)
    store = Store(tmp_path / "s.db")
    rid = store.import_timeline(tl2, source_path="x.nsys-rep", fingerprint="e" * 64, name="empty-streams")
    client = create_app(store).server.test_client()
    meta = client.get(f"/api/timeline/meta?run={rid}").get_json()
    stored = store.load(rid)
    used = set(stored.events["lane"].astype(int).tolist())
    empty = [int(x) for x in stored.lanes["lane"] if int(x) not in used]
    assert len(empty) == 3 == meta["hidden_lanes"]
    labels = meta["rows"]["label"]
    assert not any(lab.startswith("stream 90") for lab in labels), labels
    # every stream with work keeps its row
    streams = stored.lanes[(stored.lanes["lane_kind"] == 0) & stored.lanes["lane"].isin(used)]["stream"]
    for st in {int(s) for s in streams if s >= 0}:
        assert any(lab == f"stream {st}" or lab.startswith(f"stream {st} ·") for lab in labels), (st, labels)
