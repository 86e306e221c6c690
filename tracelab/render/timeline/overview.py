"""The first view of a big run's timeline, computed when the run is imported and stored with it, so that
the dashboard draws it from a small read of the store instead of loading the run's columns first.

A run of more than SYNC_ANALYSIS_MAX_EVENTS events opens on its whole run with idle time but no gap
causes yet (its analysis runs in the dashboard's background, after the first view): that view does not
depend on the analysis, so the import computes it with the same code that serves tiles
(`tracelab.render.timeline.tiles`) and the store keeps it as two opaque views of the run:

- OVERVIEW_ROWS: JSON: the rows of the default lane groups (every `timeline_rows` column), the number
  of events in the whole-run window (the page's info line), and what it was computed for (format
  version, lane groups, tile width and item budget);
- OVERVIEW_TILE: the whole-run tile (level 0, index 0) of those rows, as `encode_tile` sends it.

The dashboard uses them only when they match what it would compute (`Overview.fits`); a store written
before them, or by another version, simply has none and the dashboard computes the view as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # the drawing code loads only for a run that gets an overview (imports stay light)
    import pandas as pd

    from tracelab.model.timeline import Timeline
    from tracelab.render.timeline.tiles import RunData, TimelineData

SYNC_ANALYSIS_MAX_EVENTS = 300_000  # bigger runs: analysed in the dashboard's background, overview stored
OVERVIEW_VERSION = 1  # bump when what a tile or a row holds changes: stored overviews are then ignored
OVERVIEW_ROWS = f"timeline.overview.rows.v{OVERVIEW_VERSION}"
OVERVIEW_TILE = f"timeline.overview.tile.v{OVERVIEW_VERSION}"
OVERVIEW_KEYS = (OVERVIEW_ROWS, OVERVIEW_TILE)


class Overview(msgspec.Struct, frozen=True):
    """A big run's first view: `rows` (a `timeline_rows` frame, `attrs["stream_lanes"]` included) for
    the lane groups `show`, the whole-run tile `tile` computed for `width_px` / `max_items`, and
    `run_window_events`, the number of events overlapping [run start, run end)."""

    show: tuple[str, ...]
    width_px: int
    max_items: int
    rows: pd.DataFrame
    run_window_events: int
    tile: bytes

    def fits(self, show: Sequence[str], width_px: int, max_items: int) -> bool:
        """Whether this is the view the dashboard would compute for these lane groups and sizes."""
        return tuple(show) == self.show and width_px == self.width_px and max_items == self.max_items


def wants_overview(events: int) -> bool:
    """Whether a run of this many events gets a stored overview (its first view waits for no analysis)."""
    return events > SYNC_ANALYSIS_MAX_EVENTS


def compute_overview(data: RunData, run_id: str, n_devices: int, start_ns: int, end_ns: int) -> Overview:
    """The first view of a run: its default rows (steps lanes for every rank with host lanes: the
    steps come later) and its whole-run tile without gap causes."""
    from tracelab.render.timeline.data import encode_tile, gaps_frame
    from tracelab.render.timeline.tiles import (
        RunGaps,
        default_show,
        events_in_window,
        rows_for,
        shown_sm_lanes,
        tile_parts,
    )

    show = default_show(n_devices)
    rows = rows_for(data, run_id, show, None)
    gaps = RunGaps(gaps_frame(()), False)
    span = int(end_ns) - int(start_ns)
    parts = tile_parts(data, run_id, int(start_ns), span, rows, shown_sm_lanes(data, run_id, show), 0, 0, gaps)
    return Overview(
        show=tuple(show),
        width_px=int(data.width_px),
        max_items=int(data.max_items),
        rows=rows,
        run_window_events=events_in_window(data, run_id, int(start_ns), int(end_ns)),
        tile=encode_tile(parts, data.strings(run_id)),
    )


def overview_views(timeline: Timeline) -> dict[str, bytes]:
    """What an import stores with a run (`Store.import_timeline(views=...)`): the overview's views for
    a run of more than SYNC_ANALYSIS_MAX_EVENTS events, nothing for smaller ones."""
    ev = timeline.events
    if not wants_overview(len(ev)):
        return {}
    from tracelab.render.timeline.tiles import TimelineData

    start, end = int(ev["start"].min()), int(ev["end"].max())
    data = TimelineData(timeline)
    _warm(data, len(timeline.devices), len(ev))
    return encode_overview(compute_overview(data, "", len(timeline.devices), start, end))


def _warm(data: TimelineData, n_devices: int, n_events: int) -> None:
    """Compute the view's cached parts that do not depend on each other side by side (the SM lanes, the
    devices' busy union, the lanes' nesting and emptiness): compute_overview then finds them. An import
    computes the overview beside its encoding, so this shortens the import's longest thread."""
    from tracelab.analyses.parallel import run_each, threads_for
    from tracelab.render.timeline.tiles import (
        default_show,
        device_busy_union,
        empty_lanes,
        nvtx_depths,
        sm_lanes_for,
    )

    threads = threads_for(n_events)
    if threads <= 1:
        return

    def rest() -> None:
        device_busy_union(data, "")
        nvtx_depths(data, "")
        empty_lanes(data, "")

    tasks = [rest]
    if "sm" in default_show(n_devices):
        tasks.insert(0, lambda: sm_lanes_for(data, ""))
    run_each(tasks, min(threads, 2))


# ---- as stored ------------------------------------------------------------------------------------------


def encode_overview(ov: Overview) -> dict[str, bytes]:
    rows = ov.rows
    head: dict[str, Any] = {
        "version": OVERVIEW_VERSION,
        "show": list(ov.show),
        "width_px": ov.width_px,
        "max_items": ov.max_items,
        "run_window_events": int(ov.run_window_events),
        "columns": list(rows.columns),
        "dtypes": [str(rows[c].dtype) for c in rows.columns],
        "data": [rows[c].tolist() for c in rows.columns],
        "stream_lanes": [[int(k), int(v)] for k, v in rows.attrs.get("stream_lanes", {}).items()],
    }
    return {OVERVIEW_ROWS: json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode(), OVERVIEW_TILE: ov.tile}


def decode_overview(views: Mapping[str, bytes]) -> Overview | None:
    """The stored overview, or None when the views are missing or not of this version (the caller
    then computes the view)."""
    import numpy as np
    import pandas as pd

    raw, tile = views.get(OVERVIEW_ROWS), views.get(OVERVIEW_TILE)
    if raw is None or tile is None:
        return None
    try:
        head = json.loads(raw)
        if head.get("version") != OVERVIEW_VERSION:
            return None
        rows = pd.DataFrame(
            {c: np.asarray(v, dtype=object if t == "object" else t) for c, t, v in zip(head["columns"], head["dtypes"], head["data"])},
            columns=head["columns"],
        )
        rows.attrs["stream_lanes"] = {int(k): int(v) for k, v in head["stream_lanes"]}
        return Overview(
            show=tuple(head["show"]),
            width_px=int(head["width_px"]),
            max_items=int(head["max_items"]),
            rows=rows,
            run_window_events=int(head["run_window_events"]),
            tile=bytes(tile),
        )
    except (ValueError, KeyError, TypeError):
        return None
