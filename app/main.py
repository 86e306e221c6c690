"""create_app(store): the Dash app over a store. Pages are registered here (one module per page);
callbacks are the pages' plain functions, wrapped thinly so the tests can call them directly."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from html import escape as html_escape
from pathlib import Path
from typing import Any

import dash
from dash import Dash, Input, Output, State, dcc, html, no_update

from tracelab.api.types import Budget, Store

from . import page_callbacks, timeline_api, timeline_callbacks
from .components import PAGES
from .early import install_early_work
from .guards import allowed_hosts, guarded, install_request_guards
from .pages import compare, runs
from .state import STATE_KEY, AppState, current_state
from .urls import href

ASSETS = Path(__file__).resolve().parent / "assets"


def _not_found(**_ignored: Any) -> html.Div:
    return html.Div(
        [html.H2("Page not found"), html.P([dcc.Link("Back to the list of runs", href="/")])],
        id="not-found-page",
    )


def _register_pages() -> None:
    for order, (name, p) in enumerate(PAGES):
        module = importlib.import_module(f"app.pages.{p}")
        dash.register_page(module.__name__, path="/" if p == "runs" else f"/{p}", name=name,
                           title=f"tracelab · {name}", layout=module.layout, order=order)
    dash.register_page("app.pages.not_found_404", path="/404", name="Not found", layout=_not_found, order=99)


def _shell() -> html.Div:
    return html.Div(
        [
            html.Nav(
                [html.Span("tracelab", className="brand")]
                + [
                    dcc.Link(label, href="/" if p == "runs" else f"/{p}", id=f"nav-{p}", className="nav-link")
                    for label, p in PAGES
                ],
                className="navbar",
            ),
            dcc.Location(id="nav-location", refresh="callback-nav"),
            html.Div(id="history-sink", style={"display": "none"}),
            html.Main(dash.page_container, className="content"),
        ]
    )


def nav_hrefs(search: str | None) -> list[str]:
    """Navigation links that keep the current run (?run=ID) when there is one."""
    from urllib.parse import parse_qs

    q = parse_qs((search or "").lstrip("?"))
    run = (q.get("run") or q.get("b") or q.get("a") or [None])[0]
    return [
        ("/" if p == "runs" else href(p, run=run) if p != "compare" else href(p, b=run)) for _, p in PAGES
    ]


# in the page's head, before Dash's scripts load: on /timeline, ask for the run's meta (and, for a
# whole-run view, its first tile) at once; app/assets/timeline_canvas.js takes the answers over
EARLY_TIMELINE_FETCH = """<script>(function () {
  try {
    var m = location.pathname.match(/^(.*)\\/timeline\\/?$/), q = new URLSearchParams(location.search);
    if (!m || !q.get("run")) { return; }
    var api = m[1] + "/api/timeline/", run = encodeURIComponent(q.get("run")), p = ["run=" + run];
    ["t0", "t1", "q"].forEach(function (k) { if (q.get(k)) { p.push(k + "=" + encodeURIComponent(q.get(k))); } });
    var get = function (u) { return fetch(u, {credentials: "same-origin"}); };
    window.__tlEarly = {key: location.search, meta: get(api + "meta?" + p.join("&")),
      tile: q.get("t0") || q.get("t1") || q.get("q") ? null : get(api + "tile?run=" + run + "&level=0&index=0")};
  } catch (e) { window.__tlEarly = null; }
})();</script>"""


# where the canvas draws the timeline's first view before Dash has rendered the page (hidden until then;
# app/assets/timeline_canvas.js places it where the page puts its canvas, and the page adopts it)
EARLY_TIMELINE_ROOT = (
    '<div id="tl-early" class="content" hidden><div id="tl-early-root" class="tl-canvas-root"></div></div>'
)


CANVAS_SCRIPT = "timeline_canvas.js"  # loaded by the page head (async), not among Dash's scripts


def early_timeline_fetch(app: Dash) -> None:
    """Start the timeline's first requests from the page's head (EARLY_TIMELINE_FETCH): they run
    while the browser loads and starts Dash, instead of after; load the canvas script from the head
    too (async: it runs as soon as it is there, not after Dash's ~1 MB of scripts), and give it a
    place to draw the answers before Dash has rendered the page (EARLY_TIMELINE_ROOT)."""
    mtime = int((ASSETS / CANVAS_SCRIPT).stat().st_mtime)
    url = html_escape(f"{app.get_asset_url(CANVAS_SCRIPT)}?m={mtime}")
    head = f"{EARLY_TIMELINE_FETCH}\n        <script src=\"{url}\" async></script>"
    # before the stylesheet: a parser-inserted script after a loading stylesheet waits for it
    index = app.index_string.replace("{%css%}", head + "\n        {%css%}", 1)
    app.index_string = index.replace("{%app_entry%}", "{%app_entry%}\n        " + EARLY_TIMELINE_ROOT, 1)


def create_app(
    store: Store,
    *,
    import_dir: str | Path | None = None,
    max_upload_bytes: int = 200 * 2**20,
    max_expanded_bytes: int = 1 * 2**30,
    upload_budget: Budget | None = None,
    bind_host: str = "127.0.0.1",
    allow_hosts: Iterable[str] = (),
) -> Dash:
    """The dashboard over `store`. Uploads are written only under `import_dir` (or a temporary
    directory removed after the import), limited to `max_upload_bytes` as sent and to
    `max_expanded_bytes` once decompressed, and parsed in a child process under `upload_budget`.
    Requests whose Host (or Origin) is not the bound address, a loopback name or one of
    `allow_hosts` are refused with 403 (DNS rebinding); `allow_hosts=["*"]` turns that off."""
    state = AppState(
        store=store,
        import_dir=Path(import_dir) if import_dir is not None else None,
        max_upload_bytes=int(max_upload_bytes),
        max_expanded_bytes=int(max_expanded_bytes),
        upload_budget=upload_budget or Budget(),
    )
    app = Dash(
        "app",
        use_pages=True,
        pages_folder="",
        assets_folder=str(ASSETS),
        assets_ignore=rf"^{re.escape(CANVAS_SCRIPT)}$",  # the page head loads it (early_timeline_fetch)
        suppress_callback_exceptions=True,
        title="tracelab",
        update_title=None,
    )
    early_timeline_fetch(app)
    app.server.config[STATE_KEY] = state
    # base64 inflates uploads by 4/3; leave room for the JSON around it
    app.server.config["MAX_CONTENT_LENGTH"] = int(max_upload_bytes * 4 / 3) + 1_000_000
    install_request_guards(app.server, allowed_hosts(bind_host, allow_hosts))
    timeline_api.register(app.server)  # after the guards: every route of the server passes them
    install_early_work(app.server, state)  # after the guards: a refused request starts nothing
    _register_pages()
    app.layout = _shell
    _register_callbacks(app)
    return app


def _register_callbacks(app: Dash) -> None:
    @app.callback([Output(f"nav-{p}", "href") for _, p in PAGES], Input("_pages_location", "search"))
    def _nav(search):
        return nav_hrefs(search)

    @app.callback(Output("upload-message", "children"), Output("runs-list", "children"),
                  Input("upload", "contents"), State("upload", "filename"), prevent_initial_call=True)
    @guarded(lambda message: (html.Div(message, className="upload-error", id="upload-result"), no_update))
    def _upload(contents, filename):
        message, listing = runs.on_upload(current_state(), contents, filename)
        return message, listing.children

    timeline_callbacks.register(app)
    page_callbacks.register(app)

    # keep the address bar on the current view (shareable) without re-rendering the page
    for page, link in (("timeline", "tl-permalink"), ("compare", "compare-permalink")):
        app.clientside_callback(
            "function(h) { if (h && window.location.pathname.endsWith('/" + page + """')) {
               window.history.replaceState(null, '', h); } return ''; }""",
            Output("history-sink", "children", allow_duplicate=True),
            Input(link, "href"),
            prevent_initial_call=True,
        )

    @app.callback(Output("compare-content", "children"), Output("compare-permalink", "href"),
                  Input("compare-a", "value"), Input("compare-b", "value"), prevent_initial_call=True)
    @guarded(lambda message: (html.Div(message, className="upload-error"), no_update))
    def _compare(a, b):
        return compare.on_compare(current_state(), a, b)
