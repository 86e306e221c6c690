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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..model import EventKind, Timeline
from ..model.grouping import sorted_unique
from .collectives import Collectives, match_collectives, rank_stragglers
from .distinct import distinct_codes
from .intervals import covered_length, merge
from .results import CAUSES as GAP_CAUSES
from .results import Analysis, GapTable

CAUSES = ("host_sync", "input_wait", "launch_latency", "dependency_wait", "no_work", "unknown")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GPU_KINDS = [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)]


@dataclass(frozen=True)
class RankSummary:
    rank: int
    devices: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_by_cause: tuple[
        tuple[str, int], ...
    ]  # (cause, ns) for CAUSES (and any other cause), then ("short", ns)
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
    step_comm: tuple[Any, ...] = ()  # comm_steps.StepComm per (rank, step)
    straggler_causes: tuple[Any, ...] = ()  # comm_steps.StragglerCause of the most frequent last ranks

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    def idle_cause(self, rank: int) -> tuple[str, int] | None:
        """A rank's main reason for GPU idle: the gap cause with the most gap time (e.g. a straggler starved
        by its loader: input_wait), and that time; None without gaps."""
        for r in self.ranks:
            if r.rank == rank:
                causes = [(c, ns) for c, ns in r.idle_by_cause if c != "short" and ns > 0]
                return max(causes, key=lambda x: x[1]) if causes else None
        return None


def _idle_by_rank_cause(gaps: GapTable) -> dict[tuple[int, str], int]:
    """Total gap time per (rank, cause)."""
    if not len(gaps):
        return {}
    n = len(GAP_CAUSES)  # (rank, cause) as one key, in the same order
    keys, inv = distinct_codes(gaps.column("rank") * n + gaps.column("cause"))
    sums = np.zeros(keys.size, dtype=np.int64)
    np.add.at(sums, inv, gaps.duration)
    return {(int(k) // n, GAP_CAUSES[int(k) % n]): int(t) for k, t in zip(keys.tolist(), sums.tolist(), strict=True)}


def rank_summaries(analysis: Analysis, collectives: Collectives) -> tuple[RankSummary, ...]:
    """One RankSummary per rank with GPU activity, in rank order."""
    out = []
    devices_of: dict[int, list] = {}
    for d in analysis.devices:
        devices_of.setdefault(d.rank, []).append(d)
    idle_of = _idle_by_rank_cause(GapTable.of(analysis.gaps))  # from the gap columns, not one pass per rank
    last_of = {s.rank: s.times_last for s in collectives.stragglers}
    for r in sorted(devices_of):
        devs = devices_of[r]
        by_cause = {c: idle_of.get((r, c), 0) for c in CAUSES}
        by_cause.update({c: ns for (rr, c), ns in idle_of.items() if rr == r and c not in by_cause})
        idle = sum(d.idle_ns for d in devs)
        causes = (
            *by_cause.items(),
            ("short", idle - sum(by_cause.values())),
        )  # CAUSES first, any new one after
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
                times_last=last_of.get(r, 0),
            )
        )
    return tuple(out)


def rank_analysis(timeline: Timeline, analysis: Analysis) -> RankAnalysis:
    """The per-rank table and the matched collectives of a run (any number of ranks)."""
    from .comm_steps import comm_by_step, step_windows, straggler_causes

    collectives = steps_stragglers(match_collectives(timeline), analysis)
    windows = step_windows(analysis.step_rows or analysis.steps)  # the steps' GPU windows
    return RankAnalysis(
        ranks=rank_summaries(analysis, collectives),
        collectives=collectives,
        step_comm=comm_by_step(timeline, collectives, windows),
        straggler_causes=straggler_causes(collectives, analysis, windows),
    )


def steps_stragglers(collectives: Collectives, analysis: Analysis) -> Collectives:
    """The stragglers ranked over the collectives inside the steps (issue 24: set-up apart): the set-up's
    collectives (the communicator's creation, DDP's parameter broadcast) wait for whichever rank finished
    building its model last, which says nothing about the training loop. Unchanged without steps, or when
    no collective starts after every rank's first step."""
    if not analysis.steps or not collectives.calls:
        return collectives
    first: dict[int, int] = {}
    for st in analysis.steps:
        first[st.rank] = min(first.get(st.rank, st.start_ns), st.start_ns)
    since = min(first.values())  # the earliest first step: ranks' clocks and loop starts differ a little
    inside = [c for c in collectives.calls if c.start_ns >= since]
    if not inside or len(inside) == len(collectives.calls):
        return collectives
    ranked = rank_stragglers(inside)
    note = (
        f"stragglers ranked over the {len(inside)} of {len(collectives.calls)} matched collectives inside the steps "
        "(set-up's collectives left out)"
    )
    return replace(collectives, stragglers=ranked, notes=(*collectives.notes, note))


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
                "group": c.group,
                "bytes": c.bytes,
                "dtype": c.dtype,
                "group_size": c.group_size,
                "transfer_ns": c.transfer_ns,
                "algbw_gbps": c.algbw_gbps,
                "busbw_gbps": c.busbw_gbps,
                "per_rank": [
                    {"rank": r, "device": d, "start_ns": s0, "wait_ns": w, "transfer_ns": t}
                    for r, d, s0, w, t in c.per_rank
                ],
            }
            for c in ra.collectives.calls
        ],
        "stragglers": [
            {"rank": s.rank, "times_last": s.times_last, "caused_wait_ns": s.caused_wait_ns, **_cause_doc(ra, s.rank),
             # why it is late: its own GPU idle's main cause (issue 29: a rank starved by its loader)
             "idle_cause": (ra.idle_cause(s.rank) or (None, 0))[0],
             "idle_cause_ns": (ra.idle_cause(s.rank) or (None, 0))[1]}
            for s in ra.collectives.stragglers
        ],
        "comm_by_step": [
            {
                "rank": x.rank,
                "step": x.step,
                "comm_ns": x.comm_ns,
                "exposed_comm_ns": x.exposed_comm_ns,
                "wait_ns": x.wait_ns,
            }
            for x in ra.step_comm
        ],
    }


def _cause_doc(ra: RankAnalysis, rank: int) -> dict[str, Any]:
    """A straggler's own cause (comm_steps.StragglerCause) for its `stragglers` entry; {} when not explained."""
    from ..render.format import fmt_ns

    for c in ra.straggler_causes:
        if c.rank == rank:
            return {
                "late_ns": c.late_ns,
                "steps_late": c.steps_late,
                "steps": c.steps,
                "idle_before_ns": c.idle_before_ns,
                "cause": c.cause,
                "explanation": c.sentence(fmt_ns),
            }
    return {}


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


def _found_steps(
    timeline: Timeline, ranks: list[int], steps: Sequence[Any] | None
) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{rank: {step index: (start, end)}} from the analysis's steps (`Analysis.steps`), or else from
    `analyses.steps.find_steps`, when every rank has the same number (≥ 2) of steps; None otherwise."""
    if steps is None:
        from .steps import find_steps

        steps = find_steps(timeline).steps
    per_rank: dict[int, list[tuple[int, int]]] = {r: [] for r in ranks}
    for s in steps:  # one entry per step: a handful per rank
        if s.rank in per_rank:
            per_rank[s.rank].append((int(s.start_ns), int(s.end_ns)))
    counts = {len(v) for v in per_rank.values()}
    if len(counts) != 1 or counts.pop() < 2:
        return None
    return {r: dict(enumerate(sorted(v))) for r, v in per_rank.items()}


def _rows_by_rank(rank_col: np.ndarray, ranks: list[int]) -> list[np.ndarray]:
    """For each rank of `ranks` (sorted), the positions of its rows in `rank_col`: one sort, no mask per rank."""
    order = np.argsort(rank_col, kind="stable")
    keys = np.asarray(ranks, dtype=np.int64)
    lo = np.searchsorted(rank_col[order], keys, side="left")
    hi = np.searchsorted(rank_col[order], keys, side="right")
    return [order[a:b] for a, b in zip(lo.tolist(), hi.tolist())]


def rank_heatmap(
    timeline: Timeline,
    collectives: Collectives | None = None,
    bins: int = 40,
    steps: Sequence[Any] | None = None,
) -> RankHeatmap:
    """Busy fraction and collective wait per rank and step (ProfilerStep#N on every rank, else the steps
    `analyses.steps` finds when every rank has as many; pass the analysis's `steps` to reuse them), else
    per time bin of the run's GPU span (`bins` equal bins)."""
    collectives = collectives if collectives is not None else match_collectives(timeline)
    ev = timeline.events
    gpu = np.flatnonzero(np.isin(ev["kind"].to_numpy(), _GPU_KINDS))
    rank_col = ev["rank"].to_numpy()[gpu]
    ranks = sorted({int(r) for r in sorted_unique(rank_col).tolist()})
    if not ranks:
        z = np.zeros((0, 0))
        return RankHeatmap((), "time", (), z.astype(np.int64), z.astype(np.int64), z, z.astype(np.int64))
    start = ev["start"].to_numpy()[gpu]
    end = ev["end"].to_numpy()[gpu]
    found = _profiler_steps(timeline, ranks) or _found_steps(timeline, ranks, steps)
    if found is not None:
        numbers = sorted(next(iter(found.values())))
        labels = tuple(f"step {k}" for k in numbers)
        w0 = np.array([[found[r][k][0] for k in numbers] for r in ranks], dtype=np.int64)
        w1 = np.array([[found[r][k][1] for k in numbers] for r in ranks], dtype=np.int64)
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
    gpu_of = _rows_by_rank(rank_col, ranks)
    wait_of = _rows_by_rank(collectives.wait_rank, ranks)
    for i in range(len(ranks)):  # per rank (a few to a few hundred), vectorized inside
        us, ue = merge(start[gpu_of[i]], end[gpu_of[i]])
        busy[i] = covered_length(us, ue, w0[i], w1[i])
        ws, we = merge(collectives.wait_start[wait_of[i]], collectives.wait_end[wait_of[i]])
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
