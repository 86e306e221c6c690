"""One piece (or one part of a piece) of `traceEvents` turned into columns, without touching the parser's
state: `piece_work(rows)` is a pure function of the scanned rows, so the scan threads run it on the parts
they scanned, and the parser's thread only merges the results in file order (`pieces._Parsed._merge`):
the counters added, the first examples kept, the names and categories interned (the one step that must
follow the file order, so that string ids never depend on the threads), the columns copied into the full
ones."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.io.kineto.columns import dense_part
from tracelab.io.kineto.kinds import (
    _DROP,
    _HAS_ARGS,
    _IS_COPY,
    _IS_GPU,
    _IS_ON_DEVICE,
    _KIND_OF,
    _LEGACY_CATS,
    _OVERHEAD,
    _SYNC_NAMES,
    MAX_OVERHEAD,
)
from tracelab.io.kineto.rows import PH_FLOW, PH_INSTANT, PH_X, Rows
from tracelab.io.validate import INT32_LIMIT, us_to_ns_checked
from tracelab.model import EventKind, SyncKind
from tracelab.model.kinds import NO_STREAM


class PieceWork(msgspec.Struct):
    """What one piece's rows give: counts, first examples, the `[memory]` instants and CUPTI overhead
    events found, and the columns of the complete events kept (`cols`, all but name and category, which
    `sel` still has to intern: its rows are those of `cols`)."""

    n_total: int = 0
    n_dropped_instant: int = 0
    n_flows: int = 0
    n_not_complete: int = 0
    n_not_complete_gpu: int = 0
    n_bad_ts: int = 0
    n_bad_time: int = 0
    bad_time_example: str = ""
    n_negative_dur: int = 0
    n_lane_from_pid: int = 0
    lane_example: str = ""
    legacy: bool = False
    n_memory: int = 0
    memory: tuple[np.ndarray, dict[str, np.ndarray]] | None = None  # all of the piece's (not yet bounded)
    # overhead events: how many candidates ("X" events of category "overhead", the first MAX_OVERHEAD),
    # and of those with a valid time: their position among the candidates, start, end (ns) and name
    overhead_candidates: int = 0
    overhead_at: list[int] = msgspec.field(default_factory=list)
    overhead_start: list[int] = msgspec.field(default_factory=list)
    overhead_end: list[int] = msgspec.field(default_factory=list)
    overhead_name: list[str] = msgspec.field(default_factory=list)
    cols: dict[str, np.ndarray] | None = None
    sel: Rows | None = None


def piece_work(rows: Rows, dense: bool = False) -> PieceWork:
    """The columns and counts of one piece's rows (`PieceWork`); thread-safe (reads only `rows`). `dense`:
    the columns as `dense_part` gives them (every column of the rows: a copy each to merge)."""
    out = PieceWork(n_total=rows.n)
    if not rows.n:
        return out
    kind, cats_used = rows.kinds(_KIND_OF, int(EventKind.OTHER))
    out.legacy = not _LEGACY_CATS.isdisjoint(cats_used)
    ph = rows.phases()
    ov = kind == _OVERHEAD
    if ov.any():
        _overhead(out, rows, np.flatnonzero(ov & (ph == PH_X)))
        kind[ov] = _DROP
    n_instant = int(np.count_nonzero(ph == PH_INSTANT))
    if n_instant:
        out.n_dropped_instant = n_instant
        _memory(out, rows)
    out.n_flows = int(np.count_nonzero(ph == PH_FLOW))
    other = (ph != PH_X) & (ph != PH_INSTANT) & (ph != PH_FLOW) & (kind != _DROP)
    if other.any():  # B/E pairs, counters, ...: only complete events are read, so say what is lost
        out.n_not_complete = int(np.count_nonzero(other))
        out.n_not_complete_gpu = int(np.count_nonzero(other & _IS_ON_DEVICE[kind.view(np.uint8)]))
    kind[ph != PH_X] = _DROP
    idx = np.flatnonzero(kind != _DROP)
    if len(idx):
        _complete(out, rows.select(idx), kind[idx])
        if dense and out.cols is not None:
            out.cols = dense_part(out.cols)
    return out


def _complete(out: PieceWork, sel: Rows, kind: np.ndarray) -> None:
    """The columns of the complete events `sel` (of kinds `kind`) into `out`."""
    ts = sel.floats("ts")
    dur = sel.floats("dur")
    pid = sel.ints("pid")
    on_dev = _IS_ON_DEVICE[kind.view(np.uint8)]
    no_ts = np.isnan(ts)
    out.n_bad_ts = int(np.count_nonzero(no_ts))
    negative = dur < 0
    if negative.any():
        out.n_negative_dur = int(np.count_nonzero(negative))
        dur = np.where(negative, 0.0, dur)
    start, end, ok = us_to_ns_checked(ts, dur)
    out_of_range = ~ok & ~no_ts
    if out_of_range.any():
        first = int(np.flatnonzero(out_of_range)[0])
        out.bad_time_example = f"{sel.name(first)[:60]!r} at ts {ts[first]!r} µs"
        out.n_bad_time = int(np.count_nonzero(out_of_range))
    # drop events without a valid time, and host events on a non-numeric pid (e.g. "Spans")
    good = ok & (on_dev | (pid >= 0))
    if not good.all():
        keep = np.flatnonzero(good)
        if not len(keep):
            return
        sel = sel.select(keep)
        kind, start, end, pid, on_dev = kind[keep], start[keep], end[keep], pid[keep], on_dev[keep]
    tid = sel.ints("tid")
    cols: dict[str, np.ndarray] = {
        "kind": kind,
        "start": start,
        "end": end,
        "pid": np.where(on_dev, -1, pid),
        "tid": np.where(on_dev, -1, tid),
    }
    _gpu_fields(out, sel, kind, pid, tid, cols)
    sel.gather_text()  # the names and categories read here: the merge only interns them
    out.cols, out.sel = cols, sel


def _gpu_fields(
    out: PieceWork, sel: Rows, kind: np.ndarray, pid: np.ndarray, tid: np.ndarray, cols: dict[str, np.ndarray]
) -> None:
    """The fields of the rows that carry GPU / correlation args (device, stream, context, correlation,
    bytes, kernel launch shape, sync kind) into `cols`, as `rows` + `a_*` / `k_*` columns."""
    aidx = np.flatnonzero(_HAS_ARGS[kind.view(np.uint8)])
    if not len(aidx):
        return
    cols["rows"] = aidx.astype(np.int32)  # the rows that carry GPU / correlation fields
    args = sel.args(aidx)
    k = kind[aidx]
    dev = args.ints("device")
    stream = args.ints("stream")
    stream[stream == NO_STREAM] = -1  # CUPTI's "not on a stream" as uint32 (context syncs): none
    ann = k == int(EventKind.GPU_ANNOTATION)
    if ann.any():  # gpu_user_annotation: the GPU sits in pid, the stream in tid
        dev = np.where(ann & (dev < 0), pid[aidx], dev)
        stream = np.where(ann & (stream < 0), tid[aidx], stream)
    gpu = _IS_GPU[k.view(np.uint8)]
    legacy_stream = gpu & (stream < 0)
    if legacy_stream.any():  # 2021 schema: tid "stream 7"
        stream = np.where(legacy_stream, args.legacy_streams(), stream)
    missing = gpu & ((dev < 0) | (stream < 0))
    if missing.any():  # no args.device / args.stream: the lane Kineto's pid / tid name
        lane_pid, lane_tid = pid[aidx], tid[aidx]
        usable = missing & (lane_pid >= 0) & (lane_pid < INT32_LIMIT) & (lane_tid >= 0)
        if usable.any():
            out.lane_example = sel.name(int(aidx[np.flatnonzero(usable)[0]]))[:60]
            out.n_lane_from_pid = int(np.count_nonzero(usable))
            dev = np.where(usable & (dev < 0), lane_pid, dev)
            stream = np.where(usable & (stream < 0), lane_tid, stream)
    dev_side = _IS_ON_DEVICE[k.view(np.uint8)]
    cols["a_device"] = np.where(dev_side, dev, -1)
    cols["a_stream"] = np.where(dev_side, stream, -1)
    cols["a_context"] = np.where(dev_side, args.ints("context"), -1)
    cols["a_correlation"] = args.ints("correlation")
    b = np.full(len(aidx), -1, dtype=np.int64)
    copy = np.flatnonzero(_IS_COPY[k.view(np.uint8)])
    if len(copy):
        b[copy] = args.ints("bytes", idx=copy)
    cols["a_bytes"] = b
    kern = np.flatnonzero(k == int(EventKind.KERNEL))
    cols["k_rows"] = aidx[kern].astype(np.int32)
    cols["k_registers"] = args.ints("registers", "int32", idx=kern)
    cols["k_shared"] = args.ints("shared", idx=kern)
    cols["k_grid"] = args.triples("grid", kern)
    cols["k_block"] = args.triples("block", kern)
    syn = np.flatnonzero(k == int(EventKind.SYNC))
    if len(syn):
        sync = np.zeros(len(aidx), dtype=np.int8)
        sync[syn] = [int(_SYNC_NAMES.get(str(x).lower(), SyncKind.NONE)) for x in args.sync_names(syn)]
        cols["a_sync"] = sync


def _memory(out: PieceWork, rows: Rows) -> None:
    """The piece's `[memory]` instants (profile_memory=True): time (µs), thread and the args the scanner
    (or the msgspec twin) read; those without a time are dropped (the merge bounds how many are kept)."""
    from tracelab.io.kineto.memory import piece_memory

    idx, vals = rows.memory()
    if len(idx):
        out.memory = piece_memory(rows.select(idx), vals)
        out.n_memory = len(out.memory[0])


def _overhead(out: PieceWork, rows: Rows, idx: np.ndarray) -> None:
    """The "overhead" X events at `idx` (the first MAX_OVERHEAD): start, end in ns on the trace clock and
    name of those with a valid time, with their position among the candidates; few per trace."""
    idx = idx[:MAX_OVERHEAD]
    out.overhead_candidates = len(idx)
    if not len(idx):
        return
    sel = rows.select(idx)
    dur = sel.floats("dur")
    start, end, ok = us_to_ns_checked(sel.floats("ts"), np.where(np.isnan(dur) | (dur < 0), 0.0, dur))
    keep = np.flatnonzero(ok)
    out.overhead_at = keep.tolist()
    out.overhead_start = start[keep].tolist()
    out.overhead_end = end[keep].tolist()
    out.overhead_name = [sel.name(int(i)) for i in keep]
