"""Overlap page: /overlap?run=ID. Per device: compute / copy / comm time and their overlaps, each
stream's utilization, and the stream x stream overlap matrix of the streams that overlap another, one
device per collapsible section (the first open): a multi-rank run is a list of one-line summaries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from dash import dcc, html

from tracelab.render.figures import overlap_bars_figure, overlap_matrix_figure, stream_utilization_figure
from tracelab.text_format import fmt_ns

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
        parts.append(html.H3("Stream × stream overlap"))
        for i, d in enumerate(analysis.devices):
            parts.append(_device_matrix(timeline, d.rank, d.device, open_=i == 0))
        return html.Div(parts, id="overlap-page")

    return with_run(state, run, body)


def overlapping_streams(m: pd.DataFrame) -> pd.DataFrame:
    """The matrix restricted to the streams that run at the same time as another stream (a stream that
    never overlaps is a row and a column of "0 ns": most of a DDP rank's ~30 copy streams)."""
    v = m.to_numpy()
    off = v.copy()
    np.fill_diagonal(off, 0)
    keep = off.sum(axis=1) > 0
    return m.loc[keep, keep]


def _device_matrix(timeline: Any, rank: int, device: int, *, open_: bool) -> html.Details:
    """One device's matrix, collapsed under a one-line summary (expand on click) but for the first device;
    streams that never overlap another are left out and counted in the summary."""
    m = stream_overlap_matrix(timeline, rank, device)
    sub = overlapping_streams(m)
    left_out = len(m) - len(sub)
    if len(sub):
        v = sub.to_numpy().copy()
        np.fill_diagonal(v, 0)
        most = fmt_ns(int(v.max()))
        summary = (f"rank {rank} · GPU {device}: {len(sub)} of {len(m)} streams run at the same time as another "
                   f"(the most between two: {most})")
        title = f"rank {rank} · GPU {device}: stream × stream overlap (diagonal: busy time)"
        body: Any = dcc.Graph(
            id=f"overlap-matrix-{rank}-{device}",
            figure=overlap_matrix_figure(sub, title=title),
            config={"displaylogo": False},
        )
    else:
        summary = f"rank {rank} · GPU {device}: no two of its {len(m)} streams run at the same time"
        body = html.P("Every stream runs alone: nothing to draw.", className="hint")
    note = (html.P(f"{left_out} stream(s) that never run at the same time as another are left out.",
                   className="hint") if left_out and len(sub) else "")
    return html.Details([html.Summary(summary), note, body], open=open_, id=f"overlap-device-{rank}-{device}")


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return overlap_layout(current_state(), run)
