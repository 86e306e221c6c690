"""Ranks page: /ranks?run=ID. For a multi-rank run: first who waited for whom in collectives (rank × rank,
`wait_matrix_section`), then one row per rank (span, busy, idle by cause, comm,
compute/comm overlap, waited in collectives, times last), rank × step heatmaps of GPU busy and of
collective wait (time bins when the ranks have no common ProfilerStep markers), the matched
collectives and the stragglers."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import dcc, html

from tracelab.api import rank_analysis, rank_heatmap, rank_wait_matrix
from tracelab.api.types import RankAnalysis, WaitMatrix
from tracelab.render.figures.ranks import rank_heatmap_figure
from tracelab.render.text.ranks import stragglers_text
from tracelab.text_format import fmt_ns

from ..components import data_table, run_header
from ..state import AppState, current_state
from .common import with_run


def ranks_of(state: AppState, run_id: str) -> RankAnalysis:
    return state.cached(("ranks", run_id),
                        lambda: rank_analysis(state.timeline(run_id), state.analysis(run_id), state.context(run_id)))


def rank_frame(ra: RankAnalysis) -> pd.DataFrame:
    rows = []
    for r in ra.ranks:
        causes = dict(r.idle_by_cause)
        rows.append({
            "rank": r.rank, "span": fmt_ns(r.span_ns), "busy %": round(100.0 * r.busy_ns / r.span_ns, 1) if r.span_ns else 0.0,
            "idle": fmt_ns(r.idle_ns), **{f"idle {c}": fmt_ns(ns) for c, ns in causes.items() if ns},
            "comm": fmt_ns(r.comm_ns), "comm∥compute": fmt_ns(r.compute_comm_overlap_ns),
            "waited in collectives": fmt_ns(r.collective_wait_ns), "waited (ns)": r.collective_wait_ns,
            "times last": r.times_last,
        })
    return pd.DataFrame(rows).fillna("0 ns") if rows else pd.DataFrame()


def collectives_frame(ra: RankAnalysis) -> pd.DataFrame:
    return pd.DataFrame([
        {"collective": f"{c.name} #{c.seq}", "ranks": c.count,
         "first arrival": fmt_ns(c.start_ns - ra.collectives.calls[0].start_ns), "skew": fmt_ns(c.skew_ns),
         "skew (ns)": c.skew_ns, "last rank": c.last_rank, "others waited": fmt_ns(c.wait_ns), "waited (ns)": c.wait_ns}
        for c in ra.collectives.calls
    ])


def wait_matrix_of(state: AppState, run_id: str) -> WaitMatrix:
    """Who waited for whom in the run's collectives (cached; shared by the Ranks and Overlap pages)."""
    return state.cached(
        ("rank-wait-matrix", run_id),
        lambda: rank_wait_matrix(state.timeline(run_id), state.analysis(run_id), ranks_of(state, run_id),
                                 state.context(run_id)),
    )


def wait_matrix_section(m: WaitMatrix) -> list[Any]:
    """The rank × rank summary: row i, column j = the time rank i waited in collectives for rank j (the last
    to arrive) and in how many calls; a row's total is the rank's wait, a column's the wait it caused. The
    darker the cell, the larger its share of the largest one."""
    if not m.ranks or not m.total_ns:
        return [html.P("No rank waited for another in a matched collective.", id="wait-matrix-none", className="hint")]
    top = int(m.wait_ns.max())

    def cell(i: int, j: int) -> html.Td:
        ns, n = int(m.wait_ns[i, j]), int(m.count[i, j])
        shade = f"rgba(214, 39, 40, {0.08 + 0.6 * ns / top:.2f})" if ns else "transparent"
        return html.Td(f"{fmt_ns(ns)} · {n}×" if ns else "–", style={"background": shade},
                       **{"data-wait-ns": str(ns), "data-count": str(n)})

    head = html.Tr([html.Th("rank waited ↓ for rank →"), *[html.Th(f"rank {r}") for r in m.ranks],
                    html.Th("waited in all")])
    rows = [
        html.Tr([html.Th(f"rank {r}"), *[cell(i, j) for j in range(len(m.ranks))],
                 html.Td(fmt_ns(int(m.wait_ns[i].sum())), className="total")], **{"data-rank": str(r)})
        for i, r in enumerate(m.ranks)
    ]
    foot = html.Tr([html.Th("others waited for it"),
                    *[html.Td(fmt_ns(int(m.wait_ns[:, j].sum())), className="total") for j in range(len(m.ranks))],
                    html.Td(fmt_ns(m.total_ns), className="total")])
    scope = "over each rank's steps (set-up left out)" if m.scope == "steps" else "over the whole run"
    return [
        html.H3("Who waited for whom"),
        html.P(f"Time each rank (row) waited in collectives for the rank that arrived last (column), and in how "
               f"many calls, {scope}.", className="hint"),
        html.Table([html.Thead(head), html.Tbody(rows), html.Tfoot(foot)], id="wait-matrix",
                   className="gaps-table wait-matrix"),
    ]


def ranks_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        ra = ranks_of(state, record.id)
        parts: list[Any] = [run_header(record, "Ranks")]
        if not ra.multi_rank:
            parts.append(html.P("This run has one rank. Import a directory (or a glob) of per-rank traces to compare ranks.",
                                id="ranks-single", className="hint"))
            return html.Div(parts, id="ranks-page")
        heat = state.cached(
            ("rank-heatmap", record.id),
            lambda: rank_heatmap(state.timeline(record.id), ra, state.analysis(record.id), state.context(record.id)),
        )
        c = ra.collectives
        strag = stragglers_text(ra, 5)
        parts += [
            html.P(f"{len(ra.ranks)} ranks; {len(c.calls)} collectives matched across ranks"
                   + (f"; stragglers: {strag}" if strag else ""), id="ranks-summary"),
            *wait_matrix_section(wait_matrix_of(state, record.id)),
            data_table("ranks-table", rank_frame(ra), page_size=32),
            *(dcc.Graph(id=f"ranks-{k}", figure=rank_heatmap_figure(heat, k), config={"displaylogo": False})
              for k in ("busy", "wait")),
        ]
        if c.calls:
            parts += [html.H3("Collectives"), data_table("collectives-table", collectives_frame(ra), page_size=20)]
        parts += [html.P(n, className="hint") for n in c.notes]
        return html.Div(parts, id="ranks-page")

    return with_run(state, run, body)


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return ranks_layout(current_state(), run)
