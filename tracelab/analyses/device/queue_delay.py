"""Queue delay: how long GPU work waits between its host launch and its start, per stream and per
kernel name; and the overlap of kernels inside CUDA graphs.

- queue delay of a kernel / copy = its GPU start − the start of the host API call that launched it
  (matched by correlation id; both formats put host and GPU on one clock). Work without a launch
  call in the trace and kernels of a graph replay (which share one cudaGraphLaunch) are left out.
- per-stream figures: count, median, p90, max, mean of the queue delay of that stream's kernels.
- latency distribution of one kernel name: the same figures over the kernels whose name contains a
  pattern (the priorities workload's `latency_kernel`).
- graph overlap: over kernels launched by a CUDA graph (Flag.GRAPH, a graph node id, or a
  correlation with a cudaGraphLaunch call), concurrent_ns = time during which two or more of them
  run at once, sum_ns = sum of their durations, union_ns = length of their union; the overlap kept
  = 1 − union / sum (0 when the graph runs its kernels one at a time).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.intervals import coverage_at_least, union_length
from tracelab.model import EventKind, Flag, Timeline
from tracelab.model.grouping import sorted_unique

GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.IGNORECASE)


class DelayStats(msgspec.Struct, frozen=True):
    """Queue delays (ns) of a set of GPU operations."""

    count: int
    median_ns: int
    p90_ns: int
    max_ns: int
    mean_ns: int

    @staticmethod
    def of(delays: np.ndarray) -> DelayStats:
        d = np.asarray(delays, dtype=np.int64)
        if d.size == 0:
            return DelayStats(0, 0, 0, 0, 0)
        return DelayStats(int(d.size), int(np.median(d)), int(np.percentile(d, 90)), int(d.max()), int(d.mean()))


class StreamDelay(msgspec.Struct, frozen=True):
    rank: int
    device: int
    stream: int
    stats: DelayStats


class KernelLatency(msgspec.Struct, frozen=True):
    """Queue delay (launch → start) and duration of the kernels whose name contains `pattern`."""

    pattern: str
    delay: DelayStats
    duration: DelayStats


class GraphOverlap(msgspec.Struct, frozen=True):
    kernels: int
    sum_ns: int
    union_ns: int
    concurrent_ns: int  # time with ≥ 2 graph kernels running at once
    streams: int  # distinct streams the graph kernels were reported on

    @property
    def overlap_fraction(self) -> float:
        return 0.0 if self.sum_ns <= 0 else 1.0 - self.union_ns / self.sum_ns


def _kernels(timeline: Timeline) -> np.ndarray:
    return np.flatnonzero(timeline.events["kind"].to_numpy() == int(EventKind.KERNEL))


def graph_kernel_mask(timeline: Timeline, rows: np.ndarray) -> np.ndarray:
    """Which rows are kernels launched by a CUDA graph."""
    ev = timeline.events
    mask = ((ev["flags"].to_numpy()[rows] & Flag.GRAPH) != 0) | (ev["graph_node"].to_numpy()[rows] >= 0)
    gids = np.array([i for i, s in enumerate(timeline.strings) if GRAPH_LAUNCH.search(s)], dtype=np.int64)
    if gids.size:
        rank = ev["rank"].to_numpy()[rows]
        corr = ev["correlation"].to_numpy()[rows]
        for r in sorted_unique(rank).tolist():
            sel = np.flatnonzero(rank == r)
            host = HostView(timeline, int(r))
            li = host.launch_index(corr[sel])
            mask[sel] |= (li >= 0) & np.isin(host.api_name[np.maximum(li, 0)], gids)
    return mask


def queue_delays(timeline: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """(kernel rows, queue delay ns) for every kernel with a launch call of its own in the trace."""
    from tracelab.analyses.core.launches import launch_starts

    rows = _kernels(timeline)
    t_launch = np.full(rows.size, -1, dtype=np.int64)  # the start of each one's launch call
    rank = timeline.col("rank")[rows]
    for r in sorted_unique(rank).tolist():  # one per rank
        t_launch[rank == r] = launch_starts(timeline, int(r), rows[rank == r])
    keep = (t_launch >= 0) & ~graph_kernel_mask(timeline, rows)
    rows = rows[keep]
    return rows, timeline.events["start"].to_numpy()[rows] - t_launch[keep]


def stream_delays(timeline: Timeline) -> tuple[StreamDelay, ...]:
    """Queue-delay figures per (rank, device, stream), streams in id order."""
    rows, delay = queue_delays(timeline)
    ev = timeline.events
    if rows.size == 0:
        return ()
    key = np.stack([ev[c].to_numpy()[rows] for c in ("rank", "device", "stream")], axis=1).astype(np.int64)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0, True])
    out = []
    for i, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):  # one per stream
        r, d, s = uniq[i].tolist()
        out.append(StreamDelay(r, d, s, DelayStats.of(delay[order[lo:hi]])))
    return tuple(out)


def kernel_latency(timeline: Timeline, pattern: str) -> KernelLatency:
    """Launch → start delay and duration of the kernels whose name contains `pattern`."""
    rows, delay = queue_delays(timeline)
    ids = np.array([i for i, s in enumerate(timeline.strings) if pattern in s], dtype=np.int64)
    sel = np.isin(timeline.events["name"].to_numpy()[rows], ids)
    rows, delay = rows[sel], delay[sel]
    ev = timeline.events
    dur = ev["end"].to_numpy()[rows] - ev["start"].to_numpy()[rows]
    return KernelLatency(pattern, DelayStats.of(delay), DelayStats.of(dur))


def graph_overlap(timeline: Timeline) -> GraphOverlap:
    """How much the kernels launched by CUDA graphs run at the same time (see the module doc)."""
    rows = _kernels(timeline)
    rows = rows[graph_kernel_mask(timeline, rows)]
    ev = timeline.events
    s = ev["start"].to_numpy()[rows]
    e = ev["end"].to_numpy()[rows]
    return GraphOverlap(int(rows.size), int((e - s).sum()), union_length(s, e),
                        coverage_at_least(s, e, np.arange(rows.size), 2), int(sorted_unique(ev["stream"].to_numpy()[rows]).size))
