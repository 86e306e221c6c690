"""Cross-rank view of a multi-rank run: one row per rank, the matched collectives and stragglers (the
rank × step heatmap of GPU busy and collective wait: `heatmap`).

Per rank (sums over the rank's GPUs, same definitions as `analyze`'s per-device summaries and gaps),
over the rank's steps when the run has steps (issue 24: set-up apart — the span of its steps' GPU windows,
`step_windows.steps_spans`, every figure clipped to it; `scope` says "steps"), else over the whole run:
span (first start to last end of GPU activity on any of its GPUs), busy, idle, idle by gap cause
(gaps of at least the threshold; `short` = idle in shorter gaps), comm (union of communication
kernels), compute/comm overlap, the time it waited in matched collectives for the last rank, and
how often it was the last one (`tracelab.analyses.ranks.collectives`).

`rank_document.rank_document_of` gives the `ranks` and `collectives` parts of the `analyze --json` document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.core.bands import Bands, band_sums
from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.intervals import intersect, intersection_length, merge, union_length
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import DeviceRows, comm_kernels, positions_by
from tracelab.analyses.ranks.collectives import Collectives, _sum_by, match_collectives, rank_stragglers
from tracelab.analyses.results import CAUSES as GAP_CAUSES
from tracelab.analyses.results import Analysis, GapTable
from tracelab.model import EventKind, Timeline

CAUSES = ("host_sync", "input_wait", "launch_latency", "dependency_wait", "no_work", "unknown", "profiler")


class RankSummary(msgspec.Struct, frozen=True):
    rank: int
    devices: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_by_cause: tuple[tuple[str, int], ...]  # (cause, ns) for CAUSES (and any other cause), then ("short", ns)
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


class RankAnalysis(msgspec.Struct, frozen=True, eq=False):
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


def _by_rank_cause(rank: np.ndarray, cause: np.ndarray, ns: np.ndarray) -> dict[tuple[int, str], int]:
    """Total time per (rank, cause) of gaps."""
    if not rank.size:
        return {}
    n = len(GAP_CAUSES)  # (rank, cause) as one key, in the same order
    keys, inv = distinct_codes(rank * n + cause)
    sums = np.zeros(keys.size, dtype=np.int64)
    np.add.at(sums, inv, ns)
    return {(int(k) // n, GAP_CAUSES[int(k) % n]): int(t) for k, t in zip(keys.tolist(), sums.tolist(), strict=True)}


def rank_summaries(analysis: Analysis, collectives: Collectives, timeline: Timeline | None = None,
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
    idle_of = _by_rank_cause(table.column("rank"), table.column("cause"), table.duration)
    in_steps = _steps_figures(timeline, analysis, collectives, spans) if spans else {}
    last_of = {s.rank: s.times_last for s in collectives.stragglers}
    for r in sorted(devices_of):
        devs = devices_of[r]
        whole_wait = collectives.wait_of(r)
        if r in in_steps:
            f = in_steps[r]
            out.append(_summary(r, len(devs), f["span"], f["busy"], f["idle"], f["idle_of"], f["comm"], f["overlap"],
                                f["calls"], f["wait"], last_of.get(r, 0), "steps", whole_wait))
            continue
        out.append(_summary(
            r, len(devs), max(d.end_ns for d in devs) - min(d.start_ns for d in devs), sum(d.busy_ns for d in devs),
            sum(d.idle_ns for d in devs), {c: ns for (rr, c), ns in idle_of.items() if rr == r},
            sum(d.comm_ns for d in devs), sum(d.overlap.compute_comm_ns for d in devs),
            collectives.calls_of(r), whole_wait, last_of.get(r, 0), "whole", whole_wait,
        ))
    return tuple(out)


def _summary(rank, devices, span, busy, idle, idle_of, comm, overlap, calls, wait, last, scope, whole_wait):
    by_cause = {c: idle_of.get(c, 0) for c in CAUSES}
    by_cause.update({c: ns for c, ns in idle_of.items() if c not in by_cause})
    short = ("short", int(idle) - sum(by_cause.values()))
    return RankSummary(rank, devices, int(span), int(busy), int(idle), (*by_cause.items(), short), int(comm),
                       int(overlap), int(calls), int(wait), last, scope, int(whole_wait))


def _steps_figures(timeline: Timeline, analysis: Analysis, collectives: Collectives, spans: dict[int, tuple[int, int]],
                   ) -> dict[int, dict[str, Any]]:
    """Per rank with steps: the table's figures with every interval clipped to the rank's steps' GPU span
    (its devices' GPU work, its gaps, its waits in matched collectives). Vectorized per device."""
    from tracelab.analyses.core.memo import column
    from tracelab.analyses.device.devices import device_rows
    from tracelab.analyses.scope import _per_rank_bounds

    start = column(timeline, "start")
    devices = [dr for dr in device_rows(timeline) if dr.rank in spans]
    figures = device_figures(timeline, devices, spans)  # every device at once (None: too wide for bands)
    out: dict[int, dict[str, Any]] = {}
    for i, dr in enumerate(devices):  # per device (a few to a few hundred): its figures summed into its rank's
        lo, hi = spans[dr.rank]
        f = out.setdefault(dr.rank, {"span_lo": hi, "span_hi": lo, "busy": 0, "idle": 0, "comm": 0, "overlap": 0})
        got = figures[i] if figures is not None else _device_figure(timeline, dr, lo, hi)
        if got is None:
            continue
        f["span_lo"], f["span_hi"] = min(f["span_lo"], got[0]), max(f["span_hi"], got[1])
        for k, v in zip(("busy", "idle", "comm", "overlap"), got[2:]):
            f[k] += v
    # gaps and waits clipped to their rank's span
    table = GapTable.of(analysis.gaps)
    g_rank = table.column("rank")
    lo, hi = _per_rank_bounds(g_rank, spans)
    clipped = np.maximum(0, np.minimum(table.column("end"), hi) - np.maximum(table.column("start"), lo))
    sums = _by_rank_cause(g_rank, table.column("cause"), clipped)
    w_lo, w_hi = _per_rank_bounds(collectives.wait_rank, spans)
    w_len = np.maximum(0, np.minimum(collectives.wait_end, w_hi) - np.maximum(collectives.wait_start, w_lo))
    wait_of = _sum_by(collectives.wait_rank.astype(np.int64), w_len)
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
        f["span"] = max(0, f["span_hi"] - f["span_lo"])
        f["idle_of"] = idle_by.get(r, {})
        f["wait"] = wait_of.get(r, 0)
        f["calls"] = int(calls_of.get(r, 0))
    return out


def _device_figure(timeline: Timeline, dr: Any, lo: int, hi: int) -> tuple[int, int, int, int, int, int] | None:
    """One device's GPU work clipped to [lo, hi): (first start, last end, busy, idle, comm, compute/comm
    overlap), None when none lies inside (`device_figures` one device at a time)."""
    from tracelab.analyses.core.memo import column
    from tracelab.analyses.core.rows import comm_kernels

    kind, start, end = column(timeline, "kind"), column(timeline, "start"), column(timeline, "end")
    rows = dr.rows
    s, e = start[rows], end[rows]
    keep = (e > lo) & (s < hi)
    if not keep.any():
        return None
    rows = rows[keep]
    s, e = np.maximum(s[keep], lo), np.minimum(e[keep], hi)  # start order kept
    comm = comm_kernels(timeline, rows)
    busy = union_length(s, e, assume_sorted=True)
    d_lo, d_hi = int(s.min()), int(e.max())
    # compute/comm overlap as device_overlap defines it (kernels that are not communication ∩ comm kernels)
    compute = (kind[rows] == int(EventKind.KERNEL)) & ~comm
    return (d_lo, d_hi, busy, (d_hi - d_lo) - busy, union_length(s[comm], e[comm], assume_sorted=True),
            intersection_length(s[compute], e[compute], s[comm], e[comm]))


def rank_analysis(timeline: Timeline, analysis: Analysis) -> RankAnalysis:
    """The per-rank table and the matched collectives of a run (any number of ranks)."""
    from tracelab.analyses.ranks.comm_steps import comm_by_step, step_windows, straggler_causes

    collectives = steps_stragglers(match_collectives(timeline), analysis)
    windows = step_windows(analysis.step_rows or analysis.steps)  # the steps' GPU windows
    # the straggler's cause: its late arrivals (GPU times) in the loop steps' GPU windows, as it is ranked
    return RankAnalysis(
        ranks=rank_summaries(analysis, collectives, timeline), collectives=collectives,
        step_comm=comm_by_step(timeline, collectives, windows),
        straggler_causes=straggler_causes(collectives, analysis, step_windows(loop_steps(analysis.step_rows or analysis.steps))),
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
    by_rank = positions_by(rank)  # the gaps grouped by rank once: each rank reads its own slice
    for r, ws in per.items():  # per rank (a few to a few hundred), vectorized over the rank's gaps
        mine = by_rank.get(r)
        if mine is None:
            continue
        ws.sort()
        a = np.array([x for x, _ in ws], dtype=np.int64)
        b = np.array([y for _, y in ws], dtype=np.int64)
        e = end[mine]
        k = np.searchsorted(a, e, "right") - 1
        keep[mine] = (k >= 0) & (e <= b[np.maximum(k, 0)])
    return _by_rank_cause(rank[keep], gaps.column("cause")[keep], gaps.duration[keep])


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
    (`loop_steps`), nor a collective after the loop (a closing barrier). A collective is inside the steps
    when its last arrival (what makes its rank the last one) lies inside that rank's steps on the GPU: from
    its first loop step's GPU start to its last one's GPU end (`windows.steps_spans`; the host range for a
    step that launched no GPU work). On asynchronous code a step's host range begins before its GPU work:
    the GPU work still running from before it (set-up's collectives) is no part of it. Collectives of a rank
    without steps count. Unchanged without steps, or when every collective is inside."""
    if not analysis.steps or not collectives.calls:
        return collectives
    from tracelab.analyses.steps.windows import steps_spans

    spans = steps_spans(loop_steps(analysis.step_rows or analysis.steps))
    inside = [c for c in collectives.calls if _inside(c.last_rank, c.last_start_ns, spans)]
    if not inside or len(inside) == len(collectives.calls):
        return collectives
    ranked = rank_stragglers(inside)
    note = (
        f"stragglers ranked over the {len(inside)} of {len(collectives.calls)} matched collectives inside the steps "
        "on the GPU (set-up's, a warm-up first step's and those after the last step left out)"
    )
    return msgspec.structs.replace(collectives, stragglers=ranked, notes=(*collectives.notes, note))


def _inside(rank: int, at: int, spans: dict[int, tuple[int, int, int, int]]) -> bool:
    """Whether `at` lies in the rank's steps' GPU span ([gpu_lo, gpu_hi) of `steps_spans`); True for a rank
    without steps."""
    span = spans.get(rank)
    return span is None or span[0] <= at < span[1]


def device_figures(timeline: Timeline, devices: list[DeviceRows], spans: dict[int, tuple[int, int]],
                   ) -> list[tuple[int, int, int, int, int, int] | None] | None:
    """Per device (of a rank in `spans`), its GPU work clipped to the rank's [lo, hi): (first start, last
    end, busy, idle, comm, compute/comm overlap) as `_steps_figures` sums them, None for a device with no
    work inside; None for all when the bands would pass 2^60 (the caller goes device by device)."""
    n = len(devices)
    start, end, kind = column(timeline, "start"), column(timeline, "end"), column(timeline, "kind")
    rows = np.concatenate([dr.rows for dr in devices]) if n else np.zeros(0, dtype=np.int64)
    dev = np.repeat(np.arange(n, dtype=np.int64), [dr.rows.size for dr in devices])
    lo_d = np.array([spans[dr.rank][0] for dr in devices], dtype=np.int64)[dev]
    hi_d = np.array([spans[dr.rank][1] for dr in devices], dtype=np.int64)[dev]
    s, e = start[rows], end[rows]
    keep = (e > lo_d) & (s < hi_d)
    rows, dev = rows[keep], dev[keep]
    s, e = np.maximum(s[keep], lo_d[keep]), np.minimum(e[keep], hi_d[keep])  # start order kept per device
    bands = Bands.of(n, s, e)
    if bands is None:
        return None
    bs, be = bands.shift(s, dev), bands.shift(e, dev)
    comm = comm_kernels(timeline, rows)
    compute = (kind[rows] == int(EventKind.KERNEL)) & ~comm
    us, ue = merge(bs, be, assume_sorted=True)
    busy = band_sums(bands, us, ue - us, n)
    cs, ce = merge(bs[comm], be[comm], assume_sorted=True)
    comm_ns = band_sums(bands, cs, ce - cs, n)
    # compute/comm overlap as device_overlap defines it (kernels that are not communication ∩ comm kernels)
    xs, xe = intersect(*merge(bs[compute], be[compute]), *merge(bs[comm], be[comm]))
    overlap = band_sums(bands, xs, xe - xs, n)
    out: list[tuple[int, int, int, int, int, int] | None] = [None] * n
    if dev.size:
        first = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]])
        d_lo = np.minimum.reduceat(s, first).tolist()
        d_hi = np.maximum.reduceat(e, first).tolist()
        b, c, o = busy.tolist(), comm_ns.tolist(), overlap.tolist()
        for d, lo, hi in zip(dev[first].tolist(), d_lo, d_hi, strict=True):
            out[d] = (lo, hi, b[d], (hi - lo) - b[d], c[d], o[d])
    return out
