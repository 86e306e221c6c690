"""Group rows by several integer key columns at once, in one hash pass instead of a sort.

`group_rows(keys)` numbers the distinct key tuples in sorted (lexicographic) order, as
`DataFrame.groupby(keys, sort=True).ngroup()` does, but without building a frame: each column is
turned into small codes (an offset when its range is small, a hash factorization otherwise),
the codes are combined into one int64 key by mixed radix (re-factorized whenever the radix product
would leave int64), the combined key is factorized once, and only the distinct tuples are sorted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

_DIRECT_RANGE = 1 << 32  # columns spanning fewer values than this are coded by offset, no hashing
_KEY_LIMIT = 1 << 62


def _codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes in [0, card) that keep the order of the values, and card."""
    lo, hi = int(col.min()), int(col.max())
    if hi - lo < _DIRECT_RANGE:
        return (col.astype(np.int64, copy=False) - lo), hi - lo + 1
    codes, uniques = pd.factorize(col, sort=True)
    return codes.astype(np.int64, copy=False), len(uniques)


def group_rows(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(group id of every row, first row of each group); groups numbered in lexicographic order of
    their key tuples. All key columns are integer arrays of one length n > 0."""
    n = len(keys[0])
    key = np.zeros(n, dtype=np.int64)
    card = 1
    for col in keys:
        col = np.asarray(col)
        if col.min() == col.max():
            continue  # a constant column splits nothing
        codes, c = _codes(col)
        if card * c >= _KEY_LIMIT:  # compress the key so far to its distinct values (order kept)
            key, uniq = pd.factorize(key, sort=True)
            key = key.astype(np.int64, copy=False)
            card = len(uniq)
        key = key * c + codes
        card *= c
    codes, uniq = pd.factorize(key, sort=False)  # first-appearance order: one hash pass
    codes = codes.astype(np.int64, copy=False)
    # a code appears for the first time exactly where it exceeds every code before it
    seen = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.concatenate(([True], seen[1:] > seen[:-1])))
    rank = np.empty(len(uniq), dtype=np.int64)
    by_value = np.argsort(np.asarray(uniq), kind="stable")  # the combined key keeps lexicographic order
    rank[by_value] = np.arange(len(uniq), dtype=np.int64)
    return rank[codes], first[by_value]
