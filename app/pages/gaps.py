"""Gaps & findings page: /gaps?run=ID. Gaps sorted by duration with cause and evidence, findings with
evidence; clicking a gap (table row or chart point) or a finding opens the timeline at its window. The
page loads no plotly.js: the chart is an SVG document (tracelab.render.gaps_svg)."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracelab.analyses.setup import in_setup_mask, steps_gaps_first
from tracelab.render.figures import fmt_ns, gaps_table
from tracelab.render.gap_evidence import gap_evidence
from tracelab.render.gaps_svg import gaps_svg

from ..components import data_table, run_header
from ..data import finding_window, findings_table
from ..state import AppState, current_state
from ..urls import gap_window, timeline_href
from .common import with_run

PATH = "/gaps"
MAX_GAP_ROWS = 1000


def gaps_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        analysis = state.analysis(record.id)
        origin = record.start_ns or 0
        longest = sorted(analysis.gaps, key=lambda g: -g.duration_ns)
        # the steps' gaps lead, the set-up's after them, marked (issue 24; the CLI's gap list does the same)
        top = steps_gaps_first(analysis.gaps, analysis.setup, MAX_GAP_ROWS)  # evidence for the listed gaps only
        setup = in_setup_mask(top, analysis.setup)
        parts = ["set-up" if x else ("steps" if analysis.setup else "") for x in setup.tolist()]
        gt = gaps_table(top, origin, gap_evidence(analysis, top), parts)
        # ns times as strings: epoch nanoseconds do not survive JavaScript numbers
        shown = gt.astype({"start_ns": str, "end_ns": str})
        drawn = longest[:5000]
        ft = findings_table(analysis)
        total = sum(g.duration_ns for g in analysis.gaps)
        finding_items = []
        for i, f in enumerate(analysis.findings):
            w = finding_window(f)
            link = (
                timeline_href(record.id, *gap_window(w[0], w[1], record.start_ns, record.end_ns))
                if w
                else timeline_href(record.id)
            )
            finding_items.append(
                html.Li(
                    [
                        html.Span(f.severity.upper(), className=f"sev sev-{f.severity}"),
                        " ",
                        html.B(f.rule),
                        " — ",
                        f.message,
                        html.Br(),
                        html.Small(f"{f.count} occurrence(s) · wasted {fmt_ns(f.wasted_ns)} · {f.where}"),
                        " ",
                        dcc.Link("show in timeline", href=link, id=f"finding-link-{i}"),
                    ],
                    className="finding",
                )
            )
        gap_cols = [
            {"name": n, "id": c}
            for n, c in (
                ("rank", "rank"),
                ("GPU", "device"),
                ("at (from the run start)", "at"),
                ("duration", "duration"),
                ("ns", "duration_ns"),
                ("cause", "cause"),
                ("part", "part"),
                ("evidence", "evidence"),
            )
        ]
        return html.Div(
            [
                run_header(record, "Gaps & findings"),
                *_setup_paragraph(analysis, record.start_ns),
                html.H3(f"Findings ({len(analysis.findings)})"),
                html.Ul(finding_items or [html.Li("No findings.")], id="findings-list"),
                html.H3(
                    f"Idle gaps ({len(analysis.gaps)}, {fmt_ns(total)} in total; threshold "
                    f"{fmt_ns(analysis.options.gap_threshold_ns)})"
                ),
                html.P(
                    "Click a gap (row or point) to open the timeline there."
                    + (" The steps' gaps come first, longest first; the set-up's (before each rank's first step) "
                       "after them, marked set-up." if analysis.setup else ""),
                    className="hint",
                    id="gaps-order-hint",
                ),
                # one SVG document, no plotly.js (which took most of this page's draw time): each point a
                # link to the timeline at its gap, its evidence as the tooltip
                html.Iframe(
                    id="gaps-graph",
                    srcDoc=gaps_svg(drawn, origin, gap_evidence(analysis, drawn), [
                        timeline_href(record.id, *gap_window(g.start_ns, g.end_ns, record.start_ns, record.end_ns))
                        for g in drawn
                    ]),
                    style={"width": "100%", "height": "320px", "border": "0"},
                    title="idle gaps by start and length",
                ),
                html.P(
                    f"{MAX_GAP_ROWS:,} of {len(longest):,} gaps are listed (the steps' longest first)."
                    if len(longest) > MAX_GAP_ROWS
                    else "",
                    className="hint",
                ),
                data_table(
                    "gaps-table",
                    shown,
                    gap_cols,
                    # the evidence is cut to the column width: the whole text is its tooltip
                    tooltip_data=[{"evidence": {"value": str(e), "type": "text"}} for e in shown["evidence"].head(500)],
                ),
                html.Details([html.Summary("Findings as a table"), data_table("findings-table", ft)]),
                dcc.Store(
                    id="gaps-run",
                    data={"run": record.id, "lo": str(record.start_ns or 0), "hi": str(record.end_ns or 0)},
                ),
            ],
            id="gaps-page",
        )

    return with_run(state, run, body)


def gap_click_href(
    run_info: dict[str, Any],
    *,
    active_cell: dict[str, Any] | None = None,
    rows: list[dict[str, Any]] | None = None,
    click: dict[str, Any] | None = None,
) -> str | None:
    """The timeline URL for a clicked gap (DataTable cell -> its row by id, or a scatter point with
    customdata [start, end]); None when the click is not on a gap."""
    start = end = None
    if active_cell and rows is not None:
        row_id = active_cell.get("row_id")
        match = [r for r in rows if r.get("id") == row_id] if row_id is not None else []
        if not match and isinstance(active_cell.get("row"), int) and 0 <= active_cell["row"] < len(rows):
            match = [rows[active_cell["row"]]]
        if match:
            start, end = match[0]["start_ns"], match[0]["end_ns"]
    elif click and click.get("points"):
        cd = click["points"][0].get("customdata")
        if isinstance(cd, (list, tuple)) and len(cd) >= 2:  # ns from the run's start
            start, end = int(cd[0]) + int(run_info.get("lo") or 0), int(cd[1]) + int(run_info.get("lo") or 0)
    if start is None or end is None:
        return None
    t0, t1 = gap_window(int(start), int(end), run_info.get("lo"), run_info.get("hi"))
    return timeline_href(run_info["run"], t0, t1)


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return gaps_layout(current_state(), run)


def _setup_paragraph(analysis, origin: int) -> list:
    """The set-up line (issue 24), when the run has steps and something before the first one."""
    from tracelab.render.setup_text import setup_sentence

    text = setup_sentence(analysis, origin)
    return [html.P(f"Set-up (before the first step): {text}", id="setup-line", className="hint")] if text else []

