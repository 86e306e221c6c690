"""Vectorized interval math on half-open integer intervals [start, end) (ns).

Every function works on numpy int64 arrays with a sorted sweep (sort, running maximum, cumulative
sums, searchsorted): no Python loop per interval. A "union" is a pair of arrays (starts, ends) of
disjoint intervals sorted by start, as `merge` returns it.

Conventions:
- Touching intervals ([0, 5) and [5, 9)) merge into one.
- Zero-length intervals (start == end, e.g. a kernel Kineto rounded to 0 µs) add no length, but a
  zero-length interval that touches no other one stays a point in the union, so it splits a gap:
  the GPU did something at that instant.
"""

from __future__ import annotations

import itertools

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


def _as_i64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def merge(
    starts, ends, *, assume_sorted: bool = False, return_index: bool = False
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals as disjoint sorted intervals.

    With return_index, also the position (in the input) of the interval that opens each merged
    interval (the first one by start; for ties the first in input order)."""
    s = _as_i64(starts)
    e = _as_i64(ends)
    n = s.size
    if n == 0:
        return (_EMPTY, _EMPTY, _EMPTY) if return_index else (_EMPTY, _EMPTY)
    if assume_sorted or not (s[1:] < s[:-1]).any():  # most callers' intervals come in start order already
        order = None
    else:
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = e[order]
    runmax = np.maximum.accumulate(e)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(s[1:], runmax[:-1], out=new[1:])
    first = np.flatnonzero(new)
    us, ue = s[first], runmax[np.r_[first[1:] - 1, n - 1]]
    if return_index:
        return us, ue, (first if order is None else order[first])
    return us, ue


def length(starts, ends) -> int:
    """Total length of already-disjoint intervals (e.g. a union)."""
    return int((_as_i64(ends) - _as_i64(starts)).sum())


def union_length(starts, ends, *, assume_sorted: bool = False) -> int:
    us, ue = merge(starts, ends, assume_sorted=assume_sorted)
    return length(us, ue)


def intersection_length(a_starts, a_ends, b_starts, b_ends) -> int:
    """Length of (union of A) ∩ (union of B), exact in integers (= |A| + |B| − |A ∪ B|): the two unions
    merged, then their overlapping pieces found by binary search (`intersect`), not both sets sorted
    together."""
    au, ae = merge(a_starts, a_ends)
    bu, be = merge(b_starts, b_ends)
    return length(*intersect(au, ae, bu, be))


def merge_grouped(starts, ends, groups, presorted: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals within each group: (starts, ends, group) sorted by (group, start).
    `presorted`: the intervals come sorted by (group, start) already (no sort here)."""
    s = _as_i64(starts)
    e = _as_i64(ends)
    g = _as_i64(groups)
    n = s.size
    if n == 0:
        return _EMPTY, _EMPTY, _EMPTY
    if not presorted:
        order = _by_group_then_start(s, g)
        s, e, g = s[order], e[order], g[order]
    boundary = np.empty(n, dtype=bool)
    boundary[0] = True
    np.not_equal(g[1:], g[:-1], out=boundary[1:])
    # Segmented running maximum: shift each group into its own band of the number line so that one
    # global maximum.accumulate never carries a value across a group boundary.
    base = int(s.min())
    width = int(e.max()) - base + 1
    band = np.cumsum(boundary) - 1  # 0, 1, 2, ... per group
    if int(band[-1]) * width < 2**62:
        shift = band * width - base
        runmax = np.maximum.accumulate(e + shift) - shift
    else:  # absurd time ranges: fall back to one accumulate per group (few groups in practice)
        runmax = np.empty_like(e)
        bounds = np.flatnonzero(boundary).tolist() + [n]
        for lo, hi in itertools.pairwise(bounds):
            runmax[lo:hi] = np.maximum.accumulate(e[lo:hi])
    new = boundary.copy()
    new[1:] |= s[1:] > runmax[:-1]
    first = np.flatnonzero(new)
    return s[first], runmax[np.r_[first[1:] - 1, n - 1]], g[first]


def _by_group_then_start(s: np.ndarray, g: np.ndarray) -> np.ndarray:
    """np.lexsort((s, g)) (by group, then start, then position), as two stable sorts: by start (the
    callers' intervals come in start order: one linear pass of timsort), then by group as 16-bit keys
    when their range allows (a radix sort). lexsort sorts both keys in full."""
    order = np.argsort(s, kind="stable")
    g = g[order]
    lo = int(g.min())
    if int(g.max()) - lo < 1 << 15:  # groups in a short range (lanes, streams): 16-bit keys, sorted by radix
        g = (g - lo).astype(np.int16)
    return order[np.argsort(g, kind="stable")]


def grouped_union_lengths(starts, ends, groups, n_groups: int | None = None, presorted: bool = False) -> np.ndarray:
    """Union length per group id (groups are small non-negative ints); an array of n_groups. `presorted`:
    the intervals come sorted by (group, start)."""
    gs, ge, gg = merge_grouped(starts, ends, groups, presorted)
    size = n_groups if n_groups is not None else (int(gg.max()) + 1 if gg.size else 0)
    return np.bincount(gg, weights=(ge - gs), minlength=size).astype(np.int64)


def coverage_at_least(starts, ends, groups, k: int = 2) -> int:
    """Time covered by intervals of at least k distinct groups at once (e.g. kernels running on
    two or more streams at once). Overlaps within one group count once."""
    gs, ge, _ = merge_grouped(starts, ends, groups)
    if gs.size == 0:
        return 0
    # ends before starts at equal times: touching intervals do not overlap (zero length anyway); the ends
    # come first, so one stable sort by time gives the order lexsort((delta, times)) gives
    times = np.concatenate([ge, gs])
    delta = np.concatenate([-np.ones(ge.size, np.int64), np.ones(gs.size, np.int64)])
    order = np.argsort(times, kind="stable")
    times = times[order]
    depth = np.cumsum(delta[order])
    seg = np.diff(times)
    return int(seg[depth[:-1] >= k].sum())


def _prefix(us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Lengths of the union's intervals summed before each one (and all of them, last)."""
    cum = np.empty(us.size + 1, dtype=np.int64)
    cum[0] = 0
    np.cumsum(ue - us, out=cum[1:])
    return cum


def _measure_before(us: np.ndarray, ue: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    i = np.searchsorted(us, t, side="right")  # intervals starting at or before t
    last_end = np.where(i > 0, ue[np.maximum(i - 1, 0)], t)
    return cum[i] - np.maximum(last_end - t, 0)


def covered_length(us: np.ndarray, ue: np.ndarray, a, b) -> np.ndarray:
    """For each window [a, b), how much of it the union (us, ue) covers."""
    a, b = _as_i64(a), _as_i64(b)
    if us.size == 0:
        return np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
    cum = _prefix(us, ue)  # once for both ends
    return _measure_before(us, ue, cum, b) - _measure_before(us, ue, cum, a)


def running_max_index(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For intervals sorted by start: the running maximum of their ends and the index of the
    interval that holds it (the latest one on ties). With i = searchsorted(starts, t, 'right') - 1,
    runmax[i] answers "how far does any interval that started by t reach", argmax[i] says which."""
    e = _as_i64(ends)
    if e.size == 0:
        return _EMPTY, _EMPTY
    runmax = np.maximum.accumulate(e)
    pos = np.arange(e.size, dtype=np.int64)
    arg = np.maximum.accumulate(np.where(e == runmax, pos, 0))
    return runmax, arg


_FAR = np.int64(1) << 61  # stands for -inf / +inf in complements (any trace time is < 2^62, DECISIONS "Limits")


def intersect(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """(union A) ∩ (union B) as sorted intervals, for two unions as `merge` returns them (disjoint,
    sorted; zero-length intervals add nothing): one piece per overlapping pair (A_i, B_j), which is
    where a sorted sweep of both has one interval of each open. Pieces of one A_i cut by touching B
    intervals (a point of the union B splits its complement) stay separate pieces. Each A_i finds its
    B_j by binary search: O((|A| + |B|) log + pieces), no sort of both."""
    a_s, a_e, b_s, b_e = _as_i64(a_starts), _as_i64(a_ends), _as_i64(b_starts), _as_i64(b_ends)
    ka, kb = a_e > a_s, b_e > b_s
    if not ka.all():
        a_s, a_e = a_s[ka], a_e[ka]
    if not kb.all():
        b_s, b_e = b_s[kb], b_e[kb]
    if a_s.size == 0 or b_s.size == 0:
        return _EMPTY, _EMPTY
    lo = np.searchsorted(b_e, a_s, side="right")  # first B ending after A_i starts
    hi = np.searchsorted(b_s, a_e, side="left")  # B starting before A_i ends
    i, j = expand_ranges(lo, hi)
    return np.maximum(a_s[i], b_s[j]), np.minimum(a_e[i], b_e[j])


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(range j, position) for every position in [lo[j], hi[j]) of every range j (none when hi <= lo)."""
    n = np.maximum(hi - lo, 0)
    seg = np.repeat(np.arange(lo.size), n)
    return seg, lo[seg] + (np.arange(seg.size) - np.repeat(np.cumsum(n) - n, n))


def complement_all(us, ue) -> tuple[np.ndarray, np.ndarray]:
    """Everything outside a union (as `merge` returns it), from -inf to +inf (±2^61 stand for them)."""
    us, ue = _as_i64(us), _as_i64(ue)
    s = np.concatenate([[-_FAR], ue])
    e = np.concatenate([us, [_FAR]])
    keep = e > s
    return s[keep], e[keep]


def subtract(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """(union A) minus (union B), both unions as `merge` returns them."""
    cs, ce = complement_all(b_starts, b_ends)
    return intersect(a_starts, a_ends, cs, ce)


def step_of(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time t: the index of the window [starts[i], ends[i]) (windows sorted by start; the last one starting
    at or before t) that holds it, or -1."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.maximum(i, 0)]) if ends.size else np.zeros(np.shape(t), dtype=bool)
    return np.where(ok, i, -1)


def bounded_blocks(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive index ranges [a, b) of `sizes` (non-negative) whose sizes sum to at most `limit` each, or
    that hold one item which alone is more: work done a bounded block of items at a time."""
    cum = np.cumsum(sizes)
    out: list[tuple[int, int]] = []
    a = done = 0
    while a < sizes.size:
        b = max(int(np.searchsorted(cum, done + limit, side="right")), a + 1)
        out.append((a, b))
        done, a = int(cum[b - 1]), b
    return out
