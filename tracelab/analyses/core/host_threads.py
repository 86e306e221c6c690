"""Which rows of a rank are host-thread activity, and when each host thread was first recorded: the OS runtime
calls (nsys --trace=osrt) and the first-seen times a --steps / --window scope keeps from the whole trace."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.memo import column, memo
from tracelab.analyses.core.rows import ranks_of, rows_of
from tracelab.model import EventKind, Timeline
from tracelab.model.kinds import HOST_API_KINDS, OS_CALL_CATEGORY

_I64 = np.int64


def os_call_rows(timeline: Timeline, rank: int) -> np.ndarray:
    """Positions (ascending) of the rank's OS runtime calls (nsys --trace=osrt)."""
    strings = timeline.strings
    os_cat = memo(timeline, "os_call_category",
                  lambda: strings.index(OS_CALL_CATEGORY) if OS_CALL_CATEGORY in strings else -1)
    if os_cat < 0:
        return np.zeros(0, dtype=_I64)
    other = rows_of(timeline, rank, (EventKind.OTHER,))
    return other[column(timeline, "category")[other] == os_cat]


FEW_THREADS = 16  # up to this many threads, a mask per thread beats sorting every host event by thread


def _first_starts(tid: np.ndarray, start: np.ndarray) -> dict[int, int]:
    """Per thread: the first start of its events (in any order)."""
    threads = distinct(tid)
    if threads.size <= FEW_THREADS:
        return {int(t): int(start[tid == t].min()) for t in threads.tolist()}
    order = np.argsort(tid, kind="stable")
    t = tid[order]
    first = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    return dict(zip(t[first].tolist(), np.minimum.reduceat(start[order], first).tolist(), strict=True))


FirstSeen = dict[tuple[int, int], int]  # (rank, tid) -> start of the thread's first recorded host activity


def thread_first_seen(timeline: Timeline) -> FirstSeen:
    """When each host thread was first recorded (CUDA API calls, CPU ops, NVTX ranges, OS calls), per (rank,
    tid). Computed on the whole trace before a --steps / --window scope clips it, so "the launching thread
    was absent" keeps meaning absent from the trace, not from the window."""
    out: FirstSeen = {}
    start, tid = column(timeline, "start"), column(timeline, "tid")
    for rank in ranks_of(timeline):  # the rank's host rows, grouped once per timeline
        rows = np.concatenate([rows_of(timeline, rank, (*HOST_API_KINDS, EventKind.CPU_OP, EventKind.NVTX_RANGE)),
                               os_call_rows(timeline, rank)])
        if rows.size:
            out.update({(rank, t): first for t, first in _first_starts(tid[rows], start[rows]).items()})
    return out


