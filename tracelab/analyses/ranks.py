"""Cross-rank view of a multi-rank run: one row per rank, the matched collectives, stragglers, and a
rank × step (or rank × time bin) heatmap of GPU busy and of collective wait.

Per rank (sums over the rank's GPUs, from the same per-device summaries and gaps as `analyze`):
span (first start to last end of GPU activity on any of its GPUs), busy, idle, idle by gap cause
(gaps of at least the threshold; `short` = idle in shorter gaps), comm (union of communication
kernels), compute/comm overlap, the time it waited in matched collectives for the last rank, and
how often it was the last one (`tracelab.analyses.collectives`).

`rank_document` gives the `ranks` and `collectives` parts of the `analyze --json` document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import EventKind, Timeline
from .collectives import Collectives, match_collectives
from .intervals import covered_length, merge
from .results import Analysis

CAUSES = ("host_sync", "launch_latency", "dependency_wait", "no_work", "unknown")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GPU_KINDS = [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)]


@dataclass(frozen=True)
class RankSummary:
    rank: int
    devices: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_by_cause: tuple[tuple[str, int], ...]  # (cause, ns) for CAUSES, then ("short", ns)
    comm_ns: int
    compute_comm_overlap_ns: int
    collectives: int  # matched collectives this rank took part in
    collective_wait_ns: int  # time it waited in them for the last arrival
    times_last: int


@dataclass(frozen=True, eq=False)
class RankHeatmap:
    """Per rank and column (a step, or a time bin): GPU busy fraction and collective wait (ns)."""

    ranks: tuple[int, ...]
    column_kind: str  # "step" | "time"
    labels: tuple[str, ...]  # one per column
    starts: np.ndarray  # [rank, column] window start (steps differ per rank; time bins do not)
    ends: np.ndarray
    busy_fraction: np.ndarray  # [rank, column], 0..1
    wait_ns: np.ndarray  # [rank, column]


@dataclass(frozen=True, eq=False)
class RankAnalysis:
    ranks: tuple[RankSummary, ...]
    collectives: Collectives

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1


def rank_summaries(analysis: Analysis, collectives: Collectives) -> tuple[RankSummary, ...]:
    """One RankSummary per rank with GPU activity, in rank order."""
    out = []
    for r in sorted({d.rank for d in analysis.devices}):
        devs = [d for d in analysis.devices if d.rank == r]
        gaps = [g for g in analysis.gaps if g.rank == r]
        by_cause = {c: 0 for c in CAUSES}
        for g in gaps:
            by_cause[g.cause] = by_cause.get(g.cause, 0) + g.duration_ns
        idle = sum(d.idle_ns for d in devs)
        causes = (*((c, by_cause[c]) for c in CAUSES), ("short", idle - sum(by_cause.values())))
        last = next((s for s in collectives.stragglers if s.rank == r), None)
        out.append(
            RankSummary(
                rank=r,
                devices=len(devs),
                span_ns=max(d.end_ns for d in devs) - min(d.start_ns for d in devs),
                busy_ns=sum(d.busy_ns for d in devs),
                idle_ns=idle,
                idle_by_cause=causes,
                comm_ns=sum(d.comm_ns for d in devs),
                compute_comm_overlap_ns=sum(d.overlap.compute_comm_ns for d in devs),
                collectives=collectives.calls_of(r),
                collective_wait_ns=collectives.wait_of(r),
                times_last=last.times_last if last else 0,
            )
        )
    return tuple(out)


def rank_analysis(timeline: Timeline, analysis: Analysis) -> RankAnalysis:
    """The per-rank table and the matched collectives of a run (any number of ranks)."""
    collectives = match_collectives(timeline)
    return RankAnalysis(ranks=rank_summaries(analysis, collectives), collectives=collectives)


def rank_document(timeline: Timeline, analysis: Analysis) -> dict[str, Any]:
    """`ranks` and `collectives` for the `analyze --json` document (schema 2)."""
    return rank_document_of(rank_analysis(timeline, analysis))


def rank_document_of(ra: RankAnalysis) -> dict[str, Any]:
    return {
        "ranks": [
            {
                "rank": r.rank,
                "devices": r.devices,
                "span_ns": r.span_ns,
                "busy_ns": r.busy_ns,
                "idle_ns": r.idle_ns,
                "idle_by_cause_ns": dict(r.idle_by_cause),
                "comm_ns": r.comm_ns,
                "compute_comm_overlap_ns": r.compute_comm_overlap_ns,
                "collectives": r.collectives,
                "collective_wait_ns": r.collective_wait_ns,
                "times_last": r.times_last,
            }
            for r in ra.ranks
        ],
        "collectives": [
            {
                "name": c.name,
                "seq": c.seq,
                "count": c.count,
                "start_ns": c.start_ns,
                "skew_ns": c.skew_ns,
                "last_rank": c.last_rank,
                "wait_ns": c.wait_ns,
            }
            for c in ra.collectives.calls
        ],
        "stragglers": [
            {"rank": s.rank, "times_last": s.times_last, "caused_wait_ns": s.caused_wait_ns}
            for s in ra.collectives.stragglers
        ],
    }


# ---- heatmap ----------------------------------------------------------------------------------------


def _profiler_steps(timeline: Timeline, ranks: list[int]) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{rank: {step number: (start, end)}} from ProfilerStep#N ranges when every rank has the same ≥ 2
    step numbers; None otherwise."""
    ids = [i for i, s in enumerate(timeline.strings) if _PROFILER_STEP.match(s)]
    if not ids:
        return None
    ev = timeline.events
    sel = np.flatnonzero(
        np.isin(ev["name"].to_numpy(), ids)
        & np.isin(ev["kind"].to_numpy(), [int(EventKind.NVTX_RANGE), int(EventKind.CPU_OP)])
    )
    steps: dict[int, dict[int, tuple[int, int]]] = {r: {} for r in ranks}
    for r, n, s, e in zip(
        ev["rank"].to_numpy()[sel].tolist(),
        ev["name"].to_numpy()[sel].tolist(),
        ev["start"].to_numpy()[sel].tolist(),
        ev["end"].to_numpy()[sel].tolist(),
    ):  # one row per step marker (a handful per rank), not per event
        if r in steps:
            k = int(_PROFILER_STEP.match(timeline.strings[n]).group(1))
            old = steps[r].get(k)
            steps[r][k] = (min(s, old[0]), max(e, old[1])) if old else (s, e)
    keys = {frozenset(v) for v in steps.values()}
    if len(keys) != 1 or len(next(iter(keys))) < 2:
        return None
    return steps


def _found_steps(timeline: Timeline, ranks: list[int]) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{rank: {step index: (start, end)}} from `analyses.steps.find_steps` (step-like ranges of any
    name) when every rank has the same number (≥ 2) of steps; None otherwise."""
    from .steps import find_steps

    found = find_steps(timeline)
    per_rank = {r: found.of_rank(r) for r in ranks}
    counts = {len(s) for s, _ in per_rank.values()}
    if len(counts) != 1 or counts.pop() < 2:
        return None
    return {
        r: {k: (int(a), int(b)) for k, (a, b) in enumerate(zip(s.tolist(), e.tolist()))}
        for r, (s, e) in per_rank.items()
    }


def rank_heatmap(timeline: Timeline, collectives: Collectives | None = None, bins: int = 40) -> RankHeatmap:
    """Busy fraction and collective wait per rank and step (ProfilerStep#N on every rank, else the steps
    `analyses.steps` finds when every rank has as many), else per time bin of the run's GPU span
    (`bins` equal bins)."""
    collectives = collectives if collectives is not None else match_collectives(timeline)
    ev = timeline.events
    gpu = np.flatnonzero(np.isin(ev["kind"].to_numpy(), _GPU_KINDS))
    rank_col = ev["rank"].to_numpy()[gpu]
    ranks = sorted({int(r) for r in np.unique(rank_col).tolist()})
    if not ranks:
        z = np.zeros((0, 0))
        return RankHeatmap((), "time", (), z.astype(np.int64), z.astype(np.int64), z, z.astype(np.int64))
    start = ev["start"].to_numpy()[gpu]
    end = ev["end"].to_numpy()[gpu]
    steps = _profiler_steps(timeline, ranks) or _found_steps(timeline, ranks)
    if steps is not None:
        numbers = sorted(next(iter(steps.values())))
        labels = tuple(f"step {k}" for k in numbers)
        w0 = np.array([[steps[r][k][0] for k in numbers] for r in ranks], dtype=np.int64)
        w1 = np.array([[steps[r][k][1] for k in numbers] for r in ranks], dtype=np.int64)
        kind = "step"
    else:
        t0, t1 = int(start.min()), int(end.max())
        edges = (
            t0 + (np.arange(bins + 1, dtype=np.int64) * (t1 - t0)) // bins
        )  # exact: epoch ns overflow float
        w0 = np.tile(edges[:-1], (len(ranks), 1))
        w1 = np.tile(edges[1:], (len(ranks), 1))
        labels = tuple(f"+{(a - t0) / 1e6:.3f} ms" for a in edges[:-1].tolist())
        kind = "time"
    busy = np.zeros(w0.shape, dtype=np.int64)
    wait = np.zeros(w0.shape, dtype=np.int64)
    for i, r in enumerate(ranks):  # per rank (a few to a few hundred), vectorized inside
        mine = rank_col == r
        us, ue = merge(start[mine], end[mine])
        busy[i] = covered_length(us, ue, w0[i], w1[i])
        sel = collectives.wait_rank == r
        ws, we = merge(collectives.wait_start[sel], collectives.wait_end[sel])
        wait[i] = covered_length(ws, we, w0[i], w1[i])
    width = np.maximum(w1 - w0, 1)
    return RankHeatmap(
        ranks=tuple(ranks),
        column_kind=kind,
        labels=labels,
        starts=w0,
        ends=w1,
        busy_fraction=busy / width,
        wait_ns=wait,
    )
