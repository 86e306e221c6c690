"""Group rows by several integer key columns at once, numbered in sorted (lexicographic) key order, as
`DataFrame.groupby(keys, sort=True).ngroup()` numbers them, with numpy only (the model needs no pandas).

Each key column becomes order-preserving dense codes (a lookup table when its values span a small range,
else a sort of the column); the codes are folded into one int64 key by mixed radix, re-densified
before the radix product would pass 2^62, and the folded key is made dense once more: group ids in
key order. A constant column splits nothing and is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique(values) for integers, bools or strings (not floats: NaNs would stay apart), by one sort:
    faster here than numpy's hash-based unique on these columns, and without the import of numpy.ma
    (~20 ms of start-up) that np.unique's first plain call makes."""
    s = np.sort(np.asarray(values).reshape(-1))
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def member(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """np.isin(values, sorted_unique) for sorted distinct keys: a binary search (cheaper than np.isin for
    few keys, and without np.isin's call of np.unique)."""
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_unique, values), len(sorted_unique) - 1)
    return sorted_unique[pos] == values


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Order-preserving dense codes 0..k-1 of integer values, and k: equal values get equal codes and
    a smaller value a smaller code. A lookup table when the values span a small range, else a sort."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        return np.zeros(n, dtype=np.int64), 1
    if hi - lo < max(1 << 16, 2 * n):
        offset = values.astype(np.int64) - lo
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[offset] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return rank[offset], int(rank[-1]) + 1
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), len(uniq)


def group_codes(keys: Iterable[np.ndarray]) -> tuple[np.ndarray, int]:
    """Dense ids of the rows' key tuples, numbered in lexicographic key order, and how many there are.
    `keys` may be a generator (one key column alive at a time)."""
    code: np.ndarray | None = None
    bound = 1
    for k in keys:
        if code is None:
            code = np.zeros(len(k), dtype=np.int64)
        c, m = dense_codes(np.asarray(k))
        if m <= 1:
            continue  # a constant column splits nothing
        if bound * m >= 1 << 62:  # keep the folded key in int64: make it dense first (then bound <= n)
            code, bound = dense_codes(code)
        code = code * m + c
        bound *= m
    if code is None:
        return np.zeros(0, dtype=np.int64), 0
    return dense_codes(code) if bound > 1 else (code, min(bound, len(code)))


def first_rows(ids: np.ndarray, k: int) -> np.ndarray:
    """For ids in 0..k-1: the first row holding each id."""
    first = np.full(k, len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
    return first


def group_rows(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(group id of every row, first row of each group); groups numbered in lexicographic order of
    their key tuples. All key columns are integer arrays of one length n > 0."""
    ids, k = group_codes(keys)
    return ids, first_rows(ids, k)
