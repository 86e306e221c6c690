"""The per-step table: for each step (tracelab.analyses.steps) its duration, GPU busy and idle time,
idle by gap cause, blocking host syncs and kernels, with warm-up and outlier flags.

Definitions (per rank; a step is the host-time interval [start, end)):
- gpu_busy_ns: the part of the step covered by the union of the rank's GPU activity (kernels,
  memcpys, memsets on any of its devices); gpu_idle_ns = duration − gpu_busy_ns.
- idle_by_cause: for each gap cause, the part of the rank's gaps (tracelab.analyses.gaps, those of
  at least the gap threshold) that falls inside the step (summed over the rank's devices).
- blocking_syncs: host API calls flagged blocking (stream / device / event synchronize, synchronous
  memcpy) that start inside the step.
- kernels: kernels of the rank that start inside the step.
- warmup: the rank's first step (index 0: a scope that leaves it out has none); outlier: a step lasting more than 3× the rank's median step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import GPU_ACTIVITY_KINDS, EventKind, Flag, Timeline
from .intervals import covered_length, merge
from .results import Gap
from .steps import Steps

OUTLIER_FACTOR = 3.0
CAUSES = ("host_sync", "launch_latency", "dependency_wait", "no_work", "unknown")


@dataclass(frozen=True)
class StepRow:
    rank: int
    index: int
    source: str  # "marked" | "inferred"
    start_ns: int
    end_ns: int
    duration_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int
    idle_by_cause: tuple[tuple[str, int], ...]  # (cause, ns) for every cause with time in the step
    blocking_syncs: int
    kernels: int
    warmup: bool
    outlier: bool

    def idle_of(self, cause: str) -> int:
        return dict(self.idle_by_cause).get(cause, 0)


def _count_in(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many times t fall in each [starts[i], ends[i]) (steps sorted by start, disjoint)."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.maximum(i, 0)])
    return np.bincount(i[ok], minlength=starts.size)


def step_rows(timeline: Timeline, steps: Steps, gaps: tuple[Gap, ...] | list[Gap]) -> tuple[StepRow, ...]:
    """One row per step, ranks in order, steps in time order."""
    ev = timeline.cols
    kind = ev["kind"]
    rank_c = ev["rank"]
    start = ev["start"]
    end = ev["end"]
    flags = ev["flags"]
    gpu = np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS])
    api = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER)])
    blocking = api & ((flags & Flag.BLOCKING) != 0)
    kernel = kind == int(EventKind.KERNEL)
    g_rank = np.array([g.rank for g in gaps], dtype=np.int64)
    g_dev = np.array([g.device for g in gaps], dtype=np.int64)
    g_start = np.array([g.start_ns for g in gaps], dtype=np.int64)
    g_end = np.array([g.end_ns for g in gaps], dtype=np.int64)
    g_cause = np.array([g.cause for g in gaps], dtype=object)
    rows: list[StepRow] = []
    by_rank = {s.rank: s.source for s in steps.steps}
    for rank in steps.ranks():
        mine = sorted((st for st in steps.steps if st.rank == rank), key=lambda st: st.start_ns)
        s, e = steps.of_rank(rank)
        index = [st.index for st in mine]
        dur = e - s
        on = rank_c == rank
        us, ue = merge(start[gpu & on], end[gpu & on])
        busy = covered_length(us, ue, s, e)
        syncs = _count_in(s, e, start[blocking & on])
        kernels = _count_in(s, e, start[kernel & on])
        idle = {}
        for cause in CAUSES:
            total = np.zeros(s.size, dtype=np.int64)
            mine = (g_rank == rank) & (g_cause == cause)
            for dev in np.unique(g_dev[mine]).tolist():
                sel = mine & (g_dev == dev)
                gs, ge = merge(g_start[sel], g_end[sel])
                total += covered_length(gs, ge, s, e)
            idle[cause] = total
        med = float(np.median(dur)) if dur.size else 0.0
        for i in range(s.size):  # one row per step (not per event)
            rows.append(
                StepRow(
                    rank=rank,
                    index=index[i],
                    source=by_rank[rank],
                    start_ns=int(s[i]),
                    end_ns=int(e[i]),
                    duration_ns=int(dur[i]),
                    gpu_busy_ns=int(busy[i]),
                    gpu_idle_ns=int(dur[i] - busy[i]),
                    idle_by_cause=tuple((c, int(idle[c][i])) for c in CAUSES if idle[c][i] > 0),
                    blocking_syncs=int(syncs[i]),
                    kernels=int(kernels[i]),
                    warmup=index[i] == 0,
                    outlier=bool(med > 0 and dur[i] > OUTLIER_FACTOR * med),
                )
            )
    return tuple(rows)
