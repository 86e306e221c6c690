"""pageable_memcpy: large copies with a pageable host side (not pinned)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import (
    FindingContext,
    Prose,
    Rule,
    Window,
    count_places,
    fired,
    join_places,
    window,
)
from tracelab.model import CopyKind, MemKind
from tracelab.model.grouping import sorted_unique
from tracelab.text_format import fmt_bytes, fmt_ns


class StreamCopies(TypedDict):
    rank: int
    device: int
    stream: int
    copies: int


class PageableMemcpyData(Window):
    bytes: int
    by_kind: dict[str, int]  # CopyKind name -> copies
    copy_ns: int
    places: list[StreamCopies]  # most copies first


def _pageable_cost(ctx: FindingContext, dur: np.ndarray, ck: np.ndarray, nbytes: np.ndarray, min_bytes: int) -> int:
    """Time the pageable copies lose: per direction, their duration minus what the same bytes take at
    the bandwidth of this trace's pinned copies of that direction (when it has any, else the whole
    duration: an upper bound)."""
    mc = ctx.memcpys
    pinned = mc[
        ((ctx.col("src_mem")[mc] == int(MemKind.PINNED)) | (ctx.col("dst_mem")[mc] == int(MemKind.PINNED)))
        & (ctx.col("bytes")[mc] >= min_bytes)
    ]
    p_ck = ctx.col("copy_kind")[pinned]
    p_dur = ctx.col("end")[pinned] - ctx.col("start")[pinned]
    p_bytes = ctx.col("bytes")[pinned]
    cost = 0
    for k in sorted_unique(ck).tolist():  # one per copy direction
        m = ck == k
        pm = p_ck == k
        t = int(dur[m].sum())
        if pm.any() and p_dur[pm].sum() > 0:
            bw = p_bytes[pm].sum() / p_dur[pm].sum()  # bytes per ns
            t = max(0, t - round(nbytes[m].sum() / bw))
        cost += t
    return cost


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    min_bytes = int(opt["min_bytes"])
    mc = ctx.memcpys
    pageable = (ctx.col("src_mem")[mc] == int(MemKind.PAGEABLE)) | (ctx.col("dst_mem")[mc] == int(MemKind.PAGEABLE))
    pos = mc[pageable & (ctx.col("bytes")[mc] >= min_bytes)]
    if pos.size == 0:
        return None
    dur, ck, nb = ctx.col("end")[pos] - ctx.col("start")[pos], ctx.col("copy_kind")[pos], ctx.col("bytes")[pos]
    wasted = _pageable_cost(ctx, dur, ck, nb, min_bytes)
    longest = int(np.argmax(dur))
    data: PageableMemcpyData = {
        "bytes": int(nb.sum()),
        "by_kind": {k.name: int((ck == int(k)).sum()) for k in CopyKind if (ck == int(k)).any()},
        "copy_ns": int(dur.sum()),
        "places": cast(list[StreamCopies], count_places(ctx, pos, "copies")),
        **window(ctx.col("start")[pos[longest]], ctx.col("end")[pos[longest]]),  # the longest
    }
    return fired(RULE.id, ctx, int(pos.size), wasted, data)


def describe(f: Finding) -> Prose:
    d = cast(PageableMemcpyData, f.data)
    dirs = ", ".join(f"{v} {k}" for k, v in d["by_kind"].items())
    msg = (
        f"{f.count} memcpys ({fmt_bytes(d['bytes'])}, {fmt_ns(d['copy_ns'])}) use pageable host memory "
        f"({dirs}); pin it (pin_memory=True, cudaHostAlloc) so copies run at full speed and can overlap with compute."
    )
    return msg, join_places([f"rank {p['rank']} device {p['device']} stream {p['stream']}: {p['copies']} pageable copies"
                             for p in d["places"]])


RULE = Rule(
    id="pageable_memcpy", title="large memcpys use pageable host memory",
    evaluate=evaluate, describe=describe, data=PageableMemcpyData,
    fires_when="copies ≥ min_bytes with a pageable host side",
    severity="critical / warning by the share of the span wasted, else info",
    counts="copies / duration minus the time at the trace's pinned bandwidth (whole duration without pinned copies)",
    options={"min_bytes": 64 * 1024},
    source=('CUDA C++ Best Practices Guide, "Pinned Memory"; CUDA Runtime API, "API synchronization behavior" '
            "(pageable copies are staged and cannot overlap)"),
)
