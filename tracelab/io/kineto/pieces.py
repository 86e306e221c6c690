"""The Kineto parser's accumulator: each piece of `traceEvents` is scanned (C scanner, or msgspec when it
declines) and turned into column arrays, piece by piece in file order (`_Parsed`); `finish.finish` makes
the Timeline."""

from __future__ import annotations

import contextlib
import itertools
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from tracelab.io.kineto.columns import ColumnAssembler
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
from tracelab.io.kineto.rows import (
    PH_FLOW,
    PH_INSTANT,
    PH_X,
    ColumnRows,
    Rows,
    StructRows,
    scan,
    scan_rest,
    scanner_available,
)
from tracelab.io.kineto.stream import candidate_cut
from tracelab.io.validate import INT32_LIMIT, us_to_ns_checked
from tracelab.model import EventKind, SyncKind, Timeline
from tracelab.model.kinds import NO_STREAM
from tracelab.settings import usable_cores

SPLIT_MIN = 1 << 20  # pieces at least this long are scanned in parts, one thread each
MAX_PARTS = 4  # parts of a piece (threads scanning at once): 2 on a 2-core machine


def _boundary_before(piece: memoryview, at: int) -> int:
    """Index of the '}' of the last `},` + '{' (whitespace allowed) in the 64 kB before `at`: a likely
    boundary between two events, found as the stream's own cuts are (the scanner confirms it); -1 if none."""
    lo = max(1, at - (1 << 16))
    window = bytes(piece[lo:at])
    cut = candidate_cut(window, 0, tries=len(window))
    return lo + cut if cut >= 0 else -1


def _part_cuts(piece: memoryview, parts: int) -> list[int]:
    """Boundaries near 1/parts, 2/parts, ... of the piece, ascending and apart; [] when none is found."""
    cuts: list[int] = []
    for i in range(1, parts):
        cut = _boundary_before(piece, len(piece) * i // parts)
        if cut > (cuts[-1] + 2 if cuts else 0):
            cuts.append(cut)
    return cuts


class _Parsed:
    """Accumulates column arrays chunk by chunk. `pipeline=True`: each chunk is scanned on a second
    thread (the C scanner runs without the GIL) while this thread turns the previous chunk into columns;
    chunks are still processed one by one in file order, so the result is the same."""

    def __init__(self, pipeline: bool = False, input_bytes: int = 0) -> None:
        self._pool: ThreadPoolExecutor | None = None  # scans pieces (the parts of a big one at once)
        self._parts = min(MAX_PARTS, usable_cores())
        self._halves = pipeline and self._parts > 1  # big pieces are scanned in parts until cutting fails twice
        self._halves_failed = 0
        self._pending: list[Rows] = []  # the last piece read (or its halves), not yet turned into columns
        if pipeline and scanner_available():
            self._pool = ThreadPoolExecutor(max(self._parts, 1), thread_name_prefix="tracelab-scan")
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.parts: list[dict[str, np.ndarray]] = []
        # pipeline: each piece's columns are copied into the full columns as it is processed (while the
        # scanner reads the next one); otherwise (a decode worker) they are kept as parts
        self.columns = ColumnAssembler() if pipeline else None
        self.input_bytes = input_bytes  # the plain JSON's size, for the first estimate of the row count
        self._piece_bytes = 0
        self.n_total = 0
        self.n_dropped_instant = 0
        self.memory_parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []  # [memory] instants, per piece
        self.n_memory = 0  # [memory] instants seen (the first memory.MAX_EVENTS are kept)
        self.n_flows = 0
        # the "overhead" events (few per trace)
        self.overhead_start: list[int] = []
        self.overhead_end: list[int] = []
        self.overhead_name: list[str] = []
        self.n_not_complete = 0  # events of a known category that are not complete "X" events (B/E, ...)
        self.n_not_complete_gpu = 0  # of them, GPU work (kernels, copies, memsets)
        self.n_bad_ts = 0
        self.n_bad_time = 0  # a timestamp or duration outside the valid range (dropped)
        self.bad_time_example = ""
        self.n_negative_dur = 0
        self.n_lane_from_pid = 0
        self.lane_example = ""
        self.legacy = False
        self.comm_args: dict[str, list] | None = None  # set by the caller before finish (kineto_comm_args)

    def intern(self, values: list) -> np.ndarray:
        ids = self.ids
        new = set(values).difference(ids)
        # once per new distinct string, in first-seen order: ids must not depend on the hash seed, so
        # every process (a Dask worker, a rerun) interns a file the same way
        for v in [v for v in dict.fromkeys(values) if v in new] if new else ():
            ids[v] = len(self.strings)
            self.strings.append(v)
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int32, count=len(values))

    def intern_table(self, ids: np.ndarray, table: list[str]) -> np.ndarray:
        """`intern([table[i] for i in ids])` without the per-event list: the new strings are interned in
        the order of their first occurrence in `ids`, so the string ids are those `intern` gives."""
        if not len(ids):
            return np.zeros(0, dtype=np.int32)
        used = np.flatnonzero(np.bincount(ids, minlength=len(table)))
        known = self.ids
        got = [known.get(table[i], -1) for i in used.tolist()]
        if -1 not in got:  # nothing new (most pieces): no first-occurrence order to find
            remap = np.full(len(table), -1, dtype=np.int32)
            remap[used] = got
            return remap[ids]
        used, first = np.unique(ids, return_index=True)
        by_first = used[np.argsort(first, kind="stable")]
        remap = np.full(len(table), -1, dtype=np.int32)
        remap[by_first] = self.intern([table[i] for i in by_first.tolist()])
        return remap[ids]

    # called by EventChunks for each piece: keeps column arrays, frees the decoded piece
    def add_chunk(self, piece: memoryview) -> int:
        self._piece_bytes = len(piece)
        if self._pool is None:
            rows = self._read(piece, scan(piece))
            self._process(rows)
            return rows.n
        if self._halves and len(piece) >= SPLIT_MIN:
            halves = self._scan_halves(piece)
            if halves is not None:
                self._pending = halves
                return halves[0].n
        job = self._pool.submit(scan, piece)
        try:
            self._flush()  # the previous chunk's columns, while this one is scanned
        finally:
            wait((job,))  # always waited for: the caller reuses the piece's buffer
        rows = self._read(piece, job.result())
        self._pending = [rows]
        return rows.n

    def _scan_halves(self, piece: memoryview) -> list[Rows] | None:
        """The piece scanned as `self._parts` pieces (two on a 2-core machine), cut at element boundaries,
        on as many threads while this one turns the previous piece into columns: the scanner is the slower
        side of the pipeline. The parts' rows are joined back into the piece's (`ColumnRows.joined`), so the
        columns and string ids are the whole piece's. None when no cut is found or a part is declined (a cut
        inside a string leaves a part unterminated, which the strict scanner refuses): the whole piece then
        goes the usual way, and after two such pieces cutting stops for this file."""
        assert self._pool is not None
        cuts = _part_cuts(piece, self._parts)
        got: list[Any] = [None]
        if cuts:
            keep = [piece[c + 1] for c in cuts]
            for c in cuts:
                piece[c + 1] = 0x5D  # the ',' after a part's last element ends it, for the scan
            try:
                # the first part keeps the '['; each later one starts after the ',' that ends the one before
                # it (scan_rest) and ends at the next patched ']' (the last: the piece's own)
                bounds = [0, *(c + 2 for c in cuts), len(piece)]
                with contextlib.ExitStack() as views:
                    parts = [views.enter_context(piece[a:b]) for a, b in itertools.pairwise(bounds)]
                    jobs = [self._pool.submit(scan if k == 0 else scan_rest, v) for k, v in enumerate(parts)]
                    try:
                        self._flush()
                    finally:
                        wait(jobs)
                    # a part the scanner refuses (an error): the whole piece decides
                    got = [None if job.exception() is not None else job.result() for job in jobs]
            finally:
                for c, b in zip(cuts, keep):
                    piece[c + 1] = b
        if all(g is not None for g in got):
            self._halves_failed = 0
            return [ColumnRows.joined(got)]  # one piece again: strings interned as the whole piece's
        self._halves_failed += 1
        self._halves = self._halves_failed < 2
        return None

    @staticmethod
    def _read(piece: memoryview, scanned: Rows | None) -> Rows:
        if scanned is not None:
            return scanned
        from tracelab.io.kineto.structs import EMPTY_ARGS, Event, decode  # msgspec: loaded only when needed

        return StructRows(decode(piece), Event, EMPTY_ARGS)  # declined by the scanner: msgspec decides

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for rows in pending:
            self._process(rows)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._pool = None

    def _keep_memory(self, rows: Rows) -> None:
        """The piece's `[memory]` instants (profile_memory=True): time (µs), thread and the args the scanner
        (or the msgspec twin) read, until memory.MAX_EVENTS are kept; those without a time are dropped."""
        from tracelab.io.kineto.memory import MAX_EVENTS, piece_memory

        idx, vals = rows.memory()
        if not len(idx):
            return
        got = piece_memory(rows.select(idx), vals)
        room = MAX_EVENTS - self.n_memory
        self.n_memory += len(got[0])
        if room > 0:
            self.memory_parts.append((got[0][:room], {k: v[:room] for k, v in got[1].items()}))

    def _keep_overhead(self, rows: Rows, idx: np.ndarray) -> None:
        """Keep the "overhead" X events at `idx` (start, end in ns on the trace clock, name); few per trace."""
        room = MAX_OVERHEAD - len(self.overhead_start)
        if not idx.size or room <= 0:
            return
        sel = rows.select(idx[:room])
        dur = sel.floats("dur")
        start, end, ok = us_to_ns_checked(sel.floats("ts"), np.where(np.isnan(dur) | (dur < 0), 0.0, dur))
        keep = np.flatnonzero(ok)
        self.overhead_start += start[keep].tolist()
        self.overhead_end += end[keep].tolist()
        self.overhead_name += [sel.name(int(i)) for i in keep]

    def _process(self, rows: Rows) -> None:
        n = rows.n
        self.n_total += n
        if not n:
            return
        kind, cats_used = rows.kinds(_KIND_OF, int(EventKind.OTHER))
        if not self.legacy and not _LEGACY_CATS.isdisjoint(cats_used):
            self.legacy = True
        ph = rows.phases()
        ov = kind == _OVERHEAD
        if ov.any():
            self._keep_overhead(rows, np.flatnonzero(ov & (ph == PH_X)))
            kind[ov] = _DROP
        n_instant = int(np.count_nonzero(ph == PH_INSTANT))
        if n_instant:
            self.n_dropped_instant += n_instant
            self._keep_memory(rows)
        self.n_flows += int(np.count_nonzero(ph == PH_FLOW))
        other = (ph != PH_X) & (ph != PH_INSTANT) & (ph != PH_FLOW) & (kind != _DROP)
        if other.any():  # B/E pairs, counters, ...: only complete events are read, so say what is lost
            self.n_not_complete += int(np.count_nonzero(other))
            self.n_not_complete_gpu += int(np.count_nonzero(other & _IS_ON_DEVICE[kind.view(np.uint8)]))
        kind[ph != PH_X] = _DROP
        idx = np.flatnonzero(kind != _DROP)
        if not len(idx):
            return
        sel = rows.select(idx)
        del rows
        kind = kind[idx]
        ts = sel.floats("ts")
        dur = sel.floats("dur")
        pid = sel.ints("pid")
        on_dev = _IS_ON_DEVICE[kind.view(np.uint8)]
        no_ts = np.isnan(ts)
        self.n_bad_ts += int(np.count_nonzero(no_ts))
        negative = dur < 0
        if negative.any():
            self.n_negative_dur += int(np.count_nonzero(negative))
            dur = np.where(negative, 0.0, dur)
        start, end, ok = us_to_ns_checked(ts, dur)
        out_of_range = ~ok & ~no_ts
        if out_of_range.any():
            first = int(np.flatnonzero(out_of_range)[0])
            if not self.n_bad_time:
                self.bad_time_example = f"{sel.name(first)[:60]!r} at ts {ts[first]!r} µs"
            self.n_bad_time += int(np.count_nonzero(out_of_range))
        # drop events without a valid time, and host events on a non-numeric pid (e.g. "Spans")
        good = ok & (on_dev | (pid >= 0))
        if not good.all():
            keep = np.flatnonzero(good)
            sel = sel.select(keep)
            kind, start, end, pid, on_dev = kind[keep], start[keep], end[keep], pid[keep], on_dev[keep]
            if not len(keep):
                return
        tid = sel.ints("tid")
        cols: dict[str, np.ndarray] = {
            "kind": kind,
            "start": start,
            "end": end,
            "name": sel.name_ids(self),
            "category": sel.cat_ids(self),
            "pid": np.where(on_dev, -1, pid),
            "tid": np.where(on_dev, -1, tid),
        }
        self._gpu_fields(sel, kind, pid, tid, cols)
        self._keep(cols)

    def _gpu_fields(
        self, sel: Rows, kind: np.ndarray, pid: np.ndarray, tid: np.ndarray, cols: dict[str, np.ndarray]
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
                if not self.n_lane_from_pid:
                    self.lane_example = sel.name(int(aidx[np.flatnonzero(usable)[0]]))[:60]
                self.n_lane_from_pid += int(np.count_nonzero(usable))
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

    def _keep(self, cols: dict[str, np.ndarray]) -> None:
        if self.columns is None:
            self.parts.append(cols)
            return
        if not self.columns.cap and self.input_bytes and self._piece_bytes:
            # rows the whole file holds at this density (the first piece's rows over the length of the
            # piece read last: pieces are all about a block long), plus a margin: the first buffers are
            # that large (address space until filled), so a big file's columns rarely grow by copying
            self.columns.expected = int(len(cols["kind"]) * (self.input_bytes / self._piece_bytes) * 1.15) + 1024
        self.columns.add(cols)

    # -------------------------------------------------------------------------------------------

    def finish(self, path: Path, top: dict, rank: int | None) -> Timeline:
        """The Timeline of everything read (`finish.finish`)."""
        from tracelab.io.kineto.finish import finish

        return finish(self, path, top, rank)
