"""The run-page preamble shared by Gaps, Overlap and Kernels: resolve the run, or a clear error page."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dash import html

from tracelab.errors import BadInput, MissingDependency
from tracelab.store import RunRecord

from ..components import error_page
from ..state import AppState, describe_error

log = logging.getLogger("tracelab.app")


def resolve_run(state: AppState, run: str | None) -> RunRecord | html.Div:
    """The requested run's record (the newest when none is given), or an error page."""
    if not run:
        runs = state.runs()
        if not runs:
            return error_page("No runs yet", "Import a trace on the Runs page, or run `tracelab demo`.")
        run = runs[0].id
    try:
        return state.record(run)
    except BadInput as exc:
        return error_page("Unknown run", describe_error(exc))


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
