"""Steps of one launch each: a run of CUDA graph replays or of host-paced launches of one kernel at a steady
cadence, one step per launch (docs/DESIGN.md "Steps")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.steps.cut import Cut, group_quantile
from tracelab.analyses.steps.sequence import MIN_REPEATS, LaunchSequence

STEADY_CADENCE = 0.5  # interquartile range of the intervals between launches over their median
HOST_PACED = 6.0  # launches at least this many call durations apart: the host works in between


@dataclass(frozen=True)
class LaunchRun:
    first: int  # position in the sequence of the run's first launch
    count: int
    graph: bool  # CUDA graph replays (else launches of one kernel)
    interval_ns: float  # median time from launch to launch
    paced: float  # median interval over the median launch call duration


def launch_run(seq: LaunchSequence, graph: bool, min_paced: float = 0.0,
               min_span: float = 0.0) -> LaunchRun | None:
    """The longest run of ≥ MIN_REPEATS consecutive launches of the same token (nothing else
    launched or waited for between them) at a steady cadence, of graph launches (graph=True) or of
    anything else, at least `min_paced` call durations apart and spanning at least `min_span` ns
    (count × interval); None when there is none. Vectorized over all runs at once."""
    tok = seq.tokens
    n = tok.size
    if n < MIN_REPEATS:
        return None
    run_start = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
    run_len = np.diff(np.r_[run_start, n])
    keep = run_len >= MIN_REPEATS
    lo, m = run_start[keep], run_len[keep]
    if lo.size == 0:
        return None
    seg, p = expand_ranges(lo, lo + m)
    all_launch = np.bincount(seg, weights=~seq.launch[p], minlength=lo.size) == 0
    is_graph = np.bincount(seg, weights=~seq.graph[p], minlength=lo.size) == 0
    inner = p > lo[seg]  # intervals: from the launch before, inside the run
    iv = (seq.start[p] - seq.start[np.maximum(p - 1, 0)]).astype(np.float64)
    med = group_quantile(seg[inner], iv[inner], lo.size, 0.5)
    q25 = group_quantile(seg[inner], iv[inner], lo.size, 0.25)
    q75 = group_quantile(seg[inner], iv[inner], lo.size, 0.75)
    dur = np.maximum(group_quantile(seg, (seq.end[p] - seq.start[p]).astype(np.float64), lo.size), 1.0)
    ok = all_launch & (is_graph == graph) & (med > 0) & (q75 - q25 <= STEADY_CADENCE * med)
    ok &= (med / dur >= min_paced) & (m * med >= min_span)
    if not ok.any():
        return None
    c = int(np.flatnonzero(ok)[np.argmax(m[ok])])  # the longest (the first of equals)
    return LaunchRun(int(lo[c]), int(m[c]), bool(is_graph[c]), float(med[c]), float(med[c] / dur[c]))


def cut_launch_run(seq: LaunchSequence, run: LaunchRun, calls: LaunchSequence) -> Cut:
    """One step per launch of the run. A step starts at the first call after the longest host
    pause since the previous launch (e.g. the stream-capture check just before a graph launch),
    looked up in `calls` (the same thread(s) with every API call); the last one ends at the next
    call after the loop, at most a median interval after its start."""
    launch_start = seq.start[run.first : run.first + run.count]
    launch_end = seq.end[run.first : run.first + run.count]
    c_start, c_end = calls.start, calls.end
    at = np.searchsorted(c_start, launch_start)  # the launch itself in `calls`
    prev_end = np.r_[launch_start[0], launch_end[:-1]]  # the first launch: from itself
    lo = np.minimum(np.searchsorted(c_start, prev_end, side="left"), at)
    # the first step: as many calls back as the others have at most, not into the set-up
    back = int(np.max(at[1:] - lo[1:])) if at.size > 1 else 0
    after_prev = int(np.searchsorted(c_start, seq.end[run.first - 1], side="left")) if run.first else 0
    lo[0] = min(at[0], max(at[0] - back, after_prev))
    pause = np.r_[0, c_start[1:] - c_end[:-1]]
    seg, idx = expand_ranges(lo, at + 1)
    order = np.lexsort((-pause[idx], seg))
    firsts = np.r_[0, np.flatnonzero(np.diff(seg[order])) + 1]
    starts = c_start[idx[order][firsts]]
    nxt = int(np.searchsorted(c_start, launch_end[-1], side="left"))
    cap = int(starts[-1]) + int(run.interval_ns)
    last_end = min(cap, int(c_start[nxt])) if nxt < c_start.size else cap
    ends = np.r_[starts[1:], max(last_end, int(launch_end[-1]))]
    return starts.astype(np.int64), ends.astype(np.int64)
