"""The dashboard's request guards: which Host / Origin it answers, and callbacks that never 500.

DNS rebinding: a web page on evil.example can make its own name resolve to 127.0.0.1 and then read
http://evil.example:8050/ from the victim's browser as same-origin; the only trace of the attack is
the Host header (evil.example). So every request must name a host this dashboard serves: a loopback
name, the address it is bound to, or one the user allowed (`tracelab serve --allow-host NAME`). A
cross-site request (Origin header of another host) is refused the same way. Both get 403.

Callbacks get state from the browser (run ids, windows) that can be stale (a deleted run) or forged;
`guarded` turns any failure into a clear message in the page instead of HTTP 500, and a malformed
callback request (not even valid for Dash) gets 400 with one line.
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import flask
from dash.exceptions import PreventUpdate

from tracelab.errors import BadInput, MissingDependency

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
ANY_HOST = "*"

log = logging.getLogger(__name__)


def host_name(value: str | None) -> str:
    """The host part of a Host header value or netloc ("[::1]:8050" -> "::1"), lower-case."""
    value = (value or "").strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def allowed_hosts(bind_host: str = "127.0.0.1", extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names the dashboard answers: loopback names, the bound address (and, bound to every
    interface, this machine's own names) and `extra` ("*" allows any)."""
    names = set(LOOPBACK) | {host_name(h) for h in extra if h}
    bind = host_name(bind_host)
    if bind in {host_name(b) for b in WILDCARD_BINDS}:
        for own in (socket.gethostname(), socket.getfqdn()):
            names.add(host_name(own))
    else:
        names.add(bind)
    return frozenset(n for n in names if n)


def refusal(host_header: str | None, origin: str | None, allowed: frozenset[str]) -> str | None:
    """Why a request must be refused, or None. Host must be allowed; an Origin, when sent, too."""
    if ANY_HOST in allowed:
        return None
    host = host_name(host_header)
    if host not in allowed:
        return (
            f"refused: this dashboard does not answer to the host name {host_header!r} "
            f"(start it with `tracelab serve --allow-host {host or 'NAME'}` to allow it)"
        )
    if origin:
        origin_host = host_name(urlsplit(origin).netloc) if origin != "null" else "null"
        if origin_host not in allowed:
            return f"refused: a cross-site request from origin {origin!r}"
    return None


def install_request_guards(server: flask.Flask, allowed: frozenset[str]) -> None:
    """Check Host and Origin before every request (403), and answer a malformed callback request
    with 400 and one line instead of 500."""

    @server.before_request
    def _check_host() -> Any:
        why = refusal(flask.request.headers.get("Host"), flask.request.headers.get("Origin"), allowed)
        if why is not None:
            return flask.Response(why + "\n", status=403, mimetype="text/plain")
        return None

    @server.errorhandler(Exception)
    def _no_500(exc: Exception) -> Any:
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):
            return exc
        if not flask.request.path.endswith("/_dash-update-component"):  # a page itself failed: a bug
            log.error("request %s failed", flask.request.path, exc_info=exc)
            return flask.Response("internal error\n", status=500, mimetype="text/plain")
        log.warning("callback request failed: %s: %s", type(exc).__name__, exc)
        text = "this request is stale or malformed (reload the page)"
        return flask.Response(text + "\n", status=400, mimetype="text/plain")


def stale_message(exc: Exception) -> str:
    """One line for a callback that could not run on what the page sent."""
    if isinstance(exc, (BadInput, MissingDependency)):
        return f"{exc} (reload the page or go back to the list of runs)"
    return "this view is out of date or was changed by hand; reload the page or go back to the list of runs"


def guarded(on_error: Callable[[str], Any]) -> Callable[[Callable], Callable]:
    """A Dash callback that answers a stale or tampered request with `on_error(message)` (the
    callback's outputs showing the message) rather than an exception and HTTP 500."""

    def wrap(callback: Callable) -> Callable:
        @functools.wraps(callback)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return callback(*args, **kwargs)
            except PreventUpdate:
                raise
            except Exception as exc:  # noqa: BLE001 - what the browser sent cannot be trusted
                log.warning("callback %s failed: %s: %s", callback.__name__, type(exc).__name__, exc)
                return on_error(stale_message(exc))

        return run

    return wrap
