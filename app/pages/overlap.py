"""Overlap page: /overlap?run=ID. Per device: compute / copy / comm time and their overlaps, the
stream x stream overlap matrix and each stream's utilization."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from tracelab.render.figures import overlap_bars_figure, overlap_matrix_figure, stream_utilization_figure

from ..components import run_header
from ..data import stream_overlap_matrix
from ..state import AppState, current_state
from .common import with_run

PATH = "/overlap"


def overlap_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        analysis = state.analysis(record.id)
        timeline = state.timeline(record.id)
        parts: list[Any] = [
            run_header(record, "Overlap"),
            html.H3("Compute, copy and communication"),
            dcc.Graph(
                id="overlap-bars", figure=overlap_bars_figure(analysis.devices), config={"displaylogo": False}
            ),
            html.H3("Stream utilization"),
            dcc.Graph(
                id="stream-util",
                figure=stream_utilization_figure(analysis.devices),
                config={"displaylogo": False},
            ),
        ]
        for d in analysis.devices:
            m = stream_overlap_matrix(timeline, d.rank, d.device)
            title = f"rank {d.rank} · GPU {d.device}: stream × stream overlap (diagonal: busy time)"
            parts.append(
                dcc.Graph(
                    id=f"overlap-matrix-{d.rank}-{d.device}",
                    figure=overlap_matrix_figure(m, title=title),
                    config={"displaylogo": False},
                )
            )
        return html.Div(parts, id="overlap-page")

    return with_run(state, run, body)


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return overlap_layout(current_state(), run)
