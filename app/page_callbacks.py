"""Callbacks of the Kernels, Ranges and Gaps pages: thin wrappers over the pages' plain functions."""

from __future__ import annotations

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from .guards import guarded
from .pages import gaps, kernels, ranges
from .state import current_state


def register(app: Dash) -> None:
    for page, href in (("kernels", kernels.kernel_click_href), ("ranges", ranges.range_click_href)):

        @app.callback(Output("nav-location", "href", allow_duplicate=True), Input(f"{page}-table", "active_cell"),
                      State(f"{page}-table", "data"), State(f"{page}-run", "data"), prevent_initial_call=True)
        @guarded(lambda _message: no_update)
        def _row_click(active_cell, rows, run_id, href=href):
            return href(run_id, active_cell, rows) or no_update

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
