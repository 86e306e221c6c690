"""Work the server starts before the browser asks for it (issue 28: a cold Gaps page was the server's first
analysis of the run, after the browser had loaded and started Dash and asked for the page's content):

- at start, the analysis' imports (`tracelab.api.warm_up`, in a background thread);
- on a page request (the HTML of /gaps?run=ID, /overlap, /ranks, /ranges), the run's analysis (and the Gaps
  page's content), in a background thread: it runs while the browser loads Dash's scripts, and the page's
  callback takes it from the cache (the caches compute a key once: the callback waits for the running one
  instead of starting another).
"""

from __future__ import annotations

import logging

import flask

from tracelab.errors import BadInput, MissingDependency

from .state import AppState

# pages whose content needs the run's whole analysis (the timeline starts its own: app/timeline_view.py)
ANALYSED_PAGES = frozenset({"gaps", "overlap", "ranks", "ranges"})

log = logging.getLogger("tracelab.app")


def page_of(path: str) -> str:
    """The page a request path names ("/gaps" and "/prefix/gaps/" -> "gaps")."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def analyse_early(state: AppState, run: str, page: str = "") -> None:
    """The run's analysis, cached in `state`, and the Gaps page's content when that is the page asked for;
    an unknown run is left to the page (it says so)."""
    try:
        record = state.record(run)
        state.analysis(record.id)
        if page == "gaps":
            from .pages.gaps import cached_body

            cached_body(state, record)
    except (BadInput, MissingDependency):  # the page says why, when it is asked for
        return


def install_early_work(server: flask.Flask, state: AppState) -> None:
    """Warm the analysis' imports now, and start a run's analysis when its page is requested."""
    from tracelab.api import warm_up

    state.in_background("warm-up", warm_up)

    @server.before_request
    def _start_analysis() -> None:
        run = flask.request.args.get("run")
        page = page_of(flask.request.path)
        if flask.request.method == "GET" and run and page in ANALYSED_PAGES:
            state.in_background(f"early-{page}-{run}", lambda: analyse_early(state, run, page))
