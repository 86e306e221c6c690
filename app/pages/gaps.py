"""Gaps & findings page: /gaps?run=ID. Gaps with cause and evidence, findings with evidence; each gap
(table row or chart point) and each finding links to the timeline at its window. The page loads neither
plotly.js nor Dash's DataTable (loading and running them was most of its draw time): the chart is
an SVG element (tracelab.render.figures.gaps_svg, put in the page by app/assets/gaps_chart.js) and the gaps table plain HTML, a page of PAGE_ROWS rows at a
time, sorted and filtered by cause on the server (on_gaps_view)."""

from __future__ import annotations

from typing import Any

import numpy as np
from dash import dcc, html

from tracelab.api import gaps_in_setup
from tracelab.api.types import CAUSES, GapTable
from tracelab.render.figures.gaps_svg import gaps_svg_element
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.text_format import fmt_count, fmt_ns, fmt_ns_many, fmt_rel_many

from ..components import run_header
from ..data import FINDING_FIELDS, finding_window
from ..state import AppState, current_state
from ..urls import gap_window, timeline_href
from .common import with_run

PAGE_ROWS = 25  # gaps per page of the table
SORTS = {"length": "longest first", "start": "earliest first", "cause": "by cause"}
GAP_COLUMNS = (("rank", "rank"), ("GPU", "device"), ("at (from the run start)", "at"), ("duration", "duration"),
               ("cause", "cause"), ("evidence", "evidence"))


def gaps_layout(state: AppState, run: str | None = None) -> html.Div:
    return with_run(state, run, lambda record: cached_body(state, record))


def cached_body(state: AppState, record) -> html.Div:
    """The run's page (`gaps_body`), made once per run while its analysis is cached: the server starts it
    when the browser asks for the page's HTML (app/early.py), before Dash asks for the content."""
    return state.cached(("gaps-page", record.id, record.created), lambda: gaps_body(state, record))


def gaps_body(state: AppState, record) -> html.Div:
    """The page of one run: findings, the gaps chart, the first page of the gaps table and its controls."""
    analysis = state.analysis(record.id)
    table = GapTable.of(analysis.gaps)
    total = int(table.duration.sum()) if len(table) else 0
    view = {"sort": "length", "cause": "", "page": 0}
    rows, label = gaps_page(state, record, view)
    return html.Div(
        [
            run_header(record, "Gaps & findings"),
            *_setup_paragraph(analysis, record.start_ns),
            html.H3(f"Findings ({len(analysis.findings)})"),
            findings_list(record, analysis),
            html.H3(f"Idle gaps ({len(table)}, {fmt_ns(total)} in total; threshold "
                    f"{fmt_ns(analysis.options.gap_threshold_ns)})"),
            html.P(
                "Click a gap (row or point) to open the timeline there."
                + (" The steps' gaps come first, longest first; the set-up's (before each rank's first step) "
                   "after them, marked set-up." if analysis.setup else ""),
                className="hint",
                id="gaps-order-hint",
            ),
            gaps_chart(record, analysis, table.longest(5000)),
            gaps_controls(table, bool(analysis.setup)),
            html.Table([html.Thead(html.Tr([html.Th(name) for name, _ in gap_columns(bool(analysis.setup))])),
                        html.Tbody(rows, id="gaps-rows")], id="gaps-table", className="gaps-table"),
            gaps_pager(label),
            html.Details([html.Summary("Findings as a table"), _findings_table(analysis)]),
            dcc.Store(id="gaps-run", data={"run": record.id, "lo": str(record.start_ns or 0), "hi": str(record.end_ns or 0)}),
            dcc.Store(id="gaps-view", data=view),
        ],
        id="gaps-page",
    )


def findings_list(record, analysis) -> html.Ul:
    """The findings, each with its severity, rule, message, count, waste and a link to its window."""
    items = []
    for i, f in enumerate(analysis.findings):
        w = finding_window(f)
        link = timeline_href(record.id, *gap_window(w[0], w[1], record.start_ns, record.end_ns)) if w else timeline_href(record.id)
        items.append(html.Li([
            html.Span(f.severity.upper(), className=f"sev sev-{f.severity}"), " ", html.B(f.rule), " — ", f.message,
            html.Br(), html.Small(f"{f.count} occurrence(s) · wasted {fmt_ns(f.wasted_ns)} · {f.where}"), " ",
            dcc.Link("show in timeline", href=link, id=f"finding-link-{i}"),
        ], className="finding"))
    return html.Ul(items or [html.Li("No findings.")], id="findings-list")


def gaps_chart(record, analysis, drawn: list) -> html.Div:
    """The chart of the `drawn` gaps: one SVG element (no plotly.js, no iframe: loading plotly.js, then
    an iframe's document, were most of this page's draw time) that app/assets/gaps_chart.js puts
    in the page from `data-svg`; each point a link to the timeline at its gap, its evidence the tooltip."""
    links = [timeline_href(record.id, *gap_window(g.start_ns, g.end_ns, record.start_ns, record.end_ns))
             for g in drawn]
    svg = gaps_svg_element(drawn, record.start_ns or 0, gap_evidence(analysis, drawn), links)
    return html.Div(id="gaps-graph", role="figure", title="idle gaps by start and length", **{"data-svg": svg})


def gaps_controls(table: GapTable, with_part: bool) -> html.Div:
    """The table's sort buttons, one button per cause present (with its count) and, with set-up apart,
    the part buttons (steps / set-up)."""
    kinds = table.column("cause").astype(np.int64) if len(table) else np.zeros(0, dtype=np.int64)
    counts = np.bincount(kinds, minlength=len(CAUSES))
    causes = [CAUSES[k] for k in np.unique(kinds).tolist()]
    parts = ([html.Span("part:", className="hint")]
             + [html.Button(text or "all", id={"type": "gaps-part", "part": text}, n_clicks=0, className="gaps-btn")
                for text in ("", *PARTS)]) if with_part else []
    return html.Div(
        [
            html.Span("sort:", className="hint"),
            *[html.Button(text, id=f"gaps-sort-{key}", n_clicks=0, className="gaps-btn") for key, text in SORTS.items()],
            html.Span("cause:", className="hint"),
            html.Button("all", id={"type": "gaps-cause", "cause": ""}, n_clicks=0, className="gaps-btn"),
            *[html.Button(f"{c} ({fmt_count(int(counts[CAUSES.index(c)]))})", id={"type": "gaps-cause", "cause": c},
                          n_clicks=0, className="gaps-btn") for c in causes],
            *parts,
        ],
        className="gaps-controls",
    )


def gaps_pager(label: str) -> html.Div:
    """Previous / next page of the table, and which gaps the page shows."""
    return html.Div([html.Button("‹ previous", id="gaps-prev", n_clicks=0, className="gaps-btn"),
                     html.Span(label, id="gaps-page-label", className="hint"),
                     html.Button("next ›", id="gaps-next", n_clicks=0, className="gaps-btn")], className="gaps-controls")


PARTS = {"steps": False, "set-up": True}


def gap_columns(with_part: bool) -> tuple[tuple[str, str], ...]:
    """The table's (header, column) pairs; with set-up apart, a "part" column (steps / set-up) before the evidence."""
    return (*GAP_COLUMNS[:-1], ("part", "part"), GAP_COLUMNS[-1]) if with_part else GAP_COLUMNS


def gap_order(table: GapTable, sort: str = "length", cause: str = "", setup: np.ndarray | None = None,
              part: str = "") -> np.ndarray:
    """Row indices of `table` in the table's order: longest first ("length"), earliest first ("start"),
    or by cause then longest first ("cause"); only gaps of `cause` when given. With `setup` (per gap: in its
    rank's set-up) the steps' gaps lead, the set-up's after them ("start" stays in time order),
    and `part` ("steps" / "set-up") keeps one of the two. Ties keep table order."""
    dur, start, kind = table.duration, table.column("start"), table.column("cause").astype(np.int64)
    setup = np.zeros(len(table), dtype=bool) if setup is None else np.asarray(setup, dtype=bool)
    idx = np.arange(len(table))
    if cause:
        idx = idx[kind[idx] == CAUSES.index(cause)] if cause in CAUSES else idx[:0]
    if part in PARTS:
        idx = idx[setup[idx] == PARTS[part]]
    if sort == "start":
        keys: tuple = (-dur[idx], start[idx])
    elif sort == "cause":
        names = np.array([CAUSES[k] for k in range(len(CAUSES))])
        keys = (-dur[idx], setup[idx], names[kind[idx]])
    else:
        keys = (-dur[idx], setup[idx])
    return idx[np.lexsort(keys)] if idx.size else idx


def gaps_page(state: AppState, record, view: dict[str, Any]) -> tuple[list, str]:
    """The table rows (html.Tr) of one page of the run's gaps in `view` ({sort, cause, page}) and the line
    that says which ones they are ("gaps 26–50 of 253"). Evidence is written for the page's gaps only."""
    analysis = state.analysis(record.id)
    table = GapTable.of(analysis.gaps)
    setup = gaps_in_setup(analysis) if analysis.setup else None
    order = gap_order(table, str(view.get("sort") or "length"), str(view.get("cause") or ""), setup,
                      str(view.get("part") or ""))
    columns = gap_columns(setup is not None)
    n = int(order.size)
    pages = max(1, -(-n // PAGE_ROWS))
    page = min(max(int(view.get("page") or 0), 0), pages - 1)
    view["page"] = page
    shown = [table[int(i)] for i in order[page * PAGE_ROWS:(page + 1) * PAGE_ROWS]]
    origin = record.start_ns or 0
    starts = np.array([g.start_ns for g in shown], dtype=np.int64)
    at = fmt_rel_many(starts - int(origin))
    lengths = fmt_ns_many(np.array([g.duration_ns for g in shown], dtype=np.int64))
    evidence = gap_evidence(analysis, shown)
    rows = []
    in_setup = setup[order[page * PAGE_ROWS:(page + 1) * PAGE_ROWS]] if setup is not None else [False] * len(shown)
    for g, a, length, ev, su in zip(shown, at, lengths, evidence, in_setup):
        link = timeline_href(record.id, *gap_window(g.start_ns, g.end_ns, record.start_ns, record.end_ns))
        text = {"rank": str(g.rank), "device": str(g.device), "at": a, "duration": length, "cause": g.cause,
                "part": "set-up" if su else "steps", "evidence": ev}
        cells = [
            # the row's link (CSS stretches it over the whole row); the whole evidence is its tooltip
            html.Td(dcc.Link(a, href=link, className="gap-link", title=ev), **{"data-col": col})
            if col == "at" else html.Td(text[col], **{"data-col": col})
            for _, col in columns
        ]
        rows.append(html.Tr(cells, **{"data-start-ns": str(g.start_ns), "data-end-ns": str(g.end_ns)}))
    if not n:
        rows = [html.Tr(html.Td("No gaps" + (f" of cause {view.get('cause')}" if view.get("cause") else ""),
                                colSpan=len(columns)))]
        label = "no gaps"
    else:
        label = f"gaps {page * PAGE_ROWS + 1:,}–{min(n, (page + 1) * PAGE_ROWS):,} of {n:,}"
    label += f" · {SORTS.get(str(view.get('sort')), SORTS['length'])}"
    label += f" · cause {view['cause']}" if view.get("cause") else ""
    label += f" · {view['part']} only" if view.get("part") in PARTS else ""
    return rows, label


def on_gaps_view(state: AppState, run_info: dict[str, Any], view: dict[str, Any] | None,
                 trigger: Any) -> tuple[list, str, dict[str, Any]]:
    """A click on the table's controls (`trigger`: the clicked button's id): the new page of rows, its
    label and the view. Sorting or filtering goes back to the first page."""
    view = dict(view or {"sort": "length", "cause": "", "page": 0})
    if isinstance(trigger, dict) and trigger.get("type") == "gaps-cause":
        view.update(cause=str(trigger.get("cause") or ""), page=0)
    elif isinstance(trigger, dict) and trigger.get("type") == "gaps-part":
        view.update(part=str(trigger.get("part") or ""), page=0)
    elif isinstance(trigger, str) and trigger.startswith("gaps-sort-"):
        view.update(sort=trigger.removeprefix("gaps-sort-"), page=0)
    elif trigger == "gaps-next":
        view["page"] = int(view.get("page") or 0) + 1
    elif trigger == "gaps-prev":
        view["page"] = int(view.get("page") or 0) - 1
    record = state.record(run_info["run"])
    rows, label = gaps_page(state, record, view)
    return rows, label, view


def _findings_table(analysis) -> html.Table:
    """The findings as a plain table (as `analyze --json` names the fields)."""
    head = html.Thead(html.Tr([html.Th(c.replace("_ns", " (ns)")) for c in FINDING_FIELDS]))
    body = html.Tbody([html.Tr([html.Td(str(getattr(f, c))) for c in FINDING_FIELDS]) for f in analysis.findings])
    return html.Table([head, body], id="findings-table", className="gaps-table")


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return gaps_layout(current_state(), run)


def _setup_paragraph(analysis, origin: int) -> list:
    """The set-up line, when the run has steps and something before the first one."""
    from tracelab.render.text.setup import setup_sentence

    text = setup_sentence(analysis, origin)
    return [html.P(f"Set-up (before the first step): {text}", id="setup-line", className="hint")] if text else []

