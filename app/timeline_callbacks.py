"""The timeline page's Dash callbacks: thin wrappers over `app.pages.timeline`'s plain functions."""

from __future__ import annotations

from dash import Dash, Input, Output, State, ctx, html, no_update

from .guards import guarded
from .pages import timeline
from .state import current_state

_TRIGGERS = {
    "tl-xrange": "graph.relayoutData",
    "tl-graph": "graph.clickData",
    "tl-show": "show",
    "tl-zoom-out": "zoom-out",
    "tl-full": "full",
    "tl-clear": "clear",
    "tl-search": "search",
    "tl-next": "next",
    "tl-prev": "prev",
    "tl-flows": "flows",
}


def register(app: Dash) -> None:
    @app.callback(
        Output("tl-graph", "figure"),
        Output("tl-view", "data"),
        Output("tl-permalink", "href"),
        Output("tl-info", "children"),
        Output("tl-selection", "children"),
        Output("tl-match", "children"),
        Input("tl-xrange", "data"),
        Input("tl-graph", "clickData"),
        Input("tl-show", "value"),
        Input("tl-zoom-out", "n_clicks"),
        Input("tl-full", "n_clicks"),
        Input("tl-clear", "n_clicks"),
        Input("tl-search", "value"),
        Input("tl-next", "n_clicks"),
        Input("tl-prev", "n_clicks"),
        Input("tl-flows", "value"),
        State("tl-view", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: (no_update, no_update, no_update, message, no_update, no_update))
    def _timeline(relayout, click, show, _zo, _full, _clear, query, _next, _prev, flows, view):
        new_view, outputs = timeline.on_timeline_event(
            current_state(),
            _TRIGGERS.get(ctx.triggered_id),
            view or {},
            relayout=relayout,
            click=click,
            show=show,
            query=query,
            flows=bool(flows),
        )
        if new_view is None:
            return (no_update,) * 6
        fig, link, info, panel, matches = outputs
        return fig, new_view, link, info, panel, matches

    @app.callback(
        Output("tl-range", "children"),
        Input("tl-graph", "selectedData"),
        Input("tl-analyze-range", "n_clicks"),
        State("tl-view", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: [html.Span(message, className="error-message")])
    def _range(selected, _analyze, view):
        return timeline.on_range_select(
            current_state(), view or {}, selected, full=ctx.triggered_id == "tl-analyze-range"
        )

    # Plotly can follow a zoom with an {"autosize": true} relayout before Dash reads relayoutData, so
    # the x range is read from the graph itself whenever anything was relaid out.
    app.clientside_callback(
        """function(rl) {
            if (!rl) { return window.dash_clientside.no_update; }
            if (rl['xaxis.autorange']) { return {'xaxis.autorange': true}; }
            if (!('xaxis.range' in rl || 'xaxis.range[0]' in rl)) { return window.dash_clientside.no_update; }
            const gd = document.querySelector('#tl-graph .js-plotly-plot');
            const r = gd && gd._fullLayout && gd._fullLayout.xaxis && gd._fullLayout.xaxis.range;
            if (!r) { return window.dash_clientside.no_update; }
            return {'xaxis.range': [Number(r[0]), Number(r[1])]};
        }""",
        Output("tl-xrange", "data"),
        Input("tl-graph", "relayoutData"),
        prevent_initial_call=True,
    )
