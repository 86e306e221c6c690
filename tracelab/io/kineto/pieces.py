"""The Kineto parser's accumulator: each piece of `traceEvents` is scanned (C scanner, or msgspec when it
declines) and turned into column arrays (`piece_work`, on the scan threads), merged piece by piece in file
order (`_Parsed`); `finish.finish` makes the Timeline."""

from __future__ import annotations

import contextlib
import itertools
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from tracelab.io.kineto.columns import ColumnAssembler, populate
from tracelab.io.kineto.kinds import MAX_OVERHEAD
from tracelab.io.kineto.memory import MAX_EVENTS
from tracelab.io.kineto.piece_work import PieceWork, piece_work
from tracelab.io.kineto.rows import Rows, StructRows, scan, scan_rest, scanner_available
from tracelab.io.kineto.stream import candidate_cut
from tracelab.model import Timeline
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


def _piece_works(parts: list[Rows]) -> list[PieceWork]:
    """`piece_work` of each part of a piece, in file order (dense columns: each part is merged by copy)."""
    return [piece_work(p, True) for p in parts]


class _Parsed:
    """Accumulates column arrays chunk by chunk. `pipeline=True`: each chunk (or each part of a big one)
    is scanned on other threads (the C scanner runs without the GIL), and a chunk's parts are turned into
    columns on one of them (`piece_work` touches nothing shared) while this thread merges the previous
    chunk's; chunks are still merged one by one in file order, so the result is the same."""

    def __init__(self, pipeline: bool = False, input_bytes: int = 0) -> None:
        self._pool: ThreadPoolExecutor | None = None  # scans pieces (the parts of a big one at once)
        self._parts = min(MAX_PARTS, usable_cores())
        self._halves = pipeline and self._parts > 1  # big pieces are scanned in parts until cutting fails twice
        self._halves_failed = 0
        self._pending: Future[list[PieceWork]] | None = None  # the last piece's parts, being turned into columns
        self._pending_bytes = 0  # that piece's length
        if pipeline and scanner_available():
            # twice the parts: the next piece's parts are scanned while the last one's are turned into columns
            # (on one thread) and the assembler's next pages are mapped (`populate`)
            self._pool = ThreadPoolExecutor(2 * max(self._parts, 1), thread_name_prefix="tracelab-scan")
        self.ids: dict[str, int] = {}
        self.strings: list[str] = []
        self.parts: list[dict[str, np.ndarray]] = []
        # pipeline: each piece's columns are copied into the full columns as it is processed (while the
        # scanner reads the next one); otherwise (a decode worker) they are kept as parts
        self.columns = ColumnAssembler() if pipeline else None
        self.input_bytes = input_bytes  # the plain JSON's size, for the first estimate of the row count
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

    def intern_table(self, ids: np.ndarray, table: list[str], used: np.ndarray | None = None) -> np.ndarray:
        """`intern([table[i] for i in ids])` without the per-event list: the new strings are interned in
        the order of their first occurrence in `ids`, so the string ids are those `intern` gives. `used`:
        the entries of `table` that `ids` holds, ascending, when the caller has them."""
        if not len(ids):
            return np.zeros(0, dtype=np.int32)
        if used is None:
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
        if self._pool is None:
            rows = self._read(piece, scan(piece))
            self._merge([piece_work(rows)], len(piece))
            return rows.n
        if self._halves and len(piece) >= SPLIT_MIN:
            parts = self._scan_halves(piece)
            if parts is not None:
                self._work(parts, len(piece))
                return sum(p.n for p in parts)
        job = self._pool.submit(scan, piece)
        try:
            self._flush()  # the previous chunk's columns, while this one is scanned
        finally:
            wait((job,))  # always waited for: the caller reuses the piece's buffer
        rows = self._read(piece, job.result())
        self._work([rows], len(piece))
        return rows.n

    def _work(self, parts: list[Rows], piece_bytes: int) -> None:
        """The parts of a piece turned into columns (`piece_work`) one after another on one scan thread,
        merged by the next `_flush`: the piece's buffer is no longer needed (the rows are copies). One
        thread, not one per part: piece_work is many small numpy calls that hold the GIL, so parts side by
        side only contend for it (on 16 cores, 4 at once took 4x the CPU of one), while the C scanner of
        the next piece runs beside it without the GIL."""
        assert self._pool is not None
        self._pending = self._pool.submit(_piece_works, parts)
        self._pending_bytes = piece_bytes

    def _scan_halves(self, piece: memoryview) -> list[Rows] | None:
        """The piece scanned as `self._parts` pieces (two on a 2-core machine), cut at element boundaries,
        on as many threads while this one merges the previous piece: the parts in file order (merged as the
        whole piece: `_merge`). None when no cut is found or a part is declined (a cut inside a string leaves
        a part unterminated, which the strict scanner refuses): the whole piece then goes the usual way, and
        after two such pieces cutting stops for this file."""
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
            return got
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
        pending, self._pending = self._pending, None
        if pending is not None:
            self._merge(pending.result(), self._pending_bytes)

    @property
    def pool(self) -> tuple[ThreadPoolExecutor | None, int]:
        """The scan threads (None without the pipeline) and how many, for the last steps (`finish`)."""
        return self._pool, self._parts

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._pool = None

    def _merge(self, works: list[PieceWork], piece_bytes: int) -> None:
        """One piece's parts (`piece_work`, in file order) into the parser: counts added, the first
        examples kept, memory instants and overhead events up to their bounds, the names and categories
        interned (all the piece's names, then its categories: the ids a whole piece gets), the columns kept."""
        room = MAX_OVERHEAD - len(self.overhead_start)  # overhead candidates the piece may still give
        for w in works:
            self.n_total += w.n_total
            self.n_dropped_instant += w.n_dropped_instant
            self.n_flows += w.n_flows
            self.n_not_complete += w.n_not_complete
            self.n_not_complete_gpu += w.n_not_complete_gpu
            self.n_bad_ts += w.n_bad_ts
            self.n_negative_dur += w.n_negative_dur
            self.legacy = self.legacy or w.legacy
            if w.n_bad_time:
                if not self.n_bad_time:
                    self.bad_time_example = w.bad_time_example
                self.n_bad_time += w.n_bad_time
            if w.n_lane_from_pid:
                if not self.n_lane_from_pid:
                    self.lane_example = w.lane_example
                self.n_lane_from_pid += w.n_lane_from_pid
            if w.memory is not None:
                mem_room = MAX_EVENTS - self.n_memory
                self.n_memory += w.n_memory
                if mem_room > 0:
                    self.memory_parts.append((w.memory[0][:mem_room], {k: v[:mem_room] for k, v in w.memory[1].items()}))
            if w.overhead_candidates and room > 0:
                n = sum(1 for at in w.overhead_at if at < room)  # positions ascend
                self.overhead_start += w.overhead_start[:n]
                self.overhead_end += w.overhead_end[:n]
                self.overhead_name += w.overhead_name[:n]
            room -= w.overhead_candidates
        kept = [w for w in works if w.cols is not None]
        for w in kept:
            w.cols["name"] = w.sel.name_ids(self)
        for w in kept:
            w.cols["category"] = w.sel.cat_ids(self)
            w.sel = None
        self._keep([w.cols for w in kept], piece_bytes)

    def _keep(self, parts: list[dict[str, np.ndarray]], piece_bytes: int) -> None:
        if self.columns is None:
            self.parts += parts
            return
        if not self.columns.cap and self.input_bytes and piece_bytes and parts:
            # rows the whole file holds at this density (the first piece's rows over its length: pieces
            # are all about a block long), plus a margin: the first buffers are that large (address space
            # until filled), so a big file's columns rarely grow by copying
            rows = sum(len(p["kind"]) for p in parts)
            self.columns.expected = int(rows * (self.input_bytes / piece_bytes) * 1.15) + 1024
        for p in parts:
            self.columns.add(p)
        if self._pool is not None and parts:
            # the pages the next pieces' rows will fill, mapped meanwhile on a scan thread (about two
            # pieces ahead): copying them in then does not fault on this thread
            views = self.columns.ahead(3 * sum(len(p["kind"]) for p in parts))
            if views:
                self._pool.submit(populate, views)

    # -------------------------------------------------------------------------------------------

    def finish(self, path: Path, top: dict, rank: int | None) -> Timeline:
        """The Timeline of everything read (`finish.finish`)."""
        from tracelab.io.kineto.finish import finish

        return finish(self, path, top, rank)
