"""Overlap page: /overlap?run=ID. A run of several GPUs starts with one row per rank · GPU (busy, compute,
copy, comm, compute ∩ comm, streams with work and how many overlap another) and, with several ranks, who
waited for whom in collectives (rank × rank, as on the Ranks page); then per device: compute /
copy / comm time and their overlaps, each stream's utilization, and the stream x stream overlap matrix of
the streams that overlap another, one device per collapsible section (collapsed when there are several
devices, the only one open otherwise): a multi-rank run is a list of one-line summaries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from dash import dcc, html

from tracelab.api import stream_overlap_matrix
from tracelab.render.figures.dashboard import (
    overlap_bars_figure,
    overlap_matrix_figure,
    stream_utilization_figure,
)
from tracelab.text_format import fmt_ns

from ..components import run_header
from ..state import AppState, current_state
from .common import with_run
from .ranks import wait_matrix_of, wait_matrix_section


def overlap_layout(state: AppState, run: str | None = None) -> html.Div:
    def body(record) -> html.Div:
        analysis = state.analysis(record.id)
        timeline = state.timeline(record.id)
        sections = [_device_matrix(timeline, d.rank, d.device, open_=len(analysis.devices) == 1)
                    for d in analysis.devices]
        parts: list[Any] = [run_header(record, "Overlap")]
        if len(analysis.devices) > 1:  # the ranks side by side first (a page of one matrix per device is tall)
            parts += [html.H3("Ranks at a glance"), _rank_summary(analysis.devices, [n for _, n in sections])]
        if len({d.rank for d in analysis.devices}) > 1:  # and who waited for whom (rank × rank)
            parts += wait_matrix_section(wait_matrix_of(state, record.id))
        parts += [
            html.H3("Compute, copy and communication"),
            dcc.Graph(id="overlap-bars", figure=overlap_bars_figure(analysis.devices), config={"displaylogo": False}),
            html.H3("Stream utilization"),
            dcc.Graph(id="stream-util", figure=stream_utilization_figure(analysis.devices), config={"displaylogo": False}),
            html.H3("Stream × stream overlap"), *(section for section, _ in sections),
        ]
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


def _device_matrix(timeline: Any, rank: int, device: int, *, open_: bool) -> tuple[html.Details, int]:
    """One device's matrix, collapsed under a one-line summary (expand on click) unless `open_`; streams
    that never overlap another are left out and counted in the summary. Also: how many streams overlap."""
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
        body: Any = dcc.Graph(id=f"overlap-matrix-{rank}-{device}", figure=overlap_matrix_figure(sub, title=title),
                              config={"displaylogo": False})
    else:
        summary = f"rank {rank} · GPU {device}: no two of its {len(m)} streams run at the same time"
        body = html.P("Every stream runs alone: nothing to draw.", className="hint")
    note = (html.P(f"{left_out} stream(s) that never run at the same time as another are left out.",
                   className="hint") if left_out and len(sub) else "")
    section = html.Details([html.Summary(summary), note, body], open=open_, id=f"overlap-device-{rank}-{device}")
    return section, len(sub)


RANK_COLUMNS = ("rank · GPU", "busy", "kernels (compute+comm)", "copy", "comm", "compute ∩ comm", "streams with work",
                "streams overlapping")


def rank_summary_rows(devices: Any, overlapping: list[int]) -> list[dict[str, str]]:
    """One row per device of the run: its busy time (and share of its span), kernels (compute and comm), copy
    (memcpy), communication, compute ∩ comm, its streams with work and how many of them overlap another."""
    out = []
    for d, n_over in zip(devices, overlapping):
        share = f" ({100 * d.busy_ns / d.span_ns:.0f}%)" if d.span_ns else ""
        out.append(dict(zip(RANK_COLUMNS, (
            f"rank {d.rank} · GPU {d.device}", fmt_ns(d.busy_ns) + share, fmt_ns(d.kernel_ns), fmt_ns(d.memcpy_ns),
            fmt_ns(d.comm_ns), fmt_ns(d.overlap.compute_comm_ns), str(sum(1 for s in d.streams if s.busy_ns > 0)),
            str(n_over)))))
    return out


def _rank_summary(devices: Any, overlapping: list[int]) -> html.Table:
    rows = rank_summary_rows(devices, overlapping)
    return html.Table(
        [html.Thead(html.Tr([html.Th(c) for c in RANK_COLUMNS])),
         html.Tbody([html.Tr([html.Td(r[c]) for c in RANK_COLUMNS]) for r in rows])],
        id="overlap-ranks", className="runs-table",
    )


def layout(run: str | None = None, **_ignored: Any) -> html.Div:
    return overlap_layout(current_state(), run)
