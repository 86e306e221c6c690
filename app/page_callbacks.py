"""Callbacks of the Kernels, Ranges and Gaps pages: thin wrappers over the pages' plain functions."""

from __future__ import annotations

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from .guards import guarded
from .pages import gaps, kernels, ranges
from .state import current_state


def register(app: Dash) -> None:
    @app.callback(
        Output("nav-location", "href", allow_duplicate=True),
        Input("kernels-table", "active_cell"),
        State("kernels-table", "data"),
        State("kernels-run", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda _message: no_update)
    def _kernel_click(active_cell, rows, run_id):
        return kernels.kernel_click_href(run_id, active_cell, rows) or no_update

    @app.callback(
        Output("nav-location", "href", allow_duplicate=True),
        Input("ranges-table", "active_cell"),
        State("ranges-table", "data"),
        State("ranges-run", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda _message: no_update)
    def _range_click(active_cell, rows, run_id):
        return ranges.range_click_href(run_id, active_cell, rows) or no_update

    @app.callback(
        Output("gaps-rows", "children"),
        Output("gaps-page-label", "children"),
        Output("gaps-view", "data"),
        Input("gaps-prev", "n_clicks"),
        Input("gaps-next", "n_clicks"),
        *[Input(f"gaps-sort-{key}", "n_clicks") for key in gaps.SORTS],
        Input({"type": "gaps-cause", "cause": ALL}, "n_clicks"),
        Input({"type": "gaps-part", "part": ALL}, "n_clicks"),
        State("gaps-view", "data"),
        State("gaps-run", "data"),
        prevent_initial_call=True,
    )
    @guarded(lambda _message: (no_update, no_update, no_update))
    def _gaps_view(*args):
        # the table's page, sort and cause filter, on the server (the page has no DataTable: issue 28)
        view, run_info = args[-2], args[-1]
        return gaps.on_gaps_view(current_state(), run_info or {}, view, ctx.triggered_id)
