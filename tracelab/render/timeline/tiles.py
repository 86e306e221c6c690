"""What the dashboard's timeline draws, computed from a run's data: its rows for the shown lane groups, and
tiles (level L, index I: the I-th of 2^L equal windows of the run) with each window's level of detail
(`tracelab.render.timeline.lod`) of the shown lanes, the per-SM lanes, the idle bins and the gaps by cause, ready
for `tracelab.render.timeline.data.encode_tile`.

The functions read the run through a `RunData` (the run's Timeline, lane table, strings, GPU names and
a cache for derived values): the dashboard's `app.state.AppState` is one (many runs, LRU caches, the
columns loaded from the store), `TimelineData` another (one Timeline in memory: what an import has
before the run is stored, for `tracelab.render.timeline.overview`). The same code therefore draws the
stored overview and the served tiles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec
import numpy as np
import pandas as pd

from tracelab.analyses.core.intervals import merge_grouped
from tracelab.analyses.parallel import run_each, threads_for
from tracelab.model.kinds import EventKind
from tracelab.model.timeline import LANE_COLUMNS, Timeline
from tracelab.render.timeline.data import MIN_TILE_NS, TileParts, gaps_in_window
from tracelab.render.timeline.lod import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_WIDTH_PX,
    LodView,
    busy_bins,
    fold,
    level_of_detail,
    segments,
)
from tracelab.render.timeline.rows import (
    SmRows,
    lane_depth_cap,
    lane_to_row,
    nesting_depth,
    sm_partition_map,
    sm_partitions_of,
    sm_row_table,
    timeline_rows,
)

DEFAULT_SHOW = ("stream", "sm", "nvtx", "host")
SM_LANES_MAX_DEVICES = 2
_NVTX = (int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK))


class RunData(Protocol):
    """A run's data as the timeline reads it (by run id: one object may hold several runs)."""

    width_px: int
    max_items: int

    def timeline(self, run_id: str) -> Timeline: ...

    def lanes(self, run_id: str) -> pd.DataFrame: ...

    def strings(self, run_id: str) -> tuple[str, ...]: ...

    def device_names(self, run_id: str) -> dict[tuple[int, int], str]: ...

    def cached(self, key: Any, make: Callable[[], Any]) -> Any: ...


class TimelineData:
    """One Timeline in memory as a `RunData` (any run id names it)."""

    def __init__(self, timeline: Timeline, width_px: int = DEFAULT_WIDTH_PX, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self._timeline = timeline
        self.width_px = width_px
        self.max_items = max_items
        self._cache: dict[Any, Any] = {}

    def timeline(self, run_id: str) -> Timeline:
        return self._timeline

    def lanes(self, run_id: str) -> pd.DataFrame:
        return self._timeline.lanes[list(LANE_COLUMNS)].sort_values("lane").reset_index(drop=True)

    def strings(self, run_id: str) -> tuple[str, ...]:
        return tuple(self._timeline.strings)

    def device_names(self, run_id: str) -> dict[tuple[int, int], str]:
        return {(d.rank, d.device): d.name for d in self._timeline.devices}

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]


def default_show(n_devices: int) -> list[str]:
    """Lane groups shown at first: SM lanes only for runs of one or two GPUs (a tall block per GPU)."""
    return [g for g in DEFAULT_SHOW if g != "sm" or n_devices <= SM_LANES_MAX_DEVICES]


# ---- rows ----------------------------------------------------------------------------------------


class SmLanes(msgspec.Struct, frozen=True):
    rank: int
    device: int
    frame: pd.DataFrame  # the SM lane columns of `tracelab.analyses.sm.summary.sm_lanes`, sorted by start
    n_sms: int
    source: str


def sm_lanes_for(data: RunData, run_id: str) -> list[SmLanes]:
    """Per-SM lanes of every device (`tracelab.analyses.sm.summary.sm_lanes`), cached; [] when none has any."""
    from tracelab.analyses.sm.summary import sm_lanes

    def make() -> list[SmLanes]:
        tl = data.timeline(run_id)
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
                SmLanes(d.rank, d.device, frame.sort_values("start", kind="stable").reset_index(drop=True), n_sms, str(source))
            )
        return out

    return data.cached(("sm_lanes", run_id), make)


def nvtx_depths(data: RunData, run_id: str) -> dict[int, int]:
    """Nesting levels of each NVTX lane over the whole run (cached): how many rows it needs."""

    def make() -> dict[int, int]:
        ev = data.timeline(run_id).events
        m = np.isin(ev["kind"].to_numpy(), _NVTX)
        if not m.any():
            return {}
        lane = ev["lane"].to_numpy()[m]
        depth = nesting_depth(lane, ev["start"].to_numpy()[m], ev["end"].to_numpy()[m])
        g = pd.Series(depth).groupby(lane).max()
        return {int(k): int(v) + 1 for k, v in g.items()}

    return data.cached(("nvtx_depths", run_id), make)


def empty_lanes(data: RunData, run_id: str) -> list[int]:
    """The run's lanes that hold no event at all (cached): a stream a library created and never used, a
    thread that only existed. They get no timeline row."""

    def make() -> list[int]:
        lanes = data.lanes(run_id)["lane"].to_numpy(dtype=np.int64)
        if not lanes.size:
            return []
        used = np.bincount(data.timeline(run_id).events["lane"].to_numpy(dtype=np.int64).clip(0),
                           minlength=int(lanes.max()) + 1)
        return [int(x) for x in lanes[used[lanes] == 0]]

    return data.cached(("empty_lanes", run_id), make)


def rows_for(data: RunData, run_id: str, show: Sequence[str], step_ranks: Sequence[int] | None) -> pd.DataFrame:
    """The timeline's rows for the lane groups in `show` (`timeline_rows`). `step_ranks`: the ranks
    that get a steps lane; None: every rank with host lanes (a big run's steps come later, and no row
    may move when they arrive)."""
    sm = sm_lanes_for(data, run_id) if "sm" in show else []
    sm_rows = {
        (s.rank, s.device): SmRows(s.n_sms, s.source, parts := sm_partitions_of(s.frame),
                                   () if parts else sm_partition_map(s.frame, s.n_sms))
        for s in sm
    }
    lanes = data.lanes(run_id)
    ranks = lanes["rank"].astype(int).tolist() if step_ranks is None else list(step_ranks)
    empty = set(empty_lanes(data, run_id))
    if empty:  # streams / threads that hold no event in the run get no row (issue 28); the meta counts them
        lanes = lanes[~lanes["lane"].isin(empty)]
    return timeline_rows(
        lanes,
        data.strings(run_id),
        device_names=data.device_names(run_id),
        sm_rows=sm_rows,
        show=show,
        nvtx_depths=nvtx_depths(data, run_id),
        step_ranks=sorted(set(ranks)) if "nvtx" in show or "host" in show else [],
    )


# ---- windows of the run's columns ------------------------------------------------------------------


def events_in_window(data: RunData, run_id: str, t0: int, t1: int) -> int:
    """How many events of the run overlap [t0, t1) (the window rule of `Store.window`)."""
    ev = data.timeline(run_id).events
    start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    lo = int(np.searchsorted(start, t0, side="left"))
    return (hi - lo) + int(np.count_nonzero(end[:lo] > t0))


def device_busy_union(data: RunData, run_id: str) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Per (rank, device), the union of its GPU activity (kernels, memcpys, memsets) as disjoint
    sorted intervals (cached): what is not in it, inside the device's span, is idle."""

    def make() -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
        tl = data.timeline(run_id)
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

    return data.cached(("busy_union", run_id), make)


def idle_bins(data: RunData, run_id: str, rows: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """All idle time of each device in [t0, t1), short gaps included, as segments on its idle row
    (columns of `LodView.bins`, `busy` = the idle fraction): the gaps above the threshold are drawn
    on top by cause; this shows the idle between tiny kernels that no single gap reaches."""
    union = device_busy_union(data, run_id)
    idle_rows = rows[rows["kind"] == "idle"]
    n_bins = 1 << max(int(np.log2(max(data.width_px / 3, 1))), 0)
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


def nvtx_event_depth(data: RunData, run_id: str) -> pd.Series:
    """Nesting depth of every NVTX event of the run, indexed like timeline.events (cached)."""

    def make() -> pd.Series:
        ev = data.timeline(run_id).events
        m = np.isin(ev["kind"].to_numpy(), _NVTX)
        d = nesting_depth(ev["lane"].to_numpy()[m], ev["start"].to_numpy()[m], ev["end"].to_numpy()[m])
        return pd.Series(d, index=ev.index[m])

    return data.cached(("nvtx_event_depth", run_id), make)


def event_rows(data: RunData, run_id: str, events: pd.DataFrame, table: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """The row of each event: its lane's row, plus its nesting depth for NVTX ranges."""
    lane = events["lane"].to_numpy()
    row = table[lane]
    nv = np.isin(events["kind"].to_numpy(), _NVTX)
    if nv.any():
        depth = nvtx_event_depth(data, run_id)
        d = depth.reindex(events.index[nv]).fillna(0).to_numpy(dtype=np.int64)
        row = row.copy()
        row[nv] = np.where(row[nv] >= 0, row[nv] + np.minimum(d, cap[lane[nv]]), -1)
    return row


def _sm_view(data: RunData, sm: list[SmLanes], rows: pd.DataFrame, t0: int, t1: int) -> LodView:
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
    view = level_of_detail(events, t0, t1, len(rows), width_px=data.width_px, max_items=data.max_items // 2)
    full = pd.concat(frames, ignore_index=True)
    return _full_items(view, full)


def _full_items(view: LodView, events: pd.DataFrame) -> LodView:
    """`view` computed on narrow columns (start, end, row, pos) with its items swapped for the full
    rows of `events` at those positions (keeping the row each was drawn in)."""
    pos = view.items["pos"].to_numpy()
    items = events.iloc[pos].assign(row=view.items["row"].to_numpy(), pos=pos)
    return msgspec.structs.replace(view, items=items)


def window_view(
    data: RunData,
    run_id: str,
    t0: int,
    t1: int,
    lane_rows: np.ndarray,
    shown: np.ndarray,
    n_rows: int,
    depth_cap: np.ndarray | None = None,
) -> LodView:
    """The level-of-detail view of [t0, t1) on the shown lanes, cut with numpy from the run's columns
    (the same overlap rule as `Store.window`). Items keep `pos`, their position in Timeline.events
    (hover and click name events by it). NVTX ranges go `depth` rows below their lane's row (capped by
    `depth_cap[lane]`)."""
    ev = data.timeline(run_id).events
    start, end, lane = ev["start"].to_numpy(), ev["end"].to_numpy(), ev["lane"].to_numpy()
    if t1 <= t0:
        raise ValueError(f"empty window [{t0}, {t1})")
    hi = int(np.searchsorted(start, t1, side="left"))
    lo = int(np.searchsorted(start, t0, side="left"))  # from here on every event starts in the window
    shown_lane = lane_rows >= 0
    if not len(shown):
        pos: np.ndarray | None = np.zeros(0, np.int64)
    else:
        early = np.flatnonzero(end[:lo] > t0)  # started before t0, still running
        pos = None if not len(early) else np.concatenate([early, np.arange(lo, hi)])
        if not shown_lane.all():
            pos = np.arange(lo, hi) if pos is None else pos
            pos = pos[shown_lane[lane[pos]]]
    # the window's events: a slice of the columns when they are one run of rows (no copies)
    take: slice | np.ndarray = slice(lo, hi) if pos is None else pos
    s, e, ln = start[take], end[take], lane[take]
    rows = _nested_rows(ln, ev["kind"].to_numpy()[take], s, e, lane_rows, depth_cap)
    if len(rows) and int(rows.max()) >= n_rows:  # no row to draw them on
        ok = np.flatnonzero(rows < n_rows)
        pos = (np.arange(lo, hi) if pos is None else pos)[ok]
        s, e, rows = s[ok], e[ok], rows[ok]
    wide, bins = fold(s, e, rows, None, t0, t1, n_rows, width_px=data.width_px, max_items=data.max_items)
    at = wide + lo if pos is None else pos[wide]
    items = ev.iloc[at].assign(row=rows[wide], pos=at)
    return LodView(
        t0=int(t0), t1=int(t1), width_px=int(data.width_px), items=items, bins=bins, events_in_window=len(s)
    )


def _nested_rows(
    lane: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray, lane_rows: np.ndarray,
    depth_cap: np.ndarray | None,
) -> np.ndarray:
    """Each event's row; NVTX ranges one row per nesting level (depth counted among the window's
    ranges: every range enclosing one in the window overlaps the window too)."""
    rows = lane_rows[lane]
    if depth_cap is None:
        return rows
    nv = np.isin(kind, _NVTX) & (rows >= 0)
    if nv.any():
        rows = rows.copy()
        depth = nesting_depth(lane[nv], start[nv], end[nv])
        rows[nv] = rows[nv] + np.minimum(depth, depth_cap[lane[nv]])
    return rows


# ---- tiles ---------------------------------------------------------------------------------------------


def max_level(span_ns: int) -> int:
    """The deepest tile level of a run of this span: its tiles are still at least MIN_TILE_NS long."""
    span = max(int(span_ns or 0), 1)
    level = 0
    while (span >> (level + 1)) >= MIN_TILE_NS and level < 48:
        level += 1
    return level


def tile_window(start_ns: int, span_ns: int, level: int, index: int) -> tuple[int, int]:
    """[t0, t1) of tile (level, index) of a run starting at `start_ns` (trace-clock ns)."""
    span = max(int(span_ns or 0), 1)
    return start_ns + ((span * index) >> level), start_ns + ((span * (index + 1)) >> level)


class RunGaps(msgspec.Struct, frozen=True):
    """The run's gaps as `tracelab.render.timeline.data.gaps_frame` columns, and whether they are there yet
    (False: a big run's analysis still runs; the idle rows show idle time without causes)."""

    frame: pd.DataFrame
    ready: bool


def tile_parts(
    data: RunData,
    run_id: str,
    start_ns: int,
    span_ns: int,
    rows: pd.DataFrame,
    sm: list[SmLanes],
    level: int,
    index: int,
    gaps: RunGaps,
) -> TileParts:
    """What tile (level, index) holds, on `rows` (with the SM lanes `sm` of its SM rows)."""
    t0, t1 = tile_window(start_ns, span_ns, level, index)
    t1 = max(t1, t0 + 1)
    n_lanes = len(data.lanes(run_id))
    table = lane_to_row(rows, n_lanes)
    shown = np.flatnonzero(table >= 0)
    # the events' view and the SM rows' view side by side for a big run (numpy releases the GIL in both)
    threads = min(threads_for(data.timeline(run_id).n_events), 2) if sm else 1
    view, sm_view = run_each(
        [
            lambda: window_view(data, run_id, t0, t1, table, shown, len(rows), depth_cap=lane_depth_cap(rows, n_lanes)),
            lambda: _sm_view(data, sm, rows, t0, t1) if sm else None,
        ],
        threads,
    )
    return TileParts(
        level=level, index=index, t0=t0, t1=t1, origin=int(start_ns), view=view, sm_view=sm_view,
        idle=idle_bins(data, run_id, rows, t0, t1), gaps=gaps_in_window(gaps.frame, rows, t0, t1, view.ns_per_px),
        gaps_ready=gaps.ready,
    )


def shown_sm_lanes(data: RunData, run_id: str, show: Sequence[str]) -> list[SmLanes]:
    """The SM lanes drawn for the lane groups in `show`."""
    return sm_lanes_for(data, run_id) if "sm" in show else []

