"""Steps made of a repeated short block (a loop inside the step; token periods under SHORT_BLOCK): the host
pauses once per step, so the steps start after the recurring pause (docs/DESIGN.md "Steps", step 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelab.analyses.steps.cut import Cut, _empty, _repeating_run_end, host_pauses, in_rhythm
from tracelab.analyses.steps.sequence import MAX_TOKENS, MIN_REPEATS, LaunchSequence

PAUSE_RATIO = 3.0  # the step-boundary pause must be this many times the typical pause
PAUSE_QUANTILE = 25  # per phase, this percentile of the pauses over the periods (robust to set-up)
PAUSE_NEAR_BEST = 0.7  # the smallest multiple whose ratio is this close to the best one
MAX_MULTIPLE = 256


@dataclass(frozen=True)
class PausePeriod:
    lag: int  # a multiple of the token period
    ratio: float  # the recurring pause over the typical pause
    threshold: float  # ns: pauses at least this long are step boundaries


def pause_period(seq: LaunchSequence, base: int) -> PausePeriod:
    """When a step repeats the same short block of launches k times (a loop inside the step; used
    for token periods under SHORT_BLOCK), the tokens repeat every block, but the host pauses once
    per step (Python between iterations, the data loader): fold the pauses before each launch at
    every multiple q of the token period and keep the smallest q at which one phase pauses
    PAUSE_RATIO times longer than usual in (nearly) every period."""
    pause = host_pauses(seq).astype(np.float64)[:MAX_TOKENS]
    n = pause.size
    typical = max(float(np.median(pause)), 1.0)
    results = []
    for m in range(1, min(MAX_MULTIPLE, n // (MIN_REPEATS * base)) + 1):
        q = m * base
        k = n // q
        fold = np.percentile(pause[: k * q].reshape(k, q), PAUSE_QUANTILE, axis=0)
        results.append((q, float(fold.max()) / typical))
    if not results:
        return PausePeriod(base, 0.0, 0.0)
    best = max(r for _, r in results)
    if best < PAUSE_RATIO:
        return PausePeriod(base, best, 0.0)
    q, ratio = next((q, r) for q, r in results if r >= PAUSE_NEAR_BEST * best)
    return PausePeriod(q, ratio, typical * np.sqrt(ratio))


def _centered_max(x: np.ndarray, h: int) -> np.ndarray:
    """max(x[i-h : i+h+1]) for every i, in O(n) (van Herk / Gil-Werman: block prefix and suffix
    maxima)."""
    w = 2 * h + 1
    n = x.size
    lo = np.iinfo(np.int64).min
    total = -(-(n + 2 * h) // w) * w
    padded = np.full(total, lo, dtype=np.int64)
    padded[h : h + n] = x
    blocks = padded.reshape(-1, w)
    prefix = np.maximum.accumulate(blocks, axis=1).ravel()
    suffix = np.maximum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    i = np.arange(n)
    return np.maximum(suffix[i], prefix[np.minimum(i + w - 1, total - 1)])


def cut_by_pause(seq: LaunchSequence, pp: PausePeriod) -> Cut:
    """Steps starting at the calls that follow a step-boundary pause (in rhythm); the first step
    also when the sequence starts with it, without a pause before."""
    q = pp.lag
    pause = host_pauses(seq)
    # boundaries: long pauses that are the longest within half a step on either side
    peak = pause >= _centered_max(pause, q // 2)
    pos = in_rhythm(np.flatnonzero((pause >= pp.threshold) & peak), q)
    if pos.size == 0:
        return _empty()
    tol = max(1, q // 20)
    if pos.size > 2 and pos[1] - pos[0] < q and np.median(np.diff(pos[1:])) == q:
        # steps of exactly q calls, but a shorter first one (the first call has no pause before it
        # to tell; a slow first launch makes the second look like a boundary): q calls too
        pos = np.r_[max(0, int(pos[1]) - q), pos[1:]]
    elif pos[0] >= q - tol:
        pos = np.r_[max(0, int(pos[0]) - q), pos]
    # the teardown after the loop (a final synchronize after a pause) is no step
    stop = _repeating_run_end(seq.tokens, int(pos[-1]), q)
    if pos.size > 1 and stop - int(pos[-1]) < q // 2:
        pos = pos[:-1]
        stop = _repeating_run_end(seq.tokens, int(pos[-1]), q)
    starts = seq.start[pos]
    ends = np.r_[starts[1:], seq.end[int(pos[-1]) : max(stop, int(pos[-1]) + 1)].max()]
    return starts.astype(np.int64), ends.astype(np.int64)
