"""When each GPU row was launched: the start of the host API call that carries its correlation id."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.distinct import FirstPosition
from tracelab.analyses.core.rows import rows_of
from tracelab.model import Timeline
from tracelab.model.kinds import HOST_API_KINDS


def launch_starts(timeline: Timeline, rank: int, rows: np.ndarray) -> np.ndarray:
    """Start of the host API call of `rank` that launched each GPU row (by correlation id: the first
    call carrying it, as HostView.launch_index takes it), -1 where the trace holds none."""
    corr = timeline.col("correlation")
    api = rows_of(timeline, rank, HOST_API_KINDS)
    out = np.full(rows.size, -1, dtype=np.int64)
    api = api[corr[api] >= 0]
    if api.size == 0 or rows.size == 0:
        return out
    c = corr[rows]
    i = FirstPosition(corr[api]).find(c)
    hit = (c >= 0) & (i >= 0)
    out[hit] = timeline.col("start")[api[i[hit]]]
    return out
