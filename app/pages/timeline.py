"""Timeline page: /timeline?run=ID&t0=NS&t1=NS&q=TEXT&open=RANKS (the ranks shown unfolded, e.g. 1,3).

The timeline itself is drawn in the browser on a canvas (`app/assets/timeline_canvas.js`) from tiles the
page fetches from `app.timeline_api` and keeps: zoom, pan, hover and drag never wait for a callback.
The page's callbacks do what needs the run on the server: the permalink and info line of the window
in view (the browser reports it in `tl-window`), the selection's linked events (`tl-click`: host
launch <-> GPU work), search counts and stepping (`tl-goto` moves the view), and the statistics of a
dragged range (`tl-range-sel`, through `tracelab.api.analyze`).

Each piece of page state has one writer, so an answer that comes back late cannot undo a newer one:
the window keys of `tl-view` (t0, t1) are the window callback's, its selection the click callback's
(each writes a Patch of its own keys); the search and its current match (`tl-find`) are stepped in the
browser; the permalink and the match count are computed in one callback from all of them.

Times between the browser and these callbacks are integer nanoseconds from the run start (they fit
JavaScript numbers; epoch nanoseconds do not), and strings in the page state.
"""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracelab.api.types import EventKind, RunRecord
from tracelab.errors import BadInput
from tracelab.render.timeline.data import stream_label
from tracelab.render.timeline.tiles import default_show as show_for_devices
from tracelab.text_format import fmt_bytes, fmt_ns

from ..components import error_page, run_header
from ..range_stats import range_panel, range_stats
from ..state import AppState, current_state, describe_error
from ..timeline_view import (
    DEFAULT_SHOW,
    clamp_window,
    correlated_events,
    events_in_window,
    initial_window,
    linked_on_rows,
    match_window,
    search_matches_in_window,
    search_positions,
)
from ..urls import timeline_href
from .common import internal_error_page, resolve_run

LANE_GROUPS = (("GPU streams", "stream"), ("SM lanes", "sm"), ("NVTX ranges", "nvtx"), ("host threads", "host"))
MAX_QUERY = 200


def default_show(record: RunRecord) -> list[str]:
    """Lane groups shown at first: SM lanes only for runs of one or two GPUs (a tall block per GPU)."""
    return show_for_devices(record.devices)


def parse_show(value: Any) -> list[str]:
    """The lane groups asked for (a list, or a comma-separated string), in the usual order; BadInput
    for anything that is not one of them."""
    items = value.split(",") if isinstance(value, str) else list(value or [])
    items = [str(v).strip() for v in items if str(v).strip()]
    unknown = [v for v in items if v not in DEFAULT_SHOW]
    if unknown:
        raise BadInput(f"unknown lane group {unknown[0][:40]!r} (one of {', '.join(DEFAULT_SHOW)})")
    return [g for g in DEFAULT_SHOW if g in items]


def offset_ns(value: Any, what: str) -> int:
    """An integer number of nanoseconds from the run start, as the browser sends it."""
    try:
        if isinstance(value, bool):
            raise TypeError
        v = int(value) if isinstance(value, int) else int(float(str(value).strip()))
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{what} must be an integer number of nanoseconds, got {str(value)[:40]!r}") from None
    if abs(v) > 2**62:
        raise BadInput(f"{what} is out of range")
    return v


# ---- the view state the page keeps (times as strings) ---------------------------------------------

_NS_KEYS = ("t0", "t1", "lo", "hi", "origin")


def _times(view: dict[str, Any], to: Any) -> dict[str, Any]:
    """`view` with its nanosecond times (and its selection's start / end) converted by `to`."""
    out = {k: to(int(v)) if k in _NS_KEYS else v for k, v in view.items()}
    if out.get("selected"):
        out["selected"] = {k: (to(int(v)) if k in ("start", "end") else v) for k, v in out["selected"].items()}
    return out


def encode_view(view: dict[str, Any]) -> dict[str, Any]:
    """The view state as the browser keeps it: nanosecond times as strings, because trace clocks
    (epoch ns, ~1.7e18) do not survive a round trip through JavaScript numbers (2^53)."""
    return _times(view, str)


def decode_view(view: dict[str, Any]) -> dict[str, Any]:
    return _times(view, int)


# ---- callbacks (plain functions) ------------------------------------------------------------------


def window_info(state: AppState, record: RunRecord, t0: int, t1: int) -> str:
    """'window 4.56 ms at +12.3 ms · 1,234 events in view'."""
    n = events_in_window(state, record, t0, t1)
    return f"window {fmt_ns(t1 - t0)} at +{fmt_ns(t0 - (record.start_ns or 0))} · {n:,} events in view"


def match_text(
    state: AppState, record: RunRecord, query: str, index: int, window: tuple[int, int] | None = None,
    show: list[str] | None = None,
) -> str:
    """'3 / 120 matches (40 in view)' for the search box; '' without a query."""
    if not query:
        return ""
    n = len(search_positions(state, record.id, query))
    if n == 0:
        return f"no match for {query!r}"
    at = f"{int(index) + 1} / {n:,}" if 0 <= int(index) < n else f"{n:,}"
    in_view = ""
    if window is not None:
        k = len(search_matches_in_window(state, record, query, window[0], window[1], show or DEFAULT_SHOW))
        in_view = f" ({k:,} in view)"
    return f"{at} matches{in_view}"


def on_window(
    state: AppState, view: dict[str, Any], window: dict[str, Any] | None
) -> tuple[dict[str, Any], str] | None:
    """The browser moved to `window` ({t0, t1}: ns from the run start): (view, info line); None when
    nothing changed."""
    if not window:
        return None
    view = decode_view(view)
    record = state.record(view["run"])
    origin = int(record.start_ns or 0)
    t0, t1 = clamp_window(
        record, origin + offset_ns(window.get("t0"), "t0"), origin + offset_ns(window.get("t1"), "t1")
    )
    if (t0, t1) == (view.get("t0"), view.get("t1")):
        return None
    view["t0"], view["t1"] = t0, t1
    return encode_view(view), window_info(state, record, t0, t1)


# The search state the page keeps in `tl-find`: the query, the current match (-1: none yet) and the
# number of matches. The page's next / previous buttons step it in the browser (a clientside callback),
# so quick clicks are never lost to a callback Dash drops when the next click re-triggers it.


def find_state(state: AppState, record: RunRecord, query: str, match: int = -1) -> dict[str, Any]:
    """{query, match, count} of a search of `record` for `query` (clamped to MAX_QUERY characters)."""
    query = (query or "").strip()[:MAX_QUERY]
    count = len(search_positions(state, record.id, query)) if query else 0
    return {"query": query, "match": int(match) if 0 <= int(match) < count else -1, "count": count}


def decode_find(state: AppState, record: RunRecord, find: Any) -> dict[str, Any]:
    """The search state as the browser sent it, checked (its count recomputed: the browser's is not trusted)."""
    find = find if isinstance(find, dict) else {}
    query = find.get("query")
    return find_state(state, record, query if isinstance(query, str) else "", offset_ns(find.get("match", -1), "the match"))


def on_search(state: AppState, view: dict[str, Any], query: str | None) -> tuple[dict[str, Any], str]:
    """A new search: (its search state, no match current yet; the query the canvas highlights)."""
    record = state.record(decode_view(view)["run"])
    find = find_state(state, record, query or "")
    return find, find["query"]


def on_step(state: AppState, view: dict[str, Any], find: Any) -> dict[str, int] | None:
    """The window (ns from the run start) that shows the current match of `find`; None without one."""
    record = state.record(decode_view(view)["run"])
    find = decode_find(state, record, find)
    if find["match"] < 0:
        return None
    w = match_window(state, record, find["query"], find["match"])
    if w is None:
        return None
    origin = int(record.start_ns or 0)
    return {"t0": w[0] - origin, "t1": w[1] - origin}


def on_links(
    state: AppState, view: dict[str, Any], find: Any, show: list[str] | None = None, open_ranks: Any = None
) -> tuple[str, str]:
    """(the permalink of the view, its search and the ranks unfolded, the search box's match count) — one
    place computes both from the page's current state, so no late answer can leave them on an older view."""
    view = decode_view(view)
    record = state.record(view["run"])
    find = decode_find(state, record, find)
    t0, t1 = int(view["t0"]), int(view["t1"])
    link = timeline_href(record.id, t0, t1, q=find["query"] or None, open_ranks=parse_open(open_ranks))
    text = match_text(state, record, find["query"], find["match"], (t0, t1), parse_show(show or []))
    return link, text


def on_select(
    state: AppState, view: dict[str, Any], click: dict[str, Any] | None, show: list[str] | None
) -> tuple[dict[str, Any], list[Any], dict[str, list[int]] | None]:
    """A click on an event (`click` = {pos}: its position in the run's events; None clears): (view,
    selection panel, the linked events to outline: start / end in ns from the run start, row)."""
    view = decode_view(view)
    record = state.record(view["run"])
    show = parse_show(show or [])
    if click is not None:
        view["selected"] = selection_of(state, record, click.get("pos"))
    selected = view.get("selected")
    highlight = None
    if selected:
        linked = linked_on_rows(state, record, selected, show)
        origin = int(record.start_ns or 0)
        highlight = {"start": [int(v) - origin for v in linked["start"].tolist()],
                     "end": [int(v) - origin for v in linked["end"].tolist()],
                     "row": [int(v) for v in linked["row"].tolist()]}
    return encode_view(view), selection_panel(state, record, selected), highlight


def selection_of(state: AppState, record: RunRecord, pos: Any) -> dict[str, Any]:
    """The selection of the event at position `pos` of the run's events (BadInput when there is none)."""
    ev = state.timeline(record.id).events
    p = offset_ns(pos, "the event position")
    if not 0 <= p < len(ev):
        raise BadInput(f"run {record.id} has no event at position {p}")
    r = ev.iloc[p]
    return {
        "start": int(r["start"]), "end": int(r["end"]), "correlation": int(r["correlation"]),
        "kind": int(r["kind"]), "lane": int(r["lane"]),
    }


def on_range_select(state: AppState, view: dict[str, Any], selected: dict[str, Any] | None, full: bool = False) -> Any:
    """The statistics panel of the range dragged on the timeline ({t0, t1}: ns from the run start);
    a hint when there is none."""
    hint = html.Span("Drag across the timeline to select a range: its statistics appear here.", className="hint")
    if not selected:
        return [hint]
    view = decode_view(view)
    record = state.record(view["run"])
    origin = int(record.start_ns or 0)
    a, b = sorted((origin + offset_ns(selected.get("t0"), "t0"), origin + offset_ns(selected.get("t1"), "t1")))
    a, b = max(a, int(view["lo"])), min(b, int(view["hi"]))
    if b - a < 1:
        return [hint]
    return range_panel(record, range_stats(state, record.id, a, b), full=full)


def selection_panel(state: AppState, record: RunRecord, selected: dict[str, Any] | None) -> list[Any]:
    if not selected:
        return [html.Span("Click a kernel, copy or API call to link its host launch and GPU work.", className="hint")]
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
            extra.append(f"grid ({r.grid_x},{r.grid_y},{r.grid_z}) block ({r.block_x},{r.block_y},{r.block_z})")
        if r.bytes >= 0:
            extra.append(fmt_bytes(r.bytes))
        items.append(html.Li([html.B(kind), f" {where} · +{fmt_ns(r.start - origin)} · {fmt_ns(r.end - r.start)} · ",
                              html.Code(name), (" · " + " · ".join(extra)) if extra else ""]))
    corr = selected.get("correlation", -1)
    head = f"correlation {corr}: {len(linked)} linked event(s)" if corr >= 0 else "selected event (no correlation id)"
    return [html.Div(head, className="selection-head"), html.Ul(items, id="tl-selection-list")]


# ---- layout ----------------------------------------------------------------------------------------


def parse_open(value: Any) -> str | None:
    """The ranks to show unfolded, as the URL gives them (`?open=1,3`; `none`: every rank folded), in
    rank order; None without one (the first rank unfolded). BadInput for anything else."""
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "none"):
        return "none"
    items = [v.strip() for v in text.split(",")]
    if len(items) > 4096 or not all(v.isdigit() and len(v) <= 6 for v in items):
        raise BadInput(f"open must name ranks as 0,1,..., got {text[:40]!r}")
    return ",".join(str(v) for v in sorted({int(v) for v in items}))


def timeline_layout(
    state: AppState, run: str | None = None, t0: Any = None, t1: Any = None, q: str | None = None,
    open_ranks: Any = None,
) -> html.Div:
    record = resolve_run(state, run, pick="timeline")  # no run named: ask which
    if not isinstance(record, RunRecord):
        return record
    query = (q or "").strip()[:MAX_QUERY]
    try:
        a, b, match = initial_window(state, record, t0, t1, query)
    except BadInput as exc:
        return error_page("Bad time window", f"{describe_error(exc)} — open the whole run: {timeline_href(record.id)}")
    try:
        unfolded = parse_open(open_ranks)
    except BadInput as exc:
        return error_page("Bad ranks to unfold", f"{describe_error(exc)} — open the run: {timeline_href(record.id)}")
    show = default_show(record)
    origin = int(record.start_ns or 0)
    view: dict[str, Any] = {
        "run": record.id, "t0": a, "t1": b, "lo": origin, "hi": record.end_ns or (a + 1_000), "origin": origin,
        "selected": None,
    }
    try:
        info = window_info(state, record, a, b)
        matches = match_text(state, record, query, match, (a, b), show)
        find = find_state(state, record, query, match)
    except BadInput as exc:
        return error_page("Cannot show this run", describe_error(exc))
    except Exception as exc:  # noqa: BLE001 - see internal_error_page
        return internal_error_page(exc, f"the timeline of run {record.id}")
    return html.Div(
        [
            run_header(record, "Timeline"),
            view_controls(record, a, b, show, query, unfolded),
            search_controls(query, matches),
            html.Div(info, id="tl-info", className="tl-info"),
            canvas_root(record, a - origin, b - origin, show, query, unfolded),
            html.Div([html.Div(on_range_select(state, encode_view(view), None), id="tl-range", className="tl-range"),
                      html.Button("analyze this range", id="tl-analyze-range", n_clicks=0)], className="tl-range-box"),
            html.Div(selection_panel(state, record, None), id="tl-selection", className="tl-selection"),
            *page_stores(view, query, find, unfolded),
        ],
        id="timeline-page",
    )


def view_controls(record: RunRecord, a: int, b: int, show: list[str], query: str, unfolded: str | None) -> html.Div:
    """The lane groups, zoom and selection buttons, the arrows switch and the permalink."""
    return html.Div(
        [
            dcc.Checklist(id="tl-show", options=[{"label": lbl, "value": v} for lbl, v in LANE_GROUPS], value=show,
                          inline=True, className="tl-show"),
            html.Button("Zoom out ×3", id="tl-zoom-out", n_clicks=0),
            html.Button("Whole run", id="tl-full", n_clicks=0),
            html.Button("Clear selection", id="tl-clear", n_clicks=0),
            dcc.Checklist(id="tl-flows", options=[{"label": "launch → GPU arrows", "value": "flows"}], value=["flows"],
                          inline=True),
            dcc.Link("Permalink to this view", id="tl-permalink",
                     href=timeline_href(record.id, a, b, q=query or None, open_ranks=unfolded)),
        ],
        className="tl-controls",
    )


def search_controls(query: str, matches: str) -> html.Div:
    """The search box, previous / next match, the match count and the keys' hint."""
    return html.Div(
        [
            dcc.Input(id="tl-search", type="search", value=query, placeholder="search kernels, NVTX ranges, API calls…",
                      debounce=True, className="tl-search"),
            html.Button("◀", id="tl-prev", n_clicks=0, title="previous match"),
            html.Button("▶", id="tl-next", n_clicks=0, title="next match"),
            html.Span(matches, id="tl-match", className="tl-match"),
            html.Span("keys: W/S zoom · A/D pan · wheel zooms · drag to select a range · click an event",
                      className="hint tl-keys"),
        ],
        className="tl-controls",
    )


def canvas_root(record: RunRecord, t0: int, t1: int, show: list[str], query: str, unfolded: str | None) -> html.Div:
    """Where app/assets/timeline_canvas.js draws the timeline: the run, the window (ns from the run start),
    the lane groups, the search and, when the URL names them, the ranks unfolded (`data-open`)."""
    data = {"data-run": record.id, "data-t0": str(t0), "data-t1": str(t1), "data-show": ",".join(show), "data-q": query}
    if unfolded is not None:
        data["data-open"] = unfolded
    return html.Div(id="tl-canvas-root", className="tl-canvas-root", **data)


def page_stores(view: dict[str, Any], query: str, find: dict[str, Any], unfolded: str | None) -> list[dcc.Store]:
    """The page state the callbacks and the canvas share (each store has one writer)."""
    return [
        dcc.Store(id="tl-view", data=encode_view(view)),
        dcc.Store(id="tl-window"),  # the canvas writes the window in view here
        dcc.Store(id="tl-click"),  # ... the clicked event
        dcc.Store(id="tl-range-sel"),  # ... the dragged range
        dcc.Store(id="tl-open", data=unfolded),  # ... the ranks unfolded ("0,2"; "none")
        dcc.Store(id="tl-goto"),  # the callbacks move the canvas to a window
        dcc.Store(id="tl-highlight"),  # ... outline the selection's linked events
        dcc.Store(id="tl-query", data=query),  # ... and highlight a search
        dcc.Store(id="tl-find", data=find),  # the search and its current match
        dcc.Store(id="tl-js-sink"),
    ]


def layout(run: str | None = None, t0: Any = None, t1: Any = None, q: str | None = None, open: Any = None,
           **_ignored: Any) -> html.Div:
    return timeline_layout(current_state(), run, t0, t1, q, open)
