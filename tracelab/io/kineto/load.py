"""Kineto (PyTorch profiler) Chrome-trace JSON -> Timeline.

Both schemas are read: the current one (cats `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`,
`cuda_driver`, `cuda_sync`, `cpu_op`, `user_annotation`, `gpu_user_annotation`, `deviceProperties`,
`distributedInfo`, fractional-µs timestamps) and the 2021 one (`Kernel`, `Memcpy`, `Memset`, `Runtime`,
`Operator`, tid "stream 7", `computeProperties`, lowercase 'external id'); AMD/HIP traces use the same
cats with hip* API names.

How: the traceEvents array is streamed in chunks (`kineto_stream`). Each chunk goes through the C
scanner (`_kineto_scan.c`, built by setup.py when a compiler is there), which writes the fields we use
straight into column buffers, with the chunk's distinct strings in a small table; a chunk it declines
(anything outside strictly valid JSON of the expected types) is decoded by msgspec into small typed
structs instead, the reference path (`kineto_rows` gives both one interface). Names are interned per
distinct value; device limits and copy kinds come from `kineto_devices`. Times become integer ns on the trace's own clock: round(ts_µs * 1000).

What is kept: complete ("X") events. Flows (ac2g), instants ([memory]), counters and metadata rows are
counted in meta.stats but not kept. python_function and unknown cats become OTHER host events;
user_annotation -> NVTX_RANGE; gpu_user_annotation -> GPU_ANNOTATION on its stream.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tracelab.errors import TraceFormatError
from tracelab.io.kineto.blocks import is_compressed
from tracelab.io.kineto.columns import ColumnAssembler, assemble
from tracelab.io.kineto.devices import copy_info, devices_from_properties, is_mtia, listed_names
from tracelab.io.kineto.rows import (
    PH_FLOW,
    PH_INSTANT,
    PH_X,
    Rows,
    StructRows,
    scan,
    scan_rest,
    scanner_available,
)
from tracelab.io.kineto.stream import BLOCK_SIZE, ChunkError, EventChunks, candidate_cut
from tracelab.io.validate import (
    INT32_LIMIT,
    check_devices,
    check_rank,
    json_safe,
    launch_link_notes,
    neutralize_names,
    us_to_ns_checked,
    validate_columns,
)
from tracelab.model import (
    EventKind,
    Flag,
    RunMeta,
    SyncKind,
    Timeline,
    build_timeline,
)
from tracelab.model.api_names import classify_api_ids, comm_mask
from tracelab.model.grouping import member, sorted_unique
from tracelab.model.kinds import NO_STREAM

# Kineto category -> event kind (both schemas). Anything else with ph "X" on a host pid is OTHER.
_CAT_KIND: dict[str, int] = {
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "cuda_runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "cpu_op": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "user_annotation": EventKind.NVTX_RANGE,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
}
_LEGACY_CATS = {"Kernel", "Memcpy", "Memset", "Runtime", "Operator"}
_SKIP_CATS = {"Trace"}  # the profiler's own span
_DROP = -1
_KIND_OF: dict[str, int] = {
    **{k: int(v) for k, v in _CAT_KIND.items()},
    **{k: _DROP for k in _SKIP_CATS},
    "": _DROP,
}
_GPU = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_ON_DEVICE = (*_GPU, int(EventKind.SYNC), int(EventKind.GPU_ANNOTATION))
_WITH_CORRELATION = (*_GPU, int(EventKind.SYNC), int(EventKind.RUNTIME), int(EventKind.DRIVER))


def _kind_lut(kinds: tuple[int, ...]) -> np.ndarray:
    """A table over the 256 int8 kind codes (read through `.view(np.uint8)`, so _DROP = -1 is 255):
    np.isin(kind, kinds) as one lookup per event."""
    lut = np.zeros(256, dtype=bool)
    lut[np.array(kinds, dtype=np.int64) & 0xFF] = True
    return lut


_IS_ON_DEVICE = _kind_lut(_ON_DEVICE)
_IS_GPU = _kind_lut(_GPU)
_HAS_ARGS = _kind_lut((*_WITH_CORRELATION, *_ON_DEVICE))
_IS_COPY = _kind_lut((int(EventKind.MEMCPY), int(EventKind.MEMSET)))
_IS_API = _kind_lut((int(EventKind.RUNTIME), int(EventKind.DRIVER)))

_SYNC_NAMES = {
    "stream sync": SyncKind.STREAM,
    "event sync": SyncKind.EVENT,
    "context sync": SyncKind.DEVICE,
    "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}


def load_kineto(
    path: str | Path, rank: int | None = None, *, progress: Callable[[int, int], None] | None = None
) -> Timeline:
    """Parse a Kineto trace (`.json` / `.json.gz`). `rank` overrides the rank of distributedInfo;
    `progress(done_bytes, total_bytes)` is called as the file is read.

    Raises TraceFormatError (one line naming the file) for anything that is not a usable Kineto trace.
    The file is opened read-only."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError("no such file", path)
    with open(path, "rb") as f:
        plain = not is_compressed(f.read(4))  # the inflated size of gzip / zstd is unknown
    parsed = _Parsed(pipeline=True, input_bytes=path.stat().st_size if plain else 0)
    chunks = EventChunks(path, parsed.add_chunk, block_size=BLOCK_SIZE, progress=progress)
    try:
        for _ in chunks:
            pass
        meta_obj = _load_metadata(chunks.metadata_json)
        parsed.comm_args = chunks.comm_args
        return parsed.finish(path, meta_obj, rank)
    except ChunkError as exc:
        raise TraceFormatError(_explain(path, str(exc)), path) from None
    finally:
        parsed.close()


def relabel_rank(tl: Timeline, rank: int) -> Timeline:
    """The same timeline with every event, lane and device moved to `rank`."""
    cols = dict(tl.cols, rank=np.full(tl.n_events, rank, dtype=np.int32))
    lanes = dict(tl.lane_cols, rank=np.full(tl.n_lanes, rank, dtype=np.int32))
    devices = tuple(replace(d, rank=rank) for d in tl.devices)
    contexts = tuple(replace(c, rank=rank) for c in tl.contexts)
    return replace(
        tl, cols=cols, lane_cols=lanes, devices=devices, contexts=contexts, meta=replace(tl.meta, ranks=(rank,))
    )


# ---------------------------------------------------------------------------------------------------


def _explain(path: Path, reason: str) -> str:
    if reason.startswith("no traceEvents") and _looks_like_execution_trace(path):
        return (
            "is a PyTorch execution trace (nodes/schema), not a Kineto trace: record it with torch.profiler"
        )
    return reason


def _looks_like_execution_trace(path: Path) -> bool:
    try:
        import gzip

        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            start = f.read(4096)
        return b'"nodes"' in start and b'"schema"' in start
    except (OSError, EOFError, zlib.error):
        return False


def _load_metadata(raw: bytes | None) -> dict:
    if raw is None:
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "UTF-8" in str(exc):
            raise ChunkError("invalid UTF-8 outside traceEvents") from None
        raise ChunkError(f"corrupt JSON outside traceEvents ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise ChunkError("JSON outside traceEvents is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ChunkError("top-level JSON value is not an object")
    return obj


SPLIT_MIN = 1 << 20  # pieces at least this long are scanned in two halves on two threads


def _middle_boundary(piece: memoryview) -> int:
    """Index of the '}' of the last `},` + '{' (whitespace allowed) in the 64 kB before the middle of the
    piece: a likely boundary between two events, found as the stream's own cuts are (the scanner
    confirms it); -1 if none."""
    mid = len(piece) // 2
    lo = max(1, mid - (1 << 16))
    window = bytes(piece[lo:mid])
    cut = candidate_cut(window, 0, tries=len(window))
    return lo + cut if cut >= 0 else -1


class _Parsed:
    """Accumulates column arrays chunk by chunk. `pipeline=True`: each chunk is scanned on a second
    thread (the C scanner runs without the GIL) while this thread turns the previous chunk into columns;
    chunks are still processed one by one in file order, so the result is the same."""

    def __init__(self, pipeline: bool = False, input_bytes: int = 0) -> None:
        self._pool: ThreadPoolExecutor | None = None  # scans pieces (two halves of a big one at once)
        two = (os.cpu_count() or 1) > 1
        self._halves = pipeline and two  # big pieces are scanned in two halves until halving fails twice
        self._halves_failed = 0
        self._pending: list[Rows] = []  # the last piece read (or its halves), not yet turned into columns
        if pipeline and scanner_available():
            self._pool = ThreadPoolExecutor(2 if two else 1, thread_name_prefix="tracelab-scan")
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
        self.n_flows = 0
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
        """The piece scanned as two pieces, cut at an element boundary near its middle, on two threads
        while this one turns the previous piece into columns: the scanner is the slower side of the
        pipeline on 2 cores. The halves' rows are joined back into the piece's (`ColumnRows.followed_by`),
        so the columns and string ids are the whole piece's. None when the cut or a half is declined (a
        cut inside a string leaves the first half unterminated, which the strict scanner refuses): the
        whole piece then goes the usual way, and after two such pieces halving stops for this file."""
        assert self._pool is not None
        cut = _middle_boundary(piece)
        got: list[Any] = [None, None]
        if cut > 0:
            keep = piece[cut + 1]
            piece[cut + 1] = 0x5D  # the ',' after the first half's last element ends it, for the scan
            try:
                # the second half: the elements after that ',' up to the piece's closing ']' (scan_rest)
                with piece[: cut + 2] as first, piece[cut + 2 :] as second:
                    jobs = (self._pool.submit(scan, first), self._pool.submit(scan_rest, second))
                    try:
                        self._flush()
                    finally:
                        wait(jobs)
                    # a half the scanner refuses (an error): the whole piece decides
                    got = [None if job.exception() is not None else job.result() for job in jobs]
            finally:
                piece[cut + 1] = keep
        if got[0] is not None and got[1] is not None:
            self._halves_failed = 0
            return [got[0].followed_by(got[1])]  # one piece again: strings interned as the whole piece's
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

    def _process(self, rows: Rows) -> None:
        n = rows.n
        self.n_total += n
        if not n:
            return
        kind, cats_used = rows.kinds(_KIND_OF, int(EventKind.OTHER))
        if not self.legacy and not _LEGACY_CATS.isdisjoint(cats_used):
            self.legacy = True
        ph = rows.phases()
        self.n_dropped_instant += int(np.count_nonzero(ph == PH_INSTANT))
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
        aidx = np.flatnonzero(_HAS_ARGS[kind.view(np.uint8)])
        if len(aidx):
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
        self._keep(cols)

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
        self._flush()
        self.close()
        if "traceEvents" not in top and top:
            raise TraceFormatError("no traceEvents array (not a Kineto / Chrome trace)", path)
        if self.columns is not None:
            cols = self.columns.result()
        else:
            cols = assemble(self.parts)
        self.parts = []
        notes: list[str] = []
        strings, renamed = neutralize_names(self.strings)
        if renamed:
            notes.append(
                f"{renamed} names held Unicode direction controls or were over 1 MiB: shown with them "
                "replaced / cut"
            )
        kind = cols["kind"]
        placeless = _IS_GPU[kind.view(np.uint8)] & ((cols["device"] < 0) | (cols["stream"] < 0))
        if placeless.any():  # nothing names a lane for them: no place on any GPU, refuse as before
            example = strings[cols["name"][np.flatnonzero(placeless)[0]]][:60]
            raise TraceFormatError(
                f"{int(placeless.sum())} GPU event(s) (kernel/memcpy/memset) have no stream or device in args "
                f"nor a numeric pid/tid, so they cannot be placed on a GPU lane (e.g. {example!r})",
                path,
            )
        cols, checks = validate_columns(cols, strings, path)
        notes += checks
        kind = cols["kind"]
        n = len(kind)
        if n == 0:
            what = (
                "an empty traceEvents array"
                if self.n_total == 0
                else f"{self.n_total} events, none with a duration"
            )
            raise TraceFormatError(f"empty trace: {what} (nothing to show)", path)
        stats: dict[str, int] = {"trace_events": self.n_total}
        if self.n_bad_ts:
            notes.append(f"{self.n_bad_ts} events without a timestamp were skipped")
        if self.n_bad_time:
            notes.append(
                f"{self.n_bad_time} events with a timestamp or duration outside the valid range "
                f"(|ts| < 2^62 ns, 0 <= dur <= 2^53 ns) were dropped, e.g. {self.bad_time_example}"
            )
        if self.n_negative_dur:
            notes.append(f"{self.n_negative_dur} events with a negative duration are shown with zero length")
        if self.n_not_complete:
            gpu = f", {self.n_not_complete_gpu} of them GPU kernels/copies/memsets" if self.n_not_complete_gpu else ""
            notes.append(
                f"{self.n_not_complete} events are not complete 'X' events (e.g. 'B'/'E' begin/end pairs){gpu}: "
                "not read, so their time is missing from every figure"
            )
        if self.n_lane_from_pid:
            notes.append(
                f"{self.n_lane_from_pid} GPU events have no args.device / args.stream: placed on the lane of "
                f"their pid (device) and tid (stream), e.g. {self.lane_example!r}"
            )
        rank_source = "argument" if rank is not None else "default"
        dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else None
        if rank is None and dist is not None and dist.get("rank") is not None:
            rank, rank_source = check_rank(dist["rank"], path), "distributedInfo"
        if rank is None:
            rank = 0

        gpu = _IS_GPU[kind.view(np.uint8)]
        is_api = _IS_API[kind.view(np.uint8)]
        flags = np.zeros(n, dtype=np.int16)
        sync_kind = cols["sync_kind"]
        if is_api.any():
            s, f = classify_api_ids(strings, cols["name"][is_api])
            sync_kind[is_api] = s
            flags[is_api] = f
        kern = kind == int(EventKind.KERNEL)
        if kern.any():
            flags[kern] |= np.where(comm_mask(strings, cols["name"][kern]), Flag.COMM, 0).astype(np.int16)
        corr = cols["correlation"]
        launches = sorted_unique(corr[is_api & (corr >= 0)])
        gpu_rows = np.flatnonzero(gpu)
        orphan = np.zeros(n, dtype=bool)
        orphan[gpu_rows] = ~member(corr[gpu_rows], launches)
        flags[orphan] |= Flag.ORPHAN
        stats["orphan_gpu_events"] = int(orphan.sum())
        graph_names = np.array([i for i, s in enumerate(strings) if "GraphLaunch" in s], dtype=np.int32)
        if len(graph_names):
            graph_corr = sorted_unique(corr[is_api & np.isin(cols["name"], graph_names)])
            graph_corr = graph_corr[graph_corr >= 0]
            flags[gpu_rows[member(corr[gpu_rows], graph_corr)]] |= Flag.GRAPH
            if len(graph_corr):
                # CUPTI gives kernels launched on the device (the bodies of conditional WHILE / IF graph
                # nodes) correlation 0: they belong to a graph even though no host call launched them.
                flags[gpu_rows[corr[gpu_rows] == 0]] |= Flag.GRAPH

        notes += launch_link_notes(kind, cols["start"], corr, flags, cols["name"], strings)

        copy_kind = np.zeros(n, dtype=np.int8)
        src_mem = np.zeros(n, dtype=np.int8)
        dst_mem = np.zeros(n, dtype=np.int8)
        for k in (EventKind.MEMCPY, EventKind.MEMSET):
            rows = np.flatnonzero(kind == int(k))
            if not len(rows):
                continue
            uniq, inv = np.unique(cols["name"][rows], return_inverse=True)
            table = np.array([copy_info(strings[u], k) for u in uniq.tolist()], dtype=np.int8).reshape(-1, 3)
            copy_kind[rows], src_mem[rows], dst_mem[rows] = table[inv, 0], table[inv, 1], table[inv, 2]

        n_gpu = int(gpu.sum())
        stats.update(
            kernels=int(kern.sum()),
            memcpys=int((kind == int(EventKind.MEMCPY)).sum()),
            memsets=int((kind == int(EventKind.MEMSET)).sum()),
            host_api_calls=int(is_api.sum()),
            events=n,
            skipped_instant_events=self.n_dropped_instant,
            skipped_flow_events=self.n_flows,
        )
        if n_gpu == 0:
            what = (
                "MTIA accelerator trace: its device events are not GPU work"
                if is_mtia(top)
                else "no kernel/memcpy/memset events"
            )
            notes.append(f"no GPU activity ({what}); only host-side events were loaded")
        if stats["orphan_gpu_events"]:
            notes.append(
                f"{stats['orphan_gpu_events']} GPU events have no matching launch in the trace "
                "(flagged ORPHAN)"
            )

        used = sorted(
            {
                int(d)
                for d in sorted_unique(cols["device"][gpu | (kind == int(EventKind.GPU_ANNOTATION))])
                if d >= 0
            }
        )
        del gpu, is_api, kern, orphan, corr, gpu_rows  # per-event temporaries: free before the model is built
        devices, device_notes = check_devices(devices_from_properties(top, rank, used))
        notes += device_notes
        gpu_names = sorted({d.name for d in devices if d.name})
        if not used:  # no GPU work recorded: still say which accelerator the trace lists
            gpu_names = [str(json_safe(n))[:256] for n in listed_names(top)]
        extra: dict[str, Any] = {
            "kineto_schema": "2021" if self.legacy else "current",
            "rank_source": rank_source,
        }
        for key in (
            "distributedInfo",
            "baseTimeNanoseconds",
            "displayTimeUnit",
            "traceName",
            "trace_id",
            "cuda_runtime_version",
            "cuda_driver_version",
            "hip_runtime_version",
            "roctracer_version",
        ):
            if key in top:
                extra[key] = json_safe(top[key])
        if self.n_dropped_instant:  # instants: maybe [memory] ones (profile_memory=True)
            from tracelab.io.kineto.memory import read_memory

            memory = read_memory(path)
            if memory is not None:
                extra["memory"] = memory
        if self.comm_args:
            extra["collective_args"] = self.comm_args
        meta = RunMeta(
            source=str(path),
            format="kineto",
            ranks=(rank,),
            schema_version=str(top.get("schemaVersion", "")),
            gpu=", ".join(gpu_names),
            notes=tuple(notes),
            stats=stats,
            extra=extra,
        )
        cols.update(
            rank=np.int32(rank),
            copy_kind=copy_kind,
            src_mem=src_mem,
            dst_mem=dst_mem,
            sync_kind=sync_kind,
            flags=flags,
        )
        return build_timeline(cols, strings, meta, devices=devices, consume=True)
