"""Kernels page: /kernels?run=ID. A sortable, filterable table: name, count, total, mean, max,
grid / block, theoretical occupancy where the launch configuration is known."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracelab.api import kernel_table, launch_occupancy
from tracelab.text_format import fmt_ns

from ..components import data_table, run_header
from ..state import AppState, current_state
from ..urls import timeline_href
from .common import clicked_row, with_run


def kernels_frame(state: AppState, run_id: str):
    def make():
        tl = state.timeline(run_id)
        table = kernel_table(tl, launch_occupancy(tl))
        for c in ("total", "mean", "max"):
            table[c] = [fmt_ns(v) for v in table[f"{c}_ns"].tolist()]
        table["occupancy"] = (table["occupancy"] * 100).round(1)
        table.insert(0, "id", [f"k{i}" for i in range(len(table))])
        return table

    return state.cached(("kernels", run_id), make)


def kernels_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        table = kernels_frame(state, record.id)
        cols = [
            {"name": "name", "id": "name"},
            {"name": "count", "id": "count", "type": "numeric"},
            {"name": "total", "id": "total"},
            {"name": "total (ns)", "id": "total_ns", "type": "numeric"},
            {"name": "mean", "id": "mean"},
            {"name": "mean (ns)", "id": "mean_ns", "type": "numeric"},
            {"name": "max", "id": "max"},
            {"name": "max (ns)", "id": "max_ns", "type": "numeric"},
            {"name": "grid", "id": "grid"},
            {"name": "block", "id": "block"},
            {"name": "occupancy %", "id": "occupancy", "type": "numeric"},
        ]
        return html.Div(
            [
                run_header(record, "Kernels"),
                html.P(
                    f"{len(table):,} distinct kernels / launch configurations, "
                    f"{int(table['count'].sum()) if len(table) else 0:,} launches. Sort by clicking a column; "
                    "filter with the row under the header (e.g. gemm, >1000). Click a row to open the "
                    "timeline on that kernel's instances.",
                    className="hint",
                ),
                data_table(
                    "kernels-table",
                    table,
                    cols,
                    page_size=30,
                    tooltip_data=[
                        {"name": {"value": str(n), "type": "text"}} for n in table["name"].head(300)
                    ],
                ),
                dcc.Store(id="kernels-run", data=record.id),
            ],
            id="kernels-page",
        )

    return with_run(state, run, body)


def kernel_click_href(run_id: str | None, active_cell: dict[str, Any] | None, rows: list[dict] | None) -> str | None:
    """The timeline of the clicked kernel row's kernel: its instances found by name (search), the
    first one in view, all highlighted and counted."""
    row = clicked_row(active_cell, rows, by_index=True)
    if not run_id or row is None:
        return None
    return timeline_href(run_id, q=str(row["name"]))


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return kernels_layout(current_state(), run)
