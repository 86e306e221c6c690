"""Column helpers of the Kineto parser: struct fields -> numpy columns (C-level loops, slow paths only
for odd values), and the assembly of per-chunk parts into full, start-sorted columns."""

from __future__ import annotations

import re
from itertools import chain
from operator import attrgetter

import numpy as np
import pandas as pd


def ints(values: list | tuple, dtype: str = "int64") -> np.ndarray:
    """Python numbers -> int array; None / non-numeric / out-of-range values become -1."""
    n = len(values)
    try:
        return np.fromiter(values, dtype=dtype, count=n)
    except (TypeError, ValueError, OverflowError):
        num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(
            dtype=np.float64, copy=True
        )
        bad = ~np.isfinite(num) | (np.abs(num) > 9.2e18)
        num[bad] = -1
        return num.astype(dtype)


def floats(values: list | tuple) -> np.ndarray:
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """round(us * 1000) without losing the ns digits of large epoch-µs values."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def strs(values: list | tuple) -> list:
    return [v if isinstance(v, str) else ("" if v is None else str(v)) for v in values]


def triples(values: list | tuple) -> np.ndarray:
    """[x, y, z] lists -> (n, 3) int32; missing or malformed -> -1."""
    n = len(values)
    filled = [v if v is not None else (-1, -1, -1) for v in values]
    try:
        return np.fromiter(chain.from_iterable(filled), dtype=np.int32, count=3 * n).reshape(n, 3)
    except (TypeError, ValueError, OverflowError):
        out = np.full((n, 3), -1, dtype=np.int32)
        for i, v in enumerate(filled):  # only for malformed grids (rare; never on well-formed traces)
            if isinstance(v, (list, tuple)):
                for j, x in enumerate(v[:3]):
                    if isinstance(x, (int, float)) and abs(x) < 2**31:
                        out[i, j] = int(x)
        return out


def col(seq: list, field: str, dtype: str = "int64") -> np.ndarray:
    """One struct field over a list of structs as a numpy column (C-level loop; slow path only for
    odd values such as strings or nulls)."""
    get = attrgetter(field)
    try:
        return np.fromiter(map(get, seq), dtype=dtype, count=len(seq))
    except (TypeError, ValueError, OverflowError):
        values = list(map(get, seq))
        return floats(values) if dtype == "float64" else ints(values, dtype)


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
    "device": ("a_device", np.int32),
    "stream": ("a_stream", np.int64),
    "context": ("a_context", np.int64),
    "correlation": ("a_correlation", np.int64),
    "bytes": ("a_bytes", np.int64),
    "sync_kind": ("a_sync", np.int8),
}
_KERNEL = {"registers": ("k_registers", np.int32), "shared_mem": ("k_shared", np.int64)}


def assemble(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Chunk parts -> full columns sorted by start. Columns are built and reordered one at a time
    (each part's arrays are released as soon as they are copied) to keep peak memory low."""
    sizes = [len(p["kind"]) for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    out: dict[str, np.ndarray] = {}
    for c, t in _MAIN.items():
        out[c] = np.concatenate([p.pop(c) for p in parts]) if parts else np.zeros(0, dtype=t)
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


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique for integer arrays by sorting (faster than numpy's hash-based unique here)."""
    s = np.sort(values)
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def member(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """values in sorted_unique (a binary search; cheaper than np.isin for few values, many keys)."""
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_unique, values), len(sorted_unique) - 1)
    return sorted_unique[pos] == values


def stream_from_tid(tids: list) -> np.ndarray:
    out = []
    for t in tids:  # only GPU events that lack args.stream (rare)
        m = re.search(r"(\d+)\s*$", str(t))
        out.append(int(m.group(1)) if m else -1)
    return np.array(out, dtype=np.int64)
