"""What the timeline draws: the run's rows for the shown lane groups, and tiles (level L, index I: the
I-th of 2^L equal windows of the run) with each window's level of detail (`tracelab.render.lod`) of the
shown lanes, per-SM lanes, the idle bins and gaps by cause, encoded for the browser's canvas
(`tracelab.render.timeline.encode_tile`); plus search matches, correlated events of a selection and
the run's steps. Plain functions over an `AppState`; `app.timeline_api` serves them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tracelab.analyses.intervals import merge_grouped
from tracelab.analyses.sm import sm_lanes
from tracelab.analyses.steps import find_steps
from tracelab.errors import BadInput
from tracelab.model.kinds import EventKind
from tracelab.render.lod import LodView, busy_bins, level_of_detail, segments
from tracelab.render.timeline import (
    MIN_TILE_NS,
    SmRows,
    TileParts,
    encode_tile,
    gaps_frame,
    gaps_in_window,
    lane_depth_cap,
    lane_to_row,
    nesting_depth,
    sm_partitions_of,
    sm_row_table,
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


def steps_if_ready(state: AppState, record: RunRecord, *, start: bool = True) -> pd.DataFrame | None:
    """The run's steps (`run_steps`) if they are there: runs up to SYNC_ANALYSIS_MAX_EVENTS events get
    them now; bigger ones in a background thread (started here unless `start` is False), None until
    it is done: finding the steps of a million events takes about a second the first view must not wait."""
    if record.events <= SYNC_ANALYSIS_MAX_EVENTS:
        return run_steps(state, record.id)
    steps = state.peek(("steps", record.id))
    if steps is None and start:
        state.in_background(f"steps-{record.id}", lambda: run_steps(state, record.id))
    return steps


def view_rows(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> tuple[pd.DataFrame, list[SmLanes]]:
    """The timeline's rows for the lane groups in `show` (cached per run and groups)."""
    run_id = record.id

    def make() -> tuple[pd.DataFrame, list[SmLanes]]:
        sm = sm_lanes_for(state, run_id) if "sm" in show else []
        sm_rows = {(s.rank, s.device): SmRows(s.n_sms, s.source, sm_partitions_of(s.frame)) for s in sm}
        # a big run's steps come later: every rank with host lanes gets a steps lane now, so that no
        # row moves when they arrive; a small run's ranks without steps get none
        steps = run_steps(state, run_id) if record.events <= SYNC_ANALYSIS_MAX_EVENTS else None
        ranks = state.lanes(run_id)["rank"] if steps is None else steps["rank"]
        rows = timeline_rows(
            state.lanes(run_id),
            state.strings(run_id),
            device_names=state.device_names(run_id),
            sm_rows=sm_rows,
            show=show,
            nvtx_depths=nvtx_depths(state, run_id),
            step_ranks=sorted(set(ranks.astype(int).tolist())) if "nvtx" in show or "host" in show else [],
        )
        return rows, sm

    return state.cached(("rows", run_id, tuple(show)), make)


SYNC_ANALYSIS_MAX_EVENTS = 300_000  # bigger runs are analysed in the background: the first view never waits


def run_gaps(state: AppState, record: RunRecord, *, start: bool = True) -> tuple[pd.DataFrame, bool]:
    """The run's gaps (a `gaps_frame`) and whether they are there yet. Runs up to
    SYNC_ANALYSIS_MAX_EVENTS events are analysed now; bigger ones in a background thread (started here
    unless `start` is False), and until it is done the idle rows show the idle time without causes
    (the browser asks again)."""
    run_id = record.id
    if state.cached_analysis(run_id) is None and record.events > SYNC_ANALYSIS_MAX_EVENTS:
        if start:
            state.analyse_in_background(run_id)
        return gaps_frame(()), False
    return state.cached(("gaps_frame", run_id), lambda: gaps_frame(state.analysis(run_id).gaps)), True


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
        edges = np.arange(n_bins + 1) * width  # from t0: epoch-ns clocks lose 256 ns as float64
        in_span = np.clip(np.minimum(edges[1:], hi - t0) - np.maximum(edges[:-1], lo - t0), 0, None)
        idle = in_span - covered[0]
        idle = np.where(idle > 0.5, idle, 0.0)  # float rounding of fully busy bins is no idle time
        parts.append(segments(idle[None, :], (idle > 0)[None, :].astype(np.int64), t0, t1).assign(row=int(r.row)))
    if not parts:
        return pd.DataFrame({"row": [], "start": [], "end": [], "count": [], "busy": [], "level": []})
    return pd.concat(parts, ignore_index=True)


def steps_on_rows(steps: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame:
    """The steps (`run_steps`: rank, start, end, label; None: not there yet) with the row of their
    rank's steps lane (none when the lane is not shown)."""
    if steps is None:
        steps = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "start", "end")}).assign(label="")
    step_rows = rows[rows["kind"] == "steps"]
    row_of = dict(zip(step_rows["rank"].astype(int), step_rows["row"].astype(int)))
    out = steps.assign(row=[row_of.get(int(r), -1) for r in steps["rank"]])
    return out[out["row"] >= 0]


def search_matches_in_window(
    state: AppState, record: RunRecord, query: str, t0: int, t1: int, show: list[str] | tuple[str, ...],
    limit: int = 3000,
) -> pd.DataFrame:
    """The search matches of [t0, t1) on the rows shown for `show` (start, end, row), at most `limit`
    (the longest)."""
    pos = search_positions(state, record.id, query)
    ev = state.timeline(record.id).events
    if len(pos) == 0:
        return pd.DataFrame({"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64), "row": np.zeros(0, np.int64)})
    st, en = ev["start"].to_numpy()[pos], ev["end"].to_numpy()[pos]
    m = (st < t1) & ((en > t0) | (st >= t0))
    pos = pos[m]
    rows, _ = view_rows(state, record, show)
    n_lanes = len(state.lanes(record.id))
    row = event_rows(state, record.id, ev.iloc[pos], lane_to_row(rows, n_lanes), lane_depth_cap(rows, n_lanes))
    out = pd.DataFrame({"start": st[m], "end": en[m], "row": row})
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
    pos = view.items["pos"].to_numpy()
    items = events.iloc[pos].assign(row=view.items["row"].to_numpy(), pos=pos)
    return replace(view, items=items)


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
    """The level-of-detail view of [t0, t1) on the shown lanes, cut with numpy from the run's columns
    (loaded once through `Store.load` and cached; the same overlap rule as `Store.window`). Items keep
    `pos`, their position in Timeline.events (hover and click name events by it). NVTX ranges go
    `depth` rows below their lane's row (capped by `depth_cap[lane]`)."""
    ev = state.timeline(run_id).events
    start, end, lane = ev["start"].to_numpy(), ev["end"].to_numpy(), ev["lane"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    s, e, ln = start[:hi], end[:hi], lane[:hi]
    m = ((e > t0) | (s >= t0)) & (lane_rows[ln] >= 0) if len(shown) else np.zeros(hi, dtype=bool)
    pos = np.flatnonzero(m)
    rows = _nested_rows(ln[pos], ev["kind"].to_numpy()[pos], s[pos], e[pos], lane_rows, depth_cap)
    narrow = pd.DataFrame({"start": s[pos], "end": e[pos], "row": rows, "pos": pos})
    view = level_of_detail(narrow, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    return _full_items(view, ev)


def events_in_window(state: AppState, run_id: str, t0: int, t1: int) -> int:
    """How many events of the run overlap [t0, t1) (the window rule of `Store.window`)."""
    ev = state.timeline(run_id).events
    start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    lo = int(np.searchsorted(start, t0, side="left"))
    return (hi - lo) + int(np.count_nonzero(end[:lo] > t0))


# ---- tiles ---------------------------------------------------------------------------------------


def max_level(record: RunRecord) -> int:
    """The deepest tile level of a run: its tiles are still at least MIN_TILE_NS long."""
    span = max(int(record.span_ns or 0), 1)
    level = 0
    while (span >> (level + 1)) >= MIN_TILE_NS and level < 48:
        level += 1
    return level


def tile_window(record: RunRecord, level: int, index: int) -> tuple[int, int]:
    """[t0, t1) of tile (level, index) in trace-clock ns; BadInput for a tile the run does not have."""
    if not (0 <= level <= max_level(record)) or not (0 <= index < (1 << level)):
        raise BadInput(f"run {record.id} has no timeline tile {level}/{index} (levels 0..{max_level(record)})")
    lo = int(record.start_ns or 0)
    span = max(int(record.span_ns or 0), 1)
    return lo + ((span * index) >> level), lo + ((span * (index + 1)) >> level)


def tile_parts(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...], level: int, index: int) -> TileParts:
    """What tile (level, index) holds for the lane groups in `show`."""
    t0, t1 = tile_window(record, level, index)
    t1 = max(t1, t0 + 1)
    run_id = record.id
    lanes = state.lanes(run_id)
    rows, sm = view_rows(state, record, show)
    table = lane_to_row(rows, len(lanes))
    shown = np.flatnonzero(table >= 0)
    view = window_view(state, run_id, t0, t1, table, shown, len(rows), depth_cap=lane_depth_cap(rows, len(lanes)))
    sm_view = _sm_view(state, sm, rows, t0, t1) if sm else None
    gaps, ready = run_gaps(state, record, start=False)
    return TileParts(
        level=level, index=index, t0=t0, t1=t1, origin=int(record.start_ns or 0), view=view, sm_view=sm_view,
        idle=idle_bins(state, run_id, rows, t0, t1), gaps=gaps_in_window(gaps, rows, t0, t1, view.ns_per_px),
        gaps_ready=ready,
    )


def tile_bytes(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...], level: int, index: int) -> bytes:
    """Tile (level, index) encoded for the browser, cached (until the run's gaps arrive, when the
    gaps were not ready yet)."""
    ready = state.cached_analysis(record.id) is not None or record.events <= SYNC_ANALYSIS_MAX_EVENTS
    key = ("tile", record.id, tuple(show), level, index, ready)
    data = state.tile(
        key, lambda: encode_tile(tile_parts(state, record, show, level, index), state.strings(record.id))
    )
    if not ready:  # a big run's analysis and steps start once its first tile is out: they do not slow it
        run_gaps(state, record)
        steps_if_ready(state, record)
    return data


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


def linked_on_rows(
    state: AppState, record: RunRecord, selected: dict[str, Any], show: list[str] | tuple[str, ...]
) -> pd.DataFrame:
    """The events linked to the selection (`correlated_events`) with the row each is drawn on for
    the lane groups in `show` (NVTX ranges at their depth); those on hidden rows are left out."""
    linked = correlated_events(state, record.id, selected)
    rows, _ = view_rows(state, record, show)
    n_lanes = len(state.lanes(record.id))
    row = event_rows(state, record.id, linked, lane_to_row(rows, n_lanes), lane_depth_cap(rows, n_lanes))
    out = linked.assign(row=row)
    return out[out["row"] >= 0]


# ---- windows ---------------------------------------------------------------------------------------


def clamp_window(record: RunRecord, t0: int, t1: int) -> tuple[int, int]:
    """[t0, t1) clamped into the run's extent, at least MIN_SPAN_NS wide."""
    from .urls import MIN_SPAN_NS

    lo = int(record.start_ns or 0)
    hi = int(record.end_ns if record.end_ns is not None else lo + MIN_SPAN_NS)
    t0, t1 = max(min(t0, t1), lo), min(max(t0, t1), hi)
    if t1 - t0 < MIN_SPAN_NS:
        mid = (t0 + t1) // 2
        t0, t1 = mid - MIN_SPAN_NS // 2, mid + MIN_SPAN_NS // 2
    return t0, t1


def match_window(state: AppState, record: RunRecord, query: str, index: int) -> tuple[int, int] | None:
    """The window that shows search match `index` in the middle of the view (at least 20 µs wide)."""
    pos = search_positions(state, record.id, query)
    if len(pos) == 0:
        return None
    ev = state.timeline(record.id).events
    p = pos[int(index) % len(pos)]
    start, end = int(ev["start"].iat[p]), int(ev["end"].iat[p])
    pad = max(end - start, 20_000)
    return clamp_window(record, start - pad, end + pad)


def initial_window(state: AppState, record: RunRecord, t0: Any, t1: Any, query: str) -> tuple[int, int, int]:
    """The window a timeline URL opens (t0, t1, match index): its t0 / t1 (the whole run when absent,
    BadInput when malformed); a search without a window (a kernel row) opens on its first match."""
    from .urls import parse_window

    a, b = parse_window(record, t0, t1)
    if query and t0 in (None, "") and t1 in (None, ""):
        w = match_window(state, record, query, 0)
        if w is not None:
            return w[0], w[1], 0
    return a, b, -1
