"""Steps re-anchored at the batch fetch (issue 29) or the batch upload (issue 24, item 3), and each step's
lead-in (`refine_starts`): where a step really starts when the host recorded ranges (CPU ops, NVTX /
record_function ranges) before its first CUDA call.

A period found on one thread (DDP: the autograd thread's backward pass, which repeats most cleanly)
cuts the iterations where that thread pauses longest: every "step" is then backward(i) + forward(i+1),
the first forward lies in no step and the last step is cut short. A training iteration begins with
its batch's host-to-device copy, launched by the loop's own thread. When the rank's input copies
(the first of each cluster) are launched about one found step apart, the steps start at them
instead: same length, but aligned with the iteration, and the iterations whose period differed
(DDP's first iterations rebuild the gradient buckets; a longer warm-up) are counted too.

Before the uploads, the batch fetch: a loop over a PyTorch DataLoader begins each iteration with the
loader's iterator op (`input_wait.DATALOADER`: torch.profiler records it as a CPU op, nsys
`--pytorch=autograd-nvtx` as an NVTX range of the same name) on the loop's thread. When the found steps
hold one fetch each (all of them, or all but a last step cut short), the steps start at the fetches. This
holds however long each iteration waits for its data (a starved loader makes the iterations' lengths
irregular, which the uploads' rhythm test refuses), and it counts the iterations that the call sequence
missed at either end: up to WARMUP_STEPS fetches before the first found step (the warm-up iterations,
whose calls differ) and every fetch after the last one that still launches GPU work (the calls of the
last iterations may drift from the period: a caching-allocator event fewer).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tracelab.analyses.core.intervals import expand_ranges, step_of
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import names_matching, rows_of
from tracelab.analyses.gaps.input_wait import DATALOADER
from tracelab.analyses.steps.cut import Cut
from tracelab.analyses.steps.sequence import LaunchSequence
from tracelab.model import CopyKind, EventKind, Timeline
from tracelab.model.grouping import first_rows, member, sorted_unique, unique_inverse

RHYTHM = (0.8, 1.25)  # successive anchors lie this many found steps apart
WARMUP_MAX = 3.0  # a first iteration may take up to this many steps (warm-up) ...
WARMUP_STEPS = 2  # ... for this many first iterations
COVER = 0.8  # the copies' steps must cover this share of the found steps' time


def input_copies(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(GPU start, launch call start) of the rank's host-to-device copies that have a launch call,
    in GPU order (ns)."""
    from tracelab.analyses.core.launches import launch_starts

    rows = rows_of(timeline, rank, (EventKind.MEMCPY,))
    rows = rows[timeline.col("copy_kind")[rows] == int(CopyKind.HTOD)]
    t = launch_starts(timeline, rank, rows)
    g = timeline.col("start")[rows]
    ok = t >= 0
    order = np.argsort(g[ok], kind="stable")
    return g[ok][order], t[ok][order]


def _chain(t: np.ndarray, step: float) -> tuple[int, int]:
    """[lo, hi) of the longest run of times about `step` apart, extended back over up to two longer
    first (warm-up) iterations."""
    if t.size < 2:
        return 0, 0
    d = np.diff(t)
    ok = (d >= RHYTHM[0] * step) & (d <= RHYTHM[1] * step)
    best_lo = best_hi = 0
    lo = 0
    for i in range(ok.size + 1):  # runs of ok gaps (one pass over the copies, not the events)
        if i == ok.size or not ok[i]:
            if i - lo > best_hi - best_lo:
                best_lo, best_hi = lo, i
            lo = i + 1
    if best_hi == best_lo:
        return 0, 0
    for _ in range(WARMUP_STEPS):
        if best_lo > 0 and d[best_lo - 1] <= WARMUP_MAX * step:
            best_lo -= 1
    return best_lo, best_hi + 1


def last_iteration_end(starts: np.ndarray, calls: LaunchSequence, step: float) -> int:
    """When the last of the steps `starts` (contiguous: each ends where the next starts) ends: when the last
    launch of its iteration returns. Its iteration launches as many calls as the median step before it (the
    first, a warm-up, left out when there are others), the first that many launches from its start on, none
    later than the longest step the rhythm allows (RHYTHM × `step` from its start: the teardown after the loop
    is not the iteration's). The other steps end where the next one starts, after their last launch; the last
    has no next start (DDP: the backward pass's gradient all-reduces and the optimizer are launched after the
    found step length). `calls`: every call of the rank's launching threads. -1 when it launched nothing."""
    at = np.sort(calls.start[calls.launch])
    end = calls.end[calls.launch][np.argsort(calls.start[calls.launch], kind="stable")]
    idx = np.searchsorted(at, starts, "left")
    per = np.diff(idx)  # launches in each step but the last
    if per.size == 0:
        return -1
    count = int(np.median(per[1:] if per.size > 1 else per))
    lo = int(idx[-1])
    hi = min(lo + count, int(np.searchsorted(at, starts[-1] + RHYTHM[1] * step, "left")))
    return int(end[lo:hi].max()) if hi > lo else -1


def reanchor_at_input_copies(timeline: Timeline, rank: int, starts: np.ndarray, ends: np.ndarray,
                             calls: LaunchSequence | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Steps starting at the launches of the rank's batch uploads, or None when the copies do not
    keep the rhythm of the found steps on the GPU, cover them, and give at least as many steps. With
    `calls` (every call of the rank's launching threads), the last step lasts at least until the last
    launch of its iteration returns (`last_iteration_end`)."""
    step = float(np.median(ends - starts)) if starts.size >= 2 else 0.0
    if step <= 0:
        return None
    gpu, launch = input_copies(timeline, rank)
    if gpu.size < 2:
        return None
    keep = np.r_[True, np.diff(gpu) > step / 4]  # the first copy of each cluster (input, labels, ...)
    gpu, launch = gpu[keep], launch[keep]
    lo, hi = _chain(gpu, step)
    chain = launch[lo:hi]
    if hi - lo < starts.size or np.any(np.diff(chain) <= 0):
        return None
    last_end = max(int(ends[-1]), int(chain[-1] + step))
    if calls is not None:
        last_end = max(last_end, last_iteration_end(chain, calls, step))
    new_s = chain.astype(np.int64)
    new_e = np.r_[chain[1:], last_end].astype(np.int64)
    a, b = max(int(starts[0]), int(new_s[0])), min(int(ends[-1]), int(new_e[-1]))
    if b - a < COVER * (int(ends[-1]) - int(starts[0])):
        return None
    return new_s, new_e


def loader_fetches(timeline: Timeline, rank: int, threads: np.ndarray) -> np.ndarray:
    """Start times (ns, sorted) of the rank's DataLoader iterator ops on `threads` (CPU ops or NVTX ranges;
    an op nested in another one is left out)."""
    rows = rows_of(timeline, rank, (EventKind.CPU_OP, EventKind.NVTX_RANGE))
    rows = rows[np.isin(column(timeline, "tid")[rows], threads)]
    rows = rows[names_matching(timeline, DATALOADER)[column(timeline, "name")[rows]]]
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    s, e = column(timeline, "start")[rows], column(timeline, "end")[rows]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    prev_end = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(e)[:-1]]
    return s[s >= prev_end].astype(np.int64)


def reanchor_at_loader(timeline: Timeline, rank: int, starts: np.ndarray, ends: np.ndarray, calls: LaunchSequence,
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """Steps starting at the rank's batch fetches (module docstring), or None when the rank has no
    DataLoader ops or the found steps do not hold one fetch each. `calls`: every call of the rank's
    launching threads (a fetch after the found steps counts when GPU work is launched after it; the last
    step ends when the last launch returns)."""
    launches = calls.start[calls.launch]
    if starts.size < 2 or launches.size == 0:
        return None
    f = loader_fetches(timeline, rank, np.asarray(calls.threads, dtype=np.int64))
    if f.size < 2:
        return None
    which = step_of(starts, ends, f)
    inside = which >= 0
    per = np.bincount(which[inside], minlength=starts.size)
    if per.max() > 1 or np.count_nonzero(per[:-1] == 1) < starts.size - 1:
        return None
    before = np.flatnonzero(f < starts[0])[-WARMUP_STEPS:]
    after = np.flatnonzero(f >= ends[-1])
    # a fetch after the found steps is an iteration when GPU work is launched after it
    after = after[f[after] < launches[-1]]
    chain = np.r_[f[before], f[inside], f[after]].astype(np.int64)
    if chain.size < starts.size or np.any(np.diff(chain) <= 0):
        return None
    last_end = max(int(ends[-1]), int(calls.end[calls.launch].max()))
    return chain, np.r_[chain[1:], last_end].astype(np.int64)


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
