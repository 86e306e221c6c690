"""Distinct values of integer columns by hashing: what `np.unique` returns (sorted distinct values, their
counts, each value's index among them), in O(n) plus a sort of the distinct values only. `np.unique`
sorts all n values; on the host-call columns of a big trace (millions of calls of a few threads, a few
thousand names) that sort was most of the cost."""

from __future__ import annotations

import sys

import numpy as np

from tracelab.model.grouping import sorted_unique

SMALL = 4096  # below this np.unique is as fast
IMPORT_PANDAS_AT = 4_000_000  # np.unique sorts this many int64 in ~0.4 s, about the cost of importing pandas


def _table_find(direct: tuple[int, np.ndarray], q: np.ndarray) -> np.ndarray:
    """Look-ups in a direct table (`base`, `table`: the answer for key base + i at i): the answer for
    each q, -1 outside the table."""
    base, table = direct
    i = q - base
    inside = (i >= 0) & (i < table.size)
    return np.where(inside, table[np.where(inside, i, 0)], -1)


class SortedKeys:
    """Look-ups in sorted integer keys (repeats allowed): `find(q)` is the position of the first key
    equal to each q, or -1, as a binary search finds it. Keys that are dense (a range of at most 4x
    their count, as correlation ids are) get a table: one gather per look-up instead of a search."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = np.asarray(keys)
        self._table: tuple[int, np.ndarray] | None = None
        k = self.keys
        if k.size and k.dtype.kind in "iu":
            base, span = int(k[0]), int(k[-1]) - int(k[0]) + 1
            if span <= 4 * k.size + 1024:
                first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
                table = np.full(span, -1, dtype=np.int64)
                table[k[first] - base] = first
                self._table = (base, table)

    def find(self, queries: np.ndarray) -> np.ndarray:
        q = np.asarray(queries, dtype=np.int64)
        k = self.keys
        if k.size == 0:
            return np.full(q.shape, -1, dtype=np.int64)
        if self._table is not None:
            return _table_find(self._table, q)
        i = np.searchsorted(k, q)
        ic = np.minimum(i, k.size - 1)
        return np.where(k[ic] == q, ic, -1)


class FirstPosition:
    """Where each integer key first occurs in `keys` (any order, repeats allowed): `find(q)` is that
    position for each q, or -1. Distinct keys packed in a short range (correlation ids) get a direct
    table, filled in one scatter (no sort); others are sorted once (stably: the first occurrence wins)."""

    def __init__(self, keys: np.ndarray) -> None:
        k = np.asarray(keys)
        self._direct: tuple[int, np.ndarray] | None = None
        if k.size and k.dtype.kind in "iu":
            base, span = int(k.min()), int(k.max()) - int(k.min()) + 1
            if span <= 4 * k.size + 1024:
                table = np.full(span, -1, dtype=np.int64)
                table[k.astype(np.int64) - base] = np.arange(k.size, dtype=np.int64)
                if np.count_nonzero(table >= 0) == k.size:  # every key distinct: the one position is the first
                    self._direct = (base, table)
                    return
        order = np.argsort(k, kind="stable")
        self._pos = order
        self._sorted = SortedKeys(k[order])

    def find(self, queries: np.ndarray) -> np.ndarray:
        q = np.asarray(queries, dtype=np.int64)
        if self._direct is not None:
            return _table_find(self._direct, q)
        i = self._sorted.find(q)
        return np.where(i >= 0, self._pos[np.maximum(i, 0)] if self._pos.size else -1, -1)


def _hashable(v: np.ndarray) -> bool:
    """Whether hashing (pandas) beats np.unique's sort here: big enough, integers, and pandas already
    loaded or the array so big that loading it pays (a small trace's `analyze` never imports pandas)."""
    if v.size < SMALL or v.dtype.kind not in "iub":
        return False
    return "pandas" in sys.modules or v.size >= IMPORT_PANDAS_AT


def _dense_counts(v: np.ndarray) -> tuple[int, np.ndarray] | None:
    """For integers packed in a short range (thread ids, devices, correlation ids, codes): the smallest
    value and how often each value from it on occurs (one bincount, O(n + range): no sort, no hash).
    None when the range is wide (more than 4x the count) or the array small."""
    if v.size < SMALL or v.dtype.kind not in "iu":
        return None
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 4 * v.size + 1024 or hi >= 1 << 63:
        return None
    return lo, np.bincount((v.astype(np.int64) - lo) if lo else v.astype(np.intp, copy=False))


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values)."""
    v = np.asarray(values).reshape(-1)
    dense = _dense_counts(v)
    if dense is not None:
        lo, counts = dense
        return (np.flatnonzero(counts) + lo).astype(v.dtype)
    if not _hashable(v):
        return sorted_unique(v)
    import pandas as pd

    return np.sort(pd.unique(v))


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_counts=True)."""
    v = np.asarray(values).reshape(-1)
    dense = _dense_counts(v)
    if dense is not None:
        lo, counts = dense
        nz = np.flatnonzero(counts)
        return (nz + lo).astype(v.dtype), counts[nz].astype(np.int64)
    if not _hashable(v):
        return np.unique(v, return_counts=True)
    import pandas as pd

    codes, uniq = pd.factorize(v, sort=True)
    return np.asarray(uniq), np.bincount(codes, minlength=len(uniq)).astype(np.int64)


def distinct_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True): the sorted distinct values and each value's index among
    them."""
    v = np.asarray(values).reshape(-1)
    dense = _dense_counts(v)
    if dense is not None:
        lo, counts = dense
        nz = np.flatnonzero(counts)
        index = np.cumsum(counts > 0) - 1  # each value's index among the distinct ones
        return (nz + lo).astype(v.dtype), index[v.astype(np.int64) - lo].astype(np.int64)
    if not _hashable(v):
        u, inv = np.unique(v, return_inverse=True)
        return u, inv.reshape(-1)
    import pandas as pd

    codes, uniq = pd.factorize(v, sort=True)
    return np.asarray(uniq), codes.astype(np.int64)
