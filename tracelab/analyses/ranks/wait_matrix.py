"""Who waited for whom in collectives: a rank × rank matrix (issue 28: "one rank × rank summary first").

In every matched collective (`collectives.match_collectives`) each participant that arrived before the
last one waited from its own arrival (its call's start) to the last arrival; that wait is charged to the
pair (its rank, the rank of the last arrival). `wait_ns[i, j]` is the total time rank `ranks[i]` waited for
rank `ranks[j]`; `count[i, j]` the number of calls in which it did (a rank with several GPUs counts each
GPU's call). The diagonal holds a rank's GPUs waiting for another GPU of the same rank.

Scope, as the Ranks table's: with steps every wait is clipped to its rank's steps' GPU span (set-up left
out: `steps.windows.steps_spans`), so that row i sums to rank i's "waited in collectives"; without steps (or
for a rank without steps) the whole run. Vectorized over the calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from tracelab.analyses.core.bands import group_index
from tracelab.analyses.ranks.collectives import Collectives
from tracelab.model import Timeline


class WaitMatrix(msgspec.Struct, frozen=True, eq=False):
    """Collective wait by (waiting rank, rank waited for); arrays are read-only."""

    ranks: tuple[int, ...]  # the rows' and the columns' ranks, in order
    wait_ns: np.ndarray  # int64 [n, n]: [i, j] = time ranks[i] waited for ranks[j] (the last to arrive)
    count: np.ndarray  # int64 [n, n]: calls in which ranks[i] waited for ranks[j]
    scope: str  # "steps" (waits clipped to each rank's steps) or "whole"

    def waited(self, rank: int, on: int) -> int:
        """The time `rank` waited in collectives for `on` (0 for a rank not in the matrix)."""
        if rank not in self.ranks or on not in self.ranks:
            return 0
        return int(self.wait_ns[self.ranks.index(rank), self.ranks.index(on)])

    @property
    def total_ns(self) -> int:
        return int(self.wait_ns.sum())


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def wait_matrix(timeline: Timeline, collectives: Collectives, ranks: Sequence[int] = (),
                spans: Mapping[int, Sequence[int]] | None = None) -> WaitMatrix:
    """The matrix over `ranks` (and any other rank that took part in a matched collective), waits clipped
    to `spans` ({rank: (lo, hi, ...)}: the steps' GPU span of each rank that has steps; module docstring)."""
    rank_col = timeline.events["rank"].to_numpy().astype(np.int64)
    start_col = timeline.events["start"].to_numpy().astype(np.int64)
    rows = collectives.call_rows
    waiter = rank_col[rows]
    last = rank_col[collectives.call_last_row]
    lo, hi = start_col[rows], collectives.call_last_start.astype(np.int64)
    spans = {int(r): (int(v[0]), int(v[1])) for r, v in (spans or {}).items()}
    if spans:
        keys = np.array(sorted(spans), dtype=np.int64)
        at, known = group_index(keys, waiter)
        s_lo = np.array([spans[k][0] for k in keys.tolist()], dtype=np.int64)[at]
        s_hi = np.array([spans[k][1] for k in keys.tolist()], dtype=np.int64)[at]
        lo, hi = np.where(known, np.maximum(lo, s_lo), lo), np.where(known, np.minimum(hi, s_hi), hi)
    wait = np.maximum(hi - lo, 0)
    order = np.array(sorted({int(r) for r in ranks} | set(waiter.tolist()) | set(last.tolist())), dtype=np.int64)
    n = order.size
    i, j = np.searchsorted(order, waiter), np.searchsorted(order, last)
    waited = wait > 0
    flat_wait = np.bincount(i * n + j, weights=wait, minlength=n * n) if n else np.zeros(0)
    flat_count = np.bincount((i * n + j)[waited], minlength=n * n) if n else np.zeros(0)
    return WaitMatrix(tuple(order.tolist()), _frozen(np.rint(flat_wait).astype(np.int64).reshape(n, n)),
                      _frozen(flat_count.astype(np.int64).reshape(n, n)), "steps" if spans else "whole")
