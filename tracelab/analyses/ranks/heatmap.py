"""A rank × step (or rank × time bin) heatmap of GPU busy and of collective wait (the cross-rank view,
`view`): the columns are ProfilerStep#N on every rank, else the steps found when every rank has as many,
else equal time bins of the run's GPU span."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.core.step_names import PROFILER_STEP_NAME
from tracelab.analyses.ranks.collectives import Collectives, match_collectives
from tracelab.analyses.steps.windows import step_windows
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import sorted_unique

_GPU_KINDS = [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)]


class RankHeatmap(msgspec.Struct, frozen=True, eq=False):
    """Per rank and column (a step, or a time bin): GPU busy fraction and collective wait (ns)."""

    ranks: tuple[int, ...]
    column_kind: str  # "step" | "time"
    labels: tuple[str, ...]  # one per column
    starts: np.ndarray  # [rank, column] window start (steps differ per rank; time bins do not)
    ends: np.ndarray
    busy_fraction: np.ndarray  # [rank, column], 0..1
    wait_ns: np.ndarray  # [rank, column]


def _profiler_steps(timeline: Timeline, ranks: list[int]) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{rank: {step number: (start, end)}} from ProfilerStep#N ranges when every rank has the same ≥ 2
    step numbers; None otherwise."""
    ids = [i for i, s in enumerate(timeline.strings) if PROFILER_STEP_NAME.match(s)]
    if not ids:
        return None
    ev = timeline.events
    kinds = [int(EventKind.NVTX_RANGE), int(EventKind.CPU_OP)]
    sel = np.flatnonzero(np.isin(ev["name"].to_numpy(), ids) & np.isin(ev["kind"].to_numpy(), kinds))
    steps: dict[int, dict[int, tuple[int, int]]] = {r: {} for r in ranks}
    # one row per step marker (a handful per rank), not per event
    for r, n, s, e in zip(*(ev[c].to_numpy()[sel].tolist() for c in ("rank", "name", "start", "end"))):
        if r in steps:
            k = int(PROFILER_STEP_NAME.match(timeline.strings[n]).group(1))
            old = steps[r].get(k)
            steps[r][k] = (min(s, old[0]), max(e, old[1])) if old else (s, e)
    keys = {frozenset(v) for v in steps.values()}
    if len(keys) != 1 or len(next(iter(keys))) < 2:
        return None
    return steps


def _found_steps(timeline: Timeline, ranks: list[int], steps: Sequence[Any] | None,
                 ) -> dict[int, dict[int, tuple[int, int]]] | None:
    """{rank: {step index: (start, end)}} from the analysis's steps (`Analysis.step_rows`: each step's GPU
    window, `Analysis.steps`: host ranges), or else from
    `analyses.steps.find_steps`, when every rank has the same number (≥ 2) of steps; None otherwise."""
    if steps is None:
        from tracelab.analyses.steps.infer import find_steps

        steps = find_steps(timeline).steps
    # each step's window (its GPU window when the step table gives it), sorted: step_windows chooses it
    wins = step_windows([s for s in steps if s.rank in ranks])
    per_rank = {r: list(zip(*(w.tolist() for w in wins[r]))) if r in wins else [] for r in ranks}
    counts = {len(v) for v in per_rank.values()}
    if len(counts) != 1 or counts.pop() < 2:
        return None
    return {r: dict(enumerate(v)) for r, v in per_rank.items()}


def _rows_by_rank(rank_col: np.ndarray, ranks: list[int]) -> list[np.ndarray]:
    """For each rank of `ranks` (sorted), the positions of its rows in `rank_col`: one sort, no mask per rank."""
    order = np.argsort(rank_col, kind="stable")
    keys = np.asarray(ranks, dtype=np.int64)
    lo = np.searchsorted(rank_col[order], keys, side="left")
    hi = np.searchsorted(rank_col[order], keys, side="right")
    return [order[a:b] for a, b in zip(lo.tolist(), hi.tolist())]


def rank_heatmap(timeline: Timeline, collectives: Collectives | None = None, bins: int = 40,
                 steps: Sequence[Any] | None = None) -> RankHeatmap:
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
        edges = t0 + (np.arange(bins + 1, dtype=np.int64) * (t1 - t0)) // bins  # exact: epoch ns overflow float
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
    return RankHeatmap(tuple(ranks), kind, labels, w0, w1, busy / np.maximum(w1 - w0, 1), wait)
