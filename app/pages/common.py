"""The run-page preamble shared by Gaps, Overlap and Kernels: resolve the run, or a clear error page."""

from __future__ import annotations

import logging
from typing import Callable

from dash import html

from tracelab.errors import BadInput, MissingDependency
from tracelab.store import RunRecord

from ..components import error_page
from ..state import AppState, describe_error

log = logging.getLogger("tracelab.app")


def with_run(state: AppState, run: str | None, body: Callable[[RunRecord], html.Div]) -> html.Div:
    """body(record) for the requested run (the newest when none is given), or an error page."""
    if not run:
        runs = state.runs()
        if not runs:
            return error_page("No runs yet", "Import a trace on the Runs page, or run `tracelab demo`.")
        run = runs[0].id
    try:
        record = state.record(run)
    except BadInput as exc:
        return error_page("Unknown run", describe_error(exc))
    try:
        return body(record)
    except (BadInput, MissingDependency) as exc:
        return error_page("Cannot analyse this run", describe_error(exc))
    except Exception as exc:  # noqa: BLE001 - a bug must give a clear page, and a traceback in the log
        log.exception("internal error rendering run %s", record.id)
        return error_page("Internal error", f"{describe_error(exc)} (details in the server log)")
