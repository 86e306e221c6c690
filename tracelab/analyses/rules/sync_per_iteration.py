"""sync_per_iteration: the host waits for the GPU in most training steps (print(loss), .item(),
.cpu(), torch.cuda.synchronize() every step)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.rows import positions_by
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import (
    FindingContext,
    NotEvaluated,
    Prose,
    Rule,
    Window,
    join_places,
    memcpy_rows,
    severity,
    step_of,
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


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | NotEvaluated | None:
    min_steps = int(opt["min_steps"])
    # device-to-host copies into pageable memory, grouped by rank once (no full mask per rank)
    mc = memcpy_rows(ctx)
    dtoh = mc[
        (ctx.col("copy_kind")[mc] == int(CopyKind.DTOH)) & (ctx.col("dst_mem")[mc] == int(MemKind.PAGEABLE))
    ]
    dtoh_of = {r: dtoh[p] for r, p in positions_by(ctx.col("rank")[dtoh]).items()}
    total_steps = total_sync = wasted = 0
    per_rank: list[RankSyncs] = []
    example: Example | None = None
    win: Window | None = None
    unevaluated: list[str] = []
    for rank, host in ctx.hosts.items():
        s_start, s_end = ctx.step_bounds(rank)
        n_steps = int(s_start.size)
        n_block = int(host.api_blocking.sum())
        if n_steps < min_steps:
            if n_block >= min_steps:
                unevaluated.append(
                    f"rank {rank}: {n_block} blocking host syncs but "
                    + (f"only {n_steps} training step(s)" if n_steps else "no training steps found")
                    + f" (at least {min_steps} needed)"
                )
            continue
        # (a) device-to-host copies into pageable memory: the call blocks (.item(), .cpu())
        dtoh = dtoh_of.get(rank, _NONE)
        li = host.launch_index(ctx.col("correlation")[dtoh])
        found = li >= 0
        lic = np.maximum(li, 0)
        t_copy = np.where(found, host.api_start[lic] if host.api_start.size else 0, ctx.col("start")[dtoh])
        step_copy = step_of(s_start, s_end, t_copy)
        # (b) calls that really block: synchronize calls, synchronous copies that wait
        blk = np.flatnonzero(host.api_blocking)
        step_blk = step_of(s_start, s_end, host.api_start[blk])
        steps_with = sorted_unique(np.concatenate([step_copy[step_copy >= 0], step_blk[step_blk >= 0]]))
        if steps_with.size == 0 or steps_with.size < float(opt["step_fraction"]) * n_steps:
            continue
        # GPU idle caused by host syncs, inside the steps that sync (every idle interval, any length)
        in_steps = np.zeros(n_steps, dtype=bool)
        in_steps[steps_with] = True
        w = host_sync_idle(ctx, rank, s_start[in_steps], s_end[in_steps])
        total_steps += n_steps
        total_sync += int(steps_with.size)
        wasted += w
        per_rank.append({
            "rank": rank,
            "steps": n_steps,
            "steps_with_sync": int(steps_with.size),
            "wasted_ns": w,
            "steps_with_dtoh_copy": int(sorted_unique(step_copy[step_copy >= 0]).size),
            "steps_with_sync_call": int(sorted_unique(step_blk[step_blk >= 0]).size),
            "first_step": int(steps_with[0]) + ctx.step_base,
            "last_step": int(steps_with[-1]) + ctx.step_base,
        })
        if win is None:  # the first step that waits
            win = window(s_start[steps_with[0]], s_end[steps_with[0]])
        if example is None:
            hit = np.flatnonzero(step_copy >= 0)
            if hit.size:
                j = int(hit[0])
                example = {
                    "call": ctx.timeline.name(int(host.api_name[lic[j]])) if found[j] else "",
                    "tid": int(host.api_tid[lic[j]]) if found[j] else -1,
                    "what": "dtoh_pageable_copy",
                    "rank": rank,
                    "step": int(step_copy[j]) + ctx.step_base,
                }
            else:
                j = int(np.flatnonzero(step_blk >= 0)[0])
                example = {
                    "call": ctx.timeline.name(int(host.api_name[blk[j]])),
                    "tid": int(host.api_tid[blk[j]]),
                    "what": "sync_call",
                    "rank": rank,
                    "step": int(step_blk[j]) + ctx.step_base,
                }
    if not total_sync or example is None or win is None:
        if unevaluated:
            return NotEvaluated(RULE.id, "; ".join(unevaluated))
        return None
    data: SyncPerIterationData = {
        "ranks": per_rank, "steps": total_steps, "steps_with_sync": total_sync, "example": example, **win
    }
    return Finding(
        rule=RULE.id,
        severity=severity(wasted, ctx.span_ns(), "warning" if wasted else "info"),
        count=total_sync,
        wasted_ns=wasted,
        data=dict(data),
    )


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
    where = join_places(
        [
            f"rank {v['rank']}: {v['steps_with_sync']} of {v['steps']} steps (step {v['first_step']} … "
            f"step {v['last_step']})"
            for v in d["ranks"]
        ]
    )
    return msg, where


RULE = Rule(
    id="sync_per_iteration",
    title="the host waits for the GPU in most training steps",
    evaluate=evaluate,
    describe=describe,
    data=SyncPerIterationData,
    fires_when=(
        "≥ step_fraction of ≥ min_steps steps contain a wait (a blocking call, or a DtoH copy into pageable "
        "memory)"
    ),
    severity="critical / warning by the share of the span wasted, else warning (info when nothing is wasted)",
    counts="steps that wait / host_sync idle starting in them",
    options={"min_steps": 3, "step_fraction": 0.8},
    long=True,
    source=(
        'CUDA Runtime API, "API synchronization behavior" (which calls block the host); steps: '
        "tracelab.analyses.steps.infer (marked or inferred)"
    ),
)
