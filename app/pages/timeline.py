"""Timeline page: /timeline?run=ID&t0=NS&t1=NS.

Lanes per device (streams with context / green context, SM lanes measured or estimated, NVTX ranges,
host threads with API calls) on one time axis. Each view is re-queried from the store for the visible
window and reduced by `tracelab.render.lod` to a few thousand drawable items. Clicking an event
highlights everything with the same correlation id (host launch <-> GPU op).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from dash import dcc, html, no_update

from tracelab.errors import BadInput
from tracelab.model.kinds import EventKind
from tracelab.render.figures import (
    axis_unit,
    empty_figure,
    fmt_bytes,
    fmt_ns,
    lane_to_row,
    sm_band_size,
    timeline_figure,
    timeline_rows,
)
from tracelab.render.lod import LodView, level_of_detail
from tracelab.store import RunRecord

from ..components import error_page, run_header
from ..state import AppState, current_state, describe_error
from ..urls import MIN_SPAN_NS, parse_window, timeline_href

PATH = "/timeline"
LANE_GROUPS = (("GPU streams", "stream"), ("SM lanes", "sm"), ("NVTX ranges", "nvtx"), ("host threads", "host"))
DEFAULT_SHOW = ["stream", "sm", "nvtx", "host"]


# ---- data ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmLanes:
    rank: int
    device: int
    frame: pd.DataFrame  # engineer H's SM lane columns: sm_first, sm_last, start, end, name, measured
    n_sms: int
    source: str


def sm_lanes_for(state: AppState, run_id: str) -> list[SmLanes]:
    """Per-SM lanes of every device (engineer H's `sm_lanes`), cached; [] when unavailable."""

    def make() -> list[SmLanes]:
        try:
            from tracelab.analyses.sm import sm_lanes  # type: ignore[attr-defined]
        except ImportError:
            return []
        tl = state.timeline(run_id)
        out = []
        for d in tl.devices:
            try:
                frame, source = sm_lanes(tl, d.rank, d.device)
            except Exception:  # noqa: BLE001 - SM lanes are an optional extra; the timeline still shows
                continue
            if frame is None or len(frame) == 0 or source == "none":
                continue
            n_sms = max(int(frame["sm_last"].max()) + 1, int(d.sm_count or 0))
            out.append(SmLanes(d.rank, d.device, frame.sort_values("start", kind="stable").reset_index(drop=True),
                               n_sms, str(source)))
        return out

    return state._misc.get(("sm_lanes", run_id), make)


@dataclass(frozen=True)
class RenderedView:
    figure: Any
    view: LodView
    sm_view: LodView | None
    rows: pd.DataFrame
    t0: int
    t1: int

    @property
    def n_drawn(self) -> int:
        return self.view.n_drawn + (self.sm_view.n_drawn if self.sm_view is not None else 0)


def render_view(
    state: AppState,
    record: RunRecord,
    t0: int,
    t1: int,
    *,
    show: list[str] | tuple[str, ...] = tuple(DEFAULT_SHOW),
    selected: dict[str, Any] | None = None,
) -> RenderedView:
    """Query the store for [t0, t1) on the shown lanes, reduce to drawable items, build the figure."""
    run_id = record.id
    lanes = state.lanes(run_id)
    strings = state.strings(run_id)
    sm = sm_lanes_for(state, run_id) if "sm" in show else []
    sm_rows = {(s.rank, s.device): (s.n_sms, s.source) for s in sm}
    device_names = {}
    rows = timeline_rows(lanes, strings, device_names=device_names, sm_rows=sm_rows, show=show)
    table = lane_to_row(rows, len(lanes))
    shown = rows.loc[rows["lane"] >= 0, "lane"].to_numpy()
    view = window_view(state, run_id, t0, t1, table, shown, len(rows))

    sm_view = None
    if sm:
        sm_view = _sm_view(state, sm, rows, t0, t1)

    highlight = None
    if selected:
        highlight = _highlight(state, run_id, selected, table)
    origin = record.start_ns or 0
    fig = timeline_figure(view, rows, strings, origin_ns=origin, highlight=highlight, sm_view=sm_view,
                          uirevision=f"{run_id}")
    return RenderedView(fig, view, sm_view, rows, t0, t1)


def _sm_view(state: AppState, sm: list[SmLanes], rows: pd.DataFrame, t0: int, t1: int) -> LodView:
    """The SM rows' view: each SM-lane interval (a kernel over a range of SMs) spreads over the band
    rows of its SM range, without expanding it into one row per SM."""
    frames, narrow = [], []
    offset = 0
    for s in sm:
        f = s.frame
        st, en = f["start"].to_numpy(), f["end"].to_numpy()
        longest = int((en - st).max()) if len(st) else 0
        lo = int(np.searchsorted(st, t0 - longest, side="left"))
        hi = int(np.searchsorted(st, t1, side="left"))
        part = f.iloc[lo:hi]
        band_rows = rows[(rows["kind"] == "sm") & (rows["rank"] == s.rank) & (rows["device"] == s.device)]
        band_rows = band_rows["row"].to_numpy()
        k = sm_band_size(s.n_sms)
        first = np.clip(part["sm_first"].to_numpy() // k, 0, len(band_rows) - 1)
        last = np.clip(part["sm_last"].to_numpy() // k, 0, len(band_rows) - 1)
        narrow.append(pd.DataFrame({
            "start": part["start"].to_numpy(), "end": part["end"].to_numpy(), "row": band_rows[first],
            "row_last": band_rows[last], "pos": np.arange(len(part)) + offset,
        }))
        frames.append(part)
        offset += len(part)
    events = pd.concat(narrow, ignore_index=True)
    view = level_of_detail(events, t0, t1, len(rows), width_px=state.width_px, max_items=state.max_items // 2)
    full = pd.concat(frames, ignore_index=True)
    items = full.iloc[view.items["pos"].to_numpy()].assign(row=view.items["row"].to_numpy())
    return LodView(t0=view.t0, t1=view.t1, width_px=view.width_px, items=items, bins=view.bins,
                   events_in_window=view.events_in_window)


STORE_WINDOW_MAX_EVENTS = 20_000  # above this (estimated), a view is cut from the run's columns in memory


def estimate_window_events(lanes: pd.DataFrame, t0: int, t1: int, shown: np.ndarray) -> int:
    """Events of the shown lanes expected in [t0, t1), assuming each lane's events spread evenly
    between its first start and last end (the store's lane table has both)."""
    if not {"events", "first_start", "last_end"} <= set(lanes.columns):
        return 0
    ln = lanes[lanes["lane"].isin(shown)]
    first, last = ln["first_start"].to_numpy(), ln["last_end"].to_numpy()
    span = np.maximum(last - first, 1)
    frac = np.clip((np.minimum(last, t1) - np.maximum(first, t0)) / span, 0.0, 1.0)
    return int((ln["events"].to_numpy() * frac).sum())


def window_view(
    state: AppState, run_id: str, t0: int, t1: int, lane_rows: np.ndarray, shown: np.ndarray, n_rows: int
) -> LodView:
    """The level-of-detail view of [t0, t1) on the shown lanes. Narrow windows are an indexed
    `Store.window` query; wide ones (more than STORE_WINDOW_MAX_EVENTS events expected) are cut with
    numpy from the run's columns, loaded once through `Store.load` and cached: a row query of a
    million events costs seconds, the columnar load a fraction of one. Both give the same view."""
    if len(shown) == 0:
        empty = pd.DataFrame({"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64),
                              "row": np.zeros(0, np.int32)})
        return level_of_detail(empty, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    if estimate_window_events(state.lanes(run_id), t0, t1, shown) <= STORE_WINDOW_MAX_EVENTS:
        events = state.store.window(run_id, t0, t1, lanes=shown.tolist())
        events = events.assign(row=lane_rows[events["lane"].to_numpy()])
        return level_of_detail(events, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    ev = state.timeline(run_id).events
    start, end, lane = ev["start"].to_numpy(), ev["end"].to_numpy(), ev["lane"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    s, e, ln = start[:hi], end[:hi], lane[:hi]
    m = ((e > t0) | (s >= t0)) & (lane_rows[ln] >= 0)  # same overlap rule as Store.window
    pos = np.flatnonzero(m)
    narrow = pd.DataFrame({"start": s[pos], "end": e[pos], "row": lane_rows[ln[pos]], "pos": pos})
    view = level_of_detail(narrow, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    items = ev.iloc[view.items["pos"].to_numpy()].assign(row=view.items["row"].to_numpy())
    return LodView(t0=view.t0, t1=view.t1, width_px=view.width_px, items=items, bins=view.bins,
                   events_in_window=view.events_in_window)


def correlated_events(state: AppState, run_id: str, selected: dict[str, Any]) -> pd.DataFrame:
    """The events linked to the selected one: same correlation id (host launch and GPU work), or the
    event itself when it has none."""
    tl = state.timeline(run_id)
    ev = tl.events
    corr = int(selected.get("correlation", -1))
    if corr >= 0:
        pos = state.correlation_index(run_id).positions(corr)
        return ev.iloc[np.sort(pos)]
    m = (ev["start"].to_numpy() == int(selected.get("start", -1))) & (ev["end"].to_numpy() == int(selected.get("end", -1)))
    if "lane" in selected:
        m &= ev["lane"].to_numpy() == int(selected["lane"])
    return ev[m]


def _highlight(state: AppState, run_id: str, selected: dict[str, Any], table: np.ndarray) -> pd.DataFrame:
    linked = correlated_events(state, run_id, selected)
    rows = table[linked["lane"].to_numpy()] if len(linked) else np.zeros(0, dtype=np.int32)
    out = linked.assign(row=rows)
    return out[out["row"] >= 0]


# ---- callbacks (plain functions) ------------------------------------------------------------------


def window_from_relayout(relayout: dict[str, Any] | None, view: dict[str, Any]) -> tuple[int, int] | None:
    """The new window (ns) from Plotly's relayoutData (x in the unit `axis_unit` chose for the
    current window, from the run origin); the full run on
    autorange (double click); None when the x range did not change."""
    if not relayout:
        return None
    origin = int(view["origin"])
    if relayout.get("xaxis.autorange"):
        return int(view["lo"]), int(view["hi"])
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        a, b = relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]
    elif isinstance(relayout.get("xaxis.range"), (list, tuple)) and len(relayout["xaxis.range"]) == 2:
        a, b = relayout["xaxis.range"]
    else:
        return None
    unit, _ = axis_unit(int(view["t1"]) - int(view["t0"]))  # the unit of the figure being zoomed
    try:
        t0 = origin + int(round(float(a) * unit))
        t1 = origin + int(round(float(b) * unit))
    except (TypeError, ValueError):
        return None
    lo, hi = int(view["lo"]), int(view["hi"])
    t0, t1 = max(min(t0, t1), lo), min(max(t0, t1), hi)
    if t1 - t0 < MIN_SPAN_NS:
        mid = (t0 + t1) // 2
        t0, t1 = mid - MIN_SPAN_NS // 2, mid + MIN_SPAN_NS // 2
    return t0, t1


def selection_from_click(click: dict[str, Any] | None, rows_lanes: list[int] | None = None) -> dict[str, Any] | None:
    """The clicked event's identity from Plotly clickData (customdata [row, start, end, corr, kind])."""
    if not click or not click.get("points"):
        return None
    cd = click["points"][0].get("customdata")
    if not isinstance(cd, (list, tuple)) or len(cd) < 5:
        return None
    row, start, end, corr, kind = (int(float(v)) for v in cd[:5])
    sel: dict[str, Any] = {"row": row, "start": start, "end": end, "correlation": corr, "kind": kind}
    if rows_lanes is not None and 0 <= row < len(rows_lanes):
        sel["lane"] = int(rows_lanes[row])
    return sel


def view_outputs(state: AppState, view: dict[str, Any]) -> tuple[Any, str, str, Any]:
    """(figure, permalink href, info line, selection panel) for a view state dict."""
    try:
        record = state.record(view["run"])
        rendered = render_view(state, record, int(view["t0"]), int(view["t1"]), show=view.get("show", DEFAULT_SHOW),
                               selected=view.get("selected"))
    except BadInput as exc:
        return empty_figure(describe_error(exc)), timeline_href(view.get("run", "")), describe_error(exc), []
    link = timeline_href(record.id, rendered.t0, rendered.t1)
    info = (
        f"window {fmt_ns(rendered.t1 - rendered.t0)} at +{fmt_ns(rendered.t0 - (record.start_ns or 0))} · "
        f"{rendered.view.events_in_window:,} events in view · {rendered.n_drawn:,} items drawn "
        f"({len(rendered.view.items):,} individual, {len(rendered.view.bins):,} aggregated)"
    )
    panel = selection_panel(state, record, view.get("selected"))
    return rendered.figure, link, info, panel


def selection_panel(state: AppState, record: RunRecord, selected: dict[str, Any] | None) -> list[Any]:
    if not selected:
        return [html.Span("Click a kernel, copy or API call to link its host launch and GPU work.",
                          className="hint")]
    linked = correlated_events(state, record.id, selected)
    strings = state.strings(record.id)
    origin = record.start_ns or 0
    items = []
    for r in linked.head(20).itertuples(index=False):  # a handful of linked events, not a hot path
        kind = EventKind(int(r.kind)).name.lower()
        name = strings[r.name] if 0 <= r.name < len(strings) else ""
        where = f"stream {r.stream}" if r.device >= 0 else f"thread {r.tid}"
        extra = []
        if r.grid_x > 0:
            extra.append(f"grid ({r.grid_x},{r.grid_y},{r.grid_z}) block ({r.block_x},{r.block_y},{r.block_z})")
        if r.bytes >= 0:
            extra.append(fmt_bytes(r.bytes))
        items.append(html.Li([
            html.B(kind), f" {where} · +{fmt_ns(r.start - origin)} · {fmt_ns(r.end - r.start)} · ",
            html.Code(name), (" · " + " · ".join(extra)) if extra else "",
        ]))
    corr = selected.get("correlation", -1)
    head = f"correlation {corr}: {len(linked)} linked event(s)" if corr >= 0 else "selected event (no correlation id)"
    return [html.Div(head, className="selection-head"), html.Ul(items, id="tl-selection-list")]


def on_timeline_event(
    state: AppState,
    trigger: str | None,
    view: dict[str, Any],
    *,
    relayout: dict[str, Any] | None = None,
    click: dict[str, Any] | None = None,
    show: list[str] | None = None,
) -> tuple[dict[str, Any] | None, tuple[Any, str, str, Any] | None]:
    """One interaction: returns (new view state, outputs) or (None, None) when nothing changes.
    trigger: 'graph.relayoutData' | 'graph.clickData' | 'show' | 'zoom-out' | 'full' | 'clear'."""
    view = dict(view)
    if trigger == "graph.relayoutData":
        w = window_from_relayout(relayout, view)
        if w is None or (w[0] == view["t0"] and w[1] == view["t1"]):
            return None, None
        view["t0"], view["t1"] = w
    elif trigger == "graph.clickData":
        sel = selection_from_click(click, view.get("row_lanes"))
        if sel is None:
            return None, None
        view["selected"] = sel
    elif trigger == "show":
        view["show"] = list(show or [])
    elif trigger == "zoom-out":
        span = view["t1"] - view["t0"]
        view["t0"] = max(int(view["lo"]), view["t0"] - span)
        view["t1"] = min(int(view["hi"]), view["t1"] + span)
    elif trigger == "full":
        view["t0"], view["t1"] = int(view["lo"]), int(view["hi"])
    elif trigger == "clear":
        view["selected"] = None
    else:
        return None, None
    outputs = view_outputs(state, view)
    view["row_lanes"] = _row_lanes(state, view)
    return view, outputs


def _row_lanes(state: AppState, view: dict[str, Any]) -> list[int]:
    record = state.record(view["run"])
    sm = sm_lanes_for(state, record.id) if "sm" in view.get("show", DEFAULT_SHOW) else []
    rows = timeline_rows(state.lanes(record.id), state.strings(record.id),
                         sm_rows={(s.rank, s.device): (s.n_sms, s.source) for s in sm},
                         show=view.get("show", DEFAULT_SHOW))
    return rows["lane"].astype(int).tolist()


# ---- layout ----------------------------------------------------------------------------------------


def timeline_layout(state: AppState, run: str | None = None, t0: Any = None, t1: Any = None) -> html.Div:
    if not run:
        runs = state.runs()
        if not runs:
            return error_page("No runs yet", "Import a trace on the Runs page, or run `tracelab demo`.")
        run = runs[0].id
    try:
        record = state.record(run)
    except BadInput as exc:
        return error_page("Unknown run", describe_error(exc))
    try:
        a, b = parse_window(record, t0, t1)
    except BadInput as exc:
        return error_page("Bad time window", f"{describe_error(exc)} — open the whole run: {timeline_href(record.id)}")
    view: dict[str, Any] = {
        "run": record.id, "t0": a, "t1": b, "lo": record.start_ns or 0, "hi": record.end_ns or (a + MIN_SPAN_NS),
        "origin": record.start_ns or 0, "show": list(DEFAULT_SHOW), "selected": None,
    }
    try:
        figure, link, info, panel = view_outputs(state, view)
        view["row_lanes"] = _row_lanes(state, view)
    except BadInput as exc:
        return error_page("Cannot show this run", describe_error(exc))
    return html.Div(
        [
            run_header(record, "Timeline"),
            html.Div(
                [
                    dcc.Checklist(id="tl-show", options=[{"label": lbl, "value": v} for lbl, v in LANE_GROUPS],
                                  value=list(DEFAULT_SHOW), inline=True, className="tl-show"),
                    html.Button("Zoom out ×3", id="tl-zoom-out", n_clicks=0),
                    html.Button("Whole run", id="tl-full", n_clicks=0),
                    html.Button("Clear selection", id="tl-clear", n_clicks=0),
                    dcc.Link("Permalink to this view", id="tl-permalink", href=link),
                ],
                className="tl-controls",
            ),
            html.Div(info, id="tl-info", className="tl-info"),
            dcc.Loading(
                dcc.Graph(id="tl-graph", figure=figure,
                          config={"scrollZoom": True, "displaylogo": False, "doubleClick": "autosize"}),
                type="dot", delay_show=400,
            ),
            html.Div(panel, id="tl-selection", className="tl-selection"),
            dcc.Store(id="tl-view", data=view),
            dcc.Store(id="tl-xrange"),
        ],
        id="timeline-page",
    )


def layout(run: str | None = None, t0: Any = None, t1: Any = None, **_ignored: Any) -> html.Div:
    return timeline_layout(current_state(), run, t0, t1)
