"""Small shared UI pieces. Every user-visible string goes in as a Dash child (escaped text), never HTML."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
from dash import dash_table, dcc, html

from tracelab.api.types import RunRecord
from tracelab.text_format import fmt_ns

from ..urls import href

# (name, path) of every page, in the navigation bar's order; the page's module is app.pages.<path>
PAGES = (("Runs", "runs"), ("Timeline", "timeline"), ("Gaps & findings", "gaps"), ("Overlap", "overlap"),
         ("Kernels", "kernels"), ("Ranges", "ranges"), ("Ranks", "ranks"), ("Compare", "compare"))


def error_page(title: str, message: str) -> html.Div:
    """A clear page for a bad run id / window / file: what is wrong, and where to go instead."""
    return html.Div(
        [
            html.H2(title, className="error-title"),
            html.P(message, id="error-message", className="error-message"),
            html.P([dcc.Link("Back to the list of runs", href="/")]),
        ],
        id="error",
        className="error-page",
    )


def run_header(record: RunRecord, page: str) -> html.Div:
    bits = [b for b in (record.workload, record.variant, record.backend, record.gpu, record.format) if b]
    return html.Div(
        [
            html.H2([f"{page}: ", html.Span(record.name, className="run-name")]),
            html.Div(
                [
                    html.Code(record.id),
                    " · ",
                    " · ".join(bits),
                    " · ",
                    f"{record.events:,} events",
                    # the whole trace, host events included (as `tracelab runs` says it); the figures' "span"
                    # is the GPU's, shorter: one word for each
                    " · trace ",
                    fmt_ns(record.span_ns),
                ],
                className="run-meta",
            ),
            html.Div(
                [dcc.Link(label, href=href(p, run=record.id), className="run-tab") for label, p in PAGES[1:]],
                className="run-tabs",
            ),
        ],
        className="run-header",
    )


def run_options(records: Iterable[RunRecord]) -> list[dict[str, str]]:
    return [{"label": f"{r.name} ({r.id})", "value": r.id} for r in records]


def data_table(table_id: str, df: pd.DataFrame, columns: Sequence[dict[str, Any]] | None = None, **kw: Any):
    """A sortable, filterable DataTable of plain text cells (no markdown: names are untrusted)."""
    cols = list(columns) if columns is not None else [{"name": c, "id": c} for c in df.columns if c != "id"]
    return dash_table.DataTable(
        id=table_id,
        data=df.to_dict("records"),
        columns=cols,
        sort_action="native",
        filter_action="native",
        page_size=kw.pop("page_size", 25),
        style_table={"overflowX": "auto"},
        style_cell={"fontFamily": "monospace", "fontSize": 12, "textAlign": "left", "maxWidth": 640, "overflow": "hidden",
                    "textOverflow": "ellipsis", "whiteSpace": "nowrap"},
        style_header={"fontWeight": "bold"},
        tooltip_duration=None,
        **kw,
    )
