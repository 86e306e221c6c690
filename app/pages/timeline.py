"""Timeline page: /timeline?run=ID&t0=NS&t1=NS.

Lanes per device (streams with context / green context, SM lanes measured or estimated, NVTX ranges,
host threads with API calls) on one time axis. Each view is re-queried from the store for the visible
window and reduced by `tracelab.render.lod` to a few thousand drawable items. Clicking an event
highlights everything with the same correlation id (host launch <-> GPU op).
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracelab.errors import BadInput
from tracelab.model.kinds import EventKind
from tracelab.render.figures import empty_figure, fmt_bytes, fmt_ns
from tracelab.render.timeline import axis_unit, stream_label
from tracelab.store import RunRecord

from ..components import error_page, run_header
from ..range_stats import range_panel, range_stats
from ..state import AppState, current_state, describe_error
from ..timeline_view import DEFAULT_SHOW, correlated_events, render_view, search_positions, view_rows
from ..urls import MIN_SPAN_NS, parse_window, timeline_href
from .common import internal_error_page, resolve_run

PATH = "/timeline"
LANE_GROUPS = (
    ("GPU streams", "stream"),
    ("SM lanes", "sm"),
    ("NVTX ranges", "nvtx"),
    ("host threads", "host"),
)


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
        t0 = origin + round(float(a) * unit)
        t1 = origin + round(float(b) * unit)
    except (TypeError, ValueError):
        return None
    lo, hi = int(view["lo"]), int(view["hi"])
    t0, t1 = max(min(t0, t1), lo), min(max(t0, t1), hi)
    if t1 - t0 < MIN_SPAN_NS:
        mid = (t0 + t1) // 2
        t0, t1 = mid - MIN_SPAN_NS // 2, mid + MIN_SPAN_NS // 2
    return t0, t1


def selection_from_click(
    click: dict[str, Any] | None, rows_lanes: list[int] | None = None, origin: int = 0
) -> dict[str, Any] | None:
    """The clicked event's identity from Plotly clickData (customdata [row, start - origin,
    end - origin, correlation, kind])."""
    if not click or not click.get("points"):
        return None
    cd = click["points"][0].get("customdata")
    if not isinstance(cd, (list, tuple)) or len(cd) < 5:
        return None
    try:
        row, start, end, corr, kind = (round(float(v)) for v in cd[:5])
    except (TypeError, ValueError):
        return None
    start, end = start + int(origin), end + int(origin)
    sel: dict[str, Any] = {"row": row, "start": start, "end": end, "correlation": corr, "kind": kind}
    if rows_lanes is not None and 0 <= row < len(rows_lanes):
        sel["lane"] = int(rows_lanes[row])
    return sel


def view_outputs(state: AppState, view: dict[str, Any]) -> tuple[Any, str, str, Any, str]:
    """(figure, permalink href, info line, selection panel, search count) for a view state dict."""
    query = view.get("query") or ""
    try:
        record = state.record(view["run"])
        rendered = render_view(
            state,
            record,
            int(view["t0"]),
            int(view["t1"]),
            show=view.get("show", DEFAULT_SHOW),
            selected=view.get("selected"),
            query=query,
            flows=bool(view.get("flows", True)),
        )
    except BadInput as exc:
        return empty_figure(describe_error(exc)), timeline_href(view.get("run", "")), describe_error(exc), [], ""
    link = timeline_href(record.id, rendered.t0, rendered.t1, q=query or None)
    info = (
        f"window {fmt_ns(rendered.t1 - rendered.t0)} at +{fmt_ns(rendered.t0 - (record.start_ns or 0))} · "
        f"{rendered.view.events_in_window:,} events in view · {rendered.n_drawn:,} items drawn "
        f"({len(rendered.view.items):,} individual, {len(rendered.view.bins):,} aggregated"
        + (f"; {rendered.sm_view.n_drawn:,} on SM lanes)" if rendered.sm_view is not None else ")")
        + (f" · {rendered.flows:,} launch → GPU arrows" if rendered.flows else "")
    )
    panel = selection_panel(state, record, view.get("selected"))
    return rendered.figure, link, info, panel, match_text(state, record.id, query, view.get("match", -1), rendered)


def match_text(state: AppState, run_id: str, query: str, index: int, rendered: Any = None) -> str:
    """'3 / 120 matches (40 in view)' for the search box; '' without a query."""
    if not query:
        return ""
    n = len(search_positions(state, run_id, query))
    if n == 0:
        return f"no match for {query!r}"
    at = f"{int(index) + 1} / {n:,}" if 0 <= int(index) < n else f"{n:,}"
    in_view = f" ({rendered.matches_in_view:,} in view)" if rendered is not None else ""
    return f"{at} matches{in_view}"


def match_window(state: AppState, view: dict[str, Any], index: int) -> tuple[int, int] | None:
    """The window that shows search match `index` in the middle of the view (at least 20 µs wide)."""
    pos = search_positions(state, view["run"], view.get("query") or "")
    if len(pos) == 0:
        return None
    ev = state.timeline(view["run"]).events
    p = pos[int(index) % len(pos)]
    start, end = int(ev["start"].iat[p]), int(ev["end"].iat[p])
    pad = max(end - start, 20_000)
    t0, t1 = max(start - pad, int(view["lo"])), min(end + pad, int(view["hi"]))
    if t1 - t0 < MIN_SPAN_NS:
        mid = (t0 + t1) // 2
        t0, t1 = mid - MIN_SPAN_NS // 2, mid + MIN_SPAN_NS // 2
    return t0, t1


def selection_panel(state: AppState, record: RunRecord, selected: dict[str, Any] | None) -> list[Any]:
    if not selected:
        return [
            html.Span(
                "Click a kernel, copy or API call to link its host launch and GPU work.", className="hint"
            )
        ]
    linked = correlated_events(state, record.id, selected)
    strings = state.strings(record.id)
    origin = record.start_ns or 0
    items = []
    for r in linked.head(20).itertuples(index=False):  # a handful of linked events, not a hot path
        kind = EventKind(int(r.kind)).name.lower()
        name = strings[r.name] if 0 <= r.name < len(strings) else ""
        where = stream_label(int(r.stream)) if r.device >= 0 else f"thread {r.tid}"
        extra = []
        if r.grid_x > 0:
            extra.append(
                f"grid ({r.grid_x},{r.grid_y},{r.grid_z}) block ({r.block_x},{r.block_y},{r.block_z})"
            )
        if r.bytes >= 0:
            extra.append(fmt_bytes(r.bytes))
        items.append(
            html.Li(
                [
                    html.B(kind),
                    f" {where} · +{fmt_ns(r.start - origin)} · {fmt_ns(r.end - r.start)} · ",
                    html.Code(name),
                    (" · " + " · ".join(extra)) if extra else "",
                ]
            )
        )
    corr = selected.get("correlation", -1)
    head = (
        f"correlation {corr}: {len(linked)} linked event(s)"
        if corr >= 0
        else "selected event (no correlation id)"
    )
    return [html.Div(head, className="selection-head"), html.Ul(items, id="tl-selection-list")]


_NS_KEYS = ("t0", "t1", "lo", "hi", "origin")


def encode_view(view: dict[str, Any]) -> dict[str, Any]:
    """The view state as the browser keeps it: nanosecond times as strings, because trace clocks
    (epoch ns, ~1.7e18) do not survive a round trip through JavaScript numbers (2^53)."""
    out = dict(view)
    for k in _NS_KEYS:
        if k in out:
            out[k] = str(int(out[k]))
    if out.get("selected"):
        out["selected"] = {
            k: (str(int(v)) if k in ("start", "end") else v) for k, v in out["selected"].items()
        }
    return out


def decode_view(view: dict[str, Any]) -> dict[str, Any]:
    out = dict(view)
    for k in _NS_KEYS:
        if k in out:
            out[k] = int(out[k])
    if out.get("selected"):
        out["selected"] = {k: (int(v) if k in ("start", "end") else v) for k, v in out["selected"].items()}
    return out


def on_timeline_event(
    state: AppState,
    trigger: str | None,
    view: dict[str, Any],
    *,
    relayout: dict[str, Any] | None = None,
    click: dict[str, Any] | None = None,
    show: list[str] | None = None,
    query: str | None = None,
    flows: bool | None = None,
) -> tuple[dict[str, Any] | None, tuple[Any, str, str, Any, str] | None]:
    """One interaction: returns (new view state, outputs) or (None, None) when nothing changes.
    trigger: 'graph.relayoutData' | 'graph.clickData' | 'show' | 'zoom-out' | 'full' | 'clear' |
    'search' | 'next' | 'prev' | 'flows'. The view state comes and goes encoded (`encode_view`)."""
    try:
        view = decode_view(view)
    except (KeyError, TypeError, ValueError):
        return None, None
    if trigger == "graph.relayoutData":
        w = window_from_relayout(relayout, view)
        if w is None or (w[0] == view["t0"] and w[1] == view["t1"]):
            return None, None
        view["t0"], view["t1"] = w
    elif trigger == "graph.clickData":
        sel = selection_from_click(click, view.get("row_lanes"), int(view.get("origin", 0)))
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
    elif trigger == "flows":
        view["flows"] = bool(flows)
    elif trigger == "search":
        view["query"] = (query or "").strip()[:200]
        view["match"] = -1
    elif trigger in ("next", "prev"):
        n = len(search_positions(state, view["run"], view.get("query") or ""))
        if n == 0:
            return None, None
        at = int(view.get("match", -1))
        if at < 0:
            view["match"] = 0 if trigger == "next" else n - 1
        else:
            view["match"] = (at + (1 if trigger == "next" else -1)) % n
        w = match_window(state, view, view["match"])
        if w is not None:
            view["t0"], view["t1"] = w
    else:
        return None, None
    outputs = view_outputs(state, view)
    view["row_lanes"] = _row_lanes(state, view)
    return encode_view(view), outputs


def on_range_select(state: AppState, view: dict[str, Any], selected: dict[str, Any] | None, full: bool = False) -> Any:
    """The statistics panel of the range dragged on the timeline (Plotly selectedData's x range, in
    the current figure's unit from the run start); a hint when there is none."""
    hint = html.Span("Drag across the timeline to select a range: its statistics appear here.", className="hint")
    rng = (selected or {}).get("range", {}).get("x") if selected else None
    if not rng or len(rng) != 2:
        return [hint]
    try:
        view = decode_view(view)
        unit, _ = axis_unit(int(view["t1"]) - int(view["t0"]))
        origin = int(view["origin"])
        a, b = sorted(origin + round(float(v) * unit) for v in rng)
        record = state.record(view["run"])
    except (KeyError, TypeError, ValueError, BadInput):
        return [hint]
    a, b = max(a, int(view["lo"])), min(b, int(view["hi"]))
    if b - a < 1:
        return [hint]
    return range_panel(record, range_stats(state, record.id, a, b), full=full)


def _row_lanes(state: AppState, view: dict[str, Any]) -> list[int]:
    record = state.record(view["run"])
    rows, _ = view_rows(state, record, view.get("show", DEFAULT_SHOW))
    return rows["lane"].astype(int).tolist()


# ---- layout ----------------------------------------------------------------------------------------


SM_LANES_MAX_DEVICES = 2


def default_show(record: RunRecord) -> list[str]:
    """Lane groups shown at first: SM lanes only for runs of one or two GPUs (a tall block per GPU)."""
    return [g for g in DEFAULT_SHOW if g != "sm" or record.devices <= SM_LANES_MAX_DEVICES]


def timeline_layout(
    state: AppState, run: str | None = None, t0: Any = None, t1: Any = None, q: str | None = None
) -> html.Div:
    record = resolve_run(state, run)
    if not isinstance(record, RunRecord):
        return record
    try:
        a, b = parse_window(record, t0, t1)
    except BadInput as exc:
        return error_page(
            "Bad time window", f"{describe_error(exc)} — open the whole run: {timeline_href(record.id)}"
        )
    show = default_show(record)
    view: dict[str, Any] = {
        "run": record.id,
        "t0": a,
        "t1": b,
        "lo": record.start_ns or 0,
        "hi": record.end_ns or (a + MIN_SPAN_NS),
        "origin": record.start_ns or 0,
        "show": show,
        "selected": None,
        "query": (q or "").strip()[:200],
        "match": -1,
        "flows": True,
    }
    try:
        if view["query"] and t0 in (None, "") and t1 in (None, ""):  # a kernel row: open its first instance
            view["match"] = 0
            w = match_window(state, view, 0)
            if w is not None:
                view["t0"], view["t1"] = w
        figure, link, info, panel, matches = view_outputs(state, view)
        view["row_lanes"] = _row_lanes(state, view)
    except BadInput as exc:
        return error_page("Cannot show this run", describe_error(exc))
    except Exception as exc:  # noqa: BLE001 - see internal_error_page
        return internal_error_page(exc, f"the timeline of run {record.id}")
    return html.Div(
        [
            run_header(record, "Timeline"),
            html.Div(
                [
                    dcc.Checklist(
                        id="tl-show",
                        options=[{"label": lbl, "value": v} for lbl, v in LANE_GROUPS],
                        value=show,
                        inline=True,
                        className="tl-show",
                    ),
                    html.Button("Zoom out ×3", id="tl-zoom-out", n_clicks=0),
                    html.Button("Whole run", id="tl-full", n_clicks=0),
                    html.Button("Clear selection", id="tl-clear", n_clicks=0),
                    dcc.Checklist(
                        id="tl-flows",
                        options=[{"label": "launch → GPU arrows", "value": "flows"}],
                        value=["flows"],
                        inline=True,
                    ),
                    dcc.Link("Permalink to this view", id="tl-permalink", href=link),
                ],
                className="tl-controls",
            ),
            html.Div(
                [
                    dcc.Input(
                        id="tl-search",
                        type="search",
                        value=view["query"],
                        placeholder="search kernels, NVTX ranges, API calls…",
                        debounce=True,
                        className="tl-search",
                    ),
                    html.Button("◀", id="tl-prev", n_clicks=0, title="previous match"),
                    html.Button("▶", id="tl-next", n_clicks=0, title="next match"),
                    html.Span(matches, id="tl-match", className="tl-match"),
                    html.Span(
                        "keys: W/S zoom · A/D pan · drag to select a range · wheel zooms",
                        className="hint tl-keys",
                    ),
                ],
                className="tl-controls",
            ),
            html.Div(info, id="tl-info", className="tl-info"),
            dcc.Loading(
                dcc.Graph(
                    id="tl-graph",
                    figure=figure,
                    config={"scrollZoom": True, "displaylogo": False, "doubleClick": "autosize"},
                ),
                type="dot",
                delay_show=400,
            ),
            html.Div(
                [
                    html.Div(
                        on_range_select(state, encode_view(view), None), id="tl-range", className="tl-range"
                    ),
                    html.Button("analyze this range", id="tl-analyze-range", n_clicks=0),
                ],
                className="tl-range-box",
            ),
            html.Div(panel, id="tl-selection", className="tl-selection"),
            dcc.Store(id="tl-view", data=encode_view(view)),
            dcc.Store(id="tl-xrange"),
        ],
        id="timeline-page",
    )


def layout(
    run: str | None = None, t0: Any = None, t1: Any = None, q: str | None = None, **_ignored: Any
) -> html.Div:
    return timeline_layout(current_state(), run, t0, t1, q)
