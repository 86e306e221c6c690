"""Overlap between classes of GPU work on one device (DESIGN.md definitions).

- compute = kernels that are not communication; comm = communication kernels (NCCL and similar);
  copy = memcpys and memsets.
- compute_copy_ns / compute_comm_ns: length of the intersection of the two classes' unions.
- compute_compute_ns: time during which compute kernels run on two or more streams at once
  (kernels overlapping on the same stream, as with PDL, count once).
- copy_copy_ns: time during which copies run on two or more streams at once (e.g. an HtoD and a
  DtoH copy engine busy together); two copies on one stream count once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracelab.analyses.core.intervals import coverage_at_least, intersection_length, union_length
from tracelab.analyses.results import Overlap
from tracelab.model import EventKind, Timeline
from tracelab.model.kinds import GPU_ACTIVITY_KINDS

if TYPE_CHECKING:
    import pandas as pd


def device_overlap(kind: np.ndarray, start: np.ndarray, end: np.ndarray, stream_key: np.ndarray, comm: np.ndarray,
                   ) -> Overlap:
    """Overlap figures for the GPU events of one device (columns as arrays of equal length;
    stream_key identifies a stream, e.g. the event's lane id)."""
    is_kernel = kind == int(EventKind.KERNEL)
    compute = is_kernel & ~comm
    comm_k = is_kernel & comm
    copy = (kind == int(EventKind.MEMCPY)) | (kind == int(EventKind.MEMSET))
    cs, ce = start[compute], end[compute]
    return Overlap(compute_compute_ns=coverage_at_least(cs, ce, stream_key[compute], 2),
                   compute_copy_ns=intersection_length(cs, ce, start[copy], end[copy]),
                   compute_comm_ns=intersection_length(cs, ce, start[comm_k], end[comm_k]),
                   copy_copy_ns=coverage_at_least(start[copy], end[copy], stream_key[copy], 2))


def stream_overlap_matrix(timeline: Timeline, rank: int, device: int) -> pd.DataFrame:
    """For one device, the time (ns) during which each pair of streams is busy at once; the diagonal
    is each stream's busy time (union of its kernels, memcpys and memsets)."""
    import pandas as pd

    ev = timeline.events
    gpu = ev[ev["kind"].isin([int(k) for k in GPU_ACTIVITY_KINDS]).to_numpy() & (ev["rank"].to_numpy() == rank)
             & (ev["device"].to_numpy() == device)]
    streams = sorted(set(gpu["stream"].tolist()))
    stream, start, end = (gpu[c].to_numpy() for c in ("stream", "start", "end"))
    parts = {s: (start[stream == s], end[stream == s]) for s in streams}  # per stream (a handful)
    labels = [f"stream {s}" for s in streams]
    mat = np.zeros((len(streams), len(streams)), dtype=np.int64)
    for i, a in enumerate(streams):
        mat[i, i] = union_length(*parts[a])
        for j in range(i + 1, len(streams)):
            mat[i, j] = mat[j, i] = intersection_length(*parts[a], *parts[streams[j]])
    return pd.DataFrame(mat, index=labels, columns=labels)
