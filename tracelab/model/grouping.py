"""Group rows by several integer key columns at once, numbered in sorted (lexicographic) key order, as
`DataFrame.groupby(keys, sort=True).ngroup()` numbers them, with numpy only (the model needs no pandas).

Each key column becomes order-preserving dense codes (a lookup table when its values span a small range,
else a sort of the column); the codes are folded into one int64 key by mixed radix, re-densified
before the radix product would pass 2^62, and the folded key is made dense once more: group ids in
key order. A constant column splits nothing and is skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tracelab.settings import usable_cores


def any_of(values: np.ndarray, choices: Iterable[int]) -> np.ndarray:
    """np.isin(values, choices) for a few choices (event kinds): one comparison per choice, without np.isin's
    sort (np.isin of an int8 kind column with two or three kinds took 33 ms per 4.5M rows, the comparisons
    1-2 ms; and np.isin imports numpy.ma)."""
    values = np.asarray(values)
    out = np.zeros(values.shape, dtype=bool)
    for c in choices:
        out |= values == int(c)
    return out


def stable_order(codes: np.ndarray) -> np.ndarray:
    """np.argsort(codes, kind="stable"), as a radix sort of int16 when the codes fit in [0, 2^15) (small
    codes: threads, lanes, levels; several times faster than the int64 merge sort on millions of rows)."""
    if codes.size and 0 <= int(codes.min()) and int(codes.max()) < 1 << 15:
        return np.argsort(codes.astype(np.int16), kind="stable")
    return np.argsort(codes, kind="stable")


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique(values), by one sort for integers and booleans (integers over a narrow range: a table of
    flags instead): without np.unique's check for a masked array, which imports numpy.ma (~0.1 s, once per
    process)."""
    v = np.asarray(values).reshape(-1)
    if v.dtype.kind not in "iub":
        return np.unique(v)
    if v.size > 64 and (v.dtype.kind == "i" or (v.dtype.kind == "u" and v.dtype.itemsize < 8)):
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < _table_limit(v.size):  # a narrow range (ids, codes): flags over it, no sort
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[v.astype(np.int64) - lo] = True
            return (np.flatnonzero(present) + lo).astype(v.dtype)
    s = np.sort(v)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for integers, without importing numpy.ma (see sorted_unique):
    the distinct values sorted, and each value's index among them. Values that span a narrow range (string
    ids, kinds, small codes) through a table of flags over the range, without a sort."""
    v = np.asarray(values).reshape(-1)
    if v.size and (v.dtype.kind == "i" or (v.dtype.kind == "u" and v.dtype.itemsize < 8)):
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < _table_limit(v.size):
            offset = v.astype(np.int64) - lo
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[offset] = True
            rank = np.cumsum(present, dtype=np.int64) - 1
            return (np.flatnonzero(present) + lo).astype(v.dtype), rank[offset]
    u = sorted_unique(v)
    return u, np.searchsorted(u, v).astype(np.int64)


def member(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """np.isin(values, sorted_unique) for sorted distinct keys: a binary search (cheaper than np.isin for
    few keys, and without np.isin's call of np.unique)."""
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_unique, values), len(sorted_unique) - 1)
    return sorted_unique[pos] == values


def _table_limit(n: int) -> int:
    """The widest value range that is densified through a lookup table (else through a sort)."""
    return max(1 << 16, 2 * n)


def _by_table(offset: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """Dense codes of int64 offsets in 0..width-1 through a table of `width` flags. Few distinct offsets
    (lanes, threads) are numbered by writing their ranks into the table's seen slots alone (no running
    sum over the whole table: 0.06 s of a 9M-slot table for the 4.5M events' lane keys)."""
    present = np.zeros(width, dtype=bool)
    present[offset] = True
    seen = np.flatnonzero(present)
    if seen.size <= width >> 6:
        del present
        rank = np.empty(width, dtype=np.int64)  # only the seen slots are written, and only they are read
        rank[seen] = np.arange(seen.size, dtype=np.int64)
        return rank[offset], int(seen.size)
    rank = np.cumsum(present, dtype=np.int64) - 1
    return rank[offset], int(rank[-1]) + 1


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Order-preserving dense codes 0..k-1 of integer values, and k: equal values get equal codes and
    a smaller value a smaller code. A lookup table when the values span a small range, else a sort."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        return np.zeros(n, dtype=np.int64), 1
    if hi - lo < _table_limit(n):
        return _by_table(values.astype(np.int64) - lo, hi - lo + 1)
    uniq = sorted_unique(values)
    if len(uniq) <= n // 8:  # few distinct values: a binary search each beats unique's inverse (a full argsort)
        return np.searchsorted(uniq, values).astype(np.int64, copy=False), len(uniq)
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), len(uniq)


def group_codes(keys: Iterable[np.ndarray]) -> tuple[np.ndarray, int]:
    """Dense ids of the rows' key tuples, numbered in lexicographic key order, and how many there are.
    `keys` may be a generator (one key column alive at a time).

    A key column that spans a narrow range is folded in as its offsets from its minimum (no pass to
    make it dense), a wide one as its dense codes; the folded key is made dense (by a table) whenever
    the next fold would pass the table's width, and once at the end. Offsets order like dense codes,
    so the ids are the same as folding dense codes of every column."""
    it = iter(keys)
    first = next(it, None)
    if first is None:
        return np.zeros(0, dtype=np.int64), 0
    box = [np.asarray(first)]
    del first
    n = len(box[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0

    def parts() -> Iterator[tuple[np.ndarray, int] | None]:
        yield _prepare(box.pop(), n)
        for k in it:
            yield _prepare(np.asarray(k), n)

    return _fold(parts(), n)


PARALLEL_KEYS = 200_000  # rows from which group_codes_of makes its key columns on worker threads
KEY_WORKERS = 3  # at most this many prepared key columns (8 bytes a row each) wait to be folded in


def group_codes_of(
    makers: Sequence[Callable[[], np.ndarray]], n: int, workers: int | None = None
) -> tuple[np.ndarray, int]:
    """`group_codes` of the key columns that `makers` make (each n rows), made and turned into offsets or
    codes on `workers` threads (default: up to KEY_WORKERS from PARALLEL_KEYS rows; numpy releases the GIL
    in those passes) while this thread folds them in order; at most `workers` prepared columns wait at a
    time. The ids are those of group_codes."""
    if workers is None:
        workers = min(usable_cores(), KEY_WORKERS) if n >= PARALLEL_KEYS else 1
    if workers <= 1 or len(makers) <= 1 or n == 0:
        return group_codes(m() for m in makers)

    def prepared(pool: ThreadPoolExecutor) -> Iterator[tuple[np.ndarray, int] | None]:
        waiting: deque[Future] = deque()
        todo = iter(makers)
        for make in todo:
            waiting.append(pool.submit(lambda make=make: _prepare(np.asarray(make()), n)))
            if len(waiting) >= workers:
                break
        while waiting:
            got = waiting.popleft().result()
            make = next(todo, None)
            if make is not None:
                waiting.append(pool.submit(lambda make=make: _prepare(np.asarray(make()), n)))
            yield got

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="group-codes") as pool:
        return _fold(prepared(pool), n)


def _prepare(k: np.ndarray, n: int) -> tuple[np.ndarray, int] | None:
    """A key column as what group_codes folds in: (its offsets from its minimum, or its dense codes; their
    bound), None for a constant column (it splits nothing)."""
    lo, hi = int(k.min()), int(k.max())
    if lo == hi:
        return None
    if hi - lo < _table_limit(n):
        return np.subtract(k, lo, dtype=np.int64), hi - lo + 1  # one pass (astype then subtract: two)
    return dense_codes(k)


def _fold(parts: Iterable[tuple[np.ndarray, int] | None], n: int) -> tuple[np.ndarray, int]:
    """Fold prepared key columns of n > 0 rows into dense ids (group_codes)."""
    code = np.zeros(n, dtype=np.int64)
    bound = 1
    limit = _table_limit(n)
    for p in parts:
        if p is None:
            continue
        c, m = p
        del p
        if bound > 1 and bound * m > limit:  # keep the folded key narrow: make it dense first (then bound <= n)
            code, bound = _by_table(code, bound) if bound <= limit else dense_codes(code)
        if bound * m >= 1 << 62:  # pragma: no cover - only for billions of rows
            raise OverflowError("too many distinct keys to fold into int64")
        if bound > 1:
            code *= m
            code += c
        else:
            code = c
        bound *= m
    if bound <= 1:
        return code, min(bound, n)
    return _by_table(code, bound) if bound <= limit else dense_codes(code)


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
