"""The `[memory]` instants of a Kineto trace (torch.profiler with `profile_memory=True`): one per allocation
or free by the caching allocator, args "Bytes" (+ allocated, - freed), "Total Allocated", "Total Reserved",
"Addr", "Device Id", "Device Type" (1 = CUDA, 0 = CPU). The main parser keeps complete events only; this
reader finds the instants in the raw text, so a trace without them costs one search. Kept in
`RunMeta.extra["memory"]` (stored with the run).

The usual trace is read in bulk (no Python step per event): numpy finds every occurrence of the name and the
braces around it, the events' byte ranges are joined into one JSON array and decoded by msgspec into typed
structs, and the columns are gathered with C-level `map`/`attrgetter`. Anything unusual (an event of another
shape, a field of another type, a name that is not `[memory]`) falls back to the per-event reader
(`_read_each`), so the result is the same either way (tests/test_kineto_memory_bulk.py)."""

from __future__ import annotations

import functools
import gzip
import mmap
import os
import re
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

MARK = b'"[memory]"'
MAX_EVENTS = 1_000_000
_BRACES = re.compile(rb"[{}]")


def _raw(path: Path) -> bytes | mmap.mmap:
    """The trace's JSON text: a read-only map of a plain file (no private copy of it), else the inflated bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as g:
            return g.read()
    if head == b"\x28\xb5\x2f\xfd":
        import zstandard

        with open(path, "rb") as f:
            return zstandard.ZstdDecompressor().stream_reader(f).read()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _event_at(text: bytes | mmap.mmap, pos: int) -> dict | None:
    start = text.rfind(b"{", 0, pos)  # the fields before the name are flat: the event's own brace
    if start < 0:
        return None
    depth = 0
    for m in _BRACES.finditer(text, start):
        depth += 1 if m.group() == b"{" else -1
        if depth == 0:
            try:
                ev = orjson.loads(text[start : m.end()])
            except orjson.JSONDecodeError:
                return None
            return ev if isinstance(ev, dict) else None
    return None


@functools.cache
def _decoder() -> Any:
    """msgspec's decoder of a list of the usual [memory] events (msgspec is imported only when a trace has them:
    a Kineto analyze otherwise never loads it)."""
    import msgspec

    f = msgspec.field
    args = msgspec.defstruct("_Args", [
        ("device_type", int, f(name="Device Type", default=1)),
        ("device_id", int, f(name="Device Id", default=-1)),
        ("nbytes", int, f(name="Bytes", default=0)),
        ("allocated", int, f(name="Total Allocated", default=-1)),
        ("reserved", int, f(name="Total Reserved", default=-1)),
        ("addr", int, f(name="Addr", default=0)),
    ])
    ev = msgspec.defstruct("_Ev", [("name", str), ("ts", float), ("args", args), ("tid", int, -1)])
    return msgspec.json.Decoder(list[ev]), (msgspec.ValidationError, msgspec.DecodeError)
_CHUNK = 1 << 22
_BEFORE, _AFTER = 128, 384  # bytes around the name in which the usual event's braces lie
_BATCH = 1 << 15


def _marks(text: bytes | mmap.mmap) -> np.ndarray:
    """Start offsets of MARK in text, ascending (every occurrence, overlapping ones included)."""
    arr = np.frombuffer(text, dtype=np.uint8)
    n = max(len(arr) - len(MARK) + 1, 0)
    out = [np.flatnonzero(arr[i : min(i + _CHUNK, n)] == MARK[1]) + (i - 1) for i in range(1, n, _CHUNK)]
    pos = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)  # '[' is rare in a trace
    for j, ch in enumerate(MARK):
        pos = pos[arr[pos + j] == ch]
    return pos


def _bounds(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """[start, end) of the event around each name, for the usual event only: its own "{" within _BEFORE bytes
    before the name with no "}" between, then exactly one nested object (args) and the event's "}" within
    _AFTER bytes after it -- where the per-event reader's brace count gives the same range. None otherwise."""
    if len(pos) == 0:
        return None
    shift = 0
    if pos[0] < _BEFORE or pos[-1] + _AFTER > len(arr):  # a name near either end: pad with blanks (a copy)
        blank = np.full(_BEFORE + _AFTER, ord(" "), dtype=np.uint8)
        arr, shift = np.concatenate([blank, arr, blank]), _BEFORE + _AFTER
        pos = pos + shift
    win = np.lib.stride_tricks.sliding_window_view(arr, _BEFORE + _AFTER)
    starts, ends = [], []
    for i in range(0, len(pos), _BATCH):  # per batch of 32768 events: a bounded temporary
        w = win[pos[i : i + _BATCH] - _BEFORE]
        op, cl = w == ord("{"), w == ord("}")
        head_op = np.ascontiguousarray(op[:, _BEFORE - 1 :: -1])  # reversed: argmax finds the last one
        head_cl = np.ascontiguousarray(cl[:, _BEFORE - 1 :: -1])
        k = _BEFORE - 1 - np.argmax(head_op, axis=1)  # the last "{" before the name
        has = head_op.any(axis=1)
        last_cl = np.where(head_cl.any(axis=1), _BEFORE - 1 - np.argmax(head_cl, axis=1), -1)
        rows = np.arange(len(w))
        t_op, t_cl = op[:, _BEFORE:], cl[:, _BEFORE:]
        o0, c0 = np.argmax(t_op, axis=1), np.argmax(t_cl, axis=1)
        ok = has & (last_cl < k) & t_op[rows, o0] & t_cl[rows, c0]
        t_op[rows, o0] = False
        t_cl[rows, c0] = False
        o1, c1 = np.argmax(t_op, axis=1), np.argmax(t_cl, axis=1)
        o1 = np.where(t_op[rows, o1], o1, _AFTER)  # no 2nd "{" in the window: it lies after the event
        # args' "{" before the 1st "}", the event's "}" (the 2nd) before any other "{"
        ok &= t_cl[rows, c1] & (o0 < c0) & (c1 < o1)
        if not ok.all():
            return None
        base = pos[i : i + _BATCH] - _BEFORE - shift
        starts.append(base + k)
        ends.append(base + _BEFORE + c1 + 1)
    return np.concatenate(starts), np.concatenate(ends)


def _columns_bulk(text: bytes | mmap.mmap) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """The per-event reader's rows as columns, read in bulk; None when the trace is not of the usual shape
    (the caller then takes the per-event reader, whose result this equals)."""
    pos = _marks(text)
    if len(pos) == 0 or (len(pos) > 1 and int(np.diff(pos).min()) < len(MARK)):
        return None  # overlapping marks: the find loop skips some, leave that to it
    got = _bounds(np.frombuffer(text, dtype=np.uint8), pos)
    if got is None:
        return None
    start, end = got
    decoder, errors = _decoder()
    try:
        evs = decoder.decode(b"[" + b",".join(map(text.__getitem__, map(slice, start.tolist(), end.tolist()))) + b"]")
    except errors:
        return None
    n = len(evs)
    if any(name != "[memory]" for name in set(map(attrgetter("name"), evs))):
        return None
    if n > MAX_EVENTS:
        evs = evs[:MAX_EVENTS]
        n = MAX_EVENTS
    ts = np.fromiter(map(attrgetter("ts"), evs), dtype=np.float64, count=n)

    def col(field: str) -> np.ndarray:
        return np.fromiter(map(attrgetter(field), evs), dtype=np.int64, count=n)

    cols = {"device": np.where(col("args.device_type") == 1, col("args.device_id"), -1),
            "bytes": col("args.nbytes"), "allocated": col("args.allocated"), "reserved": col("args.reserved"),
            "addr": col("args.addr"), "tid": col("tid")}
    return ts, cols


def _read_each(text: bytes | mmap.mmap) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """The per-event reader: each occurrence of the name, its event object decoded alone."""
    rows = []
    pos = text.find(MARK)
    while pos >= 0 and len(rows) < MAX_EVENTS:
        ev = _event_at(text, pos)
        if ev is not None and ev.get("name") == "[memory]" and isinstance(ev.get("args"), dict):
            a = ev["args"]
            try:
                ts = float(ev.get("ts"))
                rows.append((ts, int(a.get("Device Id", -1)) if int(a.get("Device Type", 1)) == 1 else -1,
                             int(a.get("Bytes", 0)), int(a.get("Total Allocated", -1)), int(a.get("Total Reserved", -1)),
                             int(a.get("Addr", 0)), int(ev.get("tid", -1)) if isinstance(ev.get("tid"), int) else -1))
            except (TypeError, ValueError):
                pass
        pos = text.find(MARK, pos + len(MARK))
    if not rows:
        return None
    ts = np.array([r[0] for r in rows], dtype=np.float64)
    cols = {name: np.array([r[i] for r in rows], dtype=np.int64)
            for i, name in enumerate(("device", "bytes", "allocated", "reserved", "addr", "tid"), start=1)}
    return ts, cols


def read_piece(text: bytes | memoryview | mmap.mmap) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """The `[memory]` instants of one piece of the traceEvents array (whole elements: the parser calls this
    with each piece whose scan holds instants, while the piece is in memory, so the file is read once):
    (ts in µs, columns) in file order, or None when it has none."""
    got = _columns_bulk(text)
    if got is None:
        plain = text if isinstance(text, (bytes, mmap.mmap)) else bytes(text)  # the rare case: a copy
        if plain.find(MARK) >= 0:
            got = _read_each(plain)
    return got


def memory_document(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]]) -> dict[str, Any] | None:
    """Columns of the `[memory]` instants (the pieces' `read_piece` results, in file order) sorted by time
    (ns on the trace clock, as the parser converts µs): t, device (-1: host), bytes, allocated, reserved,
    addr, tid; None when there are none. At most MAX_EVENTS, the first in the file ("truncated" says so)."""
    if not parts:
        return None
    ts = np.concatenate([p[0] for p in parts])[:MAX_EVENTS]
    rest = {k: np.concatenate([p[1][k] for p in parts])[:MAX_EVENTS] for k in parts[0][1]}
    n = sum(len(p[0]) for p in parts)
    whole = np.floor(ts)
    t = whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)  # as validate.us_to_ns_checked
    order = np.argsort(t, kind="stable")
    cols = {"t": t} | rest
    return {k: v[order].tolist() for k, v in cols.items()} | {"source": "kineto [memory] instants",
                                                              "truncated": n >= MAX_EVENTS}


def read_memory(path: str | Path, *, bulk: bool = True) -> dict[str, Any] | None:
    """`memory_document` of a whole file read at once (the reference the parser's piece by piece reading
    is tested against). `bulk=False` takes the per-event reader only (the reference the bulk reader is
    tested against)."""
    text = _raw(Path(path))
    if text.find(MARK) < 0:
        return None
    got = (_columns_bulk(text) if bulk else None) or _read_each(text)
    return None if got is None else memory_document([got])
