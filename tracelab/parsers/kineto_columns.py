"""Column helpers of the Kineto parser: struct fields -> numpy columns (C-level loops, slow paths only
for odd values), and the assembly of per-chunk parts into full, start-sorted columns."""

from __future__ import annotations

import math
import re
from itertools import chain
from operator import attrgetter

import numpy as np


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


def _trim() -> None:
    """Give freed heap memory back to the OS (glibc): the chunk parts are small arrays on the heap, and
    without this their pages stay resident under the full columns built from them."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def assemble(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Chunk parts -> full columns sorted by start. Columns are built and reordered one at a time
    (each part's arrays are released, and their memory returned, as soon as they are copied) to keep
    peak memory low: about the columns plus the parts not yet copied."""
    sizes = [len(p["kind"]) for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    out: dict[str, np.ndarray] = {}
    for c, t in _MAIN.items():
        out[c] = np.concatenate([p.pop(c) for p in parts]) if parts else np.zeros(0, dtype=t)
        _trim()
    order = np.argsort(out["start"], kind="stable")
    if n and (np.diff(out["start"]) >= 0).all():
        order = None
    for c in list(out):
        if order is not None:
            out[c] = out[c][order]
    rows = [p.get("rows", np.zeros(0, np.int32)).astype(np.int64) + off for p, off in zip(parts, offsets)]
    krows = [p.get("k_rows", np.zeros(0, np.int32)).astype(np.int64) + off for p, off in zip(parts, offsets)]
    inverse = None
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
    all_rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    all_krows = np.concatenate(krows) if krows else np.zeros(0, np.int64)
    if inverse is not None:
        all_rows, all_krows = inverse[all_rows], inverse[all_krows]
    fill = {"sync_kind": 0}
    for c, (key, t) in _SPARSE.items():
        col = np.full(n, fill.get(c, -1), dtype=t)
        vals = [
            p.pop(key) if key in p else np.full(len(r), fill.get(c, -1), dtype=t) for p, r in zip(parts, rows)
        ]
        if vals:
            col[all_rows] = np.concatenate(vals)
        out[c] = col
        del vals
        _trim()
    for c, (key, t) in _KERNEL.items():
        col = np.full(n, -1, dtype=t)
        vals = [p.pop(key) for p in parts if key in p]
        if vals:
            col[all_krows] = np.concatenate(vals)
        out[c] = col
    for c in ("grid", "block"):
        vals = [p.pop("k_" + c) for p in parts if "k_" + c in p]
        tri = np.concatenate(vals) if vals else np.zeros((0, 3), np.int32)
        for j, axis in enumerate("xyz"):
            col = np.full(n, -1, dtype=np.int32)
            col[all_krows] = tri[:, j]
            out[f"{c}_{axis}"] = col
    parts.clear()
    return out


# the number that ends a tid, matched on the reversed text: `re.search(r"(\d+)\s*$", tid)` retries at every
# digit of a long run not at the end (quadratic: a 100 KB tid took minutes)
_TRAILING_NUMBER = re.compile(r"\s*(\d+)")


def stream_from_tid(tids: list) -> np.ndarray:
    out = []
    for t in tids:  # only GPU events that lack args.stream (rare); the 2021 schema's tid "stream 7"
        m = _TRAILING_NUMBER.match(t[::-1]) if isinstance(t, str) else None
        out.append(checked_int(m.group(1)[::-1]) if m else -1)  # past int64: unknown, as checked_int says
    return np.array(out, dtype=np.int64)
