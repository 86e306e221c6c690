"""The timeline's lanes drawn from analyses of the whole run: the projected host ranges (issue 27) and GPU
memory. Each is computed once per run (cached in the app state, with the run's analysis context)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracelab.api.types import EventKind, RunRecord

from .state import AppState

# ---- the projected ranges lane (issue 27) -------------------------------------------------------------

MAX_RANGE_LEVELS = 3
MAX_RANGE_BOXES = 20_000


def run_ranges(state: AppState, run_id: str) -> pd.DataFrame:
    """The run's NVTX / record_function ranges projected onto the GPU (tracelab.analyses.device.range_projection):
    rank, level (dense nesting level of the NVTX ranges of the rank, the first MAX_RANGE_LEVELS), start, end
    (the projected range: first enclosed GPU op's start to the last one's end), label (the range's name)."""

    def make() -> pd.DataFrame:
        from tracelab.api import ranges

        tl = state.timeline(run_id)
        p = ranges(tl, None, state.context(run_id))
        keep = (p.gpu_ops > 0) & (tl.col("kind")[p.rows] == EventKind.NVTX_RANGE)
        rows, depth = p.rows[keep], p.depth[keep]
        rank = tl.col("rank")[rows].astype(np.int64)
        level = np.zeros(rows.size, dtype=np.int64)
        for r in np.unique(rank).tolist():  # per rank (a handful): dense levels of the depths present
            m = rank == r
            level[m] = np.unique(depth[m], return_inverse=True)[1].reshape(-1)
        m = level < MAX_RANGE_LEVELS
        names = np.array(tl.strings + ("",), dtype=object)
        nid = tl.col("name")[rows[m]]
        frame = pd.DataFrame({
            "rank": rank[m], "level": level[m], "start": p.gpu_start[keep][m], "end": p.gpu_end[keep][m],
            "label": names[np.where(nid >= 0, nid, len(tl.strings))],
        })
        return frame.head(MAX_RANGE_BOXES)

    return state.cached(("ranges_lane", run_id), make)


def _renumber(new: pd.DataFrame, attrs: dict) -> pd.DataFrame:
    """`new` (rows with lanes added) numbered again: its "row" and the "y" of each row's middle, from the
    heights; `attrs` (the rows' own) kept."""
    new["row"] = np.arange(len(new), dtype=np.int32)
    heights = new["height"].to_numpy(dtype=float)
    new["y"] = np.cumsum(heights) - heights / 2 if len(new) else np.zeros(0)
    new.attrs.update(attrs)
    return new


def with_range_rows(rows: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """`rows` with a "ranges" row per level of each rank's projected ranges, after the rank's steps row (or
    its host header): the NVTX ranges drawn where their GPU work ran."""
    if not len(ranges):
        return rows
    levels = ranges.groupby("rank")["level"].max().to_dict()
    out = []
    recs = rows.to_dict("records")
    for i, r in enumerate(recs):
        out.append(r)
        nxt = recs[i + 1] if i + 1 < len(recs) else None
        anchor = r["kind"] == "steps" or (r["kind"] == "header" and r["device"] == -1
                                          and not (nxt is not None and nxt["kind"] == "steps" and nxt["rank"] == r["rank"]))
        if anchor and int(r["rank"]) in levels:
            for lv in range(int(levels[int(r["rank"])]) + 1):
                row = {**r, "kind": "ranges", "label": "GPU ranges (NVTX, projected)" if lv == 0 else f"  ↳ level {lv}",
                       "lane": -1, "depth": lv, "height": 1.0}
                out.append(row)
    return _renumber(pd.DataFrame(out, columns=rows.columns), rows.attrs)


def ranges_on_rows(state: AppState, record: RunRecord, rows: pd.DataFrame) -> pd.DataFrame:
    """The projected ranges with the row each is drawn on (start, end, row, label), for the meta's steps
    arrays (the canvas draws them as it draws steps)."""
    empty = pd.DataFrame({"start": [], "end": [], "row": [], "label": []})
    lane = rows[rows["kind"] == "ranges"]
    if not len(lane):
        return empty
    rr = run_ranges(state, record.id)
    where = {(int(r), int(d)): int(w) for r, d, w in zip(lane["rank"], lane["depth"], lane["row"], strict=True)}
    row = np.array([where.get((int(a), int(b)), -1) for a, b in zip(rr["rank"], rr["level"], strict=True)], dtype=np.int64)
    ok = row >= 0
    return pd.DataFrame({"start": rr["start"].to_numpy()[ok], "end": rr["end"].to_numpy()[ok], "row": row[ok],
                         "label": rr["label"].to_numpy()[ok]})


# ---- the GPU memory lane (issue 27) ---------------------------------------------------------------------

MEMORY_POINTS = 4000


def run_memory(state: AppState, run_id: str):
    """The run's GPU memory timeline (tracelab.analyses.device.gpu_memory), or None without memory events."""

    def make():
        from tracelab.api import memory

        return memory(state.timeline(run_id), None, state.context(run_id))  # the lane needs no analysis (per-step peaks are analyze's)

    return state.cached(("memory", run_id), make)


def with_memory_rows(rows: pd.DataFrame, mem) -> pd.DataFrame:
    """`rows` with a "memory" row after the idle row of each device that has memory events."""
    if mem is None:
        return rows
    devices = {(p.rank, p.device) for p in mem.peaks}
    out = []
    for r in rows.to_dict("records"):
        out.append(r)
        if r["kind"] == "idle" and (int(r["rank"]), int(r["device"])) in devices:
            out.append({**r, "kind": "memory", "label": "GPU memory allocated", "lane": -1, "height": 1.4})
    return _renumber(pd.DataFrame(out, columns=rows.columns), rows.attrs)


def memory_on_rows(state: AppState, record: RunRecord, rows: pd.DataFrame) -> dict[str, Any]:
    """The meta's `memory`: per memory row, the device's allocated bytes over time (ns from the run start,
    at most MEMORY_POINTS points) and its peak."""
    from tracelab.text_format import fmt_bytes

    lane = rows[rows["kind"] == "memory"]
    mem = run_memory(state, record.id) if len(lane) else None
    if mem is None:
        return {"series": []}
    origin = int(record.start_ns or 0)
    out = []
    for r, d, row in zip(lane["rank"], lane["device"], lane["row"], strict=True):
        peak = next((p for p in mem.peaks if p.rank == int(r) and p.device == int(d)), None)
        if peak is None:
            continue
        t, v = mem.series(int(d), MEMORY_POINTS)
        out.append({"row": int(row), "t": (t - origin).tolist(), "v": v.tolist(), "peak": int(peak.peak_bytes),
                    "peak_t": int(peak.at_ns - origin),
                    "peak_label": f"peak {fmt_bytes(peak.peak_bytes)}" + (f" · {peak.op}" if peak.op else "")})
    return {"series": out}
