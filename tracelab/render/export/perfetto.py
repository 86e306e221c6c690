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
from pathlib import Path
from typing import IO

import msgspec
import numpy as np
import orjson
import pandas as pd

from tracelab.analyses.results import Analysis
from tracelab.errors import BadInput
from tracelab.model import Flag, Timeline
from tracelab.model.kinds import GPU_ACTIVITY_KINDS, EventKind
from tracelab.render.export.perfetto_tracks import (
    FINDINGS_TID,
    GAPS_TID,
    MAX_SM_ROWS,
    ROW_TID,
    STEPS_TID,
    TRACELAB_PID,
    _Layout,
    _metadata_events,
    _sm_events,
    _Track,
    _us,
    overlap_rows,
)
from tracelab.render.format import run_origin
from tracelab.render.reports.write import atomic_file
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.text_format import fmt_ns

CHUNK_ROWS = 200_000

_KIND_NAMES = {int(k): k.name.lower() for k in EventKind}


class ExportSummary(msgspec.Struct):
    """What was written: events per track (keyed by "process name / track name") and notes."""

    path: Path
    events: int = 0
    flows: int = 0  # launch -> GPU work arrows
    tracks: Counter[str] = msgspec.field(default_factory=Counter)
    notes: list[str] = msgspec.field(default_factory=list)


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
        df = pd.DataFrame({"name": names[name_id], "cat": kind_names[np.clip(kind, 0, len(kind_names) - 1)],
                           "ph": np.where(kind == int(EventKind.NVTX_MARK), "i", "X"), "ts": _us(start, origin),
                           "dur": np.maximum(end - start, 0) / 1e3, "pid": pid[lo:hi], "tid": tid[lo:hi]})
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
    return pd.DataFrame({
        "name": "launch", "cat": "tracelab.launch", "ph": np.repeat(np.array(["s", "f"]), len(pairs)),
        "ts": np.concatenate([_us(start[i], origin), _us(start[j], origin)]), "pid": np.concatenate([pid[i], pid[j]]),
        "tid": np.concatenate([tid[i], tid[j]]), "id": np.concatenate([ids, ids]), "bp": "e",
    })


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
        "name": [f"idle ({g.cause})" for g in gaps], "cat": "tracelab.gap", "ph": "X", "ts": _us(start, origin),
        "dur": (end - start) / 1e3, "pid": [layout.gpu_pid.get((g.rank, g.device), TRACELAB_PID) for g in gaps],
        "tid": GAPS_TID, "args": [{"cause": g.cause, "duration": fmt_ns(g.duration_ns), "evidence": ev}
                                  for g, ev in zip(gaps, gap_evidence(analysis))],
    })
    return df, tracks


def _finding_events(analysis: Analysis, origin: int) -> tuple[pd.DataFrame, list[_Track]]:
    tracks = [_Track(TRACELAB_PID, FINDINGS_TID, "tracelab", "findings", sort=0)]
    rows = []
    for f in analysis.findings:
        at = f.data.get("start_ns") if isinstance(f.data, dict) else None
        rows.append({  # "s": "g": drawn across the whole timeline, like a marker
            "name": f"{f.rule} ({f.severity})", "cat": "tracelab.finding", "ph": "i", "s": "g",
            "ts": float(_us(int(at) if at is not None else origin, origin)), "pid": TRACELAB_PID, "tid": FINDINGS_TID,
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
        frames.append(pd.DataFrame({"name": [f"step {i}" for i in range(len(start))], "cat": "tracelab.step", "ph": "X",
                                    "ts": _us(start, origin), "dur": (np.asarray(end) - np.asarray(start)) / 1e3,
                                    "pid": TRACELAB_PID, "tid": STEPS_TID + rank}))
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), tracks


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
    path: str | Path, timeline: Timeline, analysis: Analysis, *, sm_lanes: bool = True, max_sm_rows: int = MAX_SM_ROWS
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
        flow = _flow_events(timeline, origin, pid, tid)
        summary.events += _write_events(fh, flow, first)
        summary.flows = len(flow) // 2
        del pid, tid, rows
        for code, n in sorted(used_lanes.items()):
            t = lane_tracks[int(code) // 1024]
            summary.tracks[_track_key(t)] += int(n)  # counted on the lane's own track, all rows
            tracks.append(t.row(int(code) % 1024))
        extra_parts = [_gap_events(analysis, layout, origin), _finding_events(analysis, origin),
                       _step_events(steps_by_rank(analysis), origin)]
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
