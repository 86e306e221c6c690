"""Kernel statistics grouped by name: the "top kernels" table of reports, comparisons and the dashboard.

Pure Timeline -> DataFrame, one vectorized groupby over the kernel rows (no per-event Python).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracelab.analyses.device.devices import comm_kernels
from tracelab.model import EventKind, Timeline

if TYPE_CHECKING:
    import pandas as pd

KERNEL_SUMMARY_COLUMNS: dict[str, str] = {
    "name": "object",  # the kernel name (untrusted text: escape it when rendering)
    "calls": "int64",
    "total_ns": "int64",  # sum of kernel durations (not a union: concurrent launches add up)
    "mean_ns": "float64",
    "min_ns": "int64",
    "max_ns": "int64",
    "share": "float64",  # total_ns / sum of all kernel durations in the selection (0..1)
    "comm": "bool",  # a communication (NCCL/RCCL) kernel
}


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in KERNEL_SUMMARY_COLUMNS.items()})


def kernel_summary(timeline: Timeline, rank: int | None = None, device: int | None = None) -> pd.DataFrame:
    """One row per distinct kernel name with calls, total / mean / min / max duration and share of
    kernel time, sorted by total time (largest first). `rank` / `device` restrict the selection."""
    import pandas as pd

    ev = timeline.events
    mask = ev["kind"].to_numpy() == int(EventKind.KERNEL)
    if rank is not None:
        mask &= ev["rank"].to_numpy() == rank
    if device is not None:
        mask &= ev["device"].to_numpy() == device
    if not mask.any():
        return _empty()
    names = ev["name"].to_numpy()[mask]
    dur = (ev["end"].to_numpy()[mask] - ev["start"].to_numpy()[mask]).astype(np.int64)
    comm = comm_kernels(timeline, np.flatnonzero(mask))  # flagged by the parser or named like a collective
    g = pd.DataFrame({"name_id": names, "dur": dur, "comm": comm}).groupby("name_id", sort=False)
    out = g["dur"].agg(calls="count", total_ns="sum", mean_ns="mean", min_ns="min", max_ns="max")
    out["comm"] = g["comm"].any()
    total = int(dur.sum())
    out["share"] = out["total_ns"] / total if total > 0 else 0.0
    out = out.reset_index()
    out.insert(0, "name", timeline.names(out["name_id"].to_numpy()))
    out = out.sort_values(["total_ns", "calls"], ascending=[False, False], kind="stable").reset_index(drop=True)
    return out[list(KERNEL_SUMMARY_COLUMNS)].astype(KERNEL_SUMMARY_COLUMNS)


KERNEL_TABLE_COLUMNS = ("name", "count", "total_ns", "mean_ns", "max_ns", "grid", "block", "occupancy")


def kernel_table(timeline: Timeline, occupancy: pd.Series | None = None) -> pd.DataFrame:
    """One row per (kernel name, grid, block): count, total / mean / max duration (ns), and the
    theoretical occupancy (0..1) when `occupancy` (indexed like timeline.events, NaN = unknown) is
    given. Sorted by total time. Vectorized groupby."""
    import pandas as pd

    ev = timeline.events
    k = ev[ev["kind"] == int(EventKind.KERNEL)]
    if k.empty:
        return pd.DataFrame({c: [] for c in KERNEL_TABLE_COLUMNS})
    df = pd.DataFrame({
        "name_id": k["name"].to_numpy(),
        "grid": k["grid_x"].astype(str) + "×" + k["grid_y"].astype(str) + "×" + k["grid_z"].astype(str),
        "block": k["block_x"].astype(str) + "×" + k["block_y"].astype(str) + "×" + k["block_z"].astype(str),
        "dur": (k["end"] - k["start"]).to_numpy(),
        "occ": occupancy.reindex(k.index).to_numpy(dtype=float) if occupancy is not None else np.nan,
    })
    unknown = k["grid_x"].to_numpy() < 0
    df.loc[unknown, "grid"] = ""
    df.loc[k["block_x"].to_numpy() < 0, "block"] = ""
    g = df.groupby(["name_id", "grid", "block"], sort=False)
    out = g["dur"].agg(count="count", total_ns="sum", mean_ns="mean", max_ns="max").reset_index()
    out["occupancy"] = g["occ"].mean().to_numpy()
    out["mean_ns"] = out["mean_ns"].round().astype(np.int64)
    out.insert(0, "name", timeline.names(out["name_id"].to_numpy()))
    out = out.drop(columns="name_id").sort_values("total_ns", ascending=False, kind="stable")
    return out[list(KERNEL_TABLE_COLUMNS)].reset_index(drop=True)
