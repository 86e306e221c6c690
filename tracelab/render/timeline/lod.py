"""Level of detail for the timeline: what the server sends for one view.

A view is a time window [t0, t1) drawn `width_px` pixels wide. Events at least one pixel long are drawn
one by one (up to a budget shared fairly between rows, each row's longest first); everything shorter,
or over the budget, is folded into per-row busy bins: for each row, the fraction of each bin covered by folded events (exact overlap, not
start-binned), merged into runs of bins with the same busy level. The number of drawable items stays
below `max_items` whatever the number of events (bins are coarsened until they fit).

Everything is vectorized: one pass of numpy over the window's events, no per-event Python.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

# busy-fraction levels of aggregated segments, eighths: (0, .125], (.125, .25], ..., (.875, 1]; the
# timeline draws each segment as thick as its level, so a bin 8 % busy is a thin line, never a solid box
LEVELS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)
DEFAULT_WIDTH_PX = 1600
DEFAULT_MAX_ITEMS = 4000


class LodView(msgspec.Struct, frozen=True):
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


BIN_CHUNK = 1 << 18  # events per pass of busy_bins: its temporaries stay small (and reused), not n long


def busy_bins(
    rows: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    t0: int,
    t1: int,
    n_rows: int,
    n_bins: int,
    rows_last: np.ndarray | None = None,
    skip: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row, per-bin covered time (ns, summed over events, so overlapping events can exceed the bin
    width) and event counts (by the bin of each event's clipped start). Shapes (n_rows, n_bins).

    Exact overlap of each event with each bin: the first and last bin get their partial share, the
    bins in between a full width. An event may cover a range of rows `rows..rows_last` (inclusive;
    per-SM lanes of a kernel spread over many SMs): those spreads are difference arrays over rows
    summed with cumsum. Whole bins strictly inside an event are a 2-D difference array over (rows) x
    (bins). All of it with np.bincount, no per-event Python and no expansion of events into rows;
    the events are taken BIN_CHUNK at a time (the sums are the same up to float rounding), so a view
    over millions of events does not allocate a dozen arrays of its length. `skip`: ascending positions
of events left out (those drawn one by one)."""
    size = (n_rows + 1) * n_bins
    width = (t1 - t0) / n_bins
    acc = _BinSums(np.zeros(size), np.zeros(size, dtype=np.int64), None)
    cuts = None if skip is None or not len(skip) else np.asarray(skip, dtype=np.int64)
    for a in range(0, len(rows), BIN_CHUNK):
        part: slice | np.ndarray = slice(a, a + BIN_CHUNK)
        if cuts is not None:
            i, j = np.searchsorted(cuts, [a, a + BIN_CHUNK])
            if j > i:
                part = np.delete(np.arange(a, min(a + BIN_CHUNK, len(rows))), cuts[i:j] - a)
        last = None if rows_last is None else rows_last[part]
        _add_bins(acc, rows[part], last, start[part], end[part], t0, t1, n_bins, width)
    covered = acc.time.reshape(n_rows + 1, n_bins)
    counts = acc.count.reshape(n_rows + 1, n_bins)
    if rows_last is not None:  # difference arrays over rows
        covered = np.cumsum(covered, axis=0)
        counts = np.cumsum(counts, axis=0)
    covered, counts = covered[:n_rows], counts[:n_rows]
    if acc.inner is not None:
        full = np.cumsum(np.cumsum(acc.inner.reshape(n_rows + 1, n_bins + 1), axis=1), axis=0)[:n_rows, :n_bins]
        covered = covered + full * width
    return covered, counts


class _BinSums(msgspec.Struct):
    time: np.ndarray  # (n_rows + 1) * n_bins: covered ns (per row, or a difference array over rows)
    count: np.ndarray  # the same for event counts
    inner: np.ndarray | None  # (n_rows + 1) * (n_bins + 1): 2-D difference array of whole inner bins


def _add_bins(
    acc: _BinSums, rows: np.ndarray, last: np.ndarray | None, start: np.ndarray, end: np.ndarray,
    t0: int, t1: int, n_bins: int, width: float,
) -> None:
    """Add one chunk of events to `acc` (see busy_bins)."""
    size = acc.time.size
    lo = rows.astype(np.int64)
    # offsets from t0 in integers first: epoch-ns clocks (~1.7e18) are 256 ns apart as float64
    s = np.clip(start, t0, t1)
    s -= t0
    s = s.astype(np.float64)
    e = np.clip(end, t0, t1)
    e -= t0
    e = e.astype(np.float64)
    bs = s / width
    bs = np.minimum(bs.astype(np.int64), n_bins - 1)
    be = e / width
    be = np.minimum(be.astype(np.int64), n_bins - 1)
    same = bs == be
    first_part = np.where(same, e - s, (bs + 1) * width - s)
    at = lo * n_bins + bs
    acc.time += np.bincount(at, weights=first_part, minlength=size)
    acc.count += np.bincount(at, minlength=size)
    if last is not None:  # a range of rows: minus after its last row (the cumsum over rows spreads it)
        at_hi = (last.astype(np.int64) + 1) * n_bins + bs
        acc.time -= np.bincount(at_hi, weights=first_part, minlength=size)
        acc.count -= np.bincount(at_hi, minlength=size)
    multi = ~same
    if not multi.any():
        return
    idx = np.flatnonzero(multi)
    lo_m, be_m, e_m = lo[idx], be[idx], e[idx]
    last_part = e_m - be_m * width
    acc.time += np.bincount(lo_m * n_bins + be_m, weights=last_part, minlength=size)
    if last is not None:
        hi_m = last[idx].astype(np.int64) + 1
        acc.time -= np.bincount(hi_m * n_bins + be_m, weights=last_part, minlength=size)
    inner = be_m - bs[idx] > 1
    if not inner.any():
        return
    # whole bins strictly inside: +1 on [row range) x [bin range) as a 2-D difference array
    nb1 = n_bins + 1
    li, b0, b1 = lo_m[inner], bs[idx][inner] + 1, be_m[inner]
    hi_i = li + 1 if last is None else last[idx][inner].astype(np.int64) + 1
    size2 = (size // n_bins) * nb1
    d2 = (
        np.bincount(li * nb1 + b0, minlength=size2)
        - np.bincount(li * nb1 + b1, minlength=size2)
        - np.bincount(hi_i * nb1 + b0, minlength=size2)
        + np.bincount(hi_i * nb1 + b1, minlength=size2)
    )
    acc.inner = d2 if acc.inner is None else acc.inner + d2


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
    wide, bins = fold(
        start, end, rows, last if ranged else None, t0, t1, n_rows, width_px=width_px, max_items=max_items, min_px=min_px
    )
    if ranged:
        reps = (last[wide] - rows[wide] + 1).astype(np.int64)
        idx = np.repeat(wide, reps)
        offset = np.arange(len(idx)) - np.repeat(np.cumsum(reps) - reps, reps)
        items = events.iloc[idx].assign(row=(rows[idx] + offset).astype(np.int32)).drop(columns="row_last")
    else:
        items = events.iloc[wide]
    return LodView(
        t0=int(t0),
        t1=int(t1),
        width_px=int(width_px),
        items=items,
        bins=bins,
        events_in_window=len(events),
    )


def fold(
    start: np.ndarray,
    end: np.ndarray,
    rows: np.ndarray,
    last: np.ndarray | None,
    t0: int,
    t1: int,
    n_rows: int,
    *,
    width_px: int = DEFAULT_WIDTH_PX,
    max_items: int = DEFAULT_MAX_ITEMS,
    min_px: float = 1.0,
) -> tuple[np.ndarray, pd.DataFrame]:
    """What `level_of_detail` draws of events that are all visible in [t0, t1) on rows 0..n_rows-1
    (`last`: the last row of each event's range, None when each is on one row): the positions of the
    events drawn one by one (ascending; drawn on last - row + 1 rows each) and the bins of the rest."""
    ns_per_px = (t1 - t0) / max(width_px, 1)
    need = ns_per_px * min_px
    wide = np.flatnonzero((end - start) >= need)  # the clipped length is no longer: a superset
    dur = np.minimum(end[wide], t1) - np.maximum(start[wide], t0)
    keep = dur >= need
    wide, dur = wide[keep], dur[keep]
    sizes = np.ones(len(wide), np.int64) if last is None else (last[wide] - rows[wide] + 1).astype(np.int64)
    item_budget = max_items * 3 // 4
    if int(sizes.sum()) > item_budget:
        # share the budget fairly between rows (round robin: every row's longest event, then every
        # row's second longest, ...), so a row of long host ops cannot crowd out the GPU rows;
        # the events left over are folded into bins
        r_w = rows[wide]
        by_row = np.lexsort((-dur, r_w))
        r = r_w[by_row]
        first_of_row = np.r_[0, np.flatnonzero(np.diff(r)) + 1]
        rank = np.arange(len(by_row)) - np.repeat(first_of_row, np.diff(np.r_[first_of_row, len(by_row)]))
        order = by_row[np.lexsort((-dur[by_row], rank))]
        fits = order[np.cumsum(sizes[order]) <= item_budget]
        fits.sort()
        wide, sizes = wide[fits], sizes[fits]
    bins = _empty_bins()
    if len(wide) < len(start):
        budget = max_items - int(sizes.sum())
        # bins of ~1.5 px, a power of two so that coarsening halves them exactly
        n_bins = 1 << max(int(np.log2(max(width_px / 1.5, 1))), 0)
        covered, counts = busy_bins(rows, start, end, t0, t1, n_rows, n_bins, rows_last=last, skip=wide)
        while True:
            bins = segments(covered, counts, t0, t1)
            if len(bins) <= budget or covered.shape[1] <= 1:
                break
            covered, counts = coarsen(covered, counts)
        if len(bins) > budget:  # pathological: more rows than budget; keep the busiest segments
            bins = bins.nlargest(max(budget, 0), "busy").sort_values(["row", "start"])
    return wide, bins.reset_index(drop=True)
