"""Level of detail for the timeline: what the server sends for one view.

A view is a time window [t0, t1) drawn `width_px` pixels wide. Events at least one pixel long are drawn
one by one (up to a budget shared fairly between rows, each row's longest first); everything shorter,
or over the budget, is folded into per-row busy bins: for each row, the fraction of each bin covered by folded events (exact overlap, not
start-binned), merged into runs of bins with the same busy level. The number of drawable items stays
below `max_items` whatever the number of events (bins are coarsened until they fit).

Everything is vectorized: one pass of numpy over the window's events, no per-event Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

# busy-fraction levels of aggregated segments, eighths: (0, .125], (.125, .25], ..., (.875, 1]; the
# timeline draws each segment as thick as its level, so a bin 8 % busy is a thin line, never a solid box
LEVELS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)
DEFAULT_WIDTH_PX = 1600
DEFAULT_MAX_ITEMS = 4000


@dataclass(frozen=True)
class LodView:
    """What one view draws. `items`: the events drawn one by one (the window's rows, plus `row`).
    `bins`: aggregated segments, columns row, start, end (ns), count (events folded in), busy (mean
    busy fraction over the segment, 0..1) and level (index into LEVELS)."""

    t0: int
    t1: int
    width_px: int
    items: pd.DataFrame
    bins: pd.DataFrame
    events_in_window: int

    @property
    def ns_per_px(self) -> float:
        return (self.t1 - self.t0) / max(self.width_px, 1)

    @property
    def n_drawn(self) -> int:
        return len(self.items) + len(self.bins)


_BIN_COLUMNS = {
    "row": "int32",
    "start": "int64",
    "end": "int64",
    "count": "int64",
    "busy": "float64",
    "level": "int8",
}


def _empty_bins() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in _BIN_COLUMNS.items()})


def clip_window(t0: int, t1: int, lo: int, hi: int, min_span: int = 1_000) -> tuple[int, int]:
    """Clamp a requested window into [lo, hi] (the run's extent), keeping at least `min_span` ns."""
    lo, hi = int(lo), int(hi)
    t0, t1 = max(int(t0), lo), min(int(t1), hi)
    if t1 - t0 < min_span:
        mid = (t0 + t1) // 2
        t0, t1 = mid - min_span // 2, mid + min_span // 2
    return t0, t1


def busy_bins(
    rows: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    t0: int,
    t1: int,
    n_rows: int,
    n_bins: int,
    rows_last: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row, per-bin covered time (ns, summed over events, so overlapping events can exceed the bin
    width) and event counts (by the bin of each event's clipped start). Shapes (n_rows, n_bins).

    Exact overlap of each event with each bin: the first and last bin get their partial share, the
    bins in between a full width. An event may cover a range of rows `rows..rows_last` (inclusive;
    per-SM lanes of a kernel spread over many SMs). Both spreads are difference arrays summed with
    cumsum, built with np.bincount: no per-event Python and no expansion of events into rows."""
    lo = rows.astype(np.int64)
    hi = (lo if rows_last is None else rows_last.astype(np.int64)) + 1  # exclusive
    span = t1 - t0
    width = span / n_bins
    # offsets from t0 in integers first: epoch-ns clocks (~1.7e18) are 256 ns apart as float64
    s = (np.clip(start, t0, t1) - t0).astype(np.float64)
    e = (np.clip(end, t0, t1) - t0).astype(np.float64)
    bs = np.minimum((s / width).astype(np.int64), n_bins - 1)
    be = np.minimum((e / width).astype(np.int64), n_bins - 1)
    same = bs == be
    size = (n_rows + 1) * n_bins

    def spread(b: np.ndarray, w: np.ndarray | None, sel: np.ndarray | None = None) -> np.ndarray:
        """+w at (lo, b), -w at (hi, b): after a cumsum over rows, w on every row of the range."""
        l_, h_, b_ = (lo, hi, b) if sel is None else (lo[sel], hi[sel], b[sel])
        w_ = w if (w is None or sel is None) else w[sel]
        return np.bincount(l_ * n_bins + b_, weights=w_, minlength=size) - np.bincount(
            h_ * n_bins + b_, weights=w_, minlength=size
        )

    first_part = np.where(same, e - s, (bs + 1) * width - s)
    diff = spread(bs, first_part)
    multi = ~same
    if multi.any():
        diff = diff + spread(be, e - be * width, multi)
    covered = np.cumsum(diff.reshape(n_rows + 1, n_bins), axis=0)[:n_rows]
    inner = multi & (be - bs > 1)
    if inner.any():
        # whole bins strictly inside: a 2-D difference array over (row range) x (bin range)
        nb1 = n_bins + 1
        li, hi_, b0, b1 = lo[inner], hi[inner], bs[inner] + 1, be[inner]
        size2 = (n_rows + 1) * nb1
        d2 = (
            np.bincount(li * nb1 + b0, minlength=size2)
            - np.bincount(li * nb1 + b1, minlength=size2)
            - np.bincount(hi_ * nb1 + b0, minlength=size2)
            + np.bincount(hi_ * nb1 + b1, minlength=size2)
        )
        full = np.cumsum(np.cumsum(d2.reshape(n_rows + 1, nb1), axis=1), axis=0)[:n_rows, :n_bins]
        covered = covered + full * width
    counts = np.cumsum(spread(bs, None).reshape(n_rows + 1, n_bins), axis=0)[:n_rows].astype(np.int64)
    return covered, counts


def coarsen(covered: np.ndarray, counts: np.ndarray, factor: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Merge `factor` adjacent bins (the bin count must be a multiple of factor)."""
    r, b = covered.shape
    return (
        covered.reshape(r, b // factor, factor).sum(axis=2),
        counts.reshape(r, b // factor, factor).sum(axis=2),
    )


def segments(covered: np.ndarray, counts: np.ndarray, t0: int, t1: int) -> pd.DataFrame:
    """Merge consecutive non-empty bins of the same busy level into segments."""
    n_bins = covered.shape[1]
    width = (t1 - t0) / n_bins
    busy = np.clip(covered / width, 0.0, 1.0)
    nonempty = (covered > 0) | (counts > 0)
    level = np.searchsorted(np.asarray(LEVELS), busy, side="left").clip(0, len(LEVELS) - 1)
    code = np.where(nonempty, level + 1, 0).astype(np.int16)  # 0 = empty
    flat = code.ravel()
    # a segment starts where the code changes or a new row begins
    change = np.ones(flat.size, dtype=bool)
    change[1:] = flat[1:] != flat[:-1]
    change[::n_bins] = True
    starts = np.flatnonzero(change)
    keep = flat[starts] > 0
    seg_counts = np.add.reduceat(counts.ravel(), starts)
    seg_cov = np.add.reduceat(covered.ravel(), starts)
    lengths = np.diff(np.append(starts, flat.size))
    starts, seg_counts, seg_cov, lengths = starts[keep], seg_counts[keep], seg_cov[keep], lengths[keep]
    row = starts // n_bins
    b0 = starts % n_bins
    seg_start = t0 + np.floor(b0 * width).astype(np.int64)
    seg_end = t0 + np.floor((b0 + lengths) * width).astype(np.int64)
    return pd.DataFrame(
        {
            "row": row.astype(np.int32),
            "start": seg_start,
            "end": np.minimum(seg_end, t1),
            "count": seg_counts.astype(np.int64),
            "busy": np.clip(seg_cov / (lengths * width), 0.0, 1.0),
            "level": (flat[starts] - 1).astype(np.int8),
        }
    )


def level_of_detail(
    events: pd.DataFrame,
    t0: int,
    t1: int,
    n_rows: int,
    *,
    width_px: int = DEFAULT_WIDTH_PX,
    max_items: int = DEFAULT_MAX_ITEMS,
    min_px: float = 1.0,
) -> LodView:
    """Decide what to draw for the window [t0, t1). `events` needs `row` (0..n_rows-1), `start` and
    `end` columns; rows with row < 0 are not drawn. An optional `row_last` column spreads an event
    over the rows row..row_last (drawn items are then one per row). Returns at most `max_items`
    drawable items."""
    if t1 <= t0:
        raise ValueError(f"empty window [{t0}, {t1})")
    start = events["start"].to_numpy()
    end = events["end"].to_numpy()
    rows = events["row"].to_numpy()
    ranged = "row_last" in events.columns
    last = events["row_last"].to_numpy() if ranged else rows
    visible = (rows >= 0) & (last < n_rows) & (last >= rows) & (end >= t0) & (start < t1)
    if not visible.all():
        events = events[visible]
        start, end, rows, last = start[visible], end[visible], rows[visible], last[visible]
    n = len(events)
    ns_per_px = (t1 - t0) / max(width_px, 1)
    dur = np.minimum(end, t1) - np.maximum(start, t0)
    wide = np.flatnonzero(dur >= ns_per_px * min_px)
    item_budget = max_items * 3 // 4
    sizes = (last - rows + 1).astype(np.int64)  # rows each event is drawn on
    if int(sizes[wide].sum()) > item_budget:
        # share the budget fairly between rows (round robin: every row's longest event, then every
        # row's second longest, ...), so a row of long host ops cannot crowd out the GPU rows;
        # the events left over are folded into bins
        by_row = wide[np.lexsort((-dur[wide], rows[wide]))]
        r = rows[by_row]
        first_of_row = np.r_[0, np.flatnonzero(np.diff(r)) + 1]
        rank = np.arange(len(by_row)) - np.repeat(first_of_row, np.diff(np.r_[first_of_row, len(by_row)]))
        order = by_row[np.lexsort((-dur[by_row], rank))]
        fits = np.cumsum(sizes[order]) <= item_budget
        wide = np.sort(order[fits])
    drawn = np.zeros(n, dtype=bool)
    drawn[wide] = True
    if ranged:
        reps = sizes[wide]
        idx = np.repeat(wide, reps)
        offset = np.arange(len(idx)) - np.repeat(np.cumsum(reps) - reps, reps)
        items = events.iloc[idx].assign(row=(rows[idx] + offset).astype(np.int32)).drop(columns="row_last")
    else:
        items = events.iloc[wide]
    folded = ~drawn
    bins = _empty_bins()
    if folded.any():
        budget = max_items - len(items)
        # bins of ~1.5 px, a power of two so that coarsening halves them exactly
        n_bins = 1 << max(int(np.log2(max(width_px / 1.5, 1))), 0)
        covered, counts = busy_bins(
            rows[folded],
            start[folded],
            end[folded],
            t0,
            t1,
            n_rows,
            n_bins,
            rows_last=last[folded] if ranged else None,
        )
        while True:
            bins = segments(covered, counts, t0, t1)
            if len(bins) <= budget or covered.shape[1] <= 1:
                break
            covered, counts = coarsen(covered, counts)
        if len(bins) > budget:  # pathological: more rows than budget; keep the busiest segments
            bins = bins.nlargest(max(budget, 0), "busy").sort_values(["row", "start"])
    return LodView(
        t0=int(t0),
        t1=int(t1),
        width_px=int(width_px),
        items=items,
        bins=bins.reset_index(drop=True),
        events_in_window=n,
    )
