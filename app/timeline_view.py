"""What the timeline draws for one view: the store's events of a window on the shown lanes, reduced by
`tracelab.render.lod`, the per-SM lanes (engineer H's `sm_lanes`), the correlated events of a selection,
and the figure. Plain functions over an `AppState`; the page module wires them to Dash."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tracelab.analyses.intervals import merge_grouped
from tracelab.analyses.sm import sm_lanes
from tracelab.analyses.steps import find_steps
from tracelab.model.kinds import EventKind
from tracelab.render.gap_evidence import gap_evidence
from tracelab.render.lod import LodView, busy_bins, level_of_detail, segments
from tracelab.render.timeline import (
    Overlays,
    SmRows,
    gaps_frame,
    lane_depth_cap,
    lane_to_row,
    nesting_depth,
    sm_partitions_of,
    sm_row_table,
    timeline_figure,
    timeline_rows,
)
from tracelab.store import RunRecord

from .state import AppState

DEFAULT_SHOW = ["stream", "sm", "nvtx", "host"]


@dataclass(frozen=True)
class SmLanes:
    rank: int
    device: int
    frame: pd.DataFrame  # engineer H's SM lane columns: sm_first, sm_last, start, end, name, measured
    n_sms: int
    source: str


def sm_lanes_for(state: AppState, run_id: str) -> list[SmLanes]:
    """Per-SM lanes of every device (`tracelab.analyses.sm.sm_lanes`), cached; [] when none has any."""

    def make() -> list[SmLanes]:
        tl = state.timeline(run_id)
        out = []
        for d in tl.devices:
            try:
                frame, source = sm_lanes(tl, d.rank, d.device)
            except Exception:  # noqa: BLE001, S112 - SM lanes are an optional extra; the timeline still shows
                continue
            if frame is None or len(frame) == 0 or source == "none":
                continue
            n_sms = max(int(frame["sm_last"].max()) + 1, int(d.sm_count or 0))
            out.append(
                SmLanes(
                    d.rank,
                    d.device,
                    frame.sort_values("start", kind="stable").reset_index(drop=True),
                    n_sms,
                    str(source),
                )
            )
        return out

    return state.cached(("sm_lanes", run_id), make)


@dataclass(frozen=True)
class RenderedView:
    figure: Any
    view: LodView
    sm_view: LodView | None
    rows: pd.DataFrame
    t0: int
    t1: int
    matches_in_view: int = 0
    flows: int = 0

    @property
    def n_drawn(self) -> int:
        return self.view.n_drawn + (self.sm_view.n_drawn if self.sm_view is not None else 0)


def nvtx_depths(state: AppState, run_id: str) -> dict[int, int]:
    """Nesting levels of each NVTX lane over the whole run (cached): how many rows it needs."""

    def make() -> dict[int, int]:
        ev = state.timeline(run_id).events
        m = np.isin(ev["kind"].to_numpy(), [int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)])
        if not m.any():
            return {}
        lane = ev["lane"].to_numpy()[m]
        depth = nesting_depth(lane, ev["start"].to_numpy()[m], ev["end"].to_numpy()[m])
        g = pd.Series(depth).groupby(lane).max()
        return {int(k): int(v) + 1 for k, v in g.items()}

    return state.cached(("nvtx_depths", run_id), make)


def run_steps(state: AppState, run_id: str) -> pd.DataFrame:
    """The run's steps (`tracelab.analyses.steps.find_steps`: ProfilerStep#N or step-like top-level
    ranges, per rank): rank, start, end, label ("step N", numbered per rank from 0). Cached."""

    def make() -> pd.DataFrame:
        steps = find_steps(state.timeline(run_id)).steps
        return pd.DataFrame(
            {
                "rank": np.array([s.rank for s in steps], dtype=np.int64),
                "start": np.array([s.start_ns for s in steps], dtype=np.int64),
                "end": np.array([s.end_ns for s in steps], dtype=np.int64),
                "label": [f"step {s.index}" for s in steps],
            }
        )

    return state.cached(("steps", run_id), make)


def view_rows(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> tuple[pd.DataFrame, list[SmLanes]]:
    """The timeline's rows for the lane groups in `show` (cached per run and groups)."""
    run_id = record.id

    def make() -> tuple[pd.DataFrame, list[SmLanes]]:
        sm = sm_lanes_for(state, run_id) if "sm" in show else []
        sm_rows = {(s.rank, s.device): SmRows(s.n_sms, s.source, sm_partitions_of(s.frame)) for s in sm}
        steps = run_steps(state, run_id)
        rows = timeline_rows(
            state.lanes(run_id),
            state.strings(run_id),
            device_names=state.device_names(run_id),
            sm_rows=sm_rows,
            show=show,
            nvtx_depths=nvtx_depths(state, run_id),
            step_ranks=sorted(set(steps["rank"].astype(int).tolist())) if "nvtx" in show or "host" in show else [],
        )
        return rows, sm

    return state.cached(("rows", run_id, tuple(show)), make)


def render_view(
    state: AppState,
    record: RunRecord,
    t0: int,
    t1: int,
    *,
    show: list[str] | tuple[str, ...] = tuple(DEFAULT_SHOW),
    selected: dict[str, Any] | None = None,
    query: str = "",
    flows: bool = True,
) -> RenderedView:
    """Query the store for [t0, t1) on the shown lanes, reduce to drawable items, build the figure
    with the idle lanes (the run's gaps), steps, search matches and launch -> GPU arrows."""
    run_id = record.id
    lanes = state.lanes(run_id)
    strings = state.strings(run_id)
    rows, sm = view_rows(state, record, show)
    table = lane_to_row(rows, len(lanes))
    cap = lane_depth_cap(rows, len(lanes))
    shown = np.flatnonzero(table >= 0)
    view = window_view(state, run_id, t0, t1, table, shown, len(rows), depth_cap=cap)

    sm_view = _sm_view(state, sm, rows, t0, t1) if sm else None
    highlight = _highlight(state, run_id, selected, table) if selected else None
    matches = search_matches_in_window(state, run_id, query, t0, t1, table, cap) if query else None
    origin = record.start_ns or 0
    fig = timeline_figure(
        view,
        rows,
        strings,
        origin_ns=origin,
        sm_view=sm_view,
        overlays=Overlays(
            gaps=run_gaps(state, record),
            idle=idle_bins(state, run_id, rows, t0, t1),
            steps=_steps_in_window(state, run_id, rows, t0, t1),
            matches=matches,
            highlight=highlight,
            flows=flows,
        ),
        uirevision=f"{run_id}",
    )
    return RenderedView(
        fig, view, sm_view, rows, t0, t1,
        matches_in_view=0 if matches is None else len(matches),
        flows=int(fig["layout"]["meta"]["flows"]),
    )


SYNC_ANALYSIS_MAX_EVENTS = 300_000  # bigger runs are analysed in the background: the first view never waits


def run_gaps(state: AppState, record: RunRecord) -> pd.DataFrame:
    """The run's gaps for the idle lanes (a `gaps_frame`). Runs up to SYNC_ANALYSIS_MAX_EVENTS events
    are analysed now; bigger ones in a background thread, and their first views show the idle time
    without causes (they appear in the next view once the analysis is done)."""
    run_id = record.id
    if state.cached_analysis(run_id) is None and record.events > SYNC_ANALYSIS_MAX_EVENTS:
        state.analyse_in_background(run_id)
        return gaps_frame(())
    def make() -> pd.DataFrame:
        analysis = state.analysis(run_id)
        return gaps_frame(analysis.gaps, gap_evidence(analysis))  # hover text of the idle lanes

    return state.cached(("gaps_frame", run_id), make)


def device_busy_union(state: AppState, run_id: str) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Per (rank, device), the union of its GPU activity (kernels, memcpys, memsets) as disjoint
    sorted intervals (cached): what is not in it, inside the device's span, is idle."""

    def make() -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
        tl = state.timeline(run_id)
        ev = tl.events
        m = tl.gpu_mask()
        rank, dev = ev["rank"].to_numpy()[m], ev["device"].to_numpy()[m]
        key = (rank.astype(np.int64) << 32) | (dev.astype(np.int64) & 0xFFFFFFFF)
        s, e, g = merge_grouped(ev["start"].to_numpy()[m], ev["end"].to_numpy()[m], key)
        out = {}
        for k in np.unique(g).tolist():  # per device (a handful)
            sel = g == k
            out[(int(k >> 32), int(k & 0xFFFFFFFF))] = (s[sel], e[sel])
        return out

    return state.cached(("busy_union", run_id), make)


def idle_bins(state: AppState, run_id: str, rows: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """All idle time of each device in [t0, t1), short gaps included, as segments on its idle row
    (columns of `LodView.bins`, `busy` = the idle fraction): the gaps above the threshold are drawn
    on top by cause; this shows the idle between tiny kernels that no single gap reaches."""
    union = device_busy_union(state, run_id)
    idle_rows = rows[rows["kind"] == "idle"]
    n_bins = 1 << max(int(np.log2(max(state.width_px / 3, 1))), 0)
    width = (t1 - t0) / n_bins
    parts = []
    for r in idle_rows.itertuples(index=False):
        s, e = union.get((int(r.rank), int(r.device)), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if len(s) == 0:
            continue
        lo = max(int(s[0]), t0)
        hi = min(int(e[-1]), t1)
        if hi <= lo:
            continue
        a = int(np.searchsorted(e, t0, side="right"))
        b = int(np.searchsorted(s, t1, side="left"))
        covered, _ = busy_bins(np.zeros(b - a, np.int64), s[a:b], e[a:b], t0, t1, 1, n_bins)
        edges = t0 + np.arange(n_bins + 1) * width
        in_span = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0, None)
        idle = np.clip(in_span - covered[0], 0, None)
        parts.append(segments(idle[None, :], (idle > 0)[None, :].astype(np.int64), t0, t1).assign(row=int(r.row)))
    if not parts:
        return pd.DataFrame({"row": [], "start": [], "end": [], "count": [], "busy": [], "level": []})
    return pd.concat(parts, ignore_index=True)


def _steps_in_window(state: AppState, run_id: str, rows: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame | None:
    steps = run_steps(state, run_id)
    step_rows = rows[rows["kind"] == "steps"]
    if not len(steps) or not len(step_rows):
        return None
    row_of = dict(zip(step_rows["rank"].astype(int), step_rows["row"].astype(int)))
    part = steps[(steps["end"] > t0) & (steps["start"] < t1)]
    return part.assign(row=[row_of.get(int(r), -1) for r in part["rank"]]).query("row >= 0")


def search_matches_in_window(
    state: AppState, run_id: str, query: str, t0: int, t1: int, table: np.ndarray, cap: np.ndarray, limit: int = 3000
) -> pd.DataFrame:
    """The search matches of [t0, t1) on shown rows (start, end, row), at most `limit` (the longest)."""
    pos = search_positions(state, run_id, query)
    ev = state.timeline(run_id).events
    if len(pos) == 0:
        return pd.DataFrame({"start": [], "end": [], "row": []})
    st, en = ev["start"].to_numpy()[pos], ev["end"].to_numpy()[pos]
    m = (st < t1) & ((en > t0) | (st >= t0))
    pos = pos[m]
    rows = event_rows(state, run_id, ev.iloc[pos], table, cap)
    out = pd.DataFrame({"start": st[m], "end": en[m], "row": rows})
    out = out[out["row"] >= 0]
    if len(out) > limit:
        out = out.assign(d=out["end"] - out["start"]).nlargest(limit, "d").drop(columns="d")
    return out


def event_rows(state: AppState, run_id: str, events: pd.DataFrame, table: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """The row of each event: its lane's row, plus its nesting depth for NVTX ranges."""
    lane = events["lane"].to_numpy()
    row = table[lane]
    nv = np.isin(events["kind"].to_numpy(), [int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)])
    if nv.any():
        depth = nvtx_event_depth(state, run_id)
        d = depth.reindex(events.index[nv]).fillna(0).to_numpy(dtype=np.int64)
        row = row.copy()
        row[nv] = np.where(row[nv] >= 0, row[nv] + np.minimum(d, cap[lane[nv]]), -1)
    return row


def nvtx_event_depth(state: AppState, run_id: str) -> pd.Series:
    """Nesting depth of every NVTX event of the run, indexed like timeline.events (cached)."""

    def make() -> pd.Series:
        ev = state.timeline(run_id).events
        m = np.isin(ev["kind"].to_numpy(), [int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)])
        d = nesting_depth(ev["lane"].to_numpy()[m], ev["start"].to_numpy()[m], ev["end"].to_numpy()[m])
        return pd.Series(d, index=ev.index[m])

    return state.cached(("nvtx_event_depth", run_id), make)


def search_positions(state: AppState, run_id: str, query: str) -> np.ndarray:
    """Positions (into timeline.events, in time order) of the events whose name contains `query`
    (case-insensitive): kernels, copies, NVTX ranges, API calls, CPU ops. Cached per query."""
    q = (query or "").strip().lower()
    if not q:
        return np.zeros(0, dtype=np.int64)

    def make() -> np.ndarray:
        strings = state.strings(run_id)
        ids = np.array([i for i, s in enumerate(strings) if q in s.lower()], dtype=np.int64)  # per distinct name
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        names = state.timeline(run_id).events["name"].to_numpy()
        return np.flatnonzero(np.isin(names, ids))

    return state.cached(("search", run_id, q), make)


def _sm_view(state: AppState, sm: list[SmLanes], rows: pd.DataFrame, t0: int, t1: int) -> LodView:
    """The SM rows' view: each SM-lane interval (a kernel over a range of SMs) spreads over the band
    rows of its SM range, without expanding it into one row per SM."""
    frames, narrow = [], []
    offset = 0
    for s in sm:
        f = s.frame
        st, en = f["start"].to_numpy(), f["end"].to_numpy()
        longest = int((en - st).max()) if len(st) else 0
        lo = int(np.searchsorted(st, t0 - longest, side="left"))
        hi = int(np.searchsorted(st, t1, side="left"))
        part = f.iloc[lo:hi]
        sm_row = sm_row_table(rows, s.rank, s.device, s.n_sms)
        first = sm_row[np.clip(part["sm_first"].to_numpy(), 0, len(sm_row) - 1)]
        last = sm_row[np.clip(part["sm_last"].to_numpy(), 0, len(sm_row) - 1)]
        narrow.append(
            pd.DataFrame(
                {
                    "start": part["start"].to_numpy(),
                    "end": part["end"].to_numpy(),
                    "row": first,
                    "row_last": np.maximum(last, first),
                    "pos": np.arange(len(part)) + offset,
                }
            )
        )
        frames.append(part)
        offset += len(part)
    events = pd.concat(narrow, ignore_index=True)
    view = level_of_detail(events, t0, t1, len(rows), width_px=state.width_px, max_items=state.max_items // 2)
    full = pd.concat(frames, ignore_index=True)
    return _full_items(view, full)


def _full_items(view: LodView, events: pd.DataFrame) -> LodView:
    """`view` computed on narrow columns (start, end, row, pos) with its items swapped for the full
    rows of `events` at those positions (keeping the row each was drawn in)."""
    items = events.iloc[view.items["pos"].to_numpy()].assign(row=view.items["row"].to_numpy())
    return replace(view, items=items)


STORE_WINDOW_MAX_EVENTS = 20_000  # above this (estimated), a view is cut from the run's columns in memory


def estimate_window_events(lanes: pd.DataFrame, t0: int, t1: int, shown: np.ndarray) -> int:
    """Events of the shown lanes expected in [t0, t1), assuming each lane's events spread evenly
    between its first start and last end (the store's lane table has both)."""
    if not {"events", "first_start", "last_end"} <= set(lanes.columns):
        return 0
    ln = lanes[lanes["lane"].isin(shown)]
    first, last = ln["first_start"].to_numpy(), ln["last_end"].to_numpy()
    span = np.maximum(last - first, 1)
    frac = np.clip((np.minimum(last, t1) - np.maximum(first, t0)) / span, 0.0, 1.0)
    return int((ln["events"].to_numpy() * frac).sum())


def window_view(
    state: AppState,
    run_id: str,
    t0: int,
    t1: int,
    lane_rows: np.ndarray,
    shown: np.ndarray,
    n_rows: int,
    depth_cap: np.ndarray | None = None,
) -> LodView:
    """The level-of-detail view of [t0, t1) on the shown lanes. Narrow windows are an indexed
    `Store.window` query; wide ones (more than STORE_WINDOW_MAX_EVENTS events expected) are cut with
    numpy from the run's columns, loaded once through `Store.load` and cached: a row query of a
    million events costs seconds, the columnar load a fraction of one. Both give the same view.
    NVTX ranges go `depth` rows below their lane's row (capped by `depth_cap[lane]`)."""
    if len(shown) == 0:
        empty = pd.DataFrame(
            {"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64), "row": np.zeros(0, np.int32)}
        )
        return level_of_detail(empty, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    if estimate_window_events(state.lanes(run_id), t0, t1, shown) <= STORE_WINDOW_MAX_EVENTS:
        events = state.store.window(run_id, t0, t1, lanes=shown.tolist())
        rows = _nested_rows(
            events["lane"].to_numpy(), events["kind"].to_numpy(), events["start"].to_numpy(),
            events["end"].to_numpy(), lane_rows, depth_cap,
        )
        events = events.assign(row=rows)
        return level_of_detail(events, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    ev = state.timeline(run_id).events
    start, end, lane = ev["start"].to_numpy(), ev["end"].to_numpy(), ev["lane"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    s, e, ln = start[:hi], end[:hi], lane[:hi]
    m = ((e > t0) | (s >= t0)) & (lane_rows[ln] >= 0)  # same overlap rule as Store.window
    pos = np.flatnonzero(m)
    rows = _nested_rows(ln[pos], ev["kind"].to_numpy()[pos], s[pos], e[pos], lane_rows, depth_cap)
    narrow = pd.DataFrame({"start": s[pos], "end": e[pos], "row": rows, "pos": pos})
    view = level_of_detail(narrow, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    return _full_items(view, ev)


def _nested_rows(
    lane: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray, lane_rows: np.ndarray,
    depth_cap: np.ndarray | None,
) -> np.ndarray:
    """Each event's row; NVTX ranges one row per nesting level (depth counted among the window's
    ranges: every range enclosing one in the window overlaps the window too)."""
    rows = lane_rows[lane]
    if depth_cap is None:
        return rows
    nv = np.isin(kind, [int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)]) & (rows >= 0)
    if nv.any():
        rows = rows.copy()
        depth = nesting_depth(lane[nv], start[nv], end[nv])
        rows[nv] = rows[nv] + np.minimum(depth, depth_cap[lane[nv]])
    return rows


def correlated_events(state: AppState, run_id: str, selected: dict[str, Any]) -> pd.DataFrame:
    """The events linked to the selected one: same correlation id (host launch and GPU work), or the
    event itself when it has none."""
    tl = state.timeline(run_id)
    ev = tl.events
    corr = int(selected.get("correlation", -1))
    if corr >= 0:
        pos = state.correlation_index(run_id).positions(corr)
        return ev.iloc[np.sort(pos)]
    m = (ev["start"].to_numpy() == int(selected.get("start", -1))) & (
        ev["end"].to_numpy() == int(selected.get("end", -1))
    )
    if "lane" in selected:
        m &= ev["lane"].to_numpy() == int(selected["lane"])
    return ev[m]


def _highlight(state: AppState, run_id: str, selected: dict[str, Any], table: np.ndarray) -> pd.DataFrame:
    linked = correlated_events(state, run_id, selected)
    rows = table[linked["lane"].to_numpy()] if len(linked) else np.zeros(0, dtype=np.int32)
    out = linked.assign(row=rows)
    return out[out["row"] >= 0]
