"""Cross-rank view of a multi-rank run: one row per rank, the matched collectives, stragglers, and a
rank × step (or rank × time bin) heatmap of GPU busy and of collective wait.

Per rank (sums over the rank's GPUs, same definitions as `analyze`'s per-device summaries and gaps),
over the rank's steps when the run has steps (issue 24: set-up apart — the span of its steps' GPU windows,
`step_windows.steps_spans`, every figure clipped to it; `scope` says "steps"), else over the whole run:
span (first start to last end of GPU activity on any of its GPUs), busy, idle, idle by gap cause
(gaps of at least the threshold; `short` = idle in shorter gaps), comm (union of communication
kernels), compute/comm overlap, the time it waited in matched collectives for the last rank, and
how often it was the last one (`tracelab.analyses.ranks.collectives`).

`rank_document` gives the `ranks` and `collectives` parts of the `analyze --json` document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.intervals import covered_length, intersection_length, merge, union_length
from tracelab.analyses.ranks.collectives import Collectives, match_collectives, rank_stragglers
from tracelab.analyses.results import CAUSES as GAP_CAUSES
from tracelab.analyses.results import Analysis, GapTable
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import sorted_unique

CAUSES = ("host_sync", "input_wait", "launch_latency", "dependency_wait", "no_work", "unknown", "profiler")
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
    # what the figures cover (issue 24): "steps" = the rank's steps on the GPU (step_windows.steps_spans:
    # from its first step's GPU start to its last step's GPU end; set-up and teardown apart), "whole" = the
    # whole run (a run, or a rank, without steps)
    scope: str = "whole"
    whole_collective_wait_ns: int = 0  # its collective wait over the whole run (set-up included)


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
    loop_idle: dict[tuple[int, str], int] | None = None  # gap time per (rank, cause) in the loop's steps

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    def idle_cause(self, rank: int) -> tuple[str, int] | None:
        """A rank's main reason for GPU idle: the gap cause with the most gap time (e.g. a straggler starved
        by its loader: input_wait), and that time; None without gaps. Over the gaps in the loop's steps
        (`loop_steps`: the set-up and a warm-up first step left out) when the run has steps."""
        if self.loop_idle is not None:
            mine = [(c, ns) for (r, c), ns in self.loop_idle.items() if r == rank and ns > 0]
            return max(mine, key=lambda x: (x[1], x[0])) if mine else None
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


def rank_summaries(
    analysis: Analysis, collectives: Collectives, timeline: Timeline | None = None
) -> tuple[RankSummary, ...]:
    """One RankSummary per rank with GPU activity, in rank order: over the rank's steps on the GPU when the
    analysis has steps and the timeline is given (module docstring), else over the whole run."""
    out = []
    devices_of: dict[int, list] = {}
    for d in analysis.devices:
        devices_of.setdefault(d.rank, []).append(d)
    spans: dict[int, tuple[int, int]] = {}
    if timeline is not None and analysis.step_rows:
        from tracelab.analyses.steps.windows import steps_spans

        spans = {r: (v[0], v[1]) for r, v in steps_spans(analysis.step_rows).items()}
    table = GapTable.of(analysis.gaps)
    idle_of = _idle_by_rank_cause(table)  # from the gap columns, not one pass per rank
    in_steps = _steps_figures(timeline, analysis, collectives, spans) if spans else {}
    last_of = {s.rank: s.times_last for s in collectives.stragglers}
    for r in sorted(devices_of):
        devs = devices_of[r]
        whole_wait = collectives.wait_of(r)
        if r in in_steps:
            f = in_steps[r]
            out.append(
                _summary(r, len(devs), f["span"], f["busy"], f["idle"], f["idle_of"], f["comm"], f["overlap"],
                         f["calls"], f["wait"], last_of.get(r, 0), "steps", whole_wait)
            )
            continue
        out.append(
            _summary(
                r, len(devs),
                max(d.end_ns for d in devs) - min(d.start_ns for d in devs),
                sum(d.busy_ns for d in devs),
                sum(d.idle_ns for d in devs),
                {c: ns for (rr, c), ns in idle_of.items() if rr == r},
                sum(d.comm_ns for d in devs),
                sum(d.overlap.compute_comm_ns for d in devs),
                collectives.calls_of(r), whole_wait, last_of.get(r, 0), "whole", whole_wait,
            )
        )
    return tuple(out)


def _summary(rank, devices, span, busy, idle, idle_of, comm, overlap, calls, wait, last, scope, whole_wait):
    by_cause = {c: idle_of.get(c, 0) for c in CAUSES}
    by_cause.update({c: ns for c, ns in idle_of.items() if c not in by_cause})
    return RankSummary(
        rank=rank,
        devices=devices,
        span_ns=int(span),
        busy_ns=int(busy),
        idle_ns=int(idle),
        idle_by_cause=(*by_cause.items(), ("short", int(idle) - sum(by_cause.values()))),  # CAUSES first
        comm_ns=int(comm),
        compute_comm_overlap_ns=int(overlap),
        collectives=int(calls),
        collective_wait_ns=int(wait),
        times_last=last,
        scope=scope,
        whole_collective_wait_ns=int(whole_wait),
    )


def _steps_figures(
    timeline: Timeline, analysis: Analysis, collectives: Collectives, spans: dict[int, tuple[int, int]]
) -> dict[int, dict[str, Any]]:
    """Per rank with steps: the table's figures with every interval clipped to the rank's steps' GPU span
    (its devices' GPU work, its gaps, its waits in matched collectives). Vectorized per device."""
    from tracelab.analyses.core.memo import column
    from tracelab.analyses.core.rows import comm_kernels
    from tracelab.analyses.device.devices import device_rows
    from tracelab.analyses.scope import _per_rank_bounds

    kind, start, end = column(timeline, "kind"), column(timeline, "start"), column(timeline, "end")
    out: dict[int, dict[str, Any]] = {}
    for dr in device_rows(timeline):  # per device (a few to a few hundred), vectorized inside
        if dr.rank not in spans:
            continue
        lo, hi = spans[dr.rank]
        rows = dr.rows
        s, e = start[rows], end[rows]
        keep = (e > lo) & (s < hi)
        f = out.setdefault(dr.rank, {"span_lo": hi, "span_hi": lo, "busy": 0, "idle": 0, "comm": 0, "overlap": 0})
        if not keep.any():
            continue
        rows = rows[keep]
        s, e = np.maximum(s[keep], lo), np.minimum(e[keep], hi)  # start order kept
        k = kind[rows]
        comm = comm_kernels(timeline, rows)
        busy = union_length(s, e, assume_sorted=True)
        d_lo, d_hi = int(s.min()), int(e.max())
        f["span_lo"], f["span_hi"] = min(f["span_lo"], d_lo), max(f["span_hi"], d_hi)
        f["busy"] += busy
        f["idle"] += (d_hi - d_lo) - busy
        f["comm"] += union_length(s[comm], e[comm], assume_sorted=True)
        # compute/comm overlap as device_overlap defines it (kernels that are not communication ∩ comm kernels)
        compute = (k == int(EventKind.KERNEL)) & ~comm
        f["overlap"] += intersection_length(s[compute], e[compute], s[comm], e[comm])
    for r in spans:
        if r in out:
            out[r]["span"] = max(0, out[r]["span_hi"] - out[r]["span_lo"])
    # gaps and waits clipped to their rank's span
    table = GapTable.of(analysis.gaps)
    g_rank = table.column("rank")
    lo, hi = _per_rank_bounds(g_rank, spans)
    clipped = np.maximum(0, np.minimum(table.column("end"), hi) - np.maximum(table.column("start"), lo))
    n = len(GAP_CAUSES)
    sums: dict[tuple[int, str], int] = {}
    if clipped.size:
        keys, inv = distinct_codes(g_rank * n + table.column("cause"))
        tot = np.zeros(keys.size, dtype=np.int64)
        np.add.at(tot, inv, clipped)
        sums = {(int(k) // n, GAP_CAUSES[int(k) % n]): int(t) for k, t in zip(keys.tolist(), tot.tolist())}
    w_lo, w_hi = _per_rank_bounds(collectives.wait_rank, spans)
    w_len = np.maximum(0, np.minimum(collectives.wait_end, w_hi) - np.maximum(collectives.wait_start, w_lo))
    w_keys, w_inv = distinct_codes(collectives.wait_rank.astype(np.int64))
    w_sum = np.bincount(w_inv, weights=w_len, minlength=w_keys.size).astype(np.int64)
    w_at = {int(k): i for i, k in enumerate(w_keys.tolist())}
    # matched calls arriving inside the span, each collective once per rank (its last arrival names it)
    c_rank, c_start = column(timeline, "rank")[collectives.call_rows], start[collectives.call_rows]
    c_lo, c_hi = _per_rank_bounds(c_rank, spans)
    c_in = (c_start >= c_lo) & (c_start < c_hi)
    pairs = np.unique(np.stack([c_rank[c_in].astype(np.int64), collectives.call_last_start[c_in]]), axis=1)
    calls_of = dict(zip(*np.unique(pairs[0], return_counts=True))) if pairs.size else {}
    idle_by: dict[int, dict[str, int]] = {}
    for (rr, c), ns in sums.items():
        if ns > 0:
            idle_by.setdefault(rr, {})[c] = ns
    for r, f in out.items():
        f.setdefault("span", 0)
        f["idle_of"] = idle_by.get(r, {})
        i = w_at.get(r)
        f["wait"] = int(w_sum[i]) if i is not None else 0
        f["calls"] = int(calls_of.get(r, 0))
    return out


def rank_analysis(timeline: Timeline, analysis: Analysis) -> RankAnalysis:
    """The per-rank table and the matched collectives of a run (any number of ranks)."""
    from tracelab.analyses.ranks.comm_steps import comm_by_step, step_windows, straggler_causes

    collectives = steps_stragglers(match_collectives(timeline), analysis)
    windows = step_windows(analysis.step_rows or analysis.steps)  # the steps' GPU windows
    return RankAnalysis(
        ranks=rank_summaries(analysis, collectives, timeline),
        collectives=collectives,
        step_comm=comm_by_step(timeline, collectives, windows),
        straggler_causes=straggler_causes(collectives, analysis, step_windows(loop_steps(analysis.steps))),
        loop_idle=_loop_idle(analysis),
    )


def _loop_idle(analysis: Analysis) -> dict[tuple[int, str], int] | None:
    """Gap time per (rank, cause) of the gaps that end inside the rank's loop steps (`loop_steps`, host
    ranges); None when the run has no steps."""
    if not analysis.steps:
        return None
    gaps = GapTable.of(analysis.gaps)
    if not len(gaps):
        return {}
    end, rank = gaps.column("end"), gaps.column("rank")
    keep = np.zeros(len(gaps), dtype=bool)
    per: dict[int, list[tuple[int, int]]] = {}
    for st in loop_steps(analysis.steps):
        per.setdefault(int(st.rank), []).append((int(st.start_ns), int(st.end_ns)))
    for r, ws in per.items():  # per rank (a few to a few hundred), vectorized over the gaps
        ws.sort()
        a = np.array([x for x, _ in ws], dtype=np.int64)
        b = np.array([y for _, y in ws], dtype=np.int64)
        k = np.searchsorted(a, end, "right") - 1
        keep |= (rank == r) & (k >= 0) & (end <= b[np.maximum(k, 0)])
    n = len(GAP_CAUSES)
    sel = np.flatnonzero(keep)
    if not sel.size:
        return {}
    keys, inv = distinct_codes(rank[sel] * n + gaps.column("cause")[sel])
    sums = np.zeros(keys.size, dtype=np.int64)
    np.add.at(sums, inv, gaps.duration[sel])
    return {(int(k) // n, GAP_CAUSES[int(k) % n]): int(t) for k, t in zip(keys.tolist(), sums.tolist(), strict=True)}


def loop_steps(steps: Sequence[Any]) -> list[Any]:
    """The steps of the training loop proper: every rank's steps but a first step that is a warm-up outlier
    (longer than step_table.OUTLIER_FACTOR × the median of the rank's later steps, with at least 2 later
    ones): one-time work (the communicator's first use, DDP's bucket rebuild, the loader's workers starting)
    makes whichever rank did it last there, which says nothing about the loop."""
    from tracelab.analyses.steps.table import OUTLIER_FACTOR

    by_rank: dict[int, list[Any]] = {}
    for st in steps:
        by_rank.setdefault(st.rank, []).append(st)
    out = []
    for mine in by_rank.values():
        mine = sorted(mine, key=lambda x: x.start_ns)
        later = [x.end_ns - x.start_ns for x in mine[1:]]
        warm = len(later) >= 2 and (mine[0].end_ns - mine[0].start_ns) > OUTLIER_FACTOR * float(np.median(later))
        out.extend(mine[1:] if warm else mine)
    return out


def steps_stragglers(collectives: Collectives, analysis: Analysis) -> Collectives:
    """The stragglers ranked over the collectives inside the steps (issue 24: set-up apart): the set-up's
    collectives (the communicator's creation, DDP's parameter broadcast) wait for whichever rank finished
    building its model last, which says nothing about the training loop; nor does a warm-up first step
    (`loop_steps`). Unchanged without steps, or when no collective starts after every rank's first step."""
    if not analysis.steps or not collectives.calls:
        return collectives
    first: dict[int, int] = {}
    for st in loop_steps(analysis.steps):
        first[st.rank] = min(first.get(st.rank, st.start_ns), st.start_ns)
    since = min(first.values())  # the earliest first step: ranks' clocks and loop starts differ a little
    inside = [c for c in collectives.calls if c.start_ns >= since]
    if not inside or len(inside) == len(collectives.calls):
        return collectives
    ranked = rank_stragglers(inside)
    note = (
        f"stragglers ranked over the {len(inside)} of {len(collectives.calls)} matched collectives inside the steps "
        "(set-up's and a warm-up first step's collectives left out)"
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
                "scope": r.scope,
                "whole_collective_wait_ns": r.whole_collective_wait_ns,
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
    from tracelab.text_format import fmt_ns

    for c in ra.straggler_causes:
        if c.rank == rank:
            return {
                "late_ns": c.late_ns,
                "steps_late": c.steps_late,
                "steps": c.steps,
                "idle_before_ns": c.idle_before_ns,
                "cause": c.cause,
                "cause_ns": c.cause_ns,
                "idle_ns": c.idle_ns,
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
    """{rank: {step index: (start, end)}} from the analysis's steps (`Analysis.step_rows`: each step's GPU
    window, `Analysis.steps`: host ranges), or else from
    `analyses.steps.find_steps`, when every rank has the same number (≥ 2) of steps; None otherwise."""
    if steps is None:
        from tracelab.analyses.steps.infer import find_steps

        steps = find_steps(timeline).steps
    per_rank: dict[int, list[tuple[int, int]]] = {r: [] for r in ranks}
    for s in steps:  # one entry per step: a handful per rank; its GPU window when the step table gives it
        if s.rank in per_rank:
            g0, g1 = getattr(s, "gpu_start_ns", -1), getattr(s, "gpu_end_ns", -1)
            w = (int(g0), int(g1)) if g0 >= 0 and g1 > g0 else (int(s.start_ns), int(s.end_ns))
            per_rank[s.rank].append(w)
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
