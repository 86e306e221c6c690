"""Measured SM lanes: probe blocks (`Timeline.sm_blocks`) merged into busy intervals per SM."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracelab.analyses.sm.partitions import SM_LANE_COLUMNS, _Device
from tracelab.model.grouping import sorted_unique

if TYPE_CHECKING:
    import pandas as pd


def _empty_lane_columns() -> dict[str, np.ndarray]:
    return {c: np.zeros(0, dtype=t) for c, t in SM_LANE_COLUMNS.items()}


def _empty_lanes() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(_empty_lane_columns())


def _merge_intervals(keys: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Union of intervals per key (vectorized). Returns (first row index of each merged interval,
    merged start, merged end) in key order."""
    import pandas as pd

    n = len(start)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    order = np.lexsort((start, *reversed(keys)))
    s, e = start[order], end[order]
    new_key = np.zeros(n, dtype=bool)
    new_key[0] = True
    for k in keys:
        ko = k[order]
        new_key[1:] |= ko[1:] != ko[:-1]
    # running max of end within a key group
    grp = np.cumsum(new_key) - 1
    running = pd.Series(e).groupby(grp).cummax().to_numpy()
    new = new_key.copy()
    new[1:] |= s[1:] > running[:-1]
    first = np.flatnonzero(new)
    return order[first], s[first], np.maximum.reduceat(e, first)


def _instrumented(dev: _Device) -> np.ndarray:
    """Which kernel events of the device have probe blocks: a block of the same name that starts
    within the event (the probe aligns each invocation's first block to its kernel's start).
    Workloads may probe only some launches of a kernel; the others are estimated."""
    k = dev.kcols
    out = np.zeros(dev.n_kernels, dtype=bool)
    if dev.blocks is None or not dev.n_kernels:
        return out
    k_name = k["name"]
    b_name = dev.blocks["name"].to_numpy()
    b_start = dev.blocks["start"].to_numpy()
    for nid in sorted_unique(b_name):  # one pass per probed kernel name
        rows = np.flatnonzero(k_name == nid)
        if not len(rows):
            continue
        order = np.argsort(k["start"][rows], kind="stable")
        rows = rows[order]
        ks = k["start"][rows]
        ke = k["end"][rows]
        bs = b_start[b_name == nid]
        idx = np.searchsorted(ks, bs, side="right") - 1
        hit = idx >= 0
        hit[hit] = bs[hit] <= ke[idx[hit]]
        out[rows[sorted_unique(idx[hit])]] = True
    return out


def _measured_rows(dev: _Device) -> pd.DataFrame:
    import pandas as pd

    b = dev.blocks
    assert b is not None
    sm = b["sm"].to_numpy().astype(np.int64)
    gc = b["green_context"].to_numpy().astype(np.int64)
    name = b["name"].to_numpy().astype(np.int64)
    first, ms, me = _merge_intervals([sm, gc, name], b["start"].to_numpy().astype(np.int64),
                                     b["end"].to_numpy().astype(np.int64))
    return pd.DataFrame({
        "sm_first": sm[first].astype(np.int32), "sm_last": sm[first].astype(np.int32), "start": ms, "end": me,
        "green_context": gc[first], "name": name[first].astype(np.int32), "measured": np.ones(len(first), dtype=bool),
        "kernel": np.full(len(first), -1, dtype=np.int64),
    })
