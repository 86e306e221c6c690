"""`tracelab export RUN -o FILE.perfetto.json`: the timeline as Chrome trace-event JSON (what Perfetto
and chrome://tracing open), with tracelab's own knowledge as extra tracks.

Layout (pid / tid are tracelab's own numbers; the real ones are in the names):
- pid 1 "tracelab": a "findings" track of instant events (one per finding, at the start of its first or
  worst occurrence, message and figures in args) and one "steps (rank R)" track per rank with steps;
- per GPU (rank, device): one process with a track per stream (kernels, memcpys, memsets, syncs), per
  GPU annotation lane, and "idle gaps (tracelab)": one slice per gap named by its cause, evidence in args;
- per GPU with per-SM data: a process "… per-SM lanes", one track per SM and source, named
  "SM 12 (measured)" or "SM 12 (estimated)" (runs with probes mix both: uninstrumented kernels are
  estimated);
- per host process: a track per thread (CPU ops, CUDA API calls) and per NVTX domain and thread.

Times are microseconds from the run start (the one time origin of every tracelab view:
`tracelab.render.format.run_origin`; `otherData.origin_ns` holds it on the trace clock), so they
keep nanosecond precision as JSON doubles. Events are written in chunks through pandas' C JSON
encoder (no Python loop per trace event); the file is written to a temporary name and renamed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd

from tracelab.analyses.results import Analysis
from tracelab.errors import BadInput
from tracelab.model import Flag, LaneKind, Timeline
from tracelab.model.kinds import GPU_ACTIVITY_KINDS, EventKind
from tracelab.render.format import run_origin
from tracelab.render.gap_evidence import gap_evidence
from tracelab.render.reports import atomic_file
from tracelab.text_format import fmt_ns

TRACELAB_PID = 1
FINDINGS_TID = 1
STEPS_TID = 100  # + rank
GAPS_TID = 1  # inside a GPU process
LANE_TID = 10  # + lane id
CHUNK_ROWS = 200_000
MAX_SM_ROWS = 300_000  # more per-SM rows than this are merged into busy intervals per SM (noted)
MAX_SM_EXPAND = 20_000_000  # kernel x SM rows beyond this are not even expanded

_KIND_NAMES = {int(k): k.name.lower() for k in EventKind}


@dataclass
class ExportSummary:
    """What was written: events per track (keyed by "process name / track name") and notes."""

    path: Path
    events: int = 0
    flows: int = 0  # launch -> GPU work arrows
    tracks: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Track:
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


# ---- processes and tracks ---------------------------------------------------------------------------


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


# ---- overlapping slices -------------------------------------------------------------------------------

ROW_TID = 1_000_000  # tid offset of the extra rows of a track whose slices overlap


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


# ---- event chunks -----------------------------------------------------------------------------------


def _frame_lines(df: pd.DataFrame) -> str:
    """A DataFrame of events as comma-separated JSON objects (pandas' C encoder, without the brackets)."""
    if df.empty:
        return ""
    text = df.to_json(orient="records", double_precision=6, force_ascii=False)
    return text[1:-1]


def _event_places(timeline: Timeline, tracks: dict[int, _Track]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pid, tid and row (0 = the lane's own track) of every timeline event, vectorized over events."""
    ev = timeline.events
    n = len(ev)
    size = max(tracks) + 1 if tracks else 1
    pid_of = np.zeros(size, dtype=np.int64)
    tid_of = np.zeros(size, dtype=np.int64)
    gpu_lane = np.zeros(size, dtype=bool)
    for lane, t in tracks.items():  # one per lane
        pid_of[lane], tid_of[lane], gpu_lane[lane] = t.pid, t.tid, t.gpu
    lane = ev["lane"].to_numpy().astype(np.int64)
    on_gpu = gpu_lane[lane]
    rows = np.zeros(n, dtype=np.int64)
    rows[on_gpu] = overlap_rows(lane[on_gpu], ev["start"].to_numpy()[on_gpu], ev["end"].to_numpy()[on_gpu])
    return pid_of[lane], tid_of[lane] + ROW_TID * rows, rows


def _timeline_chunks(
    timeline: Timeline, origin: int, pid: np.ndarray, tid: np.ndarray, rows: np.ndarray
) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Every timeline event as trace events, CHUNK_ROWS at a time (and lane * 1024 + row of each)."""
    ev = timeline.events
    names = np.array([*timeline.strings, ""], dtype=object)
    kind_names = np.array([_KIND_NAMES.get(k, "other") for k in range(max(_KIND_NAMES) + 1)], dtype=object)
    for lo in range(0, len(ev), CHUNK_ROWS):
        hi = lo + CHUNK_ROWS
        part = ev.iloc[lo:hi]
        kind = part["kind"].to_numpy().astype(np.int64)
        name_id = part["name"].to_numpy().astype(np.int64)
        name_id = np.where((name_id >= 0) & (name_id < len(timeline.strings)), name_id, len(timeline.strings))
        start, end = part["start"].to_numpy(), part["end"].to_numpy()
        df = pd.DataFrame({
            "name": names[name_id],
            "cat": kind_names[np.clip(kind, 0, len(kind_names) - 1)],
            "ph": np.where(kind == int(EventKind.NVTX_MARK), "i", "X"),
            "ts": _us(start, origin),
            "dur": np.maximum(end - start, 0) / 1e3,
            "pid": pid[lo:hi],
            "tid": tid[lo:hi],
        })
        yield df, part["lane"].to_numpy().astype(np.int64) * 1024 + rows[lo:hi]


def _flow_events(timeline: Timeline, origin: int, pid: np.ndarray, tid: np.ndarray) -> pd.DataFrame:
    """Launch -> GPU work arrows: a flow from each host launch call (Flag.LAUNCH) to the first GPU
    operation with its (rank, correlation id); Perfetto draws them as arrows."""
    ev = timeline.events
    if ev.empty:
        return pd.DataFrame()
    corr = ev["correlation"].to_numpy()
    kind = ev["kind"].to_numpy()
    launch = ((ev["flags"].to_numpy() & Flag.LAUNCH) != 0) & (corr >= 0)
    work = np.isin(kind, [int(k) for k in GPU_ACTIVITY_KINDS]) & (corr >= 0)
    if not launch.any() or not work.any():
        return pd.DataFrame()
    rank = ev["rank"].to_numpy().astype(np.int64)
    src = pd.DataFrame({"rank": rank[launch], "corr": corr[launch], "i": np.flatnonzero(launch)})
    dst = pd.DataFrame({"rank": rank[work], "corr": corr[work], "j": np.flatnonzero(work)})
    pairs = src.drop_duplicates(["rank", "corr"]).merge(dst.drop_duplicates(["rank", "corr"]), on=["rank", "corr"])
    if pairs.empty:
        return pd.DataFrame()
    i, j = pairs["i"].to_numpy(), pairs["j"].to_numpy()
    start = ev["start"].to_numpy()
    ids = np.arange(1, len(pairs) + 1)
    common = {"name": "launch", "cat": "tracelab.launch"}
    out = pd.DataFrame({
        **common, "ph": np.repeat(np.array(["s", "f"]), len(pairs)),
        "ts": np.concatenate([_us(start[i], origin), _us(start[j], origin)]),
        "pid": np.concatenate([pid[i], pid[j]]),
        "tid": np.concatenate([tid[i], tid[j]]),
        "id": np.concatenate([ids, ids]),
        "bp": "e",
    })
    return out


def _gap_events(analysis: Analysis, layout: _Layout, origin: int) -> tuple[pd.DataFrame, list[_Track]]:
    gaps = analysis.gaps
    tracks = [
        _Track(layout.gpu_pid[k], GAPS_TID, layout.gpu_process(*k), "idle gaps (tracelab)", sort=-1)
        for k in sorted({(g.rank, g.device) for g in gaps})
        if k in layout.gpu_pid
    ]
    if not gaps:
        return pd.DataFrame(), tracks
    start = np.fromiter((g.start_ns for g in gaps), dtype=np.int64, count=len(gaps))
    end = np.fromiter((g.end_ns for g in gaps), dtype=np.int64, count=len(gaps))
    df = pd.DataFrame({
        "name": [f"idle ({g.cause})" for g in gaps],
        "cat": "tracelab.gap",
        "ph": "X",
        "ts": _us(start, origin),
        "dur": (end - start) / 1e3,
        "pid": [layout.gpu_pid.get((g.rank, g.device), TRACELAB_PID) for g in gaps],
        "tid": GAPS_TID,
        "args": [
            {"cause": g.cause, "duration": fmt_ns(g.duration_ns), "evidence": ev}
            for g, ev in zip(gaps, gap_evidence(analysis))
        ],
    })
    return df, tracks


def _finding_events(analysis: Analysis, origin: int) -> tuple[pd.DataFrame, list[_Track]]:
    tracks = [_Track(TRACELAB_PID, FINDINGS_TID, "tracelab", "findings", sort=0)]
    rows = []
    for f in analysis.findings:
        at = f.data.get("start_ns") if isinstance(f.data, dict) else None
        rows.append({
            "name": f"{f.rule} ({f.severity})",
            "cat": "tracelab.finding",
            "ph": "i",
            "s": "g",  # drawn across the whole timeline, like a marker
            "ts": float(_us(int(at) if at is not None else origin, origin)),
            "pid": TRACELAB_PID,
            "tid": FINDINGS_TID,
            "args": {"rule": f.rule, "severity": f.severity, "count": int(f.count),
                     "wasted": fmt_ns(f.wasted_ns), "message": f.message, "where": f.where},
        })
    return pd.DataFrame(rows), tracks


def _step_events(steps: dict[int, tuple[np.ndarray, np.ndarray]], origin: int) -> tuple[pd.DataFrame, list[_Track]]:
    tracks, frames = [], []
    for rank, (start, end) in sorted(steps.items()):
        if not len(start):
            continue
        tracks.append(_Track(TRACELAB_PID, STEPS_TID + rank, "tracelab", f"steps (rank {rank})", sort=1 + rank))
        frames.append(pd.DataFrame({
            "name": [f"step {i}" for i in range(len(start))],
            "cat": "tracelab.step",
            "ph": "X",
            "ts": _us(start, origin),
            "dur": (np.asarray(end) - np.asarray(start)) / 1e3,
            "pid": TRACELAB_PID,
            "tid": STEPS_TID + rank,
        }))
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), tracks


def _sm_events(
    timeline: Timeline, analysis: Analysis, layout: _Layout, origin: int, notes: list[str], max_rows: int
) -> Iterator[tuple[pd.DataFrame, list[_Track]]]:
    from tracelab.analyses.sm import expand_lanes, sm_lanes

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
        df = pd.DataFrame({
            "name": shown,
            "cat": np.where(measured, "sm.measured", "sm.estimated"),
            "ph": "X",
            "ts": _us(start, origin),
            "dur": np.maximum(end - start, 0) / 1e3,
            "pid": pid,
            "tid": tid,
        })
        yield df, tracks


def merge_busy(
    key: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def steps_by_rank(analysis: Analysis) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(start, end) of the analysis' steps, per rank, in time order."""
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for rank in sorted({s.rank for s in analysis.steps}):
        mine = sorted((s.start_ns, s.end_ns) for s in analysis.steps if s.rank == rank)
        out[rank] = (np.array([m[0] for m in mine], dtype=np.int64), np.array([m[1] for m in mine], dtype=np.int64))
    return out


# ---- writing -----------------------------------------------------------------------------------------


def _track_key(t: _Track) -> str:
    return f"{t.process} / {t.name}"


def _write_events(fh: IO[str], df: pd.DataFrame, first: list[bool]) -> int:
    text = _frame_lines(df)
    if not text:
        return 0
    if not first[0]:
        fh.write(",\n")
    fh.write(text)
    first[0] = False
    return len(df)


def write_perfetto(
    path: str | Path,
    timeline: Timeline,
    analysis: Analysis,
    *,
    sm_lanes: bool = True,
    flows: bool = True,
    max_sm_rows: int = MAX_SM_ROWS,
) -> ExportSummary:
    """Write `timeline` and `analysis` (gaps, findings, steps, per-SM lanes) as Chrome trace-event
    JSON to `path`, atomically. Returns what went on which track."""
    path = Path(path)
    if not path.parent.is_dir():
        raise BadInput(f"directory {path.parent} does not exist", path)
    summary = ExportSummary(path=path)
    origin = run_origin(analysis)
    layout = _Layout(timeline)
    lane_tracks = layout.lane_tracks()
    with atomic_file(path, "w", encoding="utf-8") as fh:
        head = {"displayTimeUnit": "ns", "otherData": {
            "generator": "tracelab", "source": analysis.trace.source, "format": analysis.trace.format,
            "origin_ns": origin, "time_unit": "µs from the run start (origin_ns on the trace clock)",
        }}
        fh.write(orjson.dumps(head).decode()[:-1] + ',"traceEvents":[\n')
        first = [True]
        tracks: list[_Track] = []
        used_lanes: Counter[int] = Counter()
        pid, tid, rows = _event_places(timeline, lane_tracks)
        for df, lane in _timeline_chunks(timeline, origin, pid, tid, rows):
            summary.events += _write_events(fh, df, first)
            used_lanes.update(dict(zip(*np.unique(lane, return_counts=True))))
        if flows:
            flow = _flow_events(timeline, origin, pid, tid)
            summary.events += _write_events(fh, flow, first)
            summary.flows = len(flow) // 2
        del pid, tid, rows
        for code, n in sorted(used_lanes.items()):
            t = lane_tracks[int(code) // 1024]
            summary.tracks[_track_key(t)] += int(n)  # counted on the lane's own track, all rows
            tracks.append(t.row(int(code) % 1024))
        extra_parts = [
            _gap_events(analysis, layout, origin),
            _finding_events(analysis, origin),
            _step_events(steps_by_rank(analysis), origin),
        ]
        if sm_lanes:
            extra_parts += list(_sm_events(timeline, analysis, layout, origin, summary.notes, max_sm_rows))
        for df, part_tracks in extra_parts:
            summary.events += _write_events(fh, df, first)
            tracks += part_tracks
            by_id = {(t.pid, t.tid): t for t in part_tracks if t.tid < ROW_TID}
            if len(df):
                keys, counts = np.unique(
                    df["pid"].to_numpy().astype(np.int64) * ROW_TID + df["tid"].to_numpy() % ROW_TID,
                    return_counts=True,
                )
                for key, c in zip(keys.tolist(), counts.tolist()):
                    t = by_id.get(divmod(key, ROW_TID))
                    if t is not None:  # extra rows count on their track
                        summary.tracks[_track_key(t)] += int(c)
        process_sort = {TRACELAB_PID: 0}
        for i, (k, pid) in enumerate(sorted(layout.gpu_pid.items())):
            process_sort[pid] = 10 + 2 * i
            process_sort[layout.sm_pid[k]] = 11 + 2 * i
        meta = pd.DataFrame(_metadata_events(tracks, process_sort))
        _write_events(fh, meta, first)
        if summary.notes:
            fh.write('\n],"tracelabNotes":' + orjson.dumps(summary.notes).decode() + "}\n")
        else:
            fh.write("\n]}\n")
    return summary
