"""Per-device summaries: span, busy, idle, per-kind totals, per-stream busy, overlap, SM use.

Definitions (DESIGN.md): the GPU activity of a device is its kernels, memcpys and memsets; span =
first start to last end of that activity; busy = length of the union of its intervals; idle =
span − busy. kernel_ns / memcpy_ns / memset_ns / comm_ns are union lengths of each kind (so two
kernels running at once on two streams count once). Per-stream busy is the union on that stream.
Only devices with GPU activity are summarised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import EventKind, Flag, Timeline
from ..model.api_names import comm_mask
from .intervals import grouped_union_lengths, merge, union_length
from .overlap import device_overlap
from .results import DeviceSummary, StreamSummary
from .sm import sm_summary

_GPU_KINDS = np.array([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)], dtype=np.int8)


@dataclass(frozen=True)
class DeviceRows:
    """The GPU activity rows (positions into timeline.events, in start order) of one device."""

    rank: int
    device: int
    rows: np.ndarray


def device_rows(timeline: Timeline) -> list[DeviceRows]:
    """GPU activity rows grouped by (rank, device), devices in (rank, device) order."""
    ev = timeline.cols
    pos = np.flatnonzero(np.isin(ev["kind"], _GPU_KINDS))
    if pos.size == 0:
        return []
    rank = ev["rank"][pos].astype(np.int64)
    dev = ev["device"][pos].astype(np.int64)
    key = (rank << 32) | (dev & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")  # stable: keeps start order inside a device
    key_sorted = key[order]
    uniq, first = np.unique(key_sorted, return_index=True)
    bounds = list(first) + [key_sorted.size]
    out = []
    for i, k in enumerate(uniq.tolist()):
        rows = pos[order[bounds[i] : bounds[i + 1]]]
        out.append(DeviceRows(rank=int(k >> 32), device=int(k & 0xFFFFFFFF), rows=rows))
    return out


def comm_kernels(timeline: Timeline, rows: np.ndarray) -> np.ndarray:
    """Communication kernels among rows: flagged COMM by the parser or named like a collective."""
    ev = timeline.cols
    kind = ev["kind"][rows]
    flagged = (ev["flags"][rows] & Flag.COMM) != 0
    is_kernel = kind == int(EventKind.KERNEL)
    named = np.zeros(rows.size, dtype=bool)
    if is_kernel.any():
        named[is_kernel] = comm_mask(timeline.strings, ev["name"][rows][is_kernel])
    return is_kernel & (flagged | named)


def _opt(v: int) -> int | None:
    return None if v < 0 else int(v)


def summarize_device(timeline: Timeline, dr: DeviceRows) -> DeviceSummary:
    ev = timeline.cols
    rows = dr.rows
    kind = ev["kind"][rows]
    start = ev["start"][rows]
    end = ev["end"][rows]
    lane = ev["lane"][rows].astype(np.int64)
    comm = comm_kernels(timeline, rows)

    us, ue = merge(start, end, assume_sorted=True)
    busy = int((ue - us).sum())
    span_start, span_end = int(start.min()), int(end.max())
    span = span_end - span_start

    is_k = kind == int(EventKind.KERNEL)
    is_c = kind == int(EventKind.MEMCPY)
    is_s = kind == int(EventKind.MEMSET)

    def kind_len(mask: np.ndarray) -> int:
        return union_length(start[mask], end[mask], assume_sorted=True)

    # per stream (a GPU_STREAM lane = rank, device, context, green context, stream)
    n_lanes = timeline.n_lanes
    lane_busy = grouped_union_lengths(start, end, lane, n_lanes)
    nk = np.bincount(lane[is_k], minlength=n_lanes)
    nc = np.bincount(lane[is_c], minlength=n_lanes)
    ns = np.bincount(lane[is_s], minlength=n_lanes)
    used = np.unique(lane)
    l_stream = timeline.lane_col("stream")
    l_ctx = timeline.lane_col("context")
    l_green = timeline.lane_col("green_context")
    streams = sorted(
        (
            StreamSummary(
                stream=int(l_stream[i]),
                context=_opt(int(l_ctx[i])),
                green_context=_opt(int(l_green[i])),
                busy_ns=int(lane_busy[i]),
                kernels=int(nk[i]),
                memcpys=int(nc[i]),
                memsets=int(ns[i]),
            )
            for i in used.tolist()
        ),
        key=lambda s: (s.stream, s.context or -1, s.green_context or -1),
    )

    info = timeline.device_info(dr.rank, dr.device)
    return DeviceSummary(
        rank=dr.rank,
        device=dr.device,
        name=info.name if info else "",
        sm_count=info.sm_count if info else 0,
        start_ns=span_start,
        end_ns=span_end,
        span_ns=span,
        busy_ns=busy,
        idle_ns=span - busy,
        kernel_ns=kind_len(is_k),
        memcpy_ns=kind_len(is_c),
        memset_ns=kind_len(is_s),
        comm_ns=kind_len(comm),
        overlap=device_overlap(kind, start, end, lane, comm),
        streams=tuple(streams),
        sm=sm_summary(timeline, dr.rank, dr.device),
        kernels=int(is_k.sum()),
        memcpys=int(is_c.sum()),
        memsets=int(is_s.sum()),
    )


def device_summaries(timeline: Timeline, rows: list[DeviceRows] | None = None) -> tuple[DeviceSummary, ...]:
    """One DeviceSummary per (rank, device) with GPU activity, in (rank, device) order."""
    rows = device_rows(timeline) if rows is None else rows
    return tuple(summarize_device(timeline, dr) for dr in rows)
