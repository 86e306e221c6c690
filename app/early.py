"""Work the server starts before the browser asks for it (issue 28: a cold Gaps page was the server's first
analysis of the run, after the browser had loaded and started Dash and asked for the page's content):

- at start, the analysis' imports (`tracelab.api.warm_up`, in a background thread);
- on a page request (the HTML of /gaps?run=ID, /overlap, /ranks, /ranges), the run's analysis, in a background
  thread: it runs while the browser loads Dash's scripts, and the page's callback takes it from the cache
  (`AppState.analysis` computes a key once: the callback waits for the running one instead of starting another).
"""

from __future__ import annotations

import logging

import flask

from tracelab.errors import BadInput

from .state import AppState

# pages whose content needs the run's whole analysis (the timeline starts its own: app/timeline_view.py)
ANALYSED_PAGES = frozenset({"gaps", "overlap", "ranks", "ranges"})

log = logging.getLogger("tracelab.app")


def page_of(path: str) -> str:
    """The page a request path names ("/gaps" and "/prefix/gaps/" -> "gaps")."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def analyse_early(state: AppState, run: str) -> None:
    """The run's analysis, cached in `state`; an unknown run is left to the page (it says so)."""
    try:
        record = state.record(run)
    except BadInput:
        return
    state.analysis(record.id)


def install_early_work(server: flask.Flask, state: AppState) -> None:
    """Warm the analysis' imports now, and start a run's analysis when its page is requested."""
    from tracelab.api import warm_up

    state.in_background("warm-up", warm_up)

    @server.before_request
    def _start_analysis() -> None:
        run = flask.request.args.get("run")
        if flask.request.method == "GET" and run and page_of(flask.request.path) in ANALYSED_PAGES:
            state.in_background(f"early-{run}", lambda: analyse_early(state, run))
