"""implicit_default_stream_sync: work on the legacy default stream that serializes blocking streams.

CUDA Programming Guide, "Default Stream" and "Implicit Synchronization": an operation on the legacy
default (NULL) stream waits for all earlier work of every blocking stream of its context, and work
issued to a blocking stream afterwards waits for it; streams created with `cudaStreamNonBlocking`
(PyTorch's own streams) and the per-thread default stream are exempt. The trace does not say which
streams are blocking, so the rule looks for the effect itself. The legacy default stream is CUPTI's
stream 7 in both formats (every nsys export we have lists stream 7 with the NULL-stream flag in
TARGET_INFO_CUDA_STREAM; option `legacy_streams`). An operation x on it is a *serializing handoff*
when, with no cudaStreamWaitEvent issued by the host between the launches involved (an explicit
dependency looks the same):
- x waited: x starts within `max_handoff_ns` after an operation y of another stream ends, y was
  launched before x, and x was launched more than `max_handoff_ns` before y ended (x was ready);
- and x held work back: the first operation z of another stream that starts at or after x's end does
  so within `max_handoff_ns`, was launched after x but before x ended, and its own stream was idle
  (its previous operation ended more than `max_handoff_ns` before x did).
count = handoffs; wasted_ns = length of the union of the intervals [max(z's launch, end of z's stream
predecessor), z.start] (time during which ready work of a blocking stream was held back: an upper
bound of the wall time lost, which is less where other streams kept the GPU busy meanwhile). Fires
with ≥ `min_handoffs` handoffs on a device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...model import EventKind
from ..intervals import union_length
from ..results import Finding
from .base import FindingContext, Rule, join_places, window

OPTIONS: dict[str, Any] = {
    "legacy_streams": (7,),
    "max_handoff_ns": 20_000,
    "min_handoffs": 3,
    "warning_fraction": 0.01,
}
_GPU = np.array([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])


def _pred_end(stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """End of the previous operation on the same stream (by start), -1 for the first."""
    order = np.lexsort((start, stream))
    prev = np.full(stream.size, -1, dtype=np.int64)
    same = stream[order][1:] == stream[order][:-1]
    prev_sorted = np.r_[-1, np.where(same, end[order][:-1], -1)]
    prev[order] = prev_sorted
    return prev


def handoffs(ctx: FindingContext, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every serializing handoff per device (see the module doc)."""
    tol = int(options["max_handoff_ns"])
    kind, stream, corr = ctx.col("kind"), ctx.col("stream"), ctx.col("correlation")
    start, end = ctx.col("start"), ctx.col("end")
    legacy_ids = np.asarray(tuple(options["legacy_streams"]), dtype=np.int64)
    out: list[dict[str, Any]] = []
    for dr in ctx.rows:  # one per device
        host = ctx.hosts.get(dr.rank)
        if host is None:
            continue
        rows = dr.rows[np.isin(kind[dr.rows], _GPU)]
        li = host.launch_index(corr[rows])
        rows, li = rows[li >= 0], li[li >= 0]
        launch = host.api_start[li]
        st, s, e = stream[rows], start[rows], end[rows]
        legacy = np.isin(st, legacy_ids)
        if legacy.sum() == 0 or (~legacy).sum() == 0:
            continue
        pred = _pred_end(st, s, e)
        x = np.flatnonzero(legacy)
        o = np.flatnonzero(~legacy)
        # y: the other-stream operation that ended last at or before x's start
        o_by_end = o[np.argsort(e[o], kind="stable")]
        iy = np.searchsorted(e[o_by_end], s[x], side="right") - 1
        y = o_by_end[np.maximum(iy, 0)]
        waited = (iy >= 0) & (s[x] - e[y] <= tol) & (launch[y] < launch[x]) & (launch[x] < e[y] - tol)
        # z: the first other-stream operation that starts at or after x's end
        o_by_start = o[np.argsort(s[o], kind="stable")]
        iz = np.searchsorted(s[o_by_start], e[x], side="left")
        z = o_by_start[np.minimum(iz, o_by_start.size - 1)]
        held = (
            (iz < o_by_start.size)
            & (s[z] - e[x] <= tol)
            & (launch[z] > launch[x])
            & (launch[z] < e[x])
            & (pred[z] < e[x] - tol)
        )
        # no explicit cross-stream wait issued between y's launch and z's launch
        lo = np.searchsorted(host.swait_start, launch[y], side="left")
        hi = np.searchsorted(host.swait_start, launch[z], side="right")
        implicit = hi <= lo
        hit = waited & held & implicit
        for k in np.flatnonzero(hit).tolist():  # one per handoff found (a finding's evidence)
            xi, yi, zi = x[k], y[k], z[k]
            out.append(
                {
                    "rank": dr.rank,
                    "device": dr.device,
                    "legacy_row": int(rows[xi]),
                    "legacy_stream": int(st[xi]),
                    "waited_for_stream": int(st[yi]),
                    "held_stream": int(st[zi]),
                    "x_start": int(s[xi]),
                    "x_end": int(e[xi]),
                    "y_end": int(e[yi]),
                    "z_start": int(s[zi]),
                    "held_from": int(max(launch[zi], pred[zi])),
                    "held_ns": int(s[zi] - max(launch[zi], pred[zi])),
                    "name_x": int(ctx.col("name")[rows[xi]]),
                    "name_z": int(ctx.col("name")[rows[zi]]),
                }
            )
    return out


def evaluate(ctx: FindingContext, options: Mapping[str, Any]) -> Finding | None:
    opts = {**OPTIONS, **dict(options or {})}
    found = handoffs(ctx, opts)
    if len(found) < opts["min_handoffs"]:
        return None
    wasted = union_length(
        np.array([h["held_from"] for h in found], dtype=np.int64),
        np.array([h["z_start"] for h in found], dtype=np.int64),
    )
    span = ctx.span_ns()
    first = found[0]
    name = ctx.timeline.name
    return Finding(
        rule=RULE.id,
        severity="warning" if span > 0 and wasted >= opts["warning_fraction"] * span else "info",
        count=len(found),
        wasted_ns=int(wasted),
        where=join_places(sorted({f"r{h['rank']} GPU {h['device']} stream {h['legacy_stream']}" for h in found})),
        data={
            "handoffs": [
                {k: v for k, v in h.items() if not k.startswith("name_")}
                | {"legacy_op": name(h["name_x"]), "held_op": name(h["name_z"])}
                for h in found[:20]
            ],
            "legacy_streams": sorted({h["legacy_stream"] for h in found}),
            "held_streams": sorted({h["held_stream"] for h in found}),
            "waited_for_streams": sorted({h["waited_for_stream"] for h in found}),
            **window(first["y_end"], first["z_start"]),
        },
    )


RULE = Rule(
    id="implicit_default_stream_sync",
    title="work on the legacy default stream that serializes blocking streams",
    evaluate=evaluate,
    options=OPTIONS,
    source='CUDA C++ Programming Guide, "Default Stream" and "Implicit Synchronization" (streams section)',
)
