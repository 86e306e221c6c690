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
from typing import Any, TypedDict, cast

import numpy as np

from tracelab.analyses.core.intervals import union_length
from tracelab.analyses.core.names import short_name
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, join_places, window
from tracelab.model import EventKind
from tracelab.model.grouping import sorted_unique
from tracelab.text_format import fmt_ns

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


_FIELDS = (
    "rank", "device", "legacy_row", "legacy_stream", "waited_for_stream", "held_stream",
    "x_start", "x_end", "y_end", "z_start", "held_from", "held_ns", "name_x", "name_z",
)  # fmt: skip


class Handoff(TypedDict):
    """x on the legacy stream waited for y (another stream) and held z (a third stream) back."""

    rank: int
    device: int
    legacy_row: int
    legacy_stream: int
    waited_for_stream: int
    held_stream: int
    x_start: int
    x_end: int
    y_end: int
    z_start: int
    held_from: int
    held_ns: int
    legacy_op: str  # x's name
    held_op: str  # z's name


class ImplicitDefaultStreamSyncData(Window):
    handoffs: list[Handoff]  # the first 20
    legacy_streams: list[int]
    held_streams: list[int]
    waited_for_streams: list[int]


def handoffs(ctx: FindingContext, options: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every serializing handoff (see the module doc) as columns of equal length, in device order."""
    tol = int(options["max_handoff_ns"])
    kind, stream, corr = ctx.col("kind"), ctx.col("stream"), ctx.col("correlation")
    start, end, names = ctx.col("start"), ctx.col("end"), ctx.col("name")
    legacy_ids = np.asarray(tuple(options["legacy_streams"]), dtype=np.int64)
    parts: list[dict[str, np.ndarray]] = []
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
        hit = waited & held & (hi <= lo)
        xi, yi, zi = x[hit], y[hit], z[hit]
        held_from = np.maximum(launch[zi], pred[zi])
        parts.append(
            {
                "rank": np.full(xi.size, dr.rank, dtype=np.int64),
                "device": np.full(xi.size, dr.device, dtype=np.int64),
                "legacy_row": rows[xi],
                "legacy_stream": st[xi],
                "waited_for_stream": st[yi],
                "held_stream": st[zi],
                "x_start": s[xi],
                "x_end": e[xi],
                "y_end": e[yi],
                "z_start": s[zi],
                "held_from": held_from,
                "held_ns": s[zi] - held_from,
                "name_x": names[rows[xi]],
                "name_z": names[rows[zi]],
            }
        )
    if not parts:
        return {f: np.zeros(0, dtype=np.int64) for f in _FIELDS}
    return {f: np.concatenate([p[f] for p in parts]).astype(np.int64) for f in _FIELDS}


def evaluate(ctx: FindingContext, options: Mapping[str, Any]) -> Finding | None:
    opts = {**OPTIONS, **dict(options or {})}
    h = handoffs(ctx, opts)
    n = int(h["x_start"].size)
    if n < opts["min_handoffs"]:
        return None
    wasted = union_length(h["held_from"], h["z_start"])
    span = ctx.span_ns()
    name = ctx.timeline.name
    evidence = [
        cast(
            Handoff,
            {f: int(h[f][i]) for f in _FIELDS if not f.startswith("name_")}
            | {"legacy_op": name(int(h["name_x"][i])), "held_op": name(int(h["name_z"][i]))},
        )
        for i in range(min(n, 20))  # the first 20 as evidence
    ]
    keys = np.unique(np.stack([h["rank"], h["device"], h["legacy_stream"]], axis=1), axis=0)
    places = [f"r{r} GPU {d} stream {s}" for r, d, s in keys.tolist()]  # one per (rank, device, stream)
    data: ImplicitDefaultStreamSyncData = {
        "handoffs": evidence,
        "legacy_streams": sorted_unique(h["legacy_stream"]).tolist(),
        "held_streams": sorted_unique(h["held_stream"]).tolist(),
        "waited_for_streams": sorted_unique(h["waited_for_stream"]).tolist(),
        **window(int(h["y_end"][0]), int(h["z_start"][0])),
    }
    return Finding(
        rule=RULE.id,
        severity="warning" if span > 0 and wasted >= opts["warning_fraction"] * span else "info",
        count=n,
        wasted_ns=int(wasted),
        where=join_places(places),
        data=dict(data),
    )


def describe(f: Finding) -> Prose:
    d = cast(ImplicitDefaultStreamSyncData, f.data)
    h = d["handoffs"][0]
    held = ", ".join(map(str, d["held_streams"]))
    msg = (
        f"{f.count} operations on the legacy default stream {h['legacy_stream']} waited for other streams' "
        f"work and then held work of stream(s) {held} back, with no cudaStreamWaitEvent issued: e.g. "
        f"{short_name(h['legacy_op'], 50)} started {fmt_ns(h['x_start'] - h['y_end'])} after "
        f"stream {h['waited_for_stream']}'s work ended, and {short_name(h['held_op'], 50)} on stream "
        f"{h['held_stream']} started {fmt_ns(h['z_start'] - h['x_end'])} after it, having been "
        f"ready {fmt_ns(h['held_ns'])} earlier. That is the implicit synchronization of blocking streams "
        f"with the legacy default stream; ready work was held {fmt_ns(f.wasted_ns)} in all. Create the streams "
        "non-blocking (cudaStreamNonBlocking; torch.cuda.Stream does), or keep that op off the legacy default "
        "stream (its own stream, or the per-thread default stream)."
    )
    return msg, f.where


RULE = Rule(
    id="implicit_default_stream_sync",
    title="work on the legacy default stream that serializes blocking streams",
    evaluate=evaluate,
    describe=describe,
    data=ImplicitDefaultStreamSyncData,
    fires_when=(
        "≥ min_handoffs operations on a legacy default stream (legacy_streams) that waited ≤ max_handoff_ns for "
        "another stream's work and held ready work of a blocking stream back, with no cudaStreamWaitEvent "
        "(module docstring)"
    ),
    severity="warning when the held time is ≥ warning_fraction of the span, else info",
    counts="handoffs / union of the time ready work was held",
    options=OPTIONS,
    source='CUDA C++ Programming Guide, "Default Stream" and "Implicit Synchronization" (streams section)',
)
