"""sync_per_iteration: the host waits for the GPU in most training steps (print(loss), .item(),
.cpu(), torch.cuda.synchronize() every step)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import msgspec
import numpy as np

from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.intervals import step_of
from tracelab.analyses.core.rows import positions_by
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import (
    FindingContext,
    NotEvaluated,
    Prose,
    Rule,
    Window,
    fired,
    join_places,
    window,
)
from tracelab.analyses.rules.waits import host_sync_idle
from tracelab.model import CopyKind, MemKind
from tracelab.model.grouping import sorted_unique
from tracelab.text_format import fmt_ns


class RankSyncs(TypedDict):
    rank: int
    steps: int
    steps_with_sync: int
    wasted_ns: int
    steps_with_dtoh_copy: int
    steps_with_sync_call: int
    first_step: int  # as the trace numbers the steps (`--steps A:B` keeps A's number)
    last_step: int


class Example(TypedDict):
    """The first wait found: a DtoH copy into pageable memory (`call` "" / `tid` -1 when its launching
    call is not in the trace) or a blocking call."""

    call: str
    tid: int
    what: str  # "dtoh_pageable_copy" | "sync_call"
    rank: int
    step: int


class SyncPerIterationData(Window):
    ranks: list[RankSyncs]
    steps: int
    steps_with_sync: int
    example: Example


_NONE = np.zeros(0, dtype=np.int64)


class _RankWaits(msgspec.Struct, frozen=True):
    """One rank's waits, each with the step it falls in (-1: outside every step)."""

    s_start: np.ndarray  # the rank's steps
    s_end: np.ndarray
    copy_call: np.ndarray  # per pageable DtoH copy: the host call that launched it (0 when not found) ...
    copy_found: np.ndarray  # ... and whether it was found
    step_copy: np.ndarray
    blk: np.ndarray  # host calls that block
    step_blk: np.ndarray
    steps_with: np.ndarray  # the steps with any wait, sorted


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | NotEvaluated | None:
    min_steps = int(opt["min_steps"])
    dtoh_of = _pageable_dtoh_by_rank(ctx)
    per_rank: list[RankSyncs] = []
    example: Example | None = None
    win: Window | None = None
    unevaluated: list[str] = []
    for rank, host in ctx.hosts.items():
        s_start, s_end = ctx.step_bounds(rank)
        if s_start.size < min_steps:
            too_few = _too_few_steps(rank, int(s_start.size), int(host.api_blocking.sum()), min_steps)
            if too_few:
                unevaluated.append(too_few)
            continue
        waits = _rank_waits(ctx, host, dtoh_of.get(rank, _NONE), s_start, s_end)
        steps_with = waits.steps_with
        if steps_with.size == 0 or steps_with.size < float(opt["step_fraction"]) * s_start.size:
            continue
        per_rank.append(_rank_syncs(ctx, rank, waits))
        if win is None:  # the first step that waits
            win = window(s_start[steps_with[0]], s_end[steps_with[0]])
        if example is None:
            example = _example(ctx, rank, host, waits)
    total_sync = sum(r["steps_with_sync"] for r in per_rank)
    if not total_sync or example is None or win is None:
        if unevaluated:
            return NotEvaluated(RULE.id, "; ".join(unevaluated))
        return None
    wasted = sum(r["wasted_ns"] for r in per_rank)
    data: SyncPerIterationData = {
        "ranks": per_rank, "steps": sum(r["steps"] for r in per_rank), "steps_with_sync": total_sync,
        "example": example, **win,
    }
    return fired(RULE.id, ctx, total_sync, wasted, data, "warning" if wasted else "info")


def _pageable_dtoh_by_rank(ctx: FindingContext) -> dict[int, np.ndarray]:
    """Rows of the device-to-host copies into pageable memory, grouped by rank once (no full mask per rank)."""
    mc = ctx.memcpys
    dtoh = mc[(ctx.col("copy_kind")[mc] == int(CopyKind.DTOH)) & (ctx.col("dst_mem")[mc] == int(MemKind.PAGEABLE))]
    return {r: dtoh[p] for r, p in positions_by(ctx.col("rank")[dtoh]).items()}


def _too_few_steps(rank: int, n_steps: int, n_block: int, min_steps: int) -> str | None:
    """Why a rank with blocking host syncs but too few steps is not evaluated (None: nothing to say)."""
    if n_block < min_steps:
        return None
    return (f"rank {rank}: {n_block} blocking host syncs but "
            + (f"only {n_steps} training step(s)" if n_steps else "no training steps found")
            + f" (at least {min_steps} needed)")


def _rank_waits(ctx: FindingContext, host: HostView, dtoh: np.ndarray, s_start: np.ndarray,
                s_end: np.ndarray) -> _RankWaits:
    """The rank's waits placed in its steps: (a) device-to-host copies into pageable memory (the call blocks:
    .item(), .cpu()), at their launching call (else at the copy); (b) calls that really block: synchronize
    calls, synchronous copies that wait."""
    li = host.launch_index(ctx.col("correlation")[dtoh])
    found = li >= 0
    lic = np.maximum(li, 0)
    t_copy = np.where(found, host.api_start[lic] if host.api_start.size else 0, ctx.col("start")[dtoh])
    step_copy = step_of(s_start, s_end, t_copy)
    blk = np.flatnonzero(host.api_blocking)
    step_blk = step_of(s_start, s_end, host.api_start[blk])
    steps_with = sorted_unique(np.concatenate([step_copy[step_copy >= 0], step_blk[step_blk >= 0]]))
    return _RankWaits(s_start, s_end, lic, found, step_copy, blk, step_blk, steps_with)


def _rank_syncs(ctx: FindingContext, rank: int, w: _RankWaits) -> RankSyncs:
    """The rank's line of the finding; its wasted time is the GPU idle caused by host syncs inside the steps
    that wait (every idle interval, any length)."""
    in_steps = np.zeros(w.s_start.size, dtype=bool)
    in_steps[w.steps_with] = True
    return {
        "rank": rank, "steps": int(w.s_start.size), "steps_with_sync": int(w.steps_with.size),
        "wasted_ns": host_sync_idle(ctx, rank, w.s_start[in_steps], w.s_end[in_steps]),
        "steps_with_dtoh_copy": int(sorted_unique(w.step_copy[w.step_copy >= 0]).size),
        "steps_with_sync_call": int(sorted_unique(w.step_blk[w.step_blk >= 0]).size),
        "first_step": int(w.steps_with[0]) + ctx.step_base, "last_step": int(w.steps_with[-1]) + ctx.step_base,
    }


def _example(ctx: FindingContext, rank: int, host: HostView, w: _RankWaits) -> Example:
    """The rank's first wait: its first pageable DtoH copy inside a step, else its first blocking call."""
    hit = np.flatnonzero(w.step_copy >= 0)
    if hit.size:
        j = int(hit[0])
        call, found, what, step = int(w.copy_call[j]), bool(w.copy_found[j]), "dtoh_pageable_copy", w.step_copy[j]
    else:
        j = int(np.flatnonzero(w.step_blk >= 0)[0])
        call, found, what, step = int(w.blk[j]), True, "sync_call", w.step_blk[j]
    return {"call": ctx.timeline.name(int(host.api_name[call])) if found else "",
            "tid": int(host.api_tid[call]) if found else -1, "what": what, "rank": rank, "step": int(step) + ctx.step_base}


def describe(f: Finding) -> Prose:
    d = cast(SyncPerIterationData, f.data)
    ex = d["example"]
    if ex["what"] == "dtoh_pageable_copy":
        call = ex["call"] or "a copy"
        tid = f" on thread {ex['tid']}" if ex["tid"] >= 0 else ""
        example = f"{call} device-to-host into pageable memory{tid} in step {ex['step']}"
    else:
        example = f"{ex['call']} on thread {ex['tid']} in step {ex['step']}"
    msg = (
        f"{f.count} of {d['steps']} steps make the host wait for the GPU (e.g. {example}); the GPU "
        f"queue drains every step ({fmt_ns(f.wasted_ns)} idle after those waits). Typical causes: print(loss), "
        ".item(), .cpu() or torch.cuda.synchronize() every step; keep values on the GPU and read them back "
        "every N steps."
    )
    where = join_places([
        f"rank {v['rank']}: {v['steps_with_sync']} of {v['steps']} steps (step {v['first_step']} … "
        f"step {v['last_step']})"
        for v in d["ranks"]
    ])
    return msg, where


RULE = Rule(
    id="sync_per_iteration", title="the host waits for the GPU in most training steps",
    evaluate=evaluate, describe=describe, data=SyncPerIterationData,
    fires_when=(
        "≥ step_fraction of ≥ min_steps steps contain a wait (a blocking call, or a DtoH copy into pageable "
        "memory)"
    ),
    severity="critical / warning by the share of the span wasted, else warning (info when nothing is wasted)",
    counts="steps that wait / host_sync idle starting in them",
    options={"min_steps": 3, "step_fraction": 0.8},
    long=True,
    source=('CUDA Runtime API, "API synchronization behavior" (which calls block the host); steps: '
            "tracelab.analyses.steps.infer (marked or inferred)"),
)
