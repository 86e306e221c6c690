"""Steps re-anchored at the batch fetch (issue 29) or the batch upload (issue 24, item 3).

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

import numpy as np

from tracelab.analyses.core.intervals import step_of
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import names_matching, rows_of
from tracelab.analyses.gaps.input_wait import DATALOADER
from tracelab.analyses.steps.sequence import LaunchSequence
from tracelab.model import CopyKind, EventKind, Timeline

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
