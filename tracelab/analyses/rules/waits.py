"""Helpers shared by the rules about host waits (not a rule: exports no RULE)."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.rules.base import FindingContext


def host_sync_idle(ctx: FindingContext, rank: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """GPU idle time of the rank's devices caused by host syncs (every idle interval, whatever the
    display threshold) whose interval begins inside one of the windows [starts, ends): the host_sync ones
    (a wait covers most of the interval) and those that began while the launching thread (or a wait on the
    device) waited for the GPU, with the host only relaunching after it returned (the wait drained the
    queue; the interval's cause is that of the time after it, launch_latency: IdleIntervals.sync_caused_of)."""
    total = 0
    ws, we = merge(starts, ends)
    for (r, _), idle in ctx.idle.items():
        if r != rank or ws.size == 0:
            continue
        # the intervals that begin inside a window, and of those the host_sync ones (only their causes
        # are classified)
        i = np.searchsorted(ws, idle.start, side="right") - 1
        inside = (i >= 0) & (idle.start < we[np.maximum(i, 0)])
        sync = idle.sync_caused_of(inside)
        total += int((idle.end - idle.start)[inside][sync].sum())
    return total


def idle_during(ctx: FindingContext, rank: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """GPU idle time (every idle interval, any cause) of the rank's devices inside [starts, ends)."""
    total = 0
    ws, we = merge(starts, ends)
    for (r, _), idle in ctx.idle.items():
        if r == rank and ws.size:  # both are sorted disjoint unions: the idle time inside each window
            total += int(covered_length(idle.start, idle.end, ws, we).sum())
    return total
