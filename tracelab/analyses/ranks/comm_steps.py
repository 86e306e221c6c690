"""Communication per step and rank, and why a straggler is late (issue 24, item 5).

Per step and rank (sums over the rank's GPUs):
- `comm_ns`: the union of its communication kernels (NCCL / RCCL, `Flag.COMM`) inside the step;
- `exposed_comm_ns`: the part of that union not overlapped by any compute kernel (non-comm kernels)
  or copy of the rank: communication the step waits for;
- `wait_ns`: the union of its waits in matched collectives (own arrival → last arrival,
  `collectives.Collectives.wait_*`) inside the step.

The straggler (the rank most often last) is explained by its own cause: in the collectives it arrived
last, how late (median of last arrival − the previous arrival), in how many steps, and what its GPU did
before arriving. In each step the collective it was latest for holds the step's wait (after it the ranks
are lined up and the later ones are a toss-up); before each such arrival, the rank's idle gaps (the
analysis's gaps) between its previous collective and the late one: their median total per arrival, and
the cause with the most idle time over all of them ("no_work": the host was not launching; "input_wait":
it waited for its data loader). By time, not by count: a rank starved by its loader in a few steps idles
far longer there than in the launch gaps every step has (issue 29).

Steps come through `step_windows` only: the step table's rows, each step's GPU window (`gpu_start_ns` /
`gpu_end_ns`), its host range only when it launched no GPU work.
"""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.bands import Bands, group_index
from tracelab.analyses.core.intervals import covered_length, merge, step_of, subtract
from tracelab.analyses.ranks.collectives import Collectives
from tracelab.analyses.results import CAUSES as GAP_CAUSES
from tracelab.analyses.results import Analysis, GapTable
from tracelab.analyses.steps.windows import step_windows
from tracelab.model import EventKind, Flag, Timeline

__all__ = ["StepComm", "StragglerCause", "comm_by_step", "step_windows", "straggler_causes"]

_GPU_KINDS = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
CAUSE_WORDS = {
    "no_work": "host not launching", "launch_latency": "host launch-bound",
    "host_sync": "host blocked in a sync", "dependency_wait": "waiting on another stream",
    "input_wait": "waiting for input data", "unknown": "cause unknown", "profiler": "held up by the profiler",
}


class StepComm(msgspec.Struct, frozen=True):
    rank: int
    step: int
    start_ns: int
    end_ns: int
    comm_ns: int
    exposed_comm_ns: int
    wait_ns: int


def comm_by_step(timeline: Timeline, collectives: Collectives,
                 windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> tuple[StepComm, ...]:
    """Communication, exposed communication and waiting per step of every rank (module docstring): every
    rank at once, each in its own band of the number line (tracelab.analyses.core.bands)."""
    ev = timeline.cols
    kind = ev["kind"]
    gpu = np.flatnonzero(np.isin(kind, _GPU_KINDS))
    if not gpu.size or not windows:
        return ()
    ranks = sorted(windows)
    keys = np.array(ranks, dtype=np.int64)
    band, mine = group_index(keys, ev["rank"][gpu].astype(np.int64))
    gpu, band = gpu[mine], band[mine]
    w_band, w_mine = group_index(keys, collectives.wait_rank.astype(np.int64))
    ws0, we0, w_band = collectives.wait_start[w_mine], collectives.wait_end[w_mine], w_band[w_mine]
    a0 = np.concatenate([windows[r][0] for r in ranks])
    b0 = np.concatenate([windows[r][1] for r in ranks])
    win_band = np.repeat(np.arange(len(ranks), dtype=np.int64), [windows[r][0].size for r in ranks])
    start, end = ev["start"][gpu], ev["end"][gpu]
    bands = Bands.of(len(ranks), start, end, ws0, we0, a0, b0)
    if bands is None:  # a time range too wide for one band per rank: rank by rank
        return _comm_by_step_ranks(timeline, collectives, windows)
    is_comm = (kind[gpu] == int(EventKind.KERNEL)) & ((ev["flags"][gpu] & Flag.COMM) != 0)
    comm, exposed, wait = (x.tolist() for x in _covered(
        bands.shift(start, band), bands.shift(end, band), is_comm, bands.shift(ws0, w_band), bands.shift(we0, w_band),
        bands.shift(a0, win_band), bands.shift(b0, win_band)))
    steps = [(r, i, lo, hi) for r in ranks for i, (lo, hi) in enumerate(zip(*(w.tolist() for w in windows[r])))]
    return tuple(StepComm(*st, int(c), int(x), int(w)) for st, c, x, w in zip(steps, comm, exposed, wait, strict=True))


def _covered(s: np.ndarray, e: np.ndarray, is_comm: np.ndarray, ws: np.ndarray, we: np.ndarray, a: np.ndarray,
             b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window [a, b): the union of the communication kernels, its part no other GPU work overlaps, and
    the union of the waits [ws, we) in it."""
    cs, ce = merge(s[is_comm], e[is_comm])
    ks, ke = merge(s[~is_comm], e[~is_comm])
    xs, xe = subtract(cs, ce, ks, ke)
    ws, we = merge(ws, we)
    return covered_length(cs, ce, a, b), covered_length(xs, xe, a, b), covered_length(ws, we, a, b)


def _comm_by_step_ranks(timeline: Timeline, collectives: Collectives,
                        windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> tuple[StepComm, ...]:
    """comm_by_step rank by rank (for times too far apart for one band per rank)."""
    ev = timeline.cols
    kind = ev["kind"]
    gpu = np.flatnonzero(np.isin(kind, _GPU_KINDS))
    is_comm = (kind[gpu] == int(EventKind.KERNEL)) & ((ev["flags"][gpu] & Flag.COMM) != 0)
    rank = ev["rank"][gpu]
    start, end = ev["start"][gpu], ev["end"][gpu]
    order = np.argsort(rank, kind="stable")
    rs = rank[order]
    w_order = np.argsort(collectives.wait_rank, kind="stable")
    wr = collectives.wait_rank[w_order]
    out = []
    for r in sorted(windows):  # per rank (a few to a few hundred), vectorized inside
        mine = order[np.searchsorted(rs, r, "left") : np.searchsorted(rs, r, "right")]
        wm = w_order[np.searchsorted(wr, r, "left") : np.searchsorted(wr, r, "right")]
        a, b = windows[r]
        comm, exposed, wait = _covered(start[mine], end[mine], is_comm[mine], collectives.wait_start[wm],
                                       collectives.wait_end[wm], a, b)
        for i in range(a.size):  # one row per step
            out.append(StepComm(r, i, int(a[i]), int(b[i]), int(comm[i]), int(exposed[i]), int(wait[i])))
    return tuple(out)


class StragglerCause(msgspec.Struct, frozen=True):
    rank: int
    times_last: int
    collectives: int  # matched collectives the rank took part in
    late_ns: int  # median of (its arrival − the previous arrival) where it was last
    steps_late: int  # steps with at least one collective it arrived last in
    steps: int  # steps with at least one matched collective of this rank
    idle_before_ns: int  # median (over its late arrivals) idle time between its previous collective and it
    cause: str | None  # the cause with the most of that idle time
    cause_ns: int = 0  # that cause's idle time before the late arrivals, in all
    idle_ns: int = 0  # the idle time before the late arrivals, in all

    def sentence(self, fmt_ns) -> str:
        where = (f"in {self.steps_late} of {self.steps} steps" if self.steps
                 else f"in {self.times_last} of {self.collectives} collectives")
        text = f"rank {self.rank} arrives {fmt_ns(self.late_ns)} late {where}"
        if self.cause is not None and self.idle_before_ns > 0:
            text += (f"; before each, its GPU is idle {fmt_ns(self.idle_before_ns)}: {self.cause}"
                     f" ({CAUSE_WORDS.get(self.cause, self.cause)}")
            if self.idle_ns > self.cause_ns > 0:
                text += f", {fmt_ns(self.cause_ns)} of {fmt_ns(self.idle_ns)} in all"
            text += ")"
        return text


def straggler_causes(collectives: Collectives, analysis: Analysis,
                     windows: dict[int, tuple[np.ndarray, np.ndarray]], limit: int = 3) -> tuple[StragglerCause, ...]:
    """Why each of the (at most `limit`) most frequent last arrivals is late (module docstring)."""
    out = []
    gaps = GapTable.of(analysis.gaps)
    g_rank = gaps.column("rank") if len(gaps) else np.zeros(0, dtype=np.int64)
    for s in collectives.stragglers[:limit]:
        r = s.rank
        late, arrivals, prev_end, mine_starts = [], [], [], []
        last_end = np.iinfo(np.int64).min  # end of this rank's previous collective
        for c in collectives.calls:  # matched collectives in arrival order (thousands at most), not events
            mine = [p for p in c.per_rank if p[0] == r]
            if mine:
                mine_starts.append(min(p[2] for p in mine))
            if c.last_rank == r and len(c.per_rank) >= 2:
                before = [p[2] for p in c.per_rank if p[0] != r]
                late.append(c.last_start_ns - max(before) if before else 0)
                arrivals.append(c.last_start_ns)
                prev_end.append(last_end)
            if mine:
                last_end = max(last_end, max(max(p[2], c.last_start_ns) + p[4] for p in mine))
        if not arrivals:
            continue
        arr = np.asarray(arrivals, dtype=np.int64)
        steps_late = steps_with = 0
        if r in windows:
            which = step_of(*windows[r], arr)
            steps_late = int(np.unique(which[which >= 0]).size)
            wa = step_of(*windows[r], np.asarray(mine_starts, dtype=np.int64))
            steps_with = int(np.unique(wa[wa >= 0]).size)
        holding = _holding(np.asarray(late, dtype=np.int64), arr, windows.get(r))
        idle, cause, cause_ns, idle_all = 0, None, 0, 0
        sel = np.flatnonzero(g_rank == r)
        if sel.size and holding.size:
            # the rank's idle gaps between its previous collective and each late arrival holding a step's wait
            o = sel[np.argsort(gaps.column("end")[sel], kind="stable")]
            g_end = gaps.column("end")[o]
            g_len = g_end - gaps.column("start")[o]
            g_cause = gaps.column("cause")[o]
            lo = np.searchsorted(g_end, np.asarray(prev_end, dtype=np.int64)[holding], "right")
            hi = np.searchsorted(g_end, arr[holding], "right")
            totals, by_cause = [], np.zeros(len(GAP_CAUSES), dtype=np.int64)
            for i, j in zip(lo.tolist(), hi.tolist()):  # one per step (a few hundred at most)
                if j > i:
                    totals.append(int(g_len[i:j].sum()))
                    np.add.at(by_cause, g_cause[i:j], g_len[i:j])
            if totals:
                idle = int(np.median(totals))
                k = int(np.argmax(by_cause))
                cause, cause_ns, idle_all = GAP_CAUSES[k], int(by_cause[k]), int(by_cause.sum())
        late_ns = _late_per_step(np.asarray(late, dtype=np.int64), arr, windows.get(r))
        out.append(StragglerCause(r, s.times_last, collectives.calls_of(r), late_ns, steps_late, steps_with, idle, cause,
                                  cause_ns, idle_all))
    return tuple(out)


def _holding(late: np.ndarray, arrivals: np.ndarray, window: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Indices of the late arrivals that hold a step's wait: in each step the one the rank was latest for;
    every late arrival when the run has no steps (or none lies in them)."""
    if window is None or not late.size:
        return np.arange(late.size)
    which = step_of(*window, arrivals)
    inside = np.flatnonzero(which >= 0)
    if not inside.size:
        return np.arange(late.size)
    order = inside[np.lexsort((-late[inside], which[inside]))]
    first = np.r_[True, which[order][1:] != which[order][:-1]]
    return np.sort(order[first])


def _late_per_step(late: np.ndarray, arrivals: np.ndarray, window: tuple[np.ndarray, np.ndarray] | None) -> int:
    """How late the rank is per step: the median over steps of its largest lateness in the step (the
    first collective of a step holds the wait; after it the ranks are lined up and the later ones are a
    toss-up). The median over its late arrivals when the run has no steps."""
    if window is None or not late.size:
        return int(np.median(late)) if late.size else 0
    which = step_of(*window, arrivals)
    inside = which >= 0
    if not inside.any():
        return int(np.median(late))
    w, lt = which[inside], late[inside]
    order = np.lexsort((-lt, w))
    first = np.r_[True, w[order][1:] != w[order][:-1]]
    return int(np.median(lt[order][first]))

