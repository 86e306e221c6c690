"""A small integer per host thread (rank, pid, tid), consistent over every row set of one timeline, from the
lane table: a host thread's lanes (its CPU ops and API calls, its NVTX ranges of each domain) hold its rank,
pid and tid, so the codes are made once per lane and each row takes its lane's. Codes follow the
lexicographic order of (rank, pid, tid); they are not dense over a row set (other lanes have codes too)."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.memo import memo
from tracelab.model import Timeline
from tracelab.model.grouping import group_codes

_I64 = np.int64


def thread_codes(timeline: Timeline, *rows: np.ndarray) -> list[np.ndarray]:
    """Per row set: each row's thread code (int64). From the rows' own rank, pid and tid columns when the
    lane table cannot give them (a timeline without lanes)."""
    lane = timeline.col("lane")
    per_lane = memo(timeline, "lane_thread_codes", lambda: _lane_codes(timeline))
    usable = per_lane.size and all(r.size == 0 or (lane[r].min() >= 0 and lane[r].max() < per_lane.size) for r in rows)
    if usable:
        return [per_lane[lane[r]] for r in rows]
    both = np.concatenate([np.asarray(r, dtype=_I64) for r in rows]) if rows else np.zeros(0, _I64)
    codes = np.asarray(group_codes(iter([timeline.col(c)[both] for c in ("rank", "pid", "tid")]))[0], dtype=_I64)
    return np.split(codes, np.cumsum([r.size for r in rows])[:-1].tolist()) if rows else []


def _lane_codes(timeline: Timeline) -> np.ndarray:
    """The thread code of every lane (lexicographic order of its rank, pid and tid)."""
    if not timeline.n_lanes:
        return np.zeros(0, _I64)
    ids, _ = group_codes(iter([timeline.lane_col(c) for c in ("rank", "pid", "tid")]))
    out = np.asarray(ids, dtype=_I64)
    out.flags.writeable = False
    return out
