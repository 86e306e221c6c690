"""The timeline page's Dash callbacks: thin wrappers over `app.pages.timeline`'s plain functions, and the
clientside bridges that hand the page's buttons and the callbacks' answers to the canvas
(`window.tracelabTimeline`, app/assets/timeline_canvas.js). The canvas reports back through
`dash_clientside.set_props` on the stores tl-window, tl-click and tl-range-sel."""

from __future__ import annotations

from dash import Dash, Input, Output, State, ctx, html, no_update

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


def register(app: Dash) -> None:
    @app.callback(
        Output("tl-view", "data"),
        Output("tl-permalink", "href"),
        Output("tl-info", "children"),
        Output("tl-match", "children"),
        Input("tl-window", "data"),
        State("tl-view", "data"),
        State("tl-show", "value"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: (no_update, no_update, message, no_update))
    def _window(window, view, show):
        out = timeline.on_window(current_state(), view or {}, window, show)
        return out if out is not None else (no_update,) * 4

    @app.callback(
        Output("tl-view", "data", allow_duplicate=True),
        Output("tl-match", "children", allow_duplicate=True),
        Output("tl-goto", "data"),
        Output("tl-query", "data"),
        Input("tl-search", "value"),
        Input("tl-next", "n_clicks"),
        Input("tl-prev", "n_clicks"),
        State("tl-view", "data"),
        State("tl-show", "value"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: (no_update, message, no_update, no_update))
    def _search(query, _next, _prev, view, show):
        trigger = {"tl-search": "search", "tl-next": "next", "tl-prev": "prev"}.get(ctx.triggered_id, "")
        out = timeline.on_search(current_state(), view or {}, trigger, query, show)
        if out is None:
            return (no_update,) * 4
        new_view, text, goto, q = out
        return new_view, text, goto if goto is not None else no_update, q

    @app.callback(
        Output("tl-view", "data", allow_duplicate=True),
        Output("tl-selection", "children"),
        Output("tl-highlight", "data"),
        Input("tl-click", "data"),
        Input("tl-clear", "n_clicks"),
        Input("tl-show", "value"),
        State("tl-view", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: (no_update, [html.Span(message, className="error-message")], no_update))
    def _select(click, _clear, show, view):
        view = dict(view or {})
        if ctx.triggered_id == "tl-clear":
            view["selected"] = None
            click = None
        elif ctx.triggered_id != "tl-click":
            click = None
        return timeline.on_select(current_state(), view, click, show)

    @app.callback(
        Output("tl-range", "children"),
        Input("tl-range-sel", "data"),
        Input("tl-analyze-range", "n_clicks"),
        State("tl-view", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: [html.Span(message, className="error-message")])
    def _range(selected, _analyze, view):
        return timeline.on_range_select(
            current_state(), view or {}, selected, full=ctx.triggered_id == "tl-analyze-range"
        )

    _bridge(app, "setShow", Input("tl-show", "value"))
    _bridge(app, "setFlows", Input("tl-flows", "value"))
    _bridge(app, "zoomOut", Input("tl-zoom-out", "n_clicks"))
    _bridge(app, "wholeRun", Input("tl-full", "n_clicks"))
    _bridge(app, "goto", Input("tl-goto", "data"))
    _bridge(app, "setHighlight", Input("tl-highlight", "data"))
    _bridge(app, "setQuery", Input("tl-query", "data"))
