"""The Perfetto export's tracks (processes, threads, the rows of overlapping slices) and its per-SM lanes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelab.analyses.results import Analysis
from tracelab.model import LaneKind, Timeline

TRACELAB_PID = 1
FINDINGS_TID = 1
STEPS_TID = 100  # + rank
GAPS_TID = 1  # inside a GPU process
LANE_TID = 10  # + lane id
ROW_TID = 1_000_000  # tid offset of the extra rows of a track whose slices overlap
MAX_SM_ROWS = 300_000  # more per-SM rows than this are merged into busy intervals per SM (noted)
MAX_SM_EXPAND = 20_000_000  # kernel x SM rows beyond this are not even expanded


class _Track(msgspec.Struct, frozen=True):
    pid: int
    tid: int
    process: str
    name: str
    sort: int = 0
    gpu: bool = False  # slices that must not overlap on one row (GPU work, SM lanes)

    def row(self, row: int) -> _Track:
        """Extra row `row` of this track (for slices that overlap without nesting)."""
        if row == 0:
            return self
        return _Track(self.pid, self.tid + ROW_TID * row, self.process, f"{self.name} · overlap {row}",
                      self.sort, self.gpu)


def _us(ns: np.ndarray | int, origin: int) -> np.ndarray:
    """ns on the trace clock -> µs from the origin (float64, exact to the ns for spans < 100 days)."""
    return (np.asarray(ns, dtype=np.int64) - origin) / 1e3


class _Layout:
    """pid / tid numbers and names for every lane of the timeline and every tracelab track."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        extra = timeline.meta.extra or {}
        self.process_names: dict[str, str] = dict(extra.get("process_names") or {})
        self.thread_names: dict[str, str] = dict(extra.get("thread_names") or {})
        ev = timeline.events
        gpu_keys = sorted(
            {(int(r), int(d)) for r, d in zip(timeline.lanes["rank"], timeline.lanes["device"]) if d >= 0}
            | {(dv.rank, dv.device) for dv in timeline.devices}
        )
        self.gpu_pid = {k: 10 + i for i, k in enumerate(gpu_keys)}
        self.sm_pid = {k: 5000 + i for i, k in enumerate(gpu_keys)}
        host = timeline.lanes[timeline.lanes["lane_kind"].isin([int(LaneKind.HOST_THREAD), int(LaneKind.NVTX)])]
        host_keys = sorted({(int(r), int(p)) for r, p in zip(host["rank"], host["pid"])})
        self.host_pid = {k: 100_000 + i for i, k in enumerate(host_keys)}
        self.ranks = sorted({int(r) for r in np.unique(ev["rank"].to_numpy())}) if len(ev) else []

    def gpu_process(self, rank: int, device: int) -> str:
        info = self.timeline.device_info(rank, device)
        name = f" · {info.name}" if info is not None and info.name else ""
        sms = f" ({info.sm_count} SMs)" if info is not None and info.sm_count else ""
        return f"rank {rank} · GPU {device}{name}{sms}"

    def host_process(self, rank: int, pid: int) -> str:
        exe = self.process_names.get(str(pid), "")
        return f"rank {rank} · process {pid}" + (f" · {exe.rsplit('/', 1)[-1]}" if exe else "")

    def lane_tracks(self) -> dict[int, _Track]:
        """Track of every lane id."""
        out: dict[int, _Track] = {}
        strings = self.timeline.strings
        for row in self.timeline.lanes.itertuples(index=False):  # one per lane (tens to thousands)
            lane, kind = int(row.lane), int(row.lane_kind)
            rank, device, stream = int(row.rank), int(row.device), int(row.stream)
            if kind in (int(LaneKind.GPU_STREAM), int(LaneKind.GPU_ANNOTATION)):
                where = f"stream {stream}" if stream >= 0 else "all streams"
                ctx = []
                if row.context >= 0:
                    ctx.append(f"ctx {int(row.context)}")
                if row.green_context >= 0:
                    ctx.append(f"green ctx {int(row.green_context)}")
                label = where + (f" ({', '.join(ctx)})" if ctx else "")
                if kind == int(LaneKind.GPU_ANNOTATION):
                    label = f"annotations · {label}"
                out[lane] = _Track(
                    self.gpu_pid[(rank, device)], LANE_TID + lane, self.gpu_process(rank, device), label,
                    sort=(stream if stream >= 0 else 1_000_000) * 4 + kind, gpu=True,
                )
            else:
                pid, tid = int(row.pid), int(row.tid)
                thread = self.thread_names.get(f"{pid}:{tid}", "")
                label = f"thread {tid}" + (f" · {thread}" if thread else "")
                if kind == int(LaneKind.NVTX):
                    cat = int(row.category)
                    domain = strings[cat] if 0 <= cat < len(strings) and strings[cat] else "NVTX"
                    label = f"{domain} · {label}"
                out[lane] = _Track(
                    self.host_pid[(rank, pid)], LANE_TID + lane, self.host_process(rank, pid), label,
                    sort=tid * 4 + (1 if kind == int(LaneKind.NVTX) else 0),
                )
        return out


def _metadata_events(tracks: list[_Track], process_sort: dict[int, int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for t in tracks:
        if t.pid not in seen:
            seen.add(t.pid)
            out.append({"ph": "M", "name": "process_name", "ts": 0, "pid": t.pid, "tid": 0,
                        "args": {"name": t.process}})
            out.append({"ph": "M", "name": "process_sort_index", "ts": 0, "pid": t.pid, "tid": 0,
                        "args": {"sort_index": process_sort.get(t.pid, t.pid)}})
        out.append({"ph": "M", "name": "thread_name", "ts": 0, "pid": t.pid, "tid": t.tid, "args": {"name": t.name}})
        out.append({"ph": "M", "name": "thread_sort_index", "ts": 0, "pid": t.pid, "tid": t.tid,
                    "args": {"sort_index": t.sort}})
    return out


def overlap_rows(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A row per event (0 = the track itself) such that events of one track (`keys`) on one row never
    overlap: Perfetto drops slices that overlap without nesting (PDL kernels on a stream, stacked SM
    estimates), so those go to extra rows. Tracks without overlaps (found vectorized: in start order,
    any overlap shows between neighbours) keep row 0; only tracks with overlaps are split, greedily."""
    rows = np.zeros(len(keys), dtype=np.int64)
    if len(keys) < 2:
        return rows
    order = np.lexsort((-end, start, keys))
    k, s, e = keys[order], start[order], end[order]
    clash = (k[1:] == k[:-1]) & (s[1:] < e[:-1])
    if not clash.any():
        return rows
    import heapq

    for key in np.unique(k[1:][clash]).tolist():
        lo, hi = np.searchsorted(k, key, "left"), np.searchsorted(k, key, "right")
        free: list[tuple[int, int]] = []  # (end of the row's last slice, row)
        n_rows = 0
        out = np.empty(hi - lo, dtype=np.int64)
        for i, (a, b) in enumerate(zip(s[lo:hi].tolist(), e[lo:hi].tolist())):  # tracks with overlaps only
            if free and free[0][0] <= a:
                _, row = heapq.heappop(free)
            else:
                row, n_rows = n_rows, n_rows + 1
            out[i] = row
            heapq.heappush(free, (max(b, a), row))
        rows[order[lo:hi]] = out
    return rows


def _sm_events(
    timeline: Timeline, analysis: Analysis, layout: _Layout, origin: int, notes: list[str], max_rows: int
) -> Iterator[tuple[pd.DataFrame, list[_Track]]]:
    from tracelab.analyses.sm.summary import expand_lanes, sm_lanes

    names = np.array([*timeline.strings, ""], dtype=object)
    budget = max_rows
    for d in analysis.devices:
        if d.sm.source == "none":
            continue
        lanes, source = sm_lanes(timeline, d.rank, d.device)
        if source == "none" or lanes.empty:
            continue
        per_sm = int((lanes["sm_last"] - lanes["sm_first"] + 1).sum())
        if per_sm > MAX_SM_EXPAND:
            notes.append(f"per-SM lanes of rank {d.rank} GPU {d.device} left out: {per_sm:,} kernel x SM rows")
            continue
        rows = expand_lanes(lanes)
        sm = rows["sm"].to_numpy().astype(np.int64)
        measured = rows["measured"].to_numpy().astype(bool)
        tid = sm * 2 + np.where(measured, 0, 1) + 1
        start, end = rows["start"].to_numpy(), rows["end"].to_numpy()
        name_id = rows["name"].to_numpy().astype(np.int64)
        name_id = np.where((name_id >= 0) & (name_id < len(timeline.strings)), name_id, len(timeline.strings))
        kernels = np.ones(len(rows), dtype=np.int64)
        if len(rows) > budget:  # one slice per busy stretch of each SM instead of one per kernel
            tid, start, end, kernels = merge_busy(tid, start, end)
            measured = (tid - 1) % 2 == 0
            name_id = np.full(len(tid), len(timeline.strings), dtype=np.int64)
            notes.append(f"per-SM lanes of rank {d.rank} GPU {d.device}: {per_sm:,} kernel rows merged into "
                         f"{len(tid):,} busy intervals (more than {max_rows:,} rows)")
            if len(tid) > budget:
                notes.append(f"per-SM lanes of rank {d.rank} GPU {d.device} left out: {len(tid):,} busy intervals")
                continue
        budget -= len(tid)
        row = overlap_rows(tid, start, end)
        pid = layout.sm_pid[(d.rank, d.device)]
        process = f"rank {d.rank} · GPU {d.device} · per-SM lanes"
        base = {
            int(t): _Track(pid, int(t), process,
                           f"SM {(int(t) - 1) // 2} ({'measured' if (int(t) - 1) % 2 == 0 else 'estimated'})",
                           sort=int(t), gpu=True)
            for t in np.unique(tid)
        }
        tracks = [base[int(t)].row(int(r)) for t, r in sorted(set(zip(tid.tolist(), row.tolist())))]
        tid = tid + ROW_TID * row
        shown = names[name_id]
        merged = kernels > 1
        if merged.any():
            shown = shown.copy()
            shown[merged] = np.char.add(np.char.add("busy (", kernels[merged].astype(str)), " kernels)").astype(object)
        shown[(kernels == 1) & (shown == "")] = "busy"
        yield pd.DataFrame({"name": shown, "cat": np.where(measured, "sm.measured", "sm.estimated"), "ph": "X",
                            "ts": _us(start, origin), "dur": np.maximum(end - start, 0) / 1e3, "pid": pid, "tid": tid}), tracks


def merge_busy(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals of each key (SM track): (key, start, end, intervals merged) per busy
    stretch, vectorized (sorted by key then start; a stretch ends where the next start passes the
    running maximum end of its key)."""
    order = np.lexsort((start, key))
    k, s, e = key[order].astype(np.int64), start[order].astype(np.int64), end[order].astype(np.int64)
    if k.size == 0:
        return k, s, e, np.zeros(0, dtype=np.int64)
    base = e.min()
    span = int(e.max() - base) + 1
    run_max = np.maximum.accumulate((k - k.min()) * span + (e - base)) - (k - k.min()) * span + base
    new = np.ones(k.size, dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > run_max[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], k.size) - 1
    return k[first], s[first], run_max[last], np.diff(np.append(first, k.size))
