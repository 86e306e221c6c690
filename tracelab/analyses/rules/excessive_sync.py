"""excessive_sync: more blocking host syncs inside the training steps than steps (the host waits for the
GPU several times per step: every wait drains the queue)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from tracelab.analyses.core.intervals import step_of
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, fired, generic_prose, window
from tracelab.analyses.rules.waits import idle_during


class RankSyncs(TypedDict):
    rank: int
    steps: int
    syncs: int
    idle_ns: int


class ExcessiveSyncData(Window):
    ranks: list[RankSyncs]
    syncs: int
    steps: int


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    count = wasted = steps_total = 0
    longest = (-1, 0, 0)  # (duration, start, end) of the longest sync call
    ranks: list[RankSyncs] = []
    for rank, host in ctx.hosts.items():
        s_start, s_end = ctx.step_bounds(rank)
        n_steps = int(s_start.size)
        if n_steps < int(opt["min_steps"]):
            continue  # sync_per_iteration's note already says steps are missing
        # blocking calls that start inside a step (set-up and tear-down syncs outside the loop do not count)
        pos = np.flatnonzero(host.api_blocking)
        pos = pos[step_of(s_start, s_end, host.api_start[pos]) >= 0]
        if pos.size <= float(opt["syncs_per_step"]) * n_steps:
            continue
        s, e = host.api_start[pos], host.api_end[pos]
        w = idle_during(ctx, rank, s, e)
        j = int(np.argmax(e - s))
        if int(e[j] - s[j]) > longest[0]:
            longest = (int(e[j] - s[j]), int(s[j]), int(e[j]))
        ranks.append({"rank": rank, "steps": n_steps, "syncs": int(pos.size), "idle_ns": w})
        count += int(pos.size)
        wasted += w
        steps_total += n_steps
    if not count:
        return None
    data: ExcessiveSyncData = {"ranks": ranks, "syncs": count, "steps": steps_total, **window(longest[1], longest[2])}
    return fired(RULE.id, ctx, count, wasted, data, "info")


def describe(f: Finding) -> Prose:
    """The generic prose: the title, count, GPU time and the data's scalars; where = its ranks."""
    return generic_prose(f, RULE.title)


RULE = Rule(
    id="excessive_sync", title="more blocking host syncs inside the training steps than steps",
    evaluate=evaluate, describe=describe, data=ExcessiveSyncData,
    fires_when="more blocking sync calls inside the steps than syncs_per_step × steps (≥ min_steps steps)",
    severity="critical / warning by the share of the span wasted, else info",
    counts="calls / GPU idle during them", options={"min_steps": 3, "syncs_per_step": 1.0},
    source='CUDA Runtime API, "API synchronization behavior" (which calls block the host)',
)
