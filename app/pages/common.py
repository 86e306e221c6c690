"""The run-page preamble shared by Gaps, Overlap and Kernels: resolve the run, or a clear error page."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dash import dcc, html

from tracelab.api.types import RunRecord
from tracelab.errors import BadInput, MissingDependency
from tracelab.text_format import fmt_ns

from ..components import error_page
from ..state import AppState, describe_error
from ..urls import href

log = logging.getLogger("tracelab.app")


def resolve_run(state: AppState, run: str | None, pick: str | None = None) -> RunRecord | html.Div:
    """The requested run's record, or an error page. Without a run: the only run when there is one; else,
    with `pick` (the page's path, e.g. "timeline"), a page listing the runs to open it for (a run picker);
    else the newest run."""
    if not run:
        runs = state.runs()
        if not runs:
            return error_page("No runs yet", "Import a trace on the Runs page, or run `tracelab demo`.")
        if pick and len(runs) > 1:
            return run_picker(runs, pick)
        run = runs[0].id
    try:
        return state.record(run)
    except BadInput as exc:
        return error_page("Unknown run", describe_error(exc))


def run_picker(runs: list[RunRecord], page: str) -> html.Div:
    """Which run to open `page` for: one link per run (in the Runs page's order), with its backend, GPU
    and length. Names are untrusted: Dash escapes them."""
    items = [
        html.Li(
            [
                dcc.Link(r.name or r.id, href=href(page, run=r.id)),
                html.Span(
                    f" {r.id} · {r.backend or r.format} · {r.gpu or 'GPU unknown'} · {fmt_ns(r.span_ns)}",
                    className="muted",
                ),
            ]
        )
        for r in runs
    ]
    return html.Div(
        [html.H2(f"{page.capitalize()}: which run?"), html.P(f"{len(runs)} runs in the store; pick one."),
         html.Ul(items, id="run-picker-list")],
        id="run-picker",
    )


def internal_error_page(exc: Exception, what: str) -> html.Div:
    """A bug must give a clear page, and a traceback in the log (call from an `except` block)."""
    log.exception("internal error rendering %s", what)
    return error_page("Internal error", f"{describe_error(exc)} (details in the server log)")


def with_run(state: AppState, run: str | None, body: Callable[[RunRecord], html.Div]) -> html.Div:
    """body(record) for the requested run (the newest when none is given), or an error page."""
    record = resolve_run(state, run)
    if not isinstance(record, RunRecord):
        return record
    try:
        return body(record)
    except (BadInput, MissingDependency) as exc:
        return error_page("Cannot analyse this run", describe_error(exc))
    except Exception as exc:  # noqa: BLE001 - see internal_error_page
        return internal_error_page(exc, f"run {record.id}")


def clicked_row(active_cell: dict | None, rows: list[dict] | None, *, by_index: bool = False) -> dict | None:
    """The table row of a click (by its row id; with `by_index`, else by its position) when it has a name."""
    if not active_cell or not rows:
        return None
    row_id = active_cell.get("row_id")
    row = next((r for r in rows if r.get("id") == row_id), None) if row_id is not None else None
    if row is None and by_index:
        i = active_cell.get("row")
        row = rows[i] if isinstance(i, int) and 0 <= i < len(rows) else None
    return row if row is not None and row.get("name") else None
