"""serialized_copy_compute: host<->device copies queued in line with the kernels of their stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, fired, join_places, window
from tracelab.model import CopyKind, EventKind
from tracelab.text_format import fmt_ns


class StreamCopies(TypedDict):
    rank: int
    device: int
    stream: int
    copies: int
    copy_ns: int
    unoverlapped_ns: int


class SerializedCopyComputeData(Window):
    streams: list[StreamCopies]


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    min_bytes, min_copies = int(opt["min_bytes"]), int(opt["min_copies"])
    min_frac, unov_frac = float(opt["min_span_fraction"]), float(opt["unoverlapped_fraction"])
    count = wasted = 0
    details: list[StreamCopies] = []
    worst = (-1, 0, 0)  # (not-overlapped ns, start, end) of the worst copy
    lanes_stream = ctx.timeline.lane_col("stream")
    for dr, dev in zip(ctx.rows, ctx.devices):
        rows = dr.rows
        kind = ctx.col("kind")[rows]
        s = ctx.col("start")[rows]
        e = ctx.col("end")[rows]
        lane = ctx.col("lane")[rows]
        is_k = kind == int(EventKind.KERNEL)
        hd = ((kind == int(EventKind.MEMCPY))
              & np.isin(ctx.col("copy_kind")[rows], [int(CopyKind.HTOD), int(CopyKind.DTOH)])
              & (ctx.col("bytes")[rows] >= min_bytes))
        if not hd.any() or not is_k.any():
            continue
        ku, ke = merge(s[is_k], e[is_k], assume_sorted=True)
        compute_ns = int((ke - ku).sum())
        cs, ce, cl = s[hd], e[hd], lane[hd]
        alone = (ce - cs) - covered_length(ku, ke, cs, ce)
        lanes_with_k = distinct(lane[is_k])
        dev_wasted = 0
        for ln in distinct(cl).tolist():  # one per stream with copies
            if ln not in lanes_with_k:
                continue
            m = cl == ln
            total = int((ce[m] - cs[m]).sum())
            unov = int(alone[m].sum())
            if m.sum() < min_copies or total < min_frac * dev.span_ns or unov < unov_frac * total:
                continue
            n_alone = int((alone[m] * 2 > (ce[m] - cs[m])).sum())
            j = int(np.argmax(alone[m]))
            if int(alone[m][j]) > worst[0]:
                worst = (int(alone[m][j]), int(cs[m][j]), int(ce[m][j]))
            count += n_alone
            dev_wasted += unov
            details.append(
                {"rank": dr.rank, "device": dr.device, "stream": int(lanes_stream[ln]), "copies": int(m.sum()),
                 "copy_ns": total, "unoverlapped_ns": unov}
            )
        wasted += min(dev_wasted, compute_ns)
    if not count:
        return None
    data: SerializedCopyComputeData = {"streams": details, **window(worst[1], worst[2])}
    return fired(RULE.id, ctx, count, wasted, data, "warning")


def describe(f: Finding) -> Prose:
    d = cast(SerializedCopyComputeData, f.data)
    msg = (
        f"{f.count} host<->device copies run in line with the kernels of their stream and overlap no compute "
        f"({fmt_ns(f.wasted_ns)}); issue them on a side stream from pinned memory (non_blocking=True) and prefetch "
        "the next batch while this one computes."
    )
    where = join_places([f"rank {x['rank']} device {x['device']} stream {x['stream']}: {x['copies']} copies, "
                         f"{fmt_ns(x['unoverlapped_ns'])} not overlapped"
                         for x in d["streams"]])
    return msg, where


RULE = Rule(
    id="serialized_copy_compute", title="host<->device copies run in line with the kernels of their stream",
    evaluate=evaluate, describe=describe, data=SerializedCopyComputeData,
    fires_when=(
        "a stream with kernels and ≥ min_copies HtoD/DtoH copies ≥ min_bytes taking ≥ min_span_fraction of the "
        "span, ≥ unoverlapped_fraction not overlapped"
    ),
    severity="critical / warning by the share of the span wasted, else warning",
    counts="copies mostly alone / not-overlapped time capped by compute",
    options={"min_bytes": 64 * 1024, "min_copies": 3, "min_span_fraction": 0.05, "unoverlapped_fraction": 0.8},
    source=(
        'CUDA C++ Best Practices Guide, "Asynchronous and Overlapping Transfers with Computation"; CUDA C++ '
        'Programming Guide, "Overlap of Data Transfer and Kernel Execution"'
    ),
)
