"""Per-device summaries: span, busy, idle, per-kind totals, per-stream busy, overlap, SM use.

Definitions (DESIGN.md): the GPU activity of a device is its kernels, memcpys and memsets; span =
first start to last end of that activity; busy = length of the union of its intervals; idle =
span − busy. kernel_ns / memcpy_ns / memset_ns / comm_ns are union lengths of each kind (so two
kernels running at once on two streams count once). Per-stream busy is the union on that stream.
Only devices with GPU activity are summarised.
"""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.intervals import grouped_union_lengths, union_length
from tracelab.analyses.core.memo import column, lane_column
from tracelab.analyses.core.rows import DeviceRows, comm_kernels, device_rows, device_union
from tracelab.analyses.device.overlap import device_overlap
from tracelab.analyses.results import DeviceSummary, StreamSummary
from tracelab.analyses.sm.lanes import sm_summary  # not the `sm` facade: it loads the SM-lane modules too
from tracelab.model import EventKind, Timeline

__all__ = ["DeviceRows", "comm_kernels", "device_rows", "device_summaries", "summarize_device"]


def _opt(v: int) -> int | None:
    return None if v < 0 else int(v)


def summarize_device(timeline: Timeline, dr: DeviceRows) -> DeviceSummary:
    rows = dr.rows
    kind = column(timeline, "kind")[rows]
    start = column(timeline, "start")[rows]
    end = column(timeline, "end")[rows]
    lane = column(timeline, "lane")[rows].astype(np.int64)
    comm = comm_kernels(timeline, rows)

    us, ue, _ = device_union(timeline, dr)
    busy = int((ue - us).sum())
    span_start, span_end = int(start.min()), int(end.max())
    span = span_end - span_start

    is_k, is_c, is_s = (kind == int(k) for k in (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET))

    def kind_len(mask: np.ndarray) -> int:
        return union_length(start[mask], end[mask], assume_sorted=True)

    # per stream (a GPU_STREAM lane = rank, device, context, green context, stream)
    n_lanes = timeline.n_lanes
    lane_busy = grouped_union_lengths(start, end, lane, n_lanes)
    nk, nc, ns = (np.bincount(lane[m], minlength=n_lanes) for m in (is_k, is_c, is_s))
    used = distinct(lane)
    l_stream = lane_column(timeline, "stream")
    l_ctx = lane_column(timeline, "context")
    l_green = lane_column(timeline, "green_context")
    streams = sorted(
        (StreamSummary(stream=int(l_stream[i]), context=_opt(int(l_ctx[i])), green_context=_opt(int(l_green[i])),
                       busy_ns=int(lane_busy[i]), kernels=int(nk[i]), memcpys=int(nc[i]), memsets=int(ns[i]))
         for i in used.tolist()),
        key=lambda s: (s.stream, s.context or -1, s.green_context or -1),
    )

    info = timeline.device_info(dr.rank, dr.device)
    return DeviceSummary(
        rank=dr.rank, device=dr.device, name=info.name if info else "", sm_count=info.sm_count if info else 0,
        start_ns=span_start, end_ns=span_end, span_ns=span, busy_ns=busy, idle_ns=span - busy,
        kernel_ns=kind_len(is_k), memcpy_ns=kind_len(is_c), memset_ns=kind_len(is_s), comm_ns=kind_len(comm),
        overlap=device_overlap(kind, start, end, lane, comm), streams=tuple(streams),
        sm=sm_summary(timeline, dr.rank, dr.device), kernels=int(is_k.sum()), memcpys=int(is_c.sum()),
        memsets=int(is_s.sum()),
    )


def device_summaries(timeline: Timeline, rows: list[DeviceRows] | None = None) -> tuple[DeviceSummary, ...]:
    """One DeviceSummary per (rank, device) with GPU activity, in (rank, device) order."""
    rows = device_rows(timeline) if rows is None else rows
    return tuple(summarize_device(timeline, dr) for dr in rows)
