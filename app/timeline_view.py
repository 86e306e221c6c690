"""What the timeline draws for one view: the store's events of a window on the shown lanes, reduced by
`tracelab.render.lod`, the per-SM lanes (engineer H's `sm_lanes`), the correlated events of a selection,
and the figure. Plain functions over an `AppState`; the page module wires them to Dash."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tracelab.analyses.sm import sm_lanes
from tracelab.render.figures import lane_to_row, sm_band_size, timeline_figure, timeline_rows
from tracelab.render.lod import LodView, level_of_detail
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

    @property
    def n_drawn(self) -> int:
        return self.view.n_drawn + (self.sm_view.n_drawn if self.sm_view is not None else 0)


def render_view(
    state: AppState,
    record: RunRecord,
    t0: int,
    t1: int,
    *,
    show: list[str] | tuple[str, ...] = tuple(DEFAULT_SHOW),
    selected: dict[str, Any] | None = None,
) -> RenderedView:
    """Query the store for [t0, t1) on the shown lanes, reduce to drawable items, build the figure."""
    run_id = record.id
    lanes = state.lanes(run_id)
    strings = state.strings(run_id)
    sm = sm_lanes_for(state, run_id) if "sm" in show else []
    sm_rows = {(s.rank, s.device): (s.n_sms, s.source) for s in sm}
    rows = timeline_rows(lanes, strings, device_names=state.device_names(run_id), sm_rows=sm_rows, show=show)
    table = lane_to_row(rows, len(lanes))
    shown = rows.loc[rows["lane"] >= 0, "lane"].to_numpy()
    view = window_view(state, run_id, t0, t1, table, shown, len(rows))

    sm_view = None
    if sm:
        sm_view = _sm_view(state, sm, rows, t0, t1)

    highlight = None
    if selected:
        highlight = _highlight(state, run_id, selected, table)
    origin = record.start_ns or 0
    analysis = state.cached_analysis(run_id)
    fig = timeline_figure(
        view,
        rows,
        strings,
        origin_ns=origin,
        highlight=highlight,
        sm_view=sm_view,
        uirevision=f"{run_id}",
        gaps=analysis.gaps if analysis is not None else (),
    )
    return RenderedView(fig, view, sm_view, rows, t0, t1)


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
        band_rows = rows[(rows["kind"] == "sm") & (rows["rank"] == s.rank) & (rows["device"] == s.device)]
        band_rows = band_rows["row"].to_numpy()
        k = sm_band_size(s.n_sms)
        first = np.clip(part["sm_first"].to_numpy() // k, 0, len(band_rows) - 1)
        last = np.clip(part["sm_last"].to_numpy() // k, 0, len(band_rows) - 1)
        narrow.append(
            pd.DataFrame(
                {
                    "start": part["start"].to_numpy(),
                    "end": part["end"].to_numpy(),
                    "row": band_rows[first],
                    "row_last": band_rows[last],
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
    state: AppState, run_id: str, t0: int, t1: int, lane_rows: np.ndarray, shown: np.ndarray, n_rows: int
) -> LodView:
    """The level-of-detail view of [t0, t1) on the shown lanes. Narrow windows are an indexed
    `Store.window` query; wide ones (more than STORE_WINDOW_MAX_EVENTS events expected) are cut with
    numpy from the run's columns, loaded once through `Store.load` and cached: a row query of a
    million events costs seconds, the columnar load a fraction of one. Both give the same view."""
    if len(shown) == 0:
        empty = pd.DataFrame(
            {"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64), "row": np.zeros(0, np.int32)}
        )
        return level_of_detail(empty, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    if estimate_window_events(state.lanes(run_id), t0, t1, shown) <= STORE_WINDOW_MAX_EVENTS:
        events = state.store.window(run_id, t0, t1, lanes=shown.tolist())
        events = events.assign(row=lane_rows[events["lane"].to_numpy()])
        return level_of_detail(events, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    ev = state.timeline(run_id).events
    start, end, lane = ev["start"].to_numpy(), ev["end"].to_numpy(), ev["lane"].to_numpy()
    hi = int(np.searchsorted(start, t1, side="left"))
    s, e, ln = start[:hi], end[:hi], lane[:hi]
    m = ((e > t0) | (s >= t0)) & (lane_rows[ln] >= 0)  # same overlap rule as Store.window
    pos = np.flatnonzero(m)
    narrow = pd.DataFrame({"start": s[pos], "end": e[pos], "row": lane_rows[ln[pos]], "pos": pos})
    view = level_of_detail(narrow, t0, t1, n_rows, width_px=state.width_px, max_items=state.max_items)
    return _full_items(view, ev)


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
