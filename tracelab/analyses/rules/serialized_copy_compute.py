"""serialized_copy_compute: host<->device copies queued in line with the kernels of their stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...model import CopyKind, EventKind
from ..distinct import distinct
from ..intervals import covered_length, merge
from ..results import Finding
from .base import FindingContext, Rule, severity, window


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    min_bytes, min_copies = int(opt["min_bytes"]), int(opt["min_copies"])
    min_frac, unov_frac = float(opt["min_span_fraction"]), float(opt["unoverlapped_fraction"])
    count = wasted = 0
    details: list[dict[str, int]] = []
    worst = (-1, 0, 0)  # (not-overlapped ns, start, end) of the worst copy
    lanes_stream = ctx.timeline.lane_col("stream")
    for dr, dev in zip(ctx.rows, ctx.devices):
        rows = dr.rows
        kind = ctx.col("kind")[rows]
        s = ctx.col("start")[rows]
        e = ctx.col("end")[rows]
        lane = ctx.col("lane")[rows]
        is_k = kind == int(EventKind.KERNEL)
        hd = (
            (kind == int(EventKind.MEMCPY))
            & np.isin(ctx.col("copy_kind")[rows], [int(CopyKind.HTOD), int(CopyKind.DTOH)])
            & (ctx.col("bytes")[rows] >= min_bytes)
        )
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
    return Finding(
        rule=RULE.id,
        severity=severity(wasted, ctx.span_ns(), "warning"),
        count=count,
        wasted_ns=wasted,
        data={"streams": details, **window(worst[1], worst[2])},
    )


RULE = Rule(
    id="serialized_copy_compute",
    title="host<->device copies run in line with the kernels of their stream",
    evaluate=evaluate,
    options={"min_bytes": 64 * 1024, "min_copies": 3, "min_span_fraction": 0.05, "unoverlapped_fraction": 0.8},
    source=(
        'CUDA C++ Best Practices Guide, "Asynchronous and Overlapping Transfers with Computation"; CUDA C++ '
        'Programming Guide, "Overlap of Data Transfer and Kernel Execution"'
    ),
)
