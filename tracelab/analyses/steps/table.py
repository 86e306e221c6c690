"""The per-step table: for each step (tracelab.analyses.steps.infer) its duration, GPU busy and idle time,
idle by gap cause, blocking host syncs and kernels, with warm-up and outlier flags.

Definitions (per rank; a step is the host-time interval [start, end) that enqueued it):
- gpu_start_ns / gpu_end_ns: the step's GPU window, from the first start to the last end of the GPU
  work (kernels, memcpys, memsets) whose launch call (by correlation id) starts inside the step's host
  range; gpu_ns is its length, the step's length on the GPU. On asynchronous code the host range is
  short (enqueueing) while the GPU works long after it: the GPU window is what a step costs.
  gpu_runs_into_next: the step's GPU work still runs when the next step's GPU work starts.
- gpu_busy_ns: the part of the step covered by the union of the rank's GPU activity (kernels,
  memcpys, memsets on any of its devices); gpu_idle_ns = duration − gpu_busy_ns.
- idle_by_cause: for each gap cause, the part of the rank's gaps (tracelab.analyses.gaps.idle, those of
  at least the gap threshold) that falls inside the step (summed over the rank's devices).
- blocking_syncs: host API calls flagged blocking (stream / device / event synchronize, synchronous
  memcpy) that start inside the step.
- kernels: kernels of the rank that start inside the step.
- warmup: the rank's first step (index 0: a scope that leaves it out has none); outlier: a step lasting more than 3× the rank's median step.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from tracelab.analyses.core.bands import Bands, group_index
from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.core.launches import launch_starts
from tracelab.analyses.core.rows import positions_by, rank_rows, ranks_of, rows_of
from tracelab.analyses.results import CAUSES as GAP_CAUSES
from tracelab.analyses.results import Gap, GapTable
from tracelab.analyses.steps.infer import Steps
from tracelab.analyses.steps.windows import chosen_windows
from tracelab.model import EventKind, Flag, Timeline

OUTLIER_FACTOR = 3.0
CAUSES = ("host_sync", "input_wait", "launch_latency", "dependency_wait", "no_work", "unknown", "profiler")
_STEP_CAUSE = np.array([CAUSES.index(c) for c in GAP_CAUSES], dtype=np.int64)  # GapTable cause -> index here


class StepRow(msgspec.Struct, frozen=True):
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
    # the step's GPU window: first start to last end of the GPU work launched inside the step's host
    # range (by correlation); -1 when the step launched none
    gpu_start_ns: int = -1
    gpu_end_ns: int = -1
    gpu_runs_into_next: bool = False  # its GPU work still runs when the next step's starts

    @property
    def host_ns(self) -> int:
        """The host range's length (the time the host spent enqueueing the step)."""
        return self.duration_ns

    @property
    def gpu_ns(self) -> int:
        """The step's length on the GPU (0 when it launched no GPU work)."""
        return max(0, self.gpu_end_ns - self.gpu_start_ns) if self.gpu_start_ns >= 0 else 0

    def idle_of(self, cause: str) -> int:
        return dict(self.idle_by_cause).get(cause, 0)


def _count_in(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many times t fall in each [starts[i], ends[i]) (steps sorted by start, disjoint)."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.maximum(i, 0)])
    return np.bincount(i[ok], minlength=starts.size)


def gpu_windows(
    timeline: Timeline, rank: int, gpu: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(gpu_start, gpu_end) of each step [s, e) (sorted, disjoint): the first start and last end of
    the GPU rows whose launch call starts inside the step; -1 for a step that launched none."""
    if s.size == 0 or gpu.size == 0:
        return np.full(s.size, -1, dtype=np.int64), np.full(s.size, -1, dtype=np.int64)
    t = launch_starts(timeline, rank, gpu)
    return _windows(t, t >= 0, s, e, timeline.col("start")[gpu], timeline.col("end")[gpu])


def windows_of_steps(timeline: Timeline, steps: Steps) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The windows (`windows.chosen_windows`) of `steps` without the rest of the step table: per rank, its
    steps' GPU windows (`gpu_windows`, as the table's rows carry them) or host ranges, sorted."""
    gpu_of = rank_rows(timeline)
    empty = np.zeros(0, dtype=np.int64)
    out = {}
    for rank, mine in _steps_of_ranks(steps).items():
        s = np.array([st.start_ns for st in mine], dtype=np.int64)
        e = np.array([st.end_ns for st in mine], dtype=np.int64)
        out[rank] = chosen_windows(*gpu_windows(timeline, rank, gpu_of.get(rank, empty), s, e), s, e)
    return out


def _steps_of_ranks(steps: Steps) -> dict[int, list]:
    """Each rank's steps in start order, ranks in order."""
    of: dict[int, list] = {}
    for st in steps.steps:
        of.setdefault(st.rank, []).append(st)
    return {rank: sorted(of[rank], key=lambda st: st.start_ns) for rank in sorted(of)}


def _windows(t: np.ndarray, launched: np.ndarray, s: np.ndarray, e: np.ndarray, g_start: np.ndarray,
             g_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first start, last end) of the GPU rows whose launch (at t, where `launched`) lies in each step
    [s, e) (sorted, disjoint, at least one); -1 for a step that launched none."""
    lo = np.full(s.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(s.size, -1, dtype=np.int64)
    i = np.searchsorted(s, t, side="right") - 1
    ok = launched & (i >= 0) & (t < e[np.maximum(i, 0)])
    np.minimum.at(lo, i[ok], g_start[ok])
    np.maximum.at(hi, i[ok], g_end[ok])
    return np.where(hi >= 0, lo, -1), hi


def step_rows(timeline: Timeline, steps: Steps, gaps: Sequence[Gap]) -> tuple[StepRow, ...]:
    """One row per step, ranks in order, steps in time order."""
    start = timeline.col("start")
    end = timeline.col("end")
    flags = timeline.col("flags")
    # each rank's rows grouped once per timeline (rows.kind_rows: no full-length mask at all)
    gpu_of = rank_rows(timeline)
    blocking_of, kernel_of = {}, {}
    for r in ranks_of(timeline):
        api = rows_of(timeline, r, (EventKind.RUNTIME, EventKind.DRIVER))
        blocking_of[r] = api[(flags[api] & Flag.BLOCKING) != 0]
        kernel_of[r] = rows_of(timeline, r, (EventKind.KERNEL,))
    # the gaps' columns (a GapTable holds them; other sequences of Gaps are read once)
    table = GapTable.of(gaps)
    g_rank, g_dev = table.column("rank"), table.column("device")
    g_start, g_end = table.column("start"), table.column("end")
    g_cause = _STEP_CAUSE[table.column("cause")]
    empty = np.zeros(0, dtype=np.int64)
    rows: list[StepRow] = []
    by_rank = {s.rank: s.source for s in steps.steps}
    mine_of = _steps_of_ranks(steps)
    columns = (start, end, g_start, g_end, g_cause, g_dev, g_rank)
    banded = _banded_figures(timeline, columns, mine_of, gpu_of, blocking_of, kernel_of)
    gaps_of: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for rank in steps.ranks():
        mine = mine_of[rank]
        s = np.array([st.start_ns for st in mine], dtype=np.int64)
        e = np.array([st.end_ns for st in mine], dtype=np.int64)
        index = [st.index for st in mine]
        dur = e - s
        g = gpu_of.get(rank, empty)
        if banded is not None:
            busy, syncs, kernels, idle, (g_lo, g_hi) = banded[rank]
        else:  # times too far apart for one band per rank: rank by rank
            gaps_of = gaps_of or _gaps_by_rank_cause(g_rank, g_cause, g_dev)
            us, ue = merge(start[g], end[g])
            busy = covered_length(us, ue, s, e)
            syncs = _count_in(s, e, start[blocking_of.get(rank, empty)])
            kernels = _count_in(s, e, start[kernel_of.get(rank, empty)])
            g_lo, g_hi = gpu_windows(timeline, rank, g, s, e)
            idle = {}
            for ci, cause in enumerate(CAUSES):
                total = np.zeros(s.size, dtype=np.int64)
                for dev in sorted(gaps_of.get((rank, ci), {})):
                    sel = gaps_of[(rank, ci)][dev]
                    gs, ge = merge(g_start[sel], g_end[sel])
                    total += covered_length(gs, ge, s, e)
                idle[cause] = total
        into_next = np.zeros(s.size, dtype=bool)
        if s.size > 1:
            into_next[:-1] = (g_hi[:-1] >= 0) & (g_lo[1:] >= 0) & (g_hi[:-1] > g_lo[1:])
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
                    gpu_start_ns=int(g_lo[i]),
                    gpu_end_ns=int(g_hi[i]),
                    gpu_runs_into_next=bool(into_next[i]),
                )
            )
    return tuple(rows)


def _banded_figures(
    timeline: Timeline,
    columns: tuple[np.ndarray, ...],
    mine_of: dict[int, list],
    gpu_of: dict[int, np.ndarray],
    blocking_of: dict[int, np.ndarray],
    kernel_of: dict[int, np.ndarray],
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]] | None:
    """Per rank with steps: its steps' GPU busy time, blocking syncs, kernels, idle time by cause (summed
    over its devices) and GPU windows (`_windows`, as `gpu_windows`), for every rank at once, each rank's times
    in its own band of the number line
    (tracelab.analyses.core.bands); None when the bands would be too wide (the caller goes rank by rank)."""
    start, end, g_start, g_end, g_cause, g_dev, g_rank = columns
    ranks = list(mine_of)
    if not ranks:  # no steps: no rows
        return {}
    keys = np.array(ranks, dtype=np.int64)
    n_steps = [len(mine_of[r]) for r in ranks]
    s = np.array([st.start_ns for r in ranks for st in mine_of[r]], dtype=np.int64)
    e = np.array([st.end_ns for r in ranks for st in mine_of[r]], dtype=np.int64)
    s_band = np.repeat(np.arange(len(ranks), dtype=np.int64), n_steps)
    empty = np.zeros(0, dtype=np.int64)

    def rows_banded(of: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        parts = [of.get(r, empty) for r in ranks]
        return np.concatenate(parts), np.repeat(np.arange(len(ranks), dtype=np.int64), [p.size for p in parts])

    gpu, gpu_band = rows_banded(gpu_of)
    blocking, b_band = rows_banded(blocking_of)
    kernel, k_band = rows_banded(kernel_of)
    gap_band, gap_mine = group_index(keys, g_rank.astype(np.int64))
    launch = np.concatenate([launch_starts(timeline, r, gpu_of.get(r, empty)) for r in ranks])
    launched = launch >= 0
    bands = Bands.of(len(ranks), s, e, start[gpu], end[gpu], start[blocking], start[kernel],
                     g_start[gap_mine], g_end[gap_mine], launch[launched])
    if bands is None:
        return None
    a, b = bands.shift(s, s_band), bands.shift(e, s_band)
    busy = covered_length(*merge(bands.shift(start[gpu], gpu_band), bands.shift(end[gpu], gpu_band)), a, b)
    syncs = _count_in(a, b, bands.shift(start[blocking], b_band))
    kernels = _count_in(a, b, bands.shift(start[kernel], k_band))
    gs, ge = bands.shift(g_start, gap_band), bands.shift(g_end, gap_band)
    idle = {cause: np.zeros(s.size, dtype=np.int64) for cause in CAUSES}
    # per (cause, device) (a few dozen at most): the union of those gaps of every rank, over every step
    dev_lo = int(g_dev.min()) if g_dev.size else 0
    span = (int(g_dev.max()) - dev_lo + 1) if g_dev.size else 1
    for key, pos in positions_by(g_cause.astype(np.int64) * span + (g_dev.astype(np.int64) - dev_lo)).items():
        pos = pos[gap_mine[pos]]
        if pos.size:
            idle[CAUSES[key // span]] += covered_length(*merge(gs[pos], ge[pos]), a, b)
    windows = _windows(bands.shift(launch, gpu_band), launched, a, b, start[gpu], end[gpu])
    cut = np.cumsum([0, *n_steps]).tolist()
    return {
        r: (busy[lo:hi], syncs[lo:hi], kernels[lo:hi], {c: v[lo:hi] for c, v in idle.items()},
            (windows[0][lo:hi], windows[1][lo:hi]))
        for r, lo, hi in zip(ranks, cut[:-1], cut[1:], strict=True)
    }


def _gaps_by_rank_cause(g_rank: np.ndarray, g_cause: np.ndarray, g_dev: np.ndarray) -> dict[tuple[int, int], dict[int, np.ndarray]]:
    """The gaps grouped by (rank, cause), then by device; each group keeps the gaps' order."""
    gaps_of: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for key, pos in positions_by(g_rank * (len(CAUSES) + 1) + g_cause).items():
        by_dev = {d: pos[p] for d, p in positions_by(g_dev[pos]).items()}
        gaps_of[divmod(key, len(CAUSES) + 1)] = by_dev
    return gaps_of
