"""Plotly figures and tables for the dashboard. Pure functions: result / DataFrame in, figure out.

Names (kernels, NVTX text, API calls) are untrusted and often contain '<' (C++ templates): every string
that reaches a Plotly label goes through `plotly_text`, which escapes it (Plotly renders a subset of
HTML in labels and decodes the entities back for display).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracelab.analyses import units
from tracelab.analyses.kernels import KERNEL_TABLE_COLUMNS, kernel_table  # noqa: F401  (moved to the analyses)
from tracelab.analyses.results import Analysis, DeviceSummary, Gap
from tracelab.analyses.units import fmt_bytes
from tracelab.model.kinds import EventKind, Flag, LaneKind

from .lod import LEVELS, LodView

# ---------------------------------------------------------------------------------------------
# text helpers


def plotly_text(s: object) -> str:
    """Escape a string for a Plotly label / hover text (names are untrusted)."""
    return html.escape(str(s), quote=False)


def fmt_ns(ns: float) -> str:
    """A duration (tracelab.render.format.fmt_ns): 850 ns, 12.3 µs, 4.56 ms, 1.234 s."""
    return units.fmt_ns(ns, units.SIG4)


def stream_label(stream: int) -> str:
    """A GPU lane's name: "stream 7", or "all streams" for device-wide events with no stream
    (context / device synchronize: CUPTI records them on stream -1)."""
    return f"stream {stream}" if stream >= 0 else "all streams"


def _fmt_ns_array(values: np.ndarray) -> np.ndarray:
    return np.array([fmt_ns(v) for v in values.tolist()], dtype=object)  # per drawn item (<= a few 1000)


# ---------------------------------------------------------------------------------------------
# timeline rows


ROW_COLUMNS = ("row", "lane", "sm", "rank", "device", "kind", "label", "group", "y", "height")


def timeline_rows(
    lanes: pd.DataFrame,
    strings: Sequence[str],
    *,
    device_names: Mapping[tuple[int, int], str] | None = None,
    sm_rows: Mapping[tuple[int, int], tuple[int, str]] | None = None,
    show: Sequence[str] = ("stream", "sm", "nvtx", "host"),
) -> pd.DataFrame:
    """The rows of the timeline, top to bottom: for each rank, each device's stream lanes (labelled with
    context / green context), its GPU annotation lanes and its SM lanes (`sm_rows[(rank, device)] =
    (number of SMs, "measured"|"estimated")`), then the rank's NVTX lanes and host threads.
    Each row has a `y` position and a `height` (SM rows are thin). `lane` is -1 on SM rows and group
    headers; `sm` is -1 except on SM rows; `kind` is one of header/stream/annotation/sm/nvtx/host."""
    device_names = device_names or {}
    sm_rows = sm_rows or {}
    out: list[dict[str, Any]] = []

    def add(
        kind: str,
        label: str,
        group: str,
        *,
        lane: int = -1,
        sm: int = -1,
        rank: int = -1,
        device: int = -1,
        height: float = 1.0,
    ) -> None:
        out.append(
            {
                "lane": lane, "sm": sm, "rank": rank, "device": device, "kind": kind, "label": label, "group": group, "height": height
            }
        )

    lk = lanes["lane_kind"].to_numpy()
    ranks = sorted(set(lanes["rank"].tolist()) | {r for r, _ in sm_rows})
    for rank in ranks:
        of_rank = lanes[lanes["rank"] == rank]
        gpu_side = of_rank[
            np.isin(of_rank["lane_kind"], [int(LaneKind.GPU_STREAM), int(LaneKind.GPU_ANNOTATION)])
        ]
        devices = sorted(set(gpu_side["device"].tolist()) | {d for r, d in sm_rows if r == rank})
        for device in devices:
            name = device_names.get((rank, device), "")
            group = f"rank {rank} · GPU {device}" + (f" · {name}" if name else "")
            add("header", group, group, rank=rank, device=device)
            dl = gpu_side[gpu_side["device"] == device].sort_values(
                ["lane_kind", "context", "green_context", "stream"]
            )
            for r in dl.itertuples(index=False):
                if int(r.lane_kind) == int(LaneKind.GPU_STREAM):
                    if "stream" not in show:
                        continue
                    label = stream_label(int(r.stream))
                    kind = "stream"
                else:
                    if "stream" not in show:
                        continue
                    label = f"annotations s{r.stream}"
                    kind = "annotation"
                if r.context >= 0:
                    label += f" · ctx {r.context}"
                if r.green_context >= 0:
                    label += f" · green ctx {r.green_context}"
                add(kind, label, group, lane=int(r.lane), rank=rank, device=device)
            if "sm" in show and (rank, device) in sm_rows:
                n_sms, source = sm_rows[(rank, device)]
                k = sm_band_size(int(n_sms))
                n_bands = -(-int(n_sms) // k)
                for b in range(n_bands):
                    lo, hi = b * k, min(int(n_sms), (b + 1) * k) - 1
                    span = f"SM {lo}" if lo == hi else f"SMs {lo}–{hi}"
                    label = f"{span} ({source})" if b == 0 else (span if b % 4 == 0 else "")
                    add("sm", label, group, sm=lo, rank=rank, device=device, height=0.5)
        host = of_rank[np.isin(of_rank["lane_kind"], [int(LaneKind.NVTX), int(LaneKind.HOST_THREAD)])]
        if len(host) and ("nvtx" in show or "host" in show):
            group = f"rank {rank} · host"
            add("header", group, group, rank=rank)
            for r in host.sort_values(["pid", "tid", "lane_kind", "category"]).itertuples(index=False):
                if int(r.lane_kind) == int(LaneKind.NVTX):
                    if "nvtx" not in show:
                        continue
                    dom = strings[r.category] if 0 <= r.category < len(strings) else ""
                    add(
                        "nvtx",
                        f"NVTX {dom} · tid {r.tid}".replace("  ", " "),
                        group,
                        lane=int(r.lane),
                        rank=rank,
                    )
                else:
                    if "host" not in show:
                        continue
                    add("host", f"pid {r.pid} · tid {r.tid}", group, lane=int(r.lane), rank=rank)
    del lk
    rows = pd.DataFrame(out, columns=[c for c in ROW_COLUMNS if c not in ("row", "y")])
    rows.insert(0, "row", np.arange(len(rows), dtype=np.int32))
    heights = rows["height"].to_numpy(dtype=float)
    rows["y"] = np.cumsum(heights) - heights / 2 if len(rows) else np.zeros(0)
    return rows


MAX_SM_ROWS = 16


def sm_band_size(n_sms: int) -> int:
    """SMs per SM row: devices with more than MAX_SM_ROWS SMs show bands of adjacent SMs."""
    return max(1, -(-int(n_sms) // MAX_SM_ROWS))


def lane_to_row(rows: pd.DataFrame, n_lanes: int) -> np.ndarray:
    """Array mapping lane id -> row (-1 for lanes not shown)."""
    table = np.full(max(n_lanes, 1), -1, dtype=np.int32)
    shown = rows[rows["lane"] >= 0]
    table[shown["lane"].to_numpy()] = shown["row"].to_numpy()
    return table


# ---------------------------------------------------------------------------------------------
# timeline figure

EVENT_CLASSES: dict[str, tuple[str, str]] = {  # class -> (legend name, colour)
    "kernel": ("kernels", "#1f77b4"),
    "comm": ("communication", "#9467bd"),
    "memcpy": ("memcpy", "#2ca02c"),
    "memset": ("memset", "#17becf"),
    "sync": ("GPU sync", "#7f7f7f"),
    "annotation": ("GPU annotations", "#bcbd22"),
    "api": ("API calls", "#ff7f0e"),
    "blocking": ("blocking API calls", "#d62728"),
    "cpu_op": ("CPU ops", "#c7c7c7"),
    "nvtx": ("NVTX ranges", "#e377c2"),
    "sm": ("SM activity", "#8c564b"),
    "other": ("other host events", "#aaaaaa"),
}
_THIN = {"cpu_op", "sm", "other"}


def event_class(events: pd.DataFrame) -> np.ndarray:
    """The drawing class of each event (vectorized)."""
    if "sm" in events.columns and "kind" not in events.columns:
        return np.full(len(events), "sm", dtype=object)
    kind = events["kind"].to_numpy()
    flags = events["flags"].to_numpy() if "flags" in events.columns else np.zeros(len(events), dtype=np.int16)
    conds = [
        (kind == EventKind.KERNEL) & ((flags & Flag.COMM) != 0),
        kind == EventKind.KERNEL,
        kind == EventKind.MEMCPY,
        kind == EventKind.MEMSET,
        kind == EventKind.SYNC,
        kind == EventKind.GPU_ANNOTATION,
        np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER]) & ((flags & Flag.BLOCKING) != 0),
        np.isin(kind, [EventKind.RUNTIME, EventKind.DRIVER]),
        kind == EventKind.CPU_OP,
        np.isin(kind, [EventKind.NVTX_RANGE, EventKind.NVTX_MARK]),
    ]
    choices = [
        "comm",
        "kernel",
        "memcpy",
        "memset",
        "sync",
        "annotation",
        "blocking",
        "api",
        "cpu_op",
        "nvtx",
    ]
    return np.select(conds, choices, default="other").astype(object)


def _segments_xy(x0: np.ndarray, x1: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(x0)
    xs = np.empty(3 * n, dtype=float)
    ys = np.empty(3 * n, dtype=float)
    xs[0::3], xs[1::3], xs[2::3] = x0, x1, np.nan
    ys[0::3], ys[1::3], ys[2::3] = y, y, np.nan
    return xs, ys


HOVER_NAME_CHARS = 100


def _short(s: str, limit: int = HOVER_NAME_CHARS) -> str:
    """Long (templated) names cut in the middle for hover labels."""
    return s if len(s) <= limit else s[: limit * 2 // 3] + " … " + s[-(limit // 3) :]


def _name_table(strings: Sequence[str]) -> np.ndarray:
    """Escaped, shortened hover names, indexed by string id (one entry per distinct name)."""
    return np.array([plotly_text(_short(s)) for s in strings] + [""], dtype=object)


def _hover(items: pd.DataFrame, names: np.ndarray, n_strings: int) -> np.ndarray:
    """Hover text per drawn item: name, duration, grid/block, bytes (<= a few thousand items).
    Positional numpy object arrays throughout (the items' index may repeat)."""
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=object)

    def col(c: str) -> np.ndarray:
        return items[c].to_numpy()

    def txt(c: str) -> np.ndarray:
        return items[c].astype(str).to_numpy(dtype=object)

    if "name" in items.columns:
        ids = col("name")
        label = names[np.where((ids >= 0) & (ids < n_strings), ids, n_strings)]
    else:
        label = np.full(n, "", dtype=object)
    text = label + "<br>duration " + _fmt_ns_array(col("end") - col("start"))
    if "grid_x" in items.columns:
        grid = (
            "<br>grid ("
            + txt("grid_x")
            + ","
            + txt("grid_y")
            + ","
            + txt("grid_z")
            + ") block ("
            + txt("block_x")
            + ","
            + txt("block_y")
            + ","
            + txt("block_z")
            + ")"
        )
        text = text + np.where(col("grid_x") > 0, grid, "")
    if "bytes" in items.columns:
        text = text + np.array(
            ["<br>" + fmt_bytes(v) if v >= 0 else "" for v in col("bytes").tolist()], dtype=object
        )
    if "correlation" in items.columns and "kind" in items.columns:
        text = text + np.where(col("correlation") >= 0, "<br>correlation " + txt("correlation"), "")
    if "sm_first" in items.columns and "kind" not in items.columns:
        text = text + "<br>SMs " + txt("sm_first") + "–" + txt("sm_last")
        if "measured" in items.columns:
            text = text + np.where(col("measured").astype(bool), " (measured)", " (estimated)")
    return text.astype(object)


def axis_unit(span_ns: int) -> tuple[float, str]:
    """The time unit of the timeline's x axis for a window: ms above 5 ms, else µs."""
    return (1e6, "ms") if span_ns > 5_000_000 else (1e3, "µs")


def timeline_figure(
    view: LodView,
    rows: pd.DataFrame,
    strings: Sequence[str],
    *,
    origin_ns: int,
    highlight: pd.DataFrame | None = None,
    sm_view: LodView | None = None,
    title: str = "",
    uirevision: str = "timeline",
    gaps: Sequence[Gap] = (),
) -> go.Figure:
    """The timeline: one horizontal row per lane (see `timeline_rows`), events as WebGL segments, busy
    bins as translucent segments, a shared time axis in µs from `origin_ns`. `view.items` need a `row`
    column; points carry customdata [row, start - origin_ns, end - origin_ns, correlation, kind] for
    click handling.
    `highlight` (events with `row`) is outlined on top, joined by a dashed line (launch <-> GPU op).
    `gaps` inside the window are shaded (the 200 longest)."""
    names = _name_table(strings)
    unit, unit_name = axis_unit(view.t1 - view.t0)
    y_of_row = rows["y"].to_numpy(dtype=float) if len(rows) else np.zeros(1)
    height_px = 26
    n_units = float(rows["height"].sum()) if len(rows) else 1.0
    fig = go.Figure()

    def add_items(items: pd.DataFrame, classes: np.ndarray) -> None:
        if len(items) == 0:
            return
        hover = _hover(items, names, len(strings))
        row = items["row"].to_numpy()
        x0 = (items["start"].to_numpy() - origin_ns) / unit
        x1 = (items["end"].to_numpy() - origin_ns) / unit
        y = y_of_row[row]
        kind = items["kind"].to_numpy() if "kind" in items.columns else np.full(len(items), -1)
        corr = items["correlation"].to_numpy() if "correlation" in items.columns else np.full(len(items), -1)
        # plain JSON numbers, times relative to the origin (exact in float64), so that the browser
        # hands back exactly what it got (no int64 typed arrays, which JavaScript cannot decode)
        custom = np.column_stack(
            [row, items["start"].to_numpy() - origin_ns, items["end"].to_numpy() - origin_ns, corr, kind]
        ).astype(np.float64)
        for cls in pd.unique(classes):
            m = classes == cls
            legend, color = EVENT_CLASSES.get(cls, EVENT_CLASSES["other"])
            width = 3 if cls in _THIN else 12
            xs, ys = _segments_xy(x0[m], x1[m], y[m])
            fig.add_trace(
                go.Scattergl(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": color, "width": width},
                    name=legend,
                    legendgroup=cls,
                    hoverinfo="skip",
                    showlegend=True,
                )
            )
            fig.add_trace(
                go.Scattergl(
                    x=(x0[m] + x1[m]) / 2,
                    y=y[m],
                    mode="markers",
                    marker={
                        "color": color, "size": 3 if cls in _THIN else 5, "opacity": 0.35 if cls in _THIN else 0.6
                    },
                    name=legend,
                    legendgroup=cls,
                    showlegend=False,
                    hovertext=hover[m],
                    hoverinfo="text",
                    customdata=custom[m].tolist(),
                )
            )

    def add_bins(bins: pd.DataFrame, color: str, group: str) -> None:
        if len(bins) == 0:
            return
        row = bins["row"].to_numpy()
        x0 = (bins["start"].to_numpy() - origin_ns) / unit
        x1 = (bins["end"].to_numpy() - origin_ns) / unit
        y = y_of_row[row]
        lv = bins["level"].to_numpy()
        text = np.array(
            [
                f"{c} short events folded<br>busy {b:.0%}<br>{fmt_ns(e - s)}"
                for c, b, s, e in zip(
                    bins["count"].tolist(),
                    bins["busy"].tolist(),
                    bins["start"].tolist(),
                    bins["end"].tolist(),
                )
            ],
            dtype=object,
        )
        for level in range(len(LEVELS)):
            m = lv == level
            if not m.any():
                continue
            xs, ys = _segments_xy(x0[m], x1[m], y[m])
            fig.add_trace(
                go.Scattergl(
                    x=xs,
                    y=ys,
                    mode="lines",
                    opacity=0.25 + 0.75 * LEVELS[level],
                    line={"color": color, "width": 12 if group == "bins" else 3},
                    name="short events, aggregated (darker = busier)",
                    legendgroup=group,
                    hoverinfo="skip",
                    showlegend=group == "bins" and level == int(lv.max()),
                )
            )
            fig.add_trace(
                go.Scattergl(
                    x=(x0[m] + x1[m]) / 2,
                    y=y[m],
                    mode="markers",
                    marker={"color": color, "size": 4, "opacity": 0.5},
                    legendgroup=group,
                    showlegend=False,
                    hovertext=text[m],
                    hoverinfo="text",
                )
            )

    add_bins(view.bins, "#4c6a92", "bins")
    add_items(view.items, event_class(view.items))
    if sm_view is not None:
        add_bins(sm_view.bins, EVENT_CLASSES["sm"][1], "sm-bins")
        add_items(sm_view.items, np.full(len(sm_view.items), "sm", dtype=object))

    if highlight is not None and len(highlight):
        hx0 = (highlight["start"].to_numpy() - origin_ns) / unit
        hx1 = (highlight["end"].to_numpy() - origin_ns) / unit
        hy = y_of_row[highlight["row"].to_numpy()]
        xs, ys = _segments_xy(hx0, hx1, hy)
        fig.add_trace(
            go.Scattergl(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": "#ffd700", "width": 18},
                opacity=0.7,
                name="selected (correlated)",
                hoverinfo="skip",
            )
        )
        order = np.argsort(hx0)
        fig.add_trace(
            go.Scattergl(
                x=hx0[order],
                y=hy[order],
                mode="lines+markers",
                line={"color": "#d4a000", "width": 2, "dash": "dash"},
                marker={"size": 9, "color": "#d4a000"},
                showlegend=False,
                hoverinfo="skip",
            )
        )

    # row labels and group separators
    labels = rows["label"].to_numpy(dtype=object) if len(rows) else np.zeros(0, dtype=object)
    is_header = (rows["kind"] == "header").to_numpy() if len(rows) else np.zeros(0, dtype=bool)
    tick_mask = labels != ""
    ticktext = [
        f"<b>{plotly_text(t)}</b>" if h else plotly_text(t)
        for t, h in zip(labels[tick_mask], is_header[tick_mask])
    ]
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": float(y - 0.5),
            "y1": float(y - 0.5),
            "line": {"color": "#888", "width": 1},
        }
        for y in (y_of_row[: len(rows)][is_header] if len(rows) else [])
    ]
    visible_gaps = sorted(
        (g for g in gaps if g.end_ns > view.t0 and g.start_ns < view.t1), key=lambda g: -g.duration_ns
    )[:200]
    for g in visible_gaps:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": (g.start_ns - origin_ns) / unit,
                "x1": (g.end_ns - origin_ns) / unit,
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(214,39,40,0.07)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    if visible_gaps:
        mid = np.array([((g.start_ns + g.end_ns) / 2 - origin_ns) / unit for g in visible_gaps])
        fig.add_trace(
            go.Scatter(
                x=mid,
                y=np.zeros(len(mid)),
                mode="markers",
                cliponaxis=False,
                marker={"color": "rgba(214,39,40,0.7)", "size": 10, "symbol": "triangle-down"},
                name="idle gaps (shaded)",
                hoverinfo="text",
                hovertext=[
                    f"idle gap {fmt_ns(g.duration_ns)} · {plotly_text(g.cause)}<br>"
                    f"{plotly_text(_short(g.evidence, 160))}"
                    for g in visible_gaps
                ],
            )
        )
    fig.update_layout(
        title={"text": plotly_text(title), "x": 0.01} if title else None,
        height=int(min(max(260, n_units * height_px + 140), 4000)),
        margin={"l": 10, "r": 10, "t": 70 if title else 50, "b": 40},
        xaxis={
            "title": f"time ({unit_name} from run start)",
            "range": [(view.t0 - origin_ns) / unit, (view.t1 - origin_ns) / unit],
            "showgrid": True,
            "zeroline": False,
        },
        yaxis={
            "tickvals": y_of_row[: len(rows)][tick_mask].tolist() if len(rows) else [],
            "ticktext": ticktext,
            "range": [n_units, 0],
            "fixedrange": True,
            "showgrid": False,
            "automargin": True,
        },
        shapes=shapes,
        hovermode="closest",
        dragmode="zoom",
        uirevision=uirevision,
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "xanchor": "left", "font": {"size": 11}},
        plot_bgcolor="white",
    )
    return fig


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


def gaps_figure(gaps: Sequence[Gap], origin_ns: int) -> go.Figure:
    """Idle gaps on a time axis, coloured by cause (each point carries customdata [start, end] in ns
    from `origin_ns`)."""
    if not gaps:
        return empty_figure("no idle gaps above the threshold")
    df = pd.DataFrame([g.__dict__ for g in gaps])
    fig = go.Figure()
    colors = {
        "host_sync": "#d62728",
        "launch_latency": "#ff7f0e",
        "dependency_wait": "#9467bd",
        "no_work": "#7f7f7f",
        "unknown": "#bcbd22",
    }
    for cause, part in df.groupby("cause", sort=True):
        fig.add_trace(
            go.Scattergl(
                x=(part["start_ns"] - origin_ns) / 1e3,
                y=part["duration_ns"] / 1e3,
                mode="markers",
                name=str(cause),
                marker={"color": colors.get(str(cause), "#333"), "size": 8},
                customdata=np.column_stack(
                    [part["start_ns"] - origin_ns, part["end_ns"] - origin_ns]
                ).tolist(),
                hovertext=[
                    f"{plotly_text(cause)} · {fmt_ns(d)}<br>{plotly_text(ev)}"
                    for d, ev in zip(part["duration_ns"].tolist(), part["evidence"].tolist())
                ],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        xaxis_title="gap start (µs from run start)",
        yaxis_title="gap length (µs)",
        yaxis_type="log",
        height=320,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
    )
    return fig


# ---------------------------------------------------------------------------------------------
# tables




GAPS_TABLE_COLUMNS = (
    "id", "rank", "device", "start_us", "duration", "duration_ns", "cause", "evidence", "start_ns", "end_ns",
)


def gaps_table(gaps: Sequence[Gap], origin_ns: int) -> pd.DataFrame:
    """Gaps sorted by duration (longest first), with times relative to the run origin."""
    if not gaps:
        return pd.DataFrame(columns=list(GAPS_TABLE_COLUMNS))
    df = pd.DataFrame([g.__dict__ for g in gaps])
    df = df.sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)
    df["id"] = [f"gap-{i}" for i in range(len(df))]
    df["start_us"] = ((df["start_ns"] - origin_ns) / 1e3).round(3)
    df["duration"] = [fmt_ns(v) for v in df["duration_ns"].tolist()]
    return df[list(GAPS_TABLE_COLUMNS)]


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
            text=[fmt_ns(x.b) + ("" if x.pct is None else f" ({x.pct:+.0f}%)") for x in deltas],
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
