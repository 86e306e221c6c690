"""Plotly figures and tables for the dashboard. Pure functions: result / DataFrame in, figure out.

Names (kernels, NVTX text, API calls) are untrusted and often contain '<' (C++ templates): every string
that reaches a Plotly label goes through `plotly_text`, which escapes it (Plotly renders a subset of
HTML in labels and decodes the entities back for display).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracelab.analyses.results import Analysis, DeviceSummary, Gap
from tracelab.render.figures.gaps_svg import duration_ticks, offset_ticks
from tracelab.text_format import fmt_ns, fmt_ns_many, fmt_pct, fmt_rel_many

# ---------------------------------------------------------------------------------------------
# text helpers


def plotly_text(s: object) -> str:
    """Escape a string for a Plotly label / hover text (names are untrusted)."""
    return html.escape(str(s), quote=False)




def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=220,
        plot_bgcolor="white",
        annotations=[
            {
                "text": plotly_text(message),
                "showarrow": False,
                "x": 0.5,
                "y": 0.5,
                "xref": "paper",
                "yref": "paper",
                "font": {"size": 15, "color": "#555"},
            }
        ],
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
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            text=text,
            texttemplate="%{text}",
            colorscale="Blues",
            colorbar={"title": "ms"},
            hovertemplate="%{y} ∩ %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=plotly_text(title) if title else None,
        height=max(320, 60 * len(labels) + 160),
        yaxis={"autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
    )
    return fig


_BAR_FIELDS = (
    ("busy", "busy_ns"),
    ("idle", "idle_ns"),
    ("kernels (compute+comm)", "kernel_ns"),
    ("memcpy", "memcpy_ns"),
    ("memset", "memset_ns"),
    ("comm", "comm_ns"),
)
_OVERLAP_FIELDS = (
    ("compute ∩ compute", "compute_compute_ns"),
    ("compute ∩ copy", "compute_copy_ns"),
    ("compute ∩ comm", "compute_comm_ns"),
    ("copy ∩ copy", "copy_copy_ns"),
)


def _device_label(d: DeviceSummary) -> str:
    return f"rank {d.rank} · GPU {d.device}" + (f" · {d.name}" if d.name else "")


def overlap_bars_figure(devices: Sequence[DeviceSummary]) -> go.Figure:
    """Per device: busy / idle time, time in compute / copy / comm, and the overlaps between the
    classes (ms), one horizontal bar per figure (one trace per device)."""
    if not devices:
        return empty_figure("no GPU activity in this run")
    fields = [*_BAR_FIELDS, *[(lbl, f"overlap.{a}") for lbl, a in _OVERLAP_FIELDS]]
    labels = [lbl for lbl, _ in fields]
    fig = go.Figure()
    for d in devices:
        vals = []
        for _, attr in fields:
            obj: Any = d
            for part in attr.split("."):
                obj = getattr(obj, part)
            vals.append(int(obj))
        name = plotly_text(_device_label(d))
        fig.add_trace(
            go.Bar(
                y=labels,
                x=[v / 1e6 for v in vals],
                orientation="h",
                name=name,
                text=[fmt_ns(v) for v in vals],
                textposition="auto",
                hovertemplate="%{y}: %{text}<extra>" + name + "</extra>",
            )
        )
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
    fig = go.Figure(
        go.Bar(
            x=xs,
            y=ys,
            orientation="h",
            text=texts,
            hovertemplate="%{y}<br>%{text}<extra></extra>",
            marker_color="#1f77b4",
        )
    )
    fig.update_layout(
        xaxis={"title": "busy fraction of the device span", "tickformat": ".0%", "range": [0, 1]},
        height=max(240, 40 * len(xs) + 120),
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        yaxis={"autorange": "reversed"},
    )
    return fig


# Up to this many points the gaps chart is SVG: a WebGL context costs more to start than SVG draws a few
# thousand markers, and far more in a browser without a GPU (headless Chromium renders WebGL in software).
SVG_MAX_POINTS = 3000


def gaps_figure(gaps: Sequence[Gap], origin_ns: int, evidence: Sequence[str] | None = None) -> go.Figure:
    """Idle gaps on a time axis, coloured by cause (each point carries customdata [start, end] in ns
    from `origin_ns`); `evidence`: each gap's evidence text in the order of `gaps`, for the hover. Both
    axes are in ns and labelled by text_format: the start as an offset from the run start (`+12.0 ms`),
    the length on a log axis (`10.0 µs`, `100.0 µs`, `1.00 ms`)."""
    if not gaps:
        return empty_figure("no idle gaps above the threshold")
    start = np.fromiter((g.start_ns for g in gaps), dtype=np.int64, count=len(gaps)) - int(origin_ns)
    end = np.fromiter((g.end_ns for g in gaps), dtype=np.int64, count=len(gaps)) - int(origin_ns)
    dur = end - start
    causes = np.array([g.cause for g in gaps], dtype=object)
    ev = np.array(list(evidence) if evidence is not None else [""] * len(gaps), dtype=object)
    fig = go.Figure()
    colors = {
        "host_sync": "#d62728",
        "input_wait": "#17becf",
        "launch_latency": "#ff7f0e",
        "dependency_wait": "#9467bd",
        "no_work": "#7f7f7f",
        "unknown": "#bcbd22",
        "profiler": "#e377c2",
    }
    scatter = go.Scatter if len(gaps) <= SVG_MAX_POINTS else go.Scattergl
    for cause in sorted(set(causes.tolist())):
        m = causes == cause
        fig.add_trace(
            scatter(
                x=start[m],
                y=dur[m],
                mode="markers",
                name=str(cause),
                marker={"color": colors.get(str(cause), "#333"), "size": 8},
                customdata=np.column_stack([start[m], end[m]]).tolist(),
                hovertext=[
                    f"{plotly_text(cause)} · {d} at {t}<br>{plotly_text(e)}"
                    for d, t, e in zip(fmt_ns_many(dur[m]), fmt_rel_many(start[m]), ev[m].tolist())
                ],
                hoverinfo="text",
            )
        )
    x_hi = max(int(end.max()), 1)
    x_vals = offset_ticks(x_hi)
    y_vals, y_text = duration_ticks(float(dur.min()), float(dur.max()))
    fig.update_layout(
        xaxis={"title": "gap start (from the run start)", "tickvals": x_vals,
               "ticktext": ["0", *fmt_rel_many(x_vals[1:])], "range": [-0.02 * x_hi, 1.02 * x_hi]},
        yaxis={"title": "gap length", "type": "log", "tickvals": y_vals, "ticktext": y_text},
        height=320,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
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
    (tracelab.render.text.gap_evidence; '' without it). With `parts` (one per gap: "steps" / "set-up", issue 24)
    the gaps keep the order given (analyses.setup.steps_gaps_first: the steps' gaps lead) and a `part`
    column says which part of the run each lies in."""
    columns = [*GAPS_TABLE_COLUMNS, *(["part"] if parts is not None else [])]
    if not gaps:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame([g.__dict__ for g in gaps])
    df["evidence"] = list(evidence) if evidence is not None else ""
    if parts is not None:
        df["part"] = list(parts)
    else:
        df = df.sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)
    df["id"] = [f"gap-{i}" for i in range(len(df))]
    df["at"] = fmt_rel_many(df["start_ns"].to_numpy(dtype=np.int64) - int(origin_ns))
    df["duration"] = fmt_ns_many(df["duration_ns"].to_numpy())
    return df[columns]


def analysis_origin(analysis: Analysis) -> int:
    """The run start (tracelab.render.format.run_origin): the one time origin of every view."""
    from tracelab.render.format import run_origin

    return run_origin(analysis)


_COMPARE_BARS = (
    ("span", "span_ns"),
    ("busy", "busy_ns"),
    ("idle", "idle_ns"),
    ("kernels", "kernel_ns"),
    ("memcpy", "memcpy_ns"),
    ("comm", "comm_ns"),
    ("compute ∩ copy", "compute_copy_ns"),
    ("gap time", "gap_ns"),
)


def compare_bars_figure(comparison: Any, *, a_label: str = "baseline", b_label: str = "variant") -> go.Figure:
    """Baseline vs variant side by side (ms) for the main device figures of a comparison
    (`tracelab.analyses.compare.Comparison`: its totals, or its only device); the variant's bars carry
    the relative change."""
    d = (
        comparison.totals
        if comparison.totals is not None
        else (comparison.devices[0] if comparison.devices else None)
    )
    if d is None:
        return empty_figure("nothing to compare")
    labels = [lbl for lbl, _ in _COMPARE_BARS]
    deltas = [getattr(d, attr) for _, attr in _COMPARE_BARS]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[x.a / 1e6 for x in deltas],
            name=plotly_text(a_label),
            marker_color="#7f7f7f",
            text=[fmt_ns(x.a) for x in deltas],
            textposition="outside",
        )
    )
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[x.b / 1e6 for x in deltas],
            name=plotly_text(b_label),
            marker_color="#1f77b4",
            text=[fmt_ns(x.b) + ("" if x.pct is None else f" ({fmt_pct(x.pct)})") for x in deltas],
            textposition="outside",
        )
    )
    fig.update_layout(
        barmode="group",
        yaxis_title="ms",
        height=360,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.1},
        uniformtext={"minsize": 9, "mode": "show"},
    )
    return fig
