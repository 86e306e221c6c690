"""Figures of the cross-rank view (Ranks page): rank × step (or time bin) heatmaps of GPU busy and of
collective wait. Pure: results in, plotly figures out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from tracelab.analyses.ranks.heatmap import RankHeatmap


def rank_heatmap_figure(h: RankHeatmap, what: str = "busy") -> go.Figure:
    """`what`: "busy" (fraction of each window the rank's GPUs were busy) or "wait" (time the rank
    waited in collectives for the last rank, ms)."""
    if what == "busy":
        z = np.round(h.busy_fraction * 100.0, 1)
        title, unit, scale = "GPU busy per rank", "%", "Blues"
    else:
        z = np.round(h.wait_ns / 1e6, 3)
        title, unit, scale = "Waited in collectives for the last rank", "ms", "Reds"
    columns = "step" if h.column_kind == "step" else "time bin (offset from the first GPU activity)"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(h.labels),
            y=[f"rank {r}" for r in h.ranks],
            colorscale=scale,
            zmin=0,
            zmax=100 if what == "busy" else None,
            colorbar={"title": unit},
            hovertemplate="%{y} · %{x}: %{z} " + unit + "<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{title} ({columns})",
        height=max(260, 60 + 22 * len(h.ranks)),
        margin={"l": 70, "r": 20, "t": 50, "b": 60},
        yaxis={"autorange": "reversed"},
    )
    return fig
