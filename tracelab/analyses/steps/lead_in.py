"""Host activity before a step's first call: where a step really starts when the host recorded ranges
(CPU ops, NVTX / record_function ranges) before its first CUDA call."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.steps.cut import Cut
from tracelab.analyses.steps.sequence import LaunchSequence
from tracelab.model.grouping import first_rows, member, sorted_unique, unique_inverse


class HostRanges(NamedTuple):
    """Host ranges (CPU ops, NVTX / record_function ranges) of a rank's launching threads, sorted by start."""

    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    name: np.ndarray | None = None  # string ids; None where not known


MIN_HEADS = 3  # steps that must start at a range for the most common one to set the others' start ...
COMMON_HEAD = 0.75  # ... and the share of them that start at a range of one name


def refine_starts(starts: np.ndarray, ends: np.ndarray, calls: LaunchSequence, ranges: HostRanges) -> Cut:
    """Move each step's start back over the host ranges (CPU ops, NVTX / record_function ranges)
    recorded between the previous call and the step's first call: the step starts after the longest
    stretch in that window in which the host recorded nothing (the loop's own Python: the iteration,
    a print); the ranges after it (the data loader, the first ops of the forward) are the step's,
    those before it the previous step's tail. The first step's window reaches back as far as the
    longest other one, or to the outermost range that contains its first call. `ranges`: (start,
    end) of the candidate ranges, sorted by start, and their names: where three in four steps start at a
    range of one name, a step whose window holds a top-level range of that name starts there too (an iteration starts
    at the same place in each: a few µs more idle host time before another of its ranges does not move it).
    Steps stay contiguous."""
    r_start, r_end = ranges.start, ranges.end
    if starts.size == 0 or r_start.size == 0:
        return starts, ends
    last_end = np.maximum.accumulate(calls.end)
    before = np.searchsorted(calls.start, starts, side="left") - 1  # the call before each first call
    lo = np.where(before >= 0, last_end[np.maximum(before, 0)], np.iinfo(np.int64).min)
    lo = np.minimum(lo, starts)
    after_call = int(lo[0])  # the first step: after the call before it (if any) ...
    if starts.size > 1:
        lo[0] = max(int(lo[0]), int(starts[0] - np.max(starts[1:] - lo[1:])))
    elif before[0] < 0:
        lo[0] = starts[0]
    width = (starts - lo).astype(np.int64)
    # the ranges in each window (lo, start]: window ids, ends relative to lo clipped to the window
    a = np.searchsorted(r_start, lo, side="right")
    b = np.searchsorted(r_start, starts, side="right")
    seg, idx = expand_ranges(a, b)
    new = starts.copy()
    if idx.size:
        offset = np.r_[0, np.cumsum(width + 1)[:-1]]
        rel_s = r_start[idx] - lo[seg]
        rel_e = np.minimum(r_end[idx] - lo[seg], width[seg])
        covered = np.maximum.accumulate(rel_e + offset[seg]) - offset[seg]  # per window: cummax
        first = np.r_[True, seg[1:] != seg[:-1]]
        before_i = np.where(first, 0, np.r_[0, covered[:-1]])
        gap = rel_s - np.maximum(before_i, 0)  # idle host time before each range
        last = np.r_[first[1:], True]  # the last range of its window
        tail = np.zeros(starts.size, dtype=np.int64)  # idle time between the ranges and the call
        tail[seg[last]] = width[seg[last]] - np.maximum(covered[last], 0)
        # per window: the range after the longest gap, unless the gap before the call is longer
        order = np.lexsort((-gap, seg))
        heads = np.r_[0, np.flatnonzero(np.diff(seg[order])) + 1]
        best = order[heads]
        w = seg[best]
        take = gap[best] > tail[w]
        new[w[take]] = r_start[idx[best[take]]]
        if ranges.name is not None:
            moved_w, moved_at = _same_head(ranges.name, seg, idx, gap, w[take], idx[best[take]])
            new[moved_w] = r_start[moved_at]
    around = (r_start > after_call) & (r_start < starts[0]) & (r_end >= starts[0])  # ... in a range
    if around.any():
        new[0] = min(int(new[0]), int(r_start[around].min()))
        if starts.size > 1:
            new[0] = _lead_in(int(new[0]), max(after_call, int(new[0]) - int(np.max(starts[1:] - lo[1:]))), r_start, r_end)
    out_ends = ends.copy()
    out_ends[:-1] = new[1:]
    return new.astype(np.int64), out_ends.astype(np.int64)


def _same_head(names: np.ndarray, seg: np.ndarray, idx: np.ndarray, gap: np.ndarray, heads_w: np.ndarray,
               heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(windows, range positions): the steps that start at a range of another name than three in four steps
    (COMMON_HEAD) do, and the first top-level range of that name (idle host time before it) in their window
    to start at instead (none where fewer agree: on nsys's emit_nvtx ranges, named with their op_id, the
    steps that agree start at the previous iteration's last range as often as not).
    `seg`, `idx`, `gap`: window, range position and idle time before it of every range in the windows;
    `heads_w`, `heads`: the windows that start at a range and that range."""
    none = np.zeros(0, dtype=np.int64)
    if heads.size < MIN_HEADS:
        return none, none
    kinds, inverse = unique_inverse(names[heads])  # np.unique would import numpy.ma
    counts = np.bincount(inverse, minlength=kinds.size)
    top = int(np.argmax(counts))
    if int(counts[top]) < COMMON_HEAD * heads.size:
        return none, none
    common = kinds[top]
    odd = heads_w[names[heads] != common]
    cand = np.flatnonzero((names[idx] == common) & (gap > 0) & member(seg, sorted_unique(odd)))
    if cand.size == 0:
        return none, none
    # each window once, with its first candidate (the earliest: idx rises with seg)
    w, inverse = unique_inverse(seg[cand])
    return w, idx[cand[first_rows(inverse, w.size)]]


def _lead_in(at: int, lo: int, r_start: np.ndarray, r_end: np.ndarray) -> int:
    """Where the first step starts when it begins in a range (`at`, the outermost one holding its first
    call): the ranges just before it belong to it as they do to the other steps (their batch fetch, the
    loop's first op), so it starts after the longest stretch in (lo, at] in which the host recorded nothing,
    as refine_starts places the others; `at` itself when that stretch is the one right before `at`.
    `lo`: as far back as the other steps' windows reach, never before the call before the step."""
    i, j = int(np.searchsorted(r_start, lo, side="right")), int(np.searchsorted(r_start, at, side="left"))
    if j <= i:
        return at
    s, e = r_start[i:j], np.minimum(r_end[i:j], at)
    covered = np.maximum.accumulate(e)
    idle_before = s - np.r_[lo, covered[:-1]]  # idle host time before each range
    tail = at - int(covered[-1])  # ... and between the last of them and `at`
    k = int(np.argmax(idle_before))
    return int(s[k]) if idle_before[k] > tail else at
