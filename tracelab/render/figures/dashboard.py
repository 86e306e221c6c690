"""Plotly figures and tables for the dashboard. Pure functions: result / DataFrame in, figure out.

Names (kernels, NVTX text, API calls) are untrusted and often contain '<' (C++ templates): every string
that reaches a Plotly label goes through `plotly_text`, which escapes it (Plotly renders a subset of
HTML in labels and decodes the entities back for display).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracelab.analyses.results import DeviceSummary, Gap
from tracelab.text_format import fmt_ns, fmt_ns_many, fmt_pct, fmt_rel_many


def plotly_text(s: object) -> str:
    """Escape a string for a Plotly label / hover text (names are untrusted)."""
    return html.escape(str(s), quote=False)


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False}, yaxis={"visible": False}, height=220, plot_bgcolor="white",
        annotations=[{"text": plotly_text(message), "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper",
                      "yref": "paper", "font": {"size": 15, "color": "#555"}}],
    )
    return fig


# ---------------------------------------------------------------------------------------------
# overlap, utilization


def overlap_matrix_figure(matrix: pd.DataFrame, *, title: str = "") -> go.Figure:
    """Stream x stream overlap heatmap. `matrix`: square DataFrame of ns, index / columns = stream labels;
    the diagonal is each stream's busy time."""
    if matrix.empty:
        return empty_figure("no GPU streams")
    labels = [plotly_text(c) for c in matrix.columns]
    z = matrix.to_numpy(dtype=float) / 1e6
    text = [[fmt_ns(v) for v in row] for row in matrix.to_numpy(dtype=float).tolist()]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, text=text, texttemplate="%{text}", colorscale="Blues",
                               colorbar={"title": "ms"}, hovertemplate="%{y} ∩ %{x}: %{text}<extra></extra>"))
    fig.update_layout(
        title=plotly_text(title) if title else None,
        height=max(320, 60 * len(labels) + 160),
        yaxis={"autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


_BAR_FIELDS = (("busy", "busy_ns"), ("idle", "idle_ns"), ("kernels (compute+comm)", "kernel_ns"),
               ("memcpy", "memcpy_ns"), ("memset", "memset_ns"), ("comm", "comm_ns"))
_OVERLAP_FIELDS = (("compute ∩ compute", "compute_compute_ns"), ("compute ∩ copy", "compute_copy_ns"),
                   ("compute ∩ comm", "compute_comm_ns"), ("copy ∩ copy", "copy_copy_ns"))


def _device_label(d: DeviceSummary) -> str:
    return f"rank {d.rank} · GPU {d.device}" + (f" · {d.name}" if d.name else "")


def overlap_bars_figure(devices: Sequence[DeviceSummary]) -> go.Figure:
    """Per device: busy / idle time, time in compute / copy / comm, and the overlaps between the
    classes (ms), one horizontal bar per figure (one trace per device)."""
    if not devices:
        return empty_figure("no GPU activity in this run")
    labels = [lbl for lbl, _ in (*_BAR_FIELDS, *_OVERLAP_FIELDS)]
    fig = go.Figure()
    for d in devices:
        vals = [int(getattr(d, a)) for _, a in _BAR_FIELDS] + [int(getattr(d.overlap, a)) for _, a in _OVERLAP_FIELDS]
        name = plotly_text(_device_label(d))
        fig.add_trace(go.Bar(y=labels, x=[v / 1e6 for v in vals], orientation="h", name=name,
                             text=[fmt_ns(v) for v in vals], textposition="auto",
                             hovertemplate="%{y}: %{text}<extra>" + name + "</extra>"))
    fig.update_layout(
        barmode="group",
        height=max(340, 28 * len(labels) * max(1, min(len(devices), 4)) + 80),
        xaxis_title="ms",
        yaxis={"autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.08},
        showlegend=len(devices) > 1,
    )
    return fig


def stream_utilization_figure(devices: Sequence[DeviceSummary]) -> go.Figure:
    """Busy fraction of each stream over its device's span."""
    xs, ys, texts = [], [], []
    for d in devices:
        for s in d.streams:
            label = f"r{d.rank} GPU {d.device} · stream {s.stream}"
            if s.green_context is not None:
                label += f" · green ctx {s.green_context}"
            xs.append(s.busy_ns / d.span_ns if d.span_ns else 0.0)
            ys.append(plotly_text(label))
            texts.append(f"{fmt_ns(s.busy_ns)} busy · {s.kernels} kernels · {s.memcpys} memcpys")
    if not xs:
        return empty_figure("no GPU streams")
    fig = go.Figure(go.Bar(x=xs, y=ys, orientation="h", text=texts, hovertemplate="%{y}<br>%{text}<extra></extra>",
                           marker_color="#1f77b4"))
    fig.update_layout(
        xaxis={"title": "busy fraction of the device span", "tickformat": ".0%", "range": [0, 1]},
        height=max(240, 40 * len(xs) + 120),
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        yaxis={"autorange": "reversed"},
    )
    return fig


# ---------------------------------------------------------------------------------------------
# tables


GAPS_TABLE_COLUMNS = (
    "id", "rank", "device", "at", "duration", "duration_ns", "cause", "evidence", "start_ns", "end_ns",
)


def gaps_table(
    gaps: Sequence[Gap], origin_ns: int, evidence: Sequence[str] | None = None, parts: Sequence[str] | None = None
) -> pd.DataFrame:
    """Gaps sorted by duration (longest first); `at` is the gap's start from the run origin and
    `duration` its length, written by the one formatter (`+8.27 ms`, `384.3 µs`) as the CLI and the
    reports write them; `evidence`: each gap's evidence text, in the order of `gaps`
    (tracelab.render.text.gap_evidence; '' without it). With `parts` (one per gap: "steps" / "set-up")
    the gaps keep the order given (analyses.setup.steps_gaps_first: the steps' gaps lead) and a `part`
    column says which part of the run each lies in."""
    columns = [*GAPS_TABLE_COLUMNS, *(["part"] if parts is not None else [])]
    if not gaps:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame([msgspec.structs.asdict(g) for g in gaps])
    df["evidence"] = list(evidence) if evidence is not None else ""
    if parts is not None:
        df["part"] = list(parts)
    else:
        df = df.sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)
    df["id"] = [f"gap-{i}" for i in range(len(df))]
    df["at"] = fmt_rel_many(df["start_ns"].to_numpy(dtype=np.int64) - int(origin_ns))
    df["duration"] = fmt_ns_many(df["duration_ns"].to_numpy())
    return df[columns]


_COMPARE_BARS = (("span", "span_ns"), ("busy", "busy_ns"), ("idle", "idle_ns"), ("kernels", "kernel_ns"),
                 ("memcpy", "memcpy_ns"), ("comm", "comm_ns"), ("compute ∩ copy", "compute_copy_ns"),
                 ("gap time", "gap_ns"))


def compare_bars_figure(comparison: Any, *, a_label: str = "baseline", b_label: str = "variant") -> go.Figure:
    """Baseline vs variant side by side (ms) for the main device figures of a comparison
    (`tracelab.analyses.compare.Comparison`: its totals, or its only device); the variant's bars carry
    the relative change."""
    d = comparison.totals if comparison.totals is not None else (comparison.devices[0] if comparison.devices else None)
    if d is None:
        return empty_figure("nothing to compare")
    labels = [lbl for lbl, _ in _COMPARE_BARS]
    deltas = [getattr(d, attr) for _, attr in _COMPARE_BARS]
    fig = go.Figure([
        go.Bar(x=labels, y=[x.a / 1e6 for x in deltas], name=plotly_text(a_label), marker_color="#7f7f7f",
               text=[fmt_ns(x.a) for x in deltas], textposition="outside"),
        go.Bar(x=labels, y=[x.b / 1e6 for x in deltas], name=plotly_text(b_label), marker_color="#1f77b4",
               text=[fmt_ns(x.b) + ("" if x.pct is None else f" ({fmt_pct(x.pct)})") for x in deltas],
               textposition="outside"),
    ])
    fig.update_layout(
        barmode="group",
        yaxis_title="ms",
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.1},
        uniformtext={"minsize": 9, "mode": "show"},
    )
    return fig
