"""Pure figure functions the reports need (results / DataFrames -> plotly Figure), plus the binning
that keeps report figures small: a report never embeds raw events, only per-bin busy fractions.

Text that reaches plotly (kernel names, sources) is html-escaped first: plotly renders a subset of
HTML tags in labels and hover text, and turns entities back into the characters they stand for.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.device.devices import comm_kernels
from tracelab.analyses.results import Analysis, cause_totals
from tracelab.model import GPU_ACTIVITY_KINDS, EventKind, Timeline
from tracelab.render.format import run_origin
from tracelab.render.text.compare import shorten

COLORS = {
    "a": "#7f8c9a", "b": "#2b7bb9", "kernel": "#2b7bb9", "copy": "#e08a2c", "comm": "#8e44ad", "host_sync": "#d62728",
    "input_wait": "#17becf", "launch_latency": "#ff9f1c", "dependency_wait": "#9467bd", "no_work": "#7f8c9a",
    "unknown": "#bcbd22", "profiler": "#e377c2",
}


def esc(text: object, limit: int = 80) -> str:
    """Untrusted text for a plotly label: cut in the middle to `limit` characters, then html-escaped."""
    return html.escape(shorten(" ".join(str(text).split()), limit))


def _layout(fig: go.Figure, title: str, height: int = 360, **kw) -> go.Figure:
    fig.update_layout(title={"text": html.escape(title), "x": 0.01, "font": {"size": 15}}, height=height,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.18}, **kw)
    return fig


# ---- binning ----------------------------------------------------------------------------------------


def time_edges(t0: int, t1: int, bins: int) -> np.ndarray:
    """`bins` equal bins over [t0, t1] (at least 1 ns), edges rounded to whole ns (duplicates dropped)."""
    return np.unique(np.linspace(t0, max(t1, t0 + 1), bins + 1).round().astype(np.int64))


RUN_START_AXIS = "time since the run start (ms)"


def bin_centers_ms(edges: np.ndarray, origin_ns: int | None = None) -> np.ndarray:
    """Bin centers in ms since `origin_ns` (the run start, `format.run_origin`; default: the first edge),
    float32: the x axis of binned figures."""
    origin = edges[0] if origin_ns is None else origin_ns
    return (((edges[:-1] + edges[1:]) / 2 - origin) / 1e6).astype(np.float32)


def _time_axis(origin_ns: int | None) -> str:
    return RUN_START_AXIS if origin_ns is not None else "time since first GPU activity (ms)"


def covered_per_bin(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time (ns) of each bin [edges[i], edges[i+1]) under the union of the intervals."""
    us, ue = merge(starts, ends)
    return covered_length(us, ue, edges[:-1], edges[1:])


def binned_busy(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy fraction (0..1) of each bin [edges[i], edges[i+1]) under the union of the intervals."""
    if len(starts) == 0:
        return np.zeros(len(edges) - 1)
    e = np.round(edges).astype(np.int64)
    covered = covered_per_bin(starts, ends, e).astype(np.float64)
    width = np.diff(e).astype(np.float64)
    return np.clip(covered / np.where(width > 0, width, 1), 0.0, 1.0)


def binned_utilization(timeline: Timeline, bins: int = 200) -> tuple[pd.DataFrame, np.ndarray]:
    """Busy fraction per time bin for every device (all GPU activity) and every stream of it.

    Returns (rows, edges): rows has columns rank, device, stream (-1 = the whole device), label and
    `busy` (an array of `bins` fractions); edges are the bin edges in ns on the trace clock, shared by
    all devices so the rows line up."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    gpu = np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS]) & (ev["device"].to_numpy() >= 0)
    cols = ["rank", "device", "stream", "start", "end"]
    g = ev.loc[gpu, cols]
    if g.empty:
        return pd.DataFrame(columns=["rank", "device", "stream", "label", "busy"]), np.zeros(0)
    t0, t1 = int(g["start"].min()), int(g["end"].max())
    edges = time_edges(t0, t1, bins)
    rows = []
    for (rank, device), d in g.groupby(["rank", "device"], sort=True):  # per device
        s, e = d["start"].to_numpy(), d["end"].to_numpy()
        rows.append((int(rank), int(device), -1, f"r{rank}/d{device} all", binned_busy(s, e, edges)))
        for stream, sd in d.groupby("stream", sort=True):  # per stream
            rows.append((int(rank), int(device), int(stream), f"r{rank}/d{device} s{stream}",
                         binned_busy(sd["start"].to_numpy(), sd["end"].to_numpy(), edges)))
    return pd.DataFrame(rows, columns=["rank", "device", "stream", "label", "busy"]), edges


def kind_binned(timeline: Timeline, rank: int, device: int, edges: np.ndarray) -> dict[str, np.ndarray]:
    """Busy fraction per bin of compute kernels, copies (memcpy + memset) and comm kernels of a device."""
    ev = timeline.events
    rows = np.flatnonzero((ev["rank"].to_numpy() == rank) & (ev["device"].to_numpy() == device))
    kind = ev["kind"].to_numpy()[rows]
    comm = comm_kernels(timeline, rows)  # the analyses' definition: flagged or named like a collective
    s, e = ev["start"].to_numpy()[rows], ev["end"].to_numpy()[rows]
    masks = {
        "compute": (kind == int(EventKind.KERNEL)) & ~comm,
        "copy": np.isin(kind, [int(EventKind.MEMCPY), int(EventKind.MEMSET)]),
        "comm": comm,
    }
    return {k: binned_busy(s[m], e[m], edges) for k, m in masks.items() if m.any()}


# ---- single-run figures -----------------------------------------------------------------------------


def utilization_heatmap_figure(rows: pd.DataFrame, edges: np.ndarray, origin_ns: int | None = None) -> go.Figure:
    """Lanes (devices and their streams) x time bins, colored by busy fraction."""
    fig = go.Figure()
    if len(rows):
        centers_ms = bin_centers_ms(edges, origin_ns)
        z = np.round(np.vstack(rows["busy"].to_list()) * 100).astype(np.uint8)
        fig.add_trace(go.Heatmap(z=z, x=centers_ms, y=[html.escape(x) for x in rows["label"]], zmin=0, zmax=100,
                                 colorscale="Blues", colorbar={"title": {"text": "busy %"}},
                                 hovertemplate="%{y}<br>t=%{x:.3f} ms<br>busy %{z}%<extra></extra>"))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(title_text=_time_axis(origin_ns))
    return _layout(fig, "GPU utilization over time (per device and stream, binned)", height=max(260, 90 + 22 * len(rows)))


def activity_figure(
    series: dict[str, np.ndarray], edges: np.ndarray, title: str, origin_ns: int | None = None
) -> go.Figure:
    """Stacked lines of compute / copy / comm busy fraction per bin for one device."""
    fig = go.Figure()
    x = bin_centers_ms(edges, origin_ns) if len(edges) else []
    for name, values in series.items():
        fig.add_trace(go.Scatter(x=x, y=np.round(values * 100, 1).astype(np.float32), name=name, mode="lines",
                                 line={"color": COLORS["kernel" if name == "compute" else name], "width": 1.5},
                                 hovertemplate=f"{name} %{{y:.1f}}%<extra></extra>"))
    fig.update_yaxes(title_text="busy % of bin", range=[0, 105])
    fig.update_xaxes(title_text=_time_axis(origin_ns))
    return _layout(fig, title, hovermode="x unified")


def device_summary_figure(analysis: Analysis) -> go.Figure:
    """Busy vs idle time per device (stacked horizontal bars)."""
    labels = [f"r{d.rank}/d{d.device}" for d in analysis.devices]
    fig = go.Figure([
        go.Bar(name="busy", y=labels, x=[d.busy_ns / 1e6 for d in analysis.devices], orientation="h",
               marker_color=COLORS["b"]),
        go.Bar(name="idle", y=labels, x=[d.idle_ns / 1e6 for d in analysis.devices], orientation="h",
               marker_color="#c9d0d8"),
    ])
    fig.update_xaxes(title_text="ms")
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, "Busy and idle time per device", barmode="stack", height=170 + 34 * len(labels))


def sm_partitions_figure(analysis: Analysis) -> go.Figure:
    """SM busy fraction per device and per green-context partition (from the analysis)."""
    labels, values, text = [], [], []
    for d in analysis.devices:
        labels.append(f"r{d.rank}/d{d.device} ({d.sm_count or '?'} SMs)")
        values.append(round(100 * d.sm.busy_fraction, 2))
        text.append(d.sm.source)
        for p in d.sm.partitions:
            gc = "rest of device" if p.green_context is None else f"green ctx {p.green_context}"
            labels.append(f"r{d.rank}/d{d.device} {gc} ({p.sm_count} SMs)")
            values.append(round(100 * p.busy_fraction, 2))
            text.append(d.sm.source)
    fig = go.Figure(
        go.Bar(x=values, y=labels, orientation="h", text=text, textposition="auto", marker_color=COLORS["kernel"],
               hovertemplate="%{y}: %{x:.1f}% SM busy (%{text})<extra></extra>")
    )
    fig.update_xaxes(title_text="SM busy % (measured / estimated)", range=[0, 100])
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, "Per-SM utilization", height=max(240, 100 + 26 * len(labels)))


def gaps_by_cause_figure(analysis: Analysis) -> go.Figure:
    """Total idle time per gap cause (horizontal bars, the count in the label)."""
    totals = cause_totals(analysis.gaps, ties="table")
    causes = [c for c, _, _ in totals]
    fig = go.Figure(go.Bar(y=causes, x=[t / 1e6 for _, _, t in totals], text=[f"{n} gaps" for _, n, _ in totals],
                           orientation="h", marker_color=[COLORS.get(c, "#888") for c in causes], textposition="auto",
                           hovertemplate="%{y}: %{x:.3f} ms (%{text})<extra></extra>"))
    fig.update_xaxes(title_text="idle time (ms)")
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, "Idle gaps by cause", height=150 + 34 * len(causes))


def gaps_over_time_figure(analysis: Analysis, bins: int = 120) -> go.Figure:
    """Idle time in gaps per time bin, stacked by cause (all devices together: device-time), so the
    reader sees when in the run the GPU idles and why. Binned: size independent of the gap count."""
    fig = go.Figure()
    if not analysis.gaps:
        return _layout(fig, "Idle gaps over time, by cause")
    start = np.fromiter((g.start_ns for g in analysis.gaps), dtype=np.int64, count=len(analysis.gaps))
    end = np.fromiter((g.end_ns for g in analysis.gaps), dtype=np.int64, count=len(analysis.gaps))
    cause = np.array([g.cause for g in analysis.gaps], dtype=object)
    device_keys = np.array([(g.rank, g.device) for g in analysis.gaps], dtype=np.int64)
    t0 = min(d.start_ns for d in analysis.devices) if analysis.devices else int(start.min())
    t1 = max(d.end_ns for d in analysis.devices) if analysis.devices else int(end.max())
    edges = time_edges(t0, t1, bins)
    x = bin_centers_ms(edges, run_origin(analysis))
    totals = {c: int((end - start)[cause == c].sum()) for c in set(cause.tolist())}
    for c in sorted(totals, key=lambda c: -totals[c]):
        m = cause == c
        # gaps of one device are disjoint; across devices they add up (device-time)
        per_bin = np.zeros(len(edges) - 1)
        keys = device_keys[m]
        for key in np.unique(keys, axis=0):  # one pass per device
            sel = (keys == key).all(axis=1)
            per_bin += covered_per_bin(start[m][sel], end[m][sel], edges)
        fig.add_trace(go.Bar(x=x, y=(per_bin / 1e6).astype(np.float32), name=c, marker_color=COLORS.get(c, "#888"),
                             hovertemplate=c + ": %{y:.3f} ms idle<br>t=%{x:.3f} ms<extra></extra>"))
    fig.update_xaxes(title_text=RUN_START_AXIS)
    fig.update_yaxes(title_text="idle time in gaps (ms per bin)")
    return _layout(fig, "Idle gaps over time, by cause", barmode="stack", bargap=0)


def kernels_figure(kernels: pd.DataFrame, top: int = 15) -> go.Figure:
    """Top kernels by total time (horizontal bars); `kernels` is `kernel_summary(...)`."""
    k = kernels.head(top)
    names = [esc(n or "(unnamed)", 60) for n in k["name"]]
    # identical cut names would merge on a category axis: number them
    labels = [f"{i + 1}. {n}" for i, n in enumerate(names)]
    fig = go.Figure(go.Bar(
        x=(k["total_ns"] / 1e6).round(4).tolist(), y=labels, orientation="h", marker_color=COLORS["kernel"],
        customdata=np.c_[k["calls"].to_numpy(), (k["mean_ns"] / 1e3).round(2).to_numpy()],
        hovertemplate="%{y}<br>total %{x:.3f} ms, %{customdata[0]} calls, mean %{customdata[1]} µs<extra></extra>",
    ))
    fig.update_xaxes(title_text="total time (ms)")
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    return _layout(fig, f"Top {len(k)} kernels by total time", height=max(240, 100 + 24 * len(k)))


# ---- comparison figures -----------------------------------------------------------------------------


def comparison_device_figure(comparison: Comparison) -> go.Figure:
    """Span / busy / idle of A and B, per matched device (grouped bars, ms)."""
    fig = go.Figure()
    devs = comparison.devices
    cats = [f"r{d.rank}/d{d.device} {f}" for d in devs for f in ("span", "busy", "idle")]
    for side in ("a", "b"):
        y = [getattr(getattr(d, f + "_ns"), side) / 1e6 for d in devs for f in ("span", "busy", "idle")]
        fig.add_trace(go.Bar(name=f"{side.upper()}", x=cats, y=y, marker_color=COLORS[side]))
    fig.update_yaxes(title_text="ms")
    return _layout(fig, "Span, busy and idle: A vs B", barmode="group")


def comparison_gaps_figure(comparison: Comparison) -> go.Figure:
    gaps = [g for g in comparison.gaps if g.count.a or g.count.b]
    fig = go.Figure()
    for side in ("a", "b"):
        fig.add_trace(go.Bar(name=side.upper(), x=[g.cause for g in gaps], y=[getattr(g.total_ns, side) / 1e6 for g in gaps],
                             text=[f"{getattr(g.count, side)} gaps" for g in gaps], marker_color=COLORS[side],
                             hovertemplate="%{x}: %{y:.3f} ms (%{text})<extra></extra>"))
    fig.update_yaxes(title_text="idle time (ms)")
    return _layout(fig, "Idle gaps by cause: A vs B", barmode="group")


def comparison_kernels_figure(comparison: Comparison, top: int = 15) -> go.Figure:
    ks = comparison.kernels[:top]
    labels = [f"{i + 1}. {esc(k.name or '(unnamed)', 60)}" for i, k in enumerate(ks)]
    fig = go.Figure([go.Bar(name=side.upper(), y=labels, x=[getattr(k.total_ns, side) / 1e6 for k in ks], orientation="h",
                            marker_color=COLORS[side]) for side in ("a", "b")])
    fig.update_xaxes(title_text="total time (ms)")
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    return _layout(fig, "Top kernels: A vs B", barmode="group", height=max(260, 110 + 34 * len(ks)))

