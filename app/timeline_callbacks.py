"""The timeline page's Dash callbacks: thin wrappers over `app.pages.timeline`'s plain functions, and the
clientside bridges that hand the page's buttons and the callbacks' answers to the canvas
(`window.tracelabTimeline`, app/assets/timeline_canvas.js). The canvas reports back through
`dash_clientside.set_props` on the stores tl-window, tl-click, tl-range-sel and tl-open."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, Patch, State, ctx, html, no_update

from .guards import guarded
from .pages import timeline
from .state import current_state


def _bridge(app: Dash, method: str, *inputs: Input) -> None:
    """A clientside callback calling `tracelabTimeline[method](...values)` when one of `inputs` changes."""
    app.clientside_callback(
        "function() { const t = window.tracelabTimeline;"
        f" if (t) {{ t.{method}.apply(t, arguments); }}"
        " return window.dash_clientside.no_update; }",
        Output("tl-js-sink", "data", allow_duplicate=True),
        *inputs,
        prevent_initial_call=True,
    )


# The keys of the view store each callback owns. A callback writes only its own keys (a Patch), so a late
# answer of one cannot undo what another wrote meanwhile.
WINDOW_KEYS = ("t0", "t1")
SELECT_KEYS = ("selected",)

# Next / previous step the search state in the browser: a server callback re-triggered while it runs is
# dropped by Dash, and quick clicks would then read a stale match index.
STEP_MATCH_JS = """function(_next, _prev, find) {
    const f = find || {}, n = f.count || 0, id = window.dash_clientside.callback_context.triggered_id;
    if (!n || (id !== 'tl-next' && id !== 'tl-prev')) { return window.dash_clientside.no_update; }
    const at = typeof f.match === 'number' ? f.match : -1, up = id === 'tl-next';
    const match = at < 0 ? (up ? 0 : n - 1) : (((at + (up ? 1 : -1)) % n) + n) % n;
    return Object.assign({}, f, {match: match});
}"""


def _own(view: dict[str, Any], keys: tuple[str, ...]) -> Patch:
    """A patch of the view store setting only `keys` to their values in `view`."""
    patch = Patch()
    for key in keys:
        patch[key] = view.get(key)
    return patch


def register(app: Dash) -> None:
    _register_window_and_search(app)
    _register_links_and_selection(app)
    _bridge(app, "setShow", Input("tl-show", "value"))
    _bridge(app, "setFlows", Input("tl-flows", "value"))
    _bridge(app, "zoomOut", Input("tl-zoom-out", "n_clicks"))
    _bridge(app, "wholeRun", Input("tl-full", "n_clicks"))
    _bridge(app, "goto", Input("tl-goto", "data"))
    _bridge(app, "setHighlight", Input("tl-highlight", "data"))
    _bridge(app, "setQuery", Input("tl-query", "data"))


def _register_window_and_search(app: Dash) -> None:
    """The window in view (its info line), the search, stepping its matches and going to one."""

    @app.callback(Output("tl-view", "data"), Output("tl-info", "children"), Input("tl-window", "data"),
                  State("tl-view", "data"), prevent_initial_call=True)
    @guarded(lambda message: (no_update, message))
    def _window(window, view):
        out = timeline.on_window(current_state(), view or {}, window)
        if out is None:
            return no_update, no_update
        new_view, info = out
        return _own(new_view, WINDOW_KEYS), info

    @app.callback(Output("tl-find", "data"), Output("tl-query", "data"),
                  Output("tl-match", "children", allow_duplicate=True), Input("tl-search", "value"),
                  State("tl-view", "data"), prevent_initial_call=True)
    @guarded(lambda message: (no_update, no_update, message))
    def _search(query, view):
        find, highlight = timeline.on_search(current_state(), view or {}, query)
        return find, highlight, no_update

    app.clientside_callback(
        STEP_MATCH_JS,
        Output("tl-find", "data", allow_duplicate=True),
        Input("tl-next", "n_clicks"),
        Input("tl-prev", "n_clicks"),
        State("tl-find", "data"),
        prevent_initial_call=True,
    )

    @app.callback(Output("tl-goto", "data"), Input("tl-find", "data"), State("tl-view", "data"),
                  prevent_initial_call=True)
    @guarded(lambda message: no_update)
    def _step(find, view):
        goto = timeline.on_step(current_state(), view or {}, find)
        return goto if goto is not None else no_update


def _register_links_and_selection(app: Dash) -> None:
    """The permalink (window, search, ranks unfolded) and match count, the clicked event, the dragged range."""

    @app.callback(Output("tl-permalink", "href"), Output("tl-match", "children"), Input("tl-view", "data"),
                  Input("tl-find", "data"), Input("tl-show", "value"), Input("tl-open", "data"),
                  prevent_initial_call=True)
    @guarded(lambda message: (no_update, message))
    def _links(view, find, show, open_ranks):
        return timeline.on_links(current_state(), view or {}, find, show, open_ranks)

    @app.callback(Output("tl-view", "data", allow_duplicate=True), Output("tl-selection", "children"),
                  Output("tl-highlight", "data"), Input("tl-click", "data"), Input("tl-clear", "n_clicks"),
                  Input("tl-show", "value"), State("tl-view", "data"), prevent_initial_call=True)
    @guarded(lambda message: (no_update, [html.Span(message, className="error-message")], no_update))
    def _select(click, _clear, show, view):
        view = dict(view or {})
        if ctx.triggered_id == "tl-clear":
            view["selected"] = None
            click = None
        elif ctx.triggered_id != "tl-click":
            click = None
        new_view, panel, highlight = timeline.on_select(current_state(), view, click, show)
        return _own(new_view, SELECT_KEYS), panel, highlight

    @app.callback(Output("tl-range", "children"), Input("tl-range-sel", "data"),
                  Input("tl-analyze-range", "n_clicks"), State("tl-view", "data"), prevent_initial_call=True)
    @guarded(lambda message: [html.Span(message, className="error-message")])
    def _range(selected, _analyze, view):
        return timeline.on_range_select(
            current_state(), view or {}, selected, full=ctx.triggered_id == "tl-analyze-range"
        )
