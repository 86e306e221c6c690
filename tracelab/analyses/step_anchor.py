"""Steps re-anchored at the batch upload (issue 24, item 3).

A period found on one thread (DDP: the autograd thread's backward pass, which repeats most cleanly)
cuts the iterations where that thread pauses longest: every "step" is then backward(i) + forward(i+1),
the first forward lies in no step and the last step is cut short. A training iteration begins with
its batch's host-to-device copy, launched by the loop's own thread. When the rank's input copies
(the first of each cluster) are launched about one found step apart, the steps start at them
instead: same length, but aligned with the iteration, and the iterations whose period differed
(DDP's first iterations rebuild the gradient buckets; a longer warm-up) are counted too.
"""

from __future__ import annotations

import numpy as np

from ..model import CopyKind, EventKind, Timeline
from .rows import rows_of

RHYTHM = (0.8, 1.25)  # successive anchors lie this many found steps apart
WARMUP_MAX = 3.0  # a first iteration may take up to this many steps (warm-up) ...
WARMUP_STEPS = 2  # ... for this many first iterations
COVER = 0.8  # the copies' steps must cover this share of the found steps' time


def input_copies(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(GPU start, launch call start) of the rank's host-to-device copies that have a launch call,
    in GPU order (ns)."""
    from .step_table import launch_starts

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


def reanchor_at_input_copies(
    timeline: Timeline, rank: int, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Steps starting at the launches of the rank's batch uploads, or None when the copies do not
    keep the rhythm of the found steps on the GPU, cover them, and give at least as many steps."""
    if starts.size < 2:
        return None
    step = float(np.median(ends - starts))
    if step <= 0:
        return None
    gpu, launch = input_copies(timeline, rank)
    if gpu.size < 2:
        return None
    keep = np.r_[True, np.diff(gpu) > step / 4]  # the first copy of each cluster (input, labels, ...)
    gpu, launch = gpu[keep], launch[keep]
    lo, hi = _chain(gpu, step)
    if hi - lo < starts.size:
        return None
    chain = launch[lo:hi]
    if np.any(np.diff(chain) <= 0):
        return None
    last_end = max(int(ends[-1]), int(chain[-1] + step))
    new_s = chain.astype(np.int64)
    new_e = np.r_[chain[1:], last_end].astype(np.int64)
    a, b = max(int(starts[0]), int(new_s[0])), min(int(ends[-1]), int(new_e[-1]))
    if b - a < COVER * (int(ends[-1]) - int(starts[0])):
        return None
    return new_s, new_e
