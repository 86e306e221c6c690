"""Ranges page: /ranges?run=ID. GPU time by host range (NVTX, record_function, Kineto cpu_op /
user_annotation) projected onto the GPU through launch correlation (tracelab.analyses.device.range_projection),
as a tree by nesting (a name under the range that encloses its first instance). Click a row: the timeline on
that range's first instance, its instances highlighted by search."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import dcc, html

from tracelab.api import range_tree_order as tree_order
from tracelab.text_format import fmt_ns

from ..components import data_table, run_header
from ..state import AppState, current_state
from ..urls import gap_window, timeline_href
from .common import clicked_row, with_run


def ranges_frame(state: AppState, run_id: str) -> tuple[pd.DataFrame, Any]:
    def make():
        from tracelab.api import ranges

        tl = state.timeline(run_id)
        p = ranges(tl, state.analysis(run_id), state.context(run_id))
        rows = []
        for i, (level, s) in enumerate(tree_order(p.stats)):
            rows.append({
                "id": f"r{i}",
                "range": "\u2003" * level + ("└ " if level else "") + s.name,
                "name": s.name,
                "kind": s.kind,
                "calls": s.calls,
                "gpu": fmt_ns(s.gpu_ns), "gpu_ns": s.gpu_ns,
                "kernels": fmt_ns(s.kernel_ns), "kernel_ns": s.kernel_ns,
                "span": fmt_ns(s.span_ns), "span_ns": s.span_ns,
                "share": round(100 * s.share, 1),
                "ops": s.gpu_ops,
                "t0": s.first_start_ns, "t1": s.first_end_ns,
            })
        cols = ["id", "range", "name", "kind", "calls", "gpu", "gpu_ns", "kernels", "kernel_ns", "span", "span_ns",
                "share", "ops", "t0", "t1"]
        return pd.DataFrame(rows, columns=cols), p

    return state.cached(("ranges", run_id), make)


def ranges_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        table, p = ranges_frame(state, record.id)
        cols = [
            {"name": "range (tree by nesting)", "id": "range"},
            {"name": "kind", "id": "kind"},
            {"name": "calls", "id": "calls", "type": "numeric"},
            {"name": "GPU time", "id": "gpu"},
            {"name": "GPU (ns)", "id": "gpu_ns", "type": "numeric"},
            {"name": "kernels", "id": "kernels"},
            {"name": "span", "id": "span"},
            {"name": f"% of {p.reference}", "id": "share", "type": "numeric"},
            {"name": "GPU ops", "id": "ops", "type": "numeric"},
        ]
        hint = (
            f"{len(table):,} range names, {p.n:,} instances. A GPU op belongs to a range when the call that launched it "
            "starts inside the range on the same thread; GPU time is the union of those ops, span runs from the "
            "first one's start to the last one's end; nested ranges are not subtracted from their parents. "
            "Click a row to open the timeline on its first instance."
        )
        if p.unlaunched_ops:
            hint += f" {p.unlaunched_ops:,} GPU ops have no launch call in the trace (in no range)."
        return html.Div(
            [
                run_header(record, "Ranges"),
                html.P(hint, className="hint"),
                data_table("ranges-table", table, cols, page_size=40,
                           tooltip_data=[{"range": {"value": str(n), "type": "text"}} for n in table["name"].head(400)])
                if len(table) else html.P("No host ranges (NVTX, record_function, CPU ops) in this run.", className="hint"),
                dcc.Store(id="ranges-run", data=record.id),
            ],
            id="ranges-page",
        )

    return with_run(state, run, body)


def range_click_href(run_id: str | None, active_cell: dict[str, Any] | None, rows: list[dict] | None) -> str | None:
    """The timeline on the clicked range's first instance, its instances found by name (search)."""
    row = clicked_row(active_cell, rows)
    if not run_id or row is None:
        return None
    t0, t1 = int(row.get("t0", -1)), int(row.get("t1", -1))
    if t0 >= 0 and t1 > t0:
        return timeline_href(run_id, *gap_window(t0, t1), q=str(row["name"]))
    return timeline_href(run_id, q=str(row["name"]))


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return ranges_layout(current_state(), run)
