"""What the timeline draws, for the dashboard: the run's rows for the shown lane groups and its tiles
(level L, index I: the I-th of 2^L equal windows of the run), computed by `tracelab.render.timeline.tiles`
over the app's cached run data (`AppState`) and encoded for the browser's canvas
(`tracelab.render.timeline.data.encode_tile`); plus search matches, correlated events of a selection, the
run's steps and gaps. Plain functions over an `AppState`; `app.timeline_api` serves them.

A big run (more than SYNC_ANALYSIS_MAX_EVENTS events) has its first view stored with it at import
(`tracelab.render.timeline.overview`): its rows and whole-run tile come from a small read of the store,
and its columns, analysis and steps are loaded in the background once the page has drawn that view
(`start_background`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from tracelab.api import critical_path, critical_path_categories, find_steps
from tracelab.api.types import RunRecord
from tracelab.errors import BadInput, StoreError
from tracelab.render.timeline import tiles
from tracelab.render.timeline.data import TileParts, encode_tile, gaps_frame, lane_depth_cap, lane_to_row
from tracelab.render.timeline.overview import (
    OVERVIEW_KEYS,
    SYNC_ANALYSIS_MAX_EVENTS,
    Overview,
    decode_overview,
    wants_overview,
)
from tracelab.render.timeline.tiles import (  # noqa: F401 - part of this module's interface
    SmLanes,
    event_rows,
    idle_bins,
    window_view,
)

from .state import AppState
from .timeline_lanes import run_memory, run_ranges, with_memory_rows, with_range_rows

DEFAULT_SHOW = list(tiles.DEFAULT_SHOW)
log = logging.getLogger(__name__)


# ---- the stored first view of a big run -----------------------------------------------------------------


def overview(state: AppState, record: RunRecord) -> Overview | None:
    """The run's stored overview (`tracelab.render.timeline.overview`), cached; None when the store
    has none for it (a small run, or one imported before overviews were stored)."""
    if not wants_overview(record.events):
        return None
    return state.cached(
        ("overview", record.id, record.created),
        lambda: decode_overview(state.store.views(record.id, OVERVIEW_KEYS)),
    )


def overview_for(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> Overview | None:
    """The stored overview when it is the view the app would compute for `show`."""
    ov = overview(state, record)
    return ov if ov is not None and ov.fits(show, state.width_px, state.max_items) else None


def start_background(state: AppState, record: RunRecord) -> None:
    """A big run's work after its first view: load its columns, then its analysis (gaps by cause) and
    steps, each in a background thread (once); a run imported before overviews were stored gets its
    overview stored now, so the next server draws its first view from the store."""
    if record.events <= SYNC_ANALYSIS_MAX_EVENTS:
        return
    run_gaps(state, record)
    steps_if_ready(state, record)
    if overview(state, record) is None and not state.store.read_only and state.peek(("overview_stored", record.id)) is None:
        state.in_background(
            f"overview-{record.id}", lambda: state.cached(("overview_stored", record.id), lambda: _store_overview(state, record))
        )


def _store_overview(state: AppState, record: RunRecord) -> bool:
    from tracelab.api import store_views

    try:
        return store_views(state.store, record.id, state.timeline(record.id))
    except StoreError as exc:  # read-only media, locked by an import: the next server computes it again
        log.info("the overview of run %s was not stored: %s", record.id, exc)
        return False


# ---- rows ------------------------------------------------------------------------------------------------


def run_steps(state: AppState, run_id: str) -> pd.DataFrame:
    """The run's steps (`tracelab.analyses.steps.infer.find_steps`: ProfilerStep#N or step-like top-level
    ranges, per rank): rank, start, end, label ("step N", numbered per rank from 0). Cached."""

    def make() -> pd.DataFrame:
        steps = find_steps(state.timeline(run_id), state.context(run_id)).steps
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


def shown_rows(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> pd.DataFrame:
    """The timeline's rows for the lane groups in `show` (cached per run and groups): the stored
    overview's for a big run's default groups, else computed from the run's lanes."""
    ov = overview_for(state, record, show)
    if ov is not None:
        return ov.rows
    run_id = record.id

    def make() -> pd.DataFrame:
        # a big run's steps come later: every rank with host lanes gets a steps lane now, so that no
        # row moves when they arrive; a small run's ranks without steps get none
        steps = run_steps(state, run_id) if record.events <= SYNC_ANALYSIS_MAX_EVENTS else None
        rows = tiles.rows_for(state, run_id, show, None if steps is None else steps["rank"].astype(int).tolist())
        if steps is None:  # a big run: no lane that needs its columns before the first view
            return rows
        rows = with_memory_rows(rows, run_memory(state, run_id))
        if not ("nvtx" in show or "host" in show):
            return rows
        return with_range_rows(rows, run_ranges(state, run_id))

    return state.cached(("rows", run_id, tuple(show)), make)


def hidden_lane_count(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> int:
    """How many of the run's lanes get no row for holding no event (`tiles.empty_lanes`); 0 when the rows
    come from a big run's stored overview (its lanes are not read before the first view)."""
    if overview_for(state, record, show) is not None:
        return 0
    return len(tiles.empty_lanes(state, record.id))


def view_rows(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...]) -> tuple[pd.DataFrame, list[SmLanes]]:
    """The rows for `show` (`shown_rows`) and the SM lanes drawn on its SM rows."""
    rows = shown_rows(state, record, show)
    with state.context(record.id).active():  # the SM lanes leave their estimate for the run's analysis
        return rows, tiles.shown_sm_lanes(state, record.id, show)


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


CRITICAL_MAX_SEGMENTS = 20_000  # segments of the critical-path lanes sent to the page (the longest)


def run_critical_path(state: AppState, record: RunRecord) -> pd.DataFrame | None:
    """Each rank's critical path of each step (`tracelab.analyses.ranks.critical_path`, from the run's
    analysis: None until it is there) as rank, start, end, category, label; the longest
    CRITICAL_MAX_SEGMENTS segments. Cached."""
    run_id = record.id
    analysis = state.cached_analysis(run_id)
    if analysis is None and record.events > SYNC_ANALYSIS_MAX_EVENTS:
        return None

    def make() -> pd.DataFrame:
        tl = state.timeline(run_id)
        cp = critical_path(tl, analysis if analysis is not None else state.analysis(run_id), context=state.context(run_id))
        paths = cp.steps
        if not paths:
            return pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "start", "end")}).assign(category="", label="")
        cat = np.concatenate([p.cat for p in paths]).astype(np.int64)
        start = np.concatenate([p.seg_start for p in paths])
        end = np.concatenate([p.seg_end for p in paths])
        rank = np.concatenate([p.seg_rank for p in paths]).astype(np.int64)
        name = np.concatenate([p.seg_name for p in paths]).astype(np.int64)
        keep = np.sort(np.argsort(-(end - start), kind="stable")[:CRITICAL_MAX_SEGMENTS])
        strings = tl.strings
        cats = np.array(critical_path_categories(), dtype=object)[cat[keep]]
        labels = [
            f"{c} · {strings[n]}" if 0 <= n < len(strings) else str(c) for c, n in zip(cats.tolist(), name[keep].tolist())
        ]
        return pd.DataFrame(
            {"rank": rank[keep], "start": start[keep], "end": end[keep], "category": cats, "label": labels}
        )

    return state.cached(("critical_path", run_id), make)


def on_lane_rows(spans: pd.DataFrame | None, rows: pd.DataFrame, kind: str, text: tuple[str, ...]) -> pd.DataFrame:
    """Spans of ranks (`run_steps`, `run_critical_path`: rank, start, end, the `text` columns; None: not
    there yet) with the row of their rank's lane of `kind` (none when that lane is not shown)."""
    if spans is None:
        spans = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "start", "end")}).assign(**dict.fromkeys(text, ""))
    lane_rows = rows[rows["kind"] == kind]
    row_of = dict(zip(lane_rows["rank"].astype(int), lane_rows["row"].astype(int)))
    out = spans.assign(row=[row_of.get(int(r), -1) for r in spans["rank"]])
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
    rows = shown_rows(state, record, show)
    n_lanes = len(state.lanes(record.id))
    row = event_rows(state, record.id, ev.iloc[pos], lane_to_row(rows, n_lanes), lane_depth_cap(rows, n_lanes))
    out = pd.DataFrame({"start": st[m], "end": en[m], "row": row})
    out = out[out["row"] >= 0]
    if len(out) > limit:
        out = out.assign(d=out["end"] - out["start"]).nlargest(limit, "d").drop(columns="d")
    return out


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


def events_in_window(state: AppState, record: RunRecord, t0: int, t1: int) -> int:
    """How many events of the run overlap [t0, t1) (the window rule of `Store.window`); for the
    whole run of a big run, from its stored overview (no column load)."""
    ov = overview(state, record)
    if ov is not None and (t0, t1) == (record.start_ns, record.end_ns):
        return ov.run_window_events
    return tiles.events_in_window(state, record.id, t0, t1)


# ---- tiles ---------------------------------------------------------------------------------------


def max_level(record: RunRecord) -> int:
    """The deepest tile level of a run: its tiles are still at least MIN_TILE_NS long."""
    return tiles.max_level(record.span_ns)


def tile_window(record: RunRecord, level: int, index: int) -> tuple[int, int]:
    """[t0, t1) of tile (level, index) in trace-clock ns; BadInput for a tile the run does not have."""
    if not (0 <= level <= max_level(record)) or not (0 <= index < (1 << level)):
        raise BadInput(f"run {record.id} has no timeline tile {level}/{index} (levels 0..{max_level(record)})")
    return tiles.tile_window(int(record.start_ns or 0), record.span_ns, level, index)


def tile_parts(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...], level: int, index: int) -> TileParts:
    """What tile (level, index) holds for the lane groups in `show`."""
    tile_window(record, level, index)  # BadInput for a tile the run does not have
    rows, sm = view_rows(state, record, show)
    gaps, ready = run_gaps(state, record, start=False)
    return tiles.tile_parts(
        state, record.id, int(record.start_ns or 0), record.span_ns, rows, sm, level, index, tiles.RunGaps(gaps, ready)
    )


def tile_bytes(state: AppState, record: RunRecord, show: list[str] | tuple[str, ...], level: int, index: int) -> bytes:
    """Tile (level, index) encoded for the browser, cached (until the run's gaps arrive, when the
    gaps were not ready yet). A big run's whole-run tile comes from its stored overview while its
    gaps are not there: its background work then waits for the page (`start_background`)."""
    ready = state.cached_analysis(record.id) is not None or record.events <= SYNC_ANALYSIS_MAX_EVENTS
    if not ready and level == 0:
        ov = overview_for(state, record, show)
        if ov is not None:
            return ov.tile
    key = ("tile", record.id, tuple(show), level, index, ready)
    data = state.tile(
        key, lambda: encode_tile(tile_parts(state, record, show, level, index), state.strings(record.id))
    )
    if not ready:  # the run's columns are loaded now: its analysis and steps follow, in the background
        start_background(state, record)
    return data


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
    rows = shown_rows(state, record, show)
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
