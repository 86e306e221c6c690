"""The steady-state GPU step time of a run: what "per step" means in every figure and in `compare`.

Per rank: the median GPU time (step_table.StepRow.gpu_ns) of the steps after warm-up (index >= 1;
the only step when a rank has one); the run's value is the slowest rank's (a synchronous multi-rank
step is as long as its slowest rank). Steps that launched no GPU work are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from tracelab.analyses.steps.table import StepRow


class SteadyStepTime(msgspec.Struct, frozen=True):
    ns: int  # the slowest rank's median GPU step time
    rank: int  # that rank
    steps: int  # steps the median is over (that rank)
    per_rank: tuple[tuple[int, int, int], ...]  # (rank, median ns, steps) of every rank
    spread_ns: int  # that rank's interquartile range of GPU step times
    source: str  # "marked" | "inferred" (mixed: "marked+inferred")
    total_steps: int  # every step of every rank, warm-up included


def rank_gpu_times(rows: Sequence[StepRow], rank: int) -> np.ndarray:
    """GPU times (ns) of a rank's steps after warm-up (all of them when it has one), in order."""
    mine = [r for r in rows if r.rank == rank and r.gpu_start_ns >= 0]
    later = [r for r in mine if not r.warmup] or mine
    return np.array([r.gpu_ns for r in later], dtype=np.int64)


def steady_step_time(rows: Sequence[StepRow]) -> SteadyStepTime | None:
    """None when no step launched GPU work."""
    per_rank = []
    for rank in sorted({r.rank for r in rows}):
        t = rank_gpu_times(rows, rank)
        if t.size:
            per_rank.append((rank, round(float(np.median(t))), int(t.size)))
    if not per_rank:
        return None
    rank, ns, n = max(per_rank, key=lambda x: (x[1], -x[0]))
    t = rank_gpu_times(rows, rank)
    q1, q3 = np.percentile(t, [25, 75]) if t.size else (0.0, 0.0)
    sources = "+".join(sorted({r.source for r in rows}))
    return SteadyStepTime(ns=ns, rank=rank, steps=n, per_rank=tuple(per_rank), spread_ns=round(float(q3 - q1)),
                          source=sources, total_steps=len(rows))
