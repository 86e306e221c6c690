"""sync_per_iteration: the host waits for the GPU in most training steps (print(loss), .item(),
.cpu(), torch.cuda.synchronize() every step)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...model import CopyKind, MemKind
from ...model.grouping import sorted_unique
from ..results import Finding
from ..rows import positions_by
from .base import FindingContext, NotEvaluated, Rule, memcpy_rows, severity, step_of, window
from .waits import host_sync_idle

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
    per_rank: list[dict[str, Any]] = []
    example: dict[str, Any] = {}
    win: dict[str, int] = {}
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
        if not win:  # the first step that waits
            win = window(s_start[steps_with[0]], s_end[steps_with[0]])
        if not example:
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
    if not total_sync:
        if unevaluated:
            return NotEvaluated(RULE.id, "; ".join(unevaluated))
        return None
    return Finding(
        rule=RULE.id,
        severity=severity(wasted, ctx.span_ns(), "warning" if wasted else "info"),
        count=total_sync,
        wasted_ns=wasted,
        data={"ranks": per_rank, "steps": total_steps, "steps_with_sync": total_sync, "example": example, **win},
    )


RULE = Rule(
    id="sync_per_iteration",
    title="the host waits for the GPU in most training steps",
    evaluate=evaluate,
    options={"min_steps": 3, "step_fraction": 0.8},
    long=True,
    source=(
        'CUDA Runtime API, "API synchronization behavior" (which calls block the host); steps: '
        "tracelab.analyses.steps (marked or inferred)"
    ),
)
