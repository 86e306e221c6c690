"""Callbacks of the Kernels page: thin wrappers over the page's plain functions."""

from __future__ import annotations

from dash import Dash, Input, Output, State, no_update

from .guards import guarded
from .pages import kernels, ranges


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
