"""sync_memcpy: synchronous memcpy calls that really block the host."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from tracelab.analyses.core.rows import names_matching
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, fired, join_places, window
from tracelab.analyses.rules.waits import idle_during
from tracelab.model import SyncKind
from tracelab.text_format import fmt_ns


class SyncMemcpyData(Window):
    calls: dict[str, int]  # call name -> calls, most first
    host_blocked_ns: int
    ranks: list[int]
    non_blocking_excluded: int  # device-to-device / device-memset calls that do not block the host


MEMCPY_NAME = re.compile(r"Memcpy", re.IGNORECASE)


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    count = blocked = wasted = excluded = 0
    calls: dict[str, int] = {}
    ranks: list[int] = []
    worst = (-1, 0, 0)
    for rank, host in ctx.hosts.items():
        # memcpy calls only (a synchronous memset blocks too, and is a wait for the gap causes, but is no copy)
        sync_copy = (host.api_sync == int(SyncKind.MEMCPY)) & names_matching(ctx.timeline, MEMCPY_NAME)[host.api_name]
        excluded += int((sync_copy & host.api_nonblocking_sync).sum())
        pos = np.flatnonzero(sync_copy & host.api_blocking)
        if pos.size == 0:
            continue
        s, e = host.api_start[pos], host.api_end[pos]
        count += int(pos.size)
        blocked += int((e - s).sum())
        wasted += idle_during(ctx, rank, s, e)
        ranks.append(rank)
        names, counts = np.unique(host.api_name[pos], return_counts=True)
        for n, c in zip(names.tolist(), counts.tolist()):
            key = ctx.timeline.name(int(n))
            calls[key] = calls.get(key, 0) + int(c)
        j = int(np.argmax(e - s))
        if int(e[j] - s[j]) > worst[0]:
            worst = (int(e[j] - s[j]), int(s[j]), int(e[j]))
    if not count:
        return None
    data: SyncMemcpyData = {"calls": dict(sorted(calls.items(), key=lambda kv: -kv[1])), "host_blocked_ns": blocked,
                            "ranks": ranks, "non_blocking_excluded": excluded,
                            **window(worst[1], worst[2])}  # the longest call
    return fired(RULE.id, ctx, count, wasted, data)


def describe(f: Finding) -> Prose:
    d = cast(SyncMemcpyData, f.data)
    calls = ", ".join(f"{c}× {n}" for n, c in list(d["calls"].items())[:3])
    excluded = d["non_blocking_excluded"]
    note = (f" ({excluded} device-to-device or device-memset calls that do not block the host are not counted)"
            if excluded else "")
    msg = (
        f"{f.count} synchronous memcpy calls ({calls}) block the host for {fmt_ns(d['host_blocked_ns'])}, "
        f"{fmt_ns(f.wasted_ns)} of it with the GPU idle{note}; use the Async variants with pinned memory on a "
        "stream and sync only where the data is needed."
    )
    return msg, join_places([f"rank {r}" for r in d["ranks"]])


RULE = Rule(
    id="sync_memcpy", title="synchronous memcpy calls block the host",
    evaluate=evaluate, describe=describe, data=SyncMemcpyData,
    fires_when="synchronous memcpy calls that really block",
    severity="critical / warning by the share of the span wasted, else info",
    counts="calls / GPU idle during them",
    options={},
    source=(
        'CUDA Runtime API, "API synchronization behavior": synchronous memcpys to or from host memory block; '
        "device-to-device copies and memsets to device memory do not (excluded)"
    ),
)
