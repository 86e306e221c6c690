"""Per-SM figures (pure: analysis result -> plotly Figure).

- `sm_lanes_figure(grid)`: every SM of a device as one row (132 rows on an H100/H200), time binned
  into columns, colour = fraction of the bin the SM was busy; one heatmap per partition with its own
  colour, so green-context partitions stand apart. Titled "measured" or "estimated".
- `partition_utilization_figure(util)`: SM utilization over time of the device and of each
  green-context partition (the DataFrame of `tracelab.analyses.sm.summary.sm_utilization`).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracelab.analyses.sm.summary import SmGrid

# one sequential colour scale per partition (white = idle), cycling
_SCALES = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")
_LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#7f7f7f")


def _partition_label(gc: int, n: int) -> str:
    return f"outside green contexts ({n} SMs)" if gc < 0 else f"green context {gc} ({n} SMs)"


def _axis(origin_ns: int | None) -> str:
    return "time since first GPU activity (ms)" if origin_ns is None else "time since the run start (ms)"


def sm_lanes_figure(
    grid: SmGrid,
    *,
    title: str | None = None,
    height: int | None = None,
    compact: bool = False,
    origin_ns: int | None = None,
) -> go.Figure:
    """All SM lanes of one device as a heatmap: one row per SM, grouped by partition.

    `compact=True` is for embedding in a file: z as integer percent (uint8) and no per-cell hover
    text (the "SM n" label of every cell is most of the figure's size)."""
    fig = go.Figure()
    n_rows = len(grid.sm_ids)
    origin = (grid.edges[0] if len(grid.edges) else 0) if origin_ns is None else origin_ns  # run start when given
    x_ms = (grid.edges[:-1] + np.diff(grid.edges) / 2 - origin) / 1e6 if len(grid.edges) > 1 else []
    sizes = dict(grid.partitions)
    groups = list(dict.fromkeys(grid.sm_partition.tolist()))
    tickvals: list[float] = []
    ticktext: list[str] = []
    for i, gc in enumerate(groups):
        rows = np.flatnonzero(grid.sm_partition == gc)
        label = _partition_label(int(gc), sizes.get(int(gc), len(rows)))
        if compact:
            z = np.clip(np.round(grid.busy[rows] * 100), 0, 100).astype(np.uint8)
            cells = {"zmin": 0, "zmax": 100, "colorbar": {"title": "busy", "ticksuffix": "%"}}
            hovertemplate = label + "<br>t=%{x:.3f} ms<br>busy %{z}%<extra></extra>"
        else:
            z = grid.busy[rows]
            hover = np.repeat([[f"SM {int(s)}"] for s in grid.sm_ids[rows]], grid.busy.shape[1], axis=1)
            cells = {"zmin": 0.0, "zmax": 1.0, "colorbar": {"title": "busy", "tickformat": ".0%"}, "text": hover}
            hovertemplate = "%{text} · " + label + "<br>t=%{x:.3f} ms<br>busy %{z:.0%}<extra></extra>"
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x_ms,
                y=rows,
                colorscale=_SCALES[i % len(_SCALES)],
                showscale=i == 0,
                name=label,
                hovertemplate=hovertemplate,
                **cells,
            )
        )
        if len(rows):
            tickvals.append(float(rows.mean()))
            ticktext.append(label.replace(" (", "<br>("))
            if i > 0:
                fig.add_hline(y=float(rows.min()) - 0.5, line={"color": "black", "width": 1})
    source = {"measured": "measured (probe)", "estimated": "estimated (occupancy model)"}.get(
        grid.source, "none"
    )
    if grid.source == "measured" and grid.estimated_kernels:
        source += f"; {grid.estimated_kernels} uninstrumented kernel launches estimated"
    fig.update_layout(
        title=title or f"SM lanes · {html.escape(grid.device_label)} · {n_rows} SMs · {source}",
        xaxis_title=_axis(origin_ns),
        yaxis={
            "title": "one row per SM, grouped by partition",
            "autorange": "reversed",
            "tickvals": tickvals,
            "ticktext": ticktext,
        },
        height=height or max(320, min(1400, 6 * n_rows + 140)),
        template="plotly_white",
        meta={"source": grid.source, "sm_rows": n_rows},
    )
    return fig


def partition_utilization_figure(
    util: pd.DataFrame, *, title: str | None = None, origin_ns: int | None = None
) -> go.Figure:
    """SM utilization (%) over time of the device and each green-context partition."""
    fig = go.Figure()
    if len(util):
        t0 = int(util["start"].min()) if origin_ns is None else int(origin_ns)
        src = str(util["source"].iloc[0])
        keys = util[["scope", "green_context", "sm_count"]].drop_duplicates().itertuples(index=False)
        for i, (scope, gc, n) in enumerate(keys):
            part = util[(util["scope"] == scope) & (util["green_context"] == gc)]
            label = f"device ({n} SMs)" if scope == "device" else _partition_label(int(gc), int(n))
            fig.add_trace(
                go.Scatter(
                    x=(part["start"].to_numpy() - t0) / 1e6,
                    y=part["utilization"].to_numpy() * 100,
                    mode="lines",
                    line={
                        "shape": "hv",
                        "color": _LINE_COLOURS[i % len(_LINE_COLOURS)],
                        "dash": "dot" if scope == "device" else "solid",
                    },
                    name=label,
                    hovertemplate=label + "<br>t=%{x:.3f} ms<br>%{y:.1f}% of SMs busy<extra></extra>",
                )
            )
    else:
        src = "none"
    fig.update_layout(
        title=title or f"SM utilization over time ({src})",
        xaxis_title=_axis(origin_ns),
        yaxis={"title": "SMs busy (%)", "range": [0, 105]},
        template="plotly_white",
        meta={"source": src},
    )
    return fig
