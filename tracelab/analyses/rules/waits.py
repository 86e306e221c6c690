"""Helpers shared by the rules about host waits (not a rule: exports no RULE)."""

from __future__ import annotations

import numpy as np

from ..intervals import intersection_length, merge
from .base import FindingContext


def host_sync_idle(ctx: FindingContext, rank: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """GPU idle time of the rank's devices caused by host syncs (every idle interval, whatever the
    display threshold) whose interval begins inside one of the windows [starts, ends)."""
    total = 0
    ws, we = merge(starts, ends)
    for (r, _), idle in ctx.idle.items():
        if r != rank or ws.size == 0:
            continue
        gs, ge = idle.of_cause("host_sync")
        i = np.searchsorted(ws, gs, side="right") - 1
        inside = (i >= 0) & (gs < we[np.maximum(i, 0)])
        total += int((ge - gs)[inside].sum())
    return total


def idle_during(ctx: FindingContext, rank: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """GPU idle time (every idle interval, any cause) of the rank's devices inside [starts, ends)."""
    total = 0
    ws, we = merge(starts, ends)
    for (r, _), idle in ctx.idle.items():
        if r == rank:
            total += intersection_length(idle.start, idle.end, ws, we)
    return total
