"""The GPU memory timeline: bytes allocated (and reserved, where recorded) over time per device, from Kineto
`[memory]` instants (parsers/kineto_memory.py: the caching allocator's Total Allocated / Total Reserved after
each allocation or free) or nsys CUDA memory usage events (parsers/nsys_memory.py: the running sum of CUDA
allocations). Per device: the peak, the allocation that reached it and the host op / range it was made in
(the innermost host range or CPU op on the allocating thread containing it; for nsys the range around the
CUDA call with the event's correlation id); per step: the peak within the step (the level carried into the
step counts). Vectorized (sorts, searchsorted, maximum.reduceat)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.results import Analysis
from tracelab.model.grouping import sorted_unique
from tracelab.model.kinds import EventKind
from tracelab.model.timeline import Timeline

_I64 = np.int64


class MemoryPeak(msgspec.Struct, frozen=True):
    rank: int
    device: int
    peak_bytes: int  # allocated at the peak
    at_ns: int
    allocation_bytes: int  # the allocation that reached it
    op: str  # the innermost host op / range around it ("" unknown)
    reserved_peak_bytes: int  # -1 when not recorded
    events: int


class StepMemory(msgspec.Struct, frozen=True):
    rank: int
    device: int
    index: int
    peak_bytes: int
    start_bytes: int  # allocated when the step began


class MemoryTimeline(msgspec.Struct, frozen=True, eq=False):
    source: str
    t: np.ndarray  # event times, sorted within each device
    device: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    peaks: tuple[MemoryPeak, ...]
    steps: tuple[StepMemory, ...]

    def series(self, device: int, max_points: int = 4000) -> tuple[np.ndarray, np.ndarray]:
        """(t, allocated) of one device, at most `max_points` (each kept point a bucket's maximum)."""
        m = self.device == device
        t, v = self.t[m], self.allocated[m]
        if t.size <= max_points:
            return t, v
        edges = np.linspace(0, t.size, max_points + 1).astype(np.int64)[:-1]
        return t[edges], np.maximum.reduceat(v, edges)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "events": int(self.t.size), "peaks": [msgspec.structs.asdict(p) for p in self.peaks],
                "steps": [msgspec.structs.asdict(s) for s in self.steps]}


def _enclosing_op(tl: Timeline, tid: int, t: int) -> str:
    """The innermost host range / CPU op on thread `tid` (any thread when -1) containing time t."""
    kind = tl.col("kind")
    start, end = tl.col("start"), tl.col("end")
    m = ((kind == EventKind.NVTX_RANGE) | (kind == EventKind.CPU_OP)) & (start <= t) & (end >= t)
    if tid >= 0:
        m &= tl.col("tid") == tid
    rows = np.flatnonzero(m)
    if not rows.size:
        return ""
    r = rows[np.argmax(start[rows])]  # the latest start = the innermost
    nid = int(tl.col("name")[r])
    return tl.strings[nid] if 0 <= nid < len(tl.strings) else ""


def _call_of(tl: Timeline, corr: int) -> tuple[int, int]:
    """(tid, start) of the host call with this correlation id, or (-1, -1)."""
    if corr < 0:
        return -1, -1
    kind = tl.col("kind")
    rows = np.flatnonzero(((kind == EventKind.RUNTIME) | (kind == EventKind.DRIVER)) & (tl.col("correlation") == corr))
    if not rows.size:
        return -1, -1
    return int(tl.col("tid")[rows[0]]), int(tl.col("start")[rows[0]])


def memory_timeline(tl: Timeline, analysis: Analysis | None = None) -> MemoryTimeline | None:
    """The run's GPU memory timeline, or None when the trace recorded no memory events."""
    mem = tl.meta.extra.get("memory") if isinstance(tl.meta.extra, dict) else None
    if not mem or len(mem.get("t", ())) == 0:  # lists (nsys, the store) or int64 arrays (Kineto)
        return None
    t = np.asarray(mem["t"], dtype=_I64)
    dev = np.asarray(mem["device"], dtype=_I64)
    gpu = dev >= 0
    if not gpu.any():
        return None
    t, dev = t[gpu], dev[gpu]
    alloc = np.asarray(mem["allocated"], dtype=_I64)[gpu]
    reserved = np.asarray(mem["reserved"], dtype=_I64)[gpu]
    size = np.asarray(mem["bytes"], dtype=_I64)[gpu]
    absent = np.full(gpu.size, -1, dtype=_I64)  # a column the memory events do not hold
    tid = (np.asarray(mem["tid"], dtype=_I64) if "tid" in mem else absent)[gpu]
    corr = (np.asarray(mem["correlation"], dtype=_I64) if "correlation" in mem else absent)[gpu]
    order = np.lexsort((t, dev))
    t, dev, alloc, reserved, size, tid, corr = (a[order] for a in (t, dev, alloc, reserved, size, tid, corr))
    rank = int(tl.meta.ranks[0]) if tl.meta.ranks else 0
    peaks, steps = [], []
    for d in sorted_unique(dev).tolist():
        idx = np.flatnonzero(dev == d)
        i = int(idx[np.argmax(alloc[idx])])  # the first time the peak is reached
        ctid, ct = _call_of(tl, int(corr[i]))
        op = _enclosing_op(tl, ctid, ct) if ct >= 0 else _enclosing_op(tl, int(tid[i]), int(t[i]))
        res = reserved[idx]
        peaks.append(MemoryPeak(rank, int(d), int(alloc[i]), int(t[i]), int(size[i]), op,
                                int(res.max()) if (res >= 0).any() else -1, int(idx.size)))
        if analysis is not None and analysis.steps:
            td, ad = t[idx], alloc[idx]
            st = [s for s in analysis.steps if s.rank == rank] or list(analysis.steps)
            lo, hi = (np.searchsorted(td, np.array([getattr(s, k) for s in st], dtype=_I64), side="left")
                      for k in ("start_ns", "end_ns"))
            before = np.where(lo > 0, ad[np.maximum(lo - 1, 0)], 0)  # the level carried into the step
            inside = np.full(len(st), np.iinfo(_I64).min, _I64)
            has = hi > lo
            if has.any():
                ext = np.r_[ad, 0]
                inside[has] = np.maximum.reduceat(ext, np.c_[lo[has], hi[has]].ravel())[::2]
            peak = np.maximum(before, inside)
            steps += [StepMemory(rank, int(d), s.index, int(p), int(b)) for s, p, b in zip(st, peak, before, strict=True)]
    return MemoryTimeline(str(mem.get("source", "")), t, dev, alloc, reserved, tuple(peaks), tuple(steps))
