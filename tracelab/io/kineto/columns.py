"""Column helpers of the Kineto parser: struct fields -> numpy columns (C-level loops, slow paths only
for odd values), and the assembly of per-chunk parts into full, start-sorted columns."""

from __future__ import annotations

import math
import re
from concurrent.futures import Executor
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from tracelab.settings import release_memory


def checked_int(v: object) -> int:
    """An exact integer in int64 range, else -1: bools, fractions, NaN, huge values and non-numeric
    strings are not silently cast."""
    t = type(v)
    if t is int:
        return v if -(1 << 63) <= v < (1 << 63) else -1  # type: ignore[return-value]
    if t is float:
        return int(v) if v.is_integer() and abs(v) < 9.2e18 else -1  # type: ignore[union-attr]
    if t is str:
        try:
            return checked_int(int(v, 10))  # type: ignore[arg-type]
        except ValueError:
            return -1
    return -1


def _checked_float(v: object) -> float:
    """A finite-or-not float for int / float values; NaN for bools, strings and anything else."""
    t = type(v)
    if t is float:
        return v  # type: ignore[return-value]
    if t is int:
        return float(v) if abs(v) < (1 << 1000) else math.nan  # type: ignore[arg-type]
    if t is str:
        try:
            return float(v)  # type: ignore[arg-type]
        except ValueError:
            return math.nan
    return math.nan


def ints(values: list | tuple, dtype: str = "int64", checked: bool = False) -> np.ndarray:
    """Python numbers -> int array; None, bools, fractions, non-numeric and out-of-range values
    become -1. `checked`: skip the fast path (values may hold bools or floats)."""
    n = len(values)
    if not checked:
        try:
            return np.fromiter(values, dtype=dtype, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
    out = np.fromiter(map(checked_int, values), dtype=np.int64, count=n)
    if dtype != "int64":
        info = np.iinfo(dtype)
        out = np.where((out < info.min) | (out > info.max), -1, out)
    return out.astype(dtype)


def floats(values: list | tuple, checked: bool = False) -> np.ndarray:
    if not checked:
        try:
            return np.fromiter(values, dtype=np.float64, count=len(values))
        except (TypeError, ValueError, OverflowError):
            pass
    return np.fromiter(map(_checked_float, values), dtype=np.float64, count=len(values))


def _text(v: object) -> str:
    if isinstance(v, str):
        return v
    if type(v) in (int, float):
        return str(v)
    return ""  # None, bools, lists, objects: not a name


def strs(values: list | tuple) -> list:
    """Loosely decoded names -> str: numbers as text, anything else (null, lists, objects) as ''."""
    return [v if type(v) is str else _text(v) for v in values]


def triples(values: list | tuple, checked: bool = False) -> np.ndarray:
    """[x, y, z] lists -> (n, 3) int32; missing or malformed -> -1. `checked`: values were decoded
    loosely (may hold bools, fractions or lists of other lengths), so each one is checked."""
    n = len(values)
    filled = [v if v is not None else (-1, -1, -1) for v in values]
    try:
        if checked:
            raise TypeError
        return np.fromiter(chain.from_iterable(filled), dtype=np.int32, count=3 * n).reshape(n, 3)
    except (TypeError, ValueError, OverflowError):
        out = np.full((n, 3), -1, dtype=np.int32)
        for i, v in enumerate(filled):  # only for malformed grids (rare; never on well-formed traces)
            if isinstance(v, (list, tuple)):
                for j, x in enumerate(v[:3]):
                    if type(x) in (int, float) and abs(x) < 2**31 and float(x).is_integer():
                        out[i, j] = int(x)
        return out


def col(seq: list, field: str, dtype: str = "int64", checked: bool = False) -> np.ndarray:
    """One struct field over a list of structs as a numpy column (C-level loop; slow path only for
    odd values such as strings or nulls). `checked`: the structs were decoded loosely (fields may
    hold bools or fractions), so every value is checked."""
    get = attrgetter(field)
    if not checked:
        try:
            return np.fromiter(map(get, seq), dtype=dtype, count=len(seq))
        except (TypeError, ValueError, OverflowError):
            pass
    values = list(map(get, seq))
    return floats(values, True) if dtype == "float64" else ints(values, dtype, True)


def take(seq: list, idx: np.ndarray) -> list:
    return seq if len(idx) == len(seq) else list(map(seq.__getitem__, idx.tolist()))


_MAIN = {
    "kind": np.int8,
    "start": np.int64,
    "end": np.int64,
    "name": np.int32,
    "category": np.int32,
    "pid": np.int64,
    "tid": np.int64,
}
_SPARSE = {
    "device": ("a_device", np.int64),  # int64 until validate_columns has checked the range
    "stream": ("a_stream", np.int64),
    "context": ("a_context", np.int64),
    "correlation": ("a_correlation", np.int64),
    "bytes": ("a_bytes", np.int64),
    "sync_kind": ("a_sync", np.int8),
}
_KERNEL = {"registers": ("k_registers", np.int32), "shared_mem": ("k_shared", np.int64)}


_madvise = None
_MADV_POPULATE_WRITE = 23  # Linux 5.14+: map pages writable, as a write would, without changing their bytes
_PAGE = 4096


def populate(arrays: list[np.ndarray]) -> None:
    """Map the pages that hold `arrays` (madvise MADV_POPULATE_WRITE, run without the GIL), so that the first
    writes into them do not fault: a thread that fills big new buffers leaves their page faults to the
    thread that calls this. The bytes are left as they are (the arrays may be written meanwhile); where
    the kernel lacks it (before Linux 5.14) or there is no glibc, nothing happens."""
    global _madvise
    if _madvise is None:
        try:
            import ctypes

            fn = ctypes.CDLL("libc.so.6", use_errno=True).madvise
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _madvise = fn
        except (OSError, AttributeError):
            _madvise = False
    if not _madvise:
        return
    for a in arrays:
        if not a.nbytes:
            continue
        lo = a.ctypes.data & ~(_PAGE - 1)
        hi = (a.ctypes.data + a.nbytes + _PAGE - 1) & ~(_PAGE - 1)
        if _madvise(lo, hi - lo, _MADV_POPULATE_WRITE) != 0:
            import ctypes
            import errno

            if ctypes.get_errno() == errno.EINVAL:  # not supported by this kernel
                _madvise = False
                return


class ColumnAssembler:
    """Full columns built piece by piece: `add(part)` copies a piece's columns into growing columns (the
    parser calls it on its main thread while the scanner reads the next piece, time it otherwise spends
    waiting), and `result()` sorts them by start, as `assemble` of all the parts gives.

    The columns grow column by column (at most one column's old and new buffers at once); with
    `expected` rows (an estimate from the file size) the first buffers are that large. Buffers are
    allocated uninitialized, so capacity not yet filled costs address space, not memory."""

    _GROWTH = 1.5
    # every full column, in the order of the result: the main ones, then those filled at the rows that
    # carry them (sparse, kernel, and the grid / block triples as three columns each)
    _TRIPLES = tuple(f"{g}_{axis}" for g in ("grid", "block") for axis in "xyz")
    _COLUMNS: tuple[tuple[str, Any], ...] = (
        *_MAIN.items(),
        *((c, t) for c, (_k, t) in _SPARSE.items()),
        *((c, t) for c, (_k, t) in _KERNEL.items()),
        *((c, np.int32) for c in _TRIPLES),
    )

    def __init__(self, expected: int = 0) -> None:
        self.n = 0
        self.cap = 0
        self.expected = max(int(expected), 0)
        self.cols: dict[str, np.ndarray] = {}
        self._ahead = 0  # rows up to which the buffers' pages were populated (`ahead`)

    def _reserve(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(need, int(self.cap * self._GROWTH), self.expected if not self.cap else 0, 1024)
        for c, t in self._COLUMNS:
            new = np.empty(cap, dtype=t)
            old = self.cols.get(c)
            if old is not None and self.n:
                new[: self.n] = old[: self.n]
            self.cols[c] = new
            del old
        self.cap = cap
        self._ahead = self.n

    def ahead(self, rows: int) -> list[np.ndarray]:
        """Views of the columns' next `rows` rows not yet given by `ahead` (for `populate`, on another
        thread: the views keep their buffers alive)."""
        lo, hi = max(self._ahead, self.n), min(self.cap, self.n + rows)
        if hi <= lo:
            return []
        self._ahead = hi
        return [self.cols[c][lo:hi] for c, _t in self._COLUMNS]

    def add(self, part: dict[str, np.ndarray]) -> None:
        """Append a piece's columns: sparse (`rows` + `a_*`, `k_rows` + `k_*`, as the parser makes them) or
        dense (every column, `dense_part`: then one copy per column)."""
        k = len(part["kind"])
        if not k:
            return
        self._reserve(self.n + k)
        lo, hi = self.n, self.n + k
        cols = self.cols
        if "device" in part:  # dense
            for c, _t in self._COLUMNS:
                cols[c][lo:hi] = part[c]
            self.n = hi
            return
        for c in _MAIN:
            cols[c][lo:hi] = part[c]
        rows = part.get("rows")
        for c, (key, _t) in _SPARSE.items():
            cols[c][lo:hi] = 0 if c == "sync_kind" else -1
            if rows is not None and key in part:
                cols[c][lo + rows.astype(np.int64)] = part[key]
        krows = part.get("k_rows")
        for c in (*_KERNEL, *self._TRIPLES):
            cols[c][lo:hi] = -1
        if krows is not None and len(krows):
            at = lo + krows.astype(np.int64)
            for c, (key, _t) in _KERNEL.items():
                if key in part:
                    cols[c][at] = part[key]
            for g in ("grid", "block"):
                tri = part.get("k_" + g)
                if tri is not None:
                    for j, axis in enumerate("xyz"):
                        cols[f"{g}_{axis}"][at] = tri[:, j]
        self.n = hi

    def result(self, pool: Executor | None = None, threads: int = 1) -> dict[str, np.ndarray]:
        """The columns sorted by start (stable); the assembler is empty afterwards. With `pool` (of
        `threads` threads) the columns are reordered `threads` at a time on it (a gather runs without the
        GIL)."""
        n = self.n
        if not self.cap:
            out = {c: np.zeros(0, dtype=t) for c, t in self._COLUMNS}
        else:
            out = {c: self.cols[c][:n] for c, _t in self._COLUMNS}
        self.cols, self.n, self.cap = {}, 0, 0
        start = out["start"]
        if n and not (start[1:] >= start[:-1]).all():
            order = np.argsort(start, kind="stable")
            names = list(out)
            step = max(threads, 1) if pool is not None else 1
            for i in range(0, len(names), step):
                batch = names[i : i + step]  # a few columns at a time: their old buffers are freed as replaced
                if pool is None or len(batch) == 1:
                    got = [out[c][order] for c in batch]
                else:
                    got = list(pool.map(lambda c: out[c][order], batch))
                for c, v in zip(batch, got):
                    out[c] = v
                del got
                release_memory()
        return out


def dense_part(part: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A piece's sparse columns (`rows` + `a_*`, `k_rows` + `k_*`) as every column of its rows (those of
    ColumnAssembler, their dtypes; what `ColumnAssembler.add` fills them with), so that adding it is one copy
    per column: made on a scan thread, it leaves the parser's thread only those copies. `name` and
    `category` are passed through when there."""
    k = len(part["kind"])
    out = {c: part[c] for c in _MAIN if c in part}
    rows = part.get("rows")
    for c, (key, t) in _SPARSE.items():
        col = np.full(k, 0 if c == "sync_kind" else -1, dtype=t)
        if rows is not None and key in part:
            col[rows] = part[key]
        out[c] = col
    krows = part.get("k_rows")
    scatter = krows is not None and len(krows) > 0
    for c, (key, t) in _KERNEL.items():
        col = np.full(k, -1, dtype=t)
        if scatter and key in part:
            col[krows] = part[key]
        out[c] = col
    for g in ("grid", "block"):
        tri = part.get("k_" + g)
        for j, axis in enumerate("xyz"):
            col = np.full(k, -1, dtype=np.int32)
            if scatter and tri is not None:
                col[krows] = tri[:, j]
            out[f"{g}_{axis}"] = col
    return out


def assemble(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Chunk parts -> full columns sorted by start (`ColumnAssembler` over the parts, each part's
    arrays released as soon as they are copied)."""
    columns = ColumnAssembler(sum(len(p["kind"]) for p in parts))
    for p in parts:
        columns.add(p)
        p.clear()
    parts.clear()
    return columns.result()


# the number that ends a tid, matched on the reversed text: `re.search(r"(\d+)\s*$", tid)` retries at every
# digit of a long run not at the end (quadratic: a 100 KB tid took minutes)
_TRAILING_NUMBER = re.compile(r"\s*(\d+)")


def stream_from_tid(tids: list) -> np.ndarray:
    out = []
    for t in tids:  # only GPU events that lack args.stream (rare); the 2021 schema's tid "stream 7"
        m = _TRAILING_NUMBER.match(t[::-1]) if isinstance(t, str) else None
        out.append(checked_int(m.group(1)[::-1]) if m else -1)  # past int64: unknown, as checked_int says
    return np.array(out, dtype=np.int64)
