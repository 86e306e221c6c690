"""model.grouping.group_rows against plain Python: sorted distinct key tuples, numbered in order."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.model.grouping import group_rows

# values from small codes to the int64 extremes, so both the offset and the hash coding and the
# key compression (radix products past 2^62) are exercised
VALUES = st.one_of(
    st.integers(-3, 3),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1 << 20, (1 << 20) + 1, 1 << 40, -(1 << 40), 2**63 - 1, -(2**63)]),
)


def reference(cols):
    rows = list(zip(*[c.tolist() for c in cols]))
    order = sorted(set(rows))
    number = {t: i for i, t in enumerate(order)}
    ids = [number[t] for t in rows]
    first = [rows.index(t) for t in order]
    return ids, first


def assert_groups_as_reference(cols: list[np.ndarray]) -> None:
    ids, first = group_rows(cols)
    want_ids, want_first = reference(cols)
    assert ids.tolist() == want_ids
    assert first.tolist() == want_first


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda k: st.lists(st.tuples(*[VALUES] * k), min_size=1, max_size=40)))
def test_group_rows_matches_sorted_distinct_tuples(rows):
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    assert_groups_as_reference(cols)


def test_many_wide_columns_compress_the_key():
    rng = np.random.default_rng(7)
    # 8 columns of 2^30 distinct-ish values: the radix product passes 2^62 several times
    cols = [rng.integers(0, 1 << 30, 5000) * 4096 for _ in range(8)]
    cols[3][:2500] = cols[3][2500:]  # some repeated tuples
    for c in cols:
        c[:2500] = c[2500:]
    assert_groups_as_reference(cols)


def test_mixed_dtypes_narrow_and_wide_columns():
    """Lane-key-like columns: int8 / int32 / int64, narrow ranges folded as offsets, a wide column with few
    distinct values (dense codes by binary search), a wide one with many (by unique's inverse), and
    folds that pass the table width several times."""
    rng = np.random.default_rng(11)
    n = 3000
    cols = [
        rng.integers(-1, 2, n).astype(np.int8),
        rng.choice([-1, 0, 7], n).astype(np.int32),
        rng.choice([-1, 1_701_896, 5, 1 << 40], n).astype(np.int64),
        rng.integers(-(1 << 62), 1 << 62, n),
        rng.integers(24, 36, n).astype(np.int32),
        rng.choice([-(2**63), 2**63 - 1], n),
        np.full(n, 4, dtype=np.int16),
    ]
    cols[3][: n // 2] = cols[3][n // 2 :]
    for k in range(1, len(cols) + 1):
        for sub in (cols[:k], cols[-k:]):
            assert_groups_as_reference(sub)


def test_sorted_unique_is_np_unique():
    from tracelab.model.grouping import sorted_unique

    rng = np.random.default_rng(3)
    for a in (
        np.zeros(0, np.int64),
        np.array([5], np.int32),
        rng.integers(-5, 5, 1000).astype(np.int8),
        rng.integers(-(2**63), 2**63 - 1, 1000),
        rng.integers(0, 2, 100).astype(bool),
        rng.integers(0, 9, (4, 5)),
        np.array([1.5, np.nan, 1.5, np.nan]),
    ):
        want = np.unique(a)
        got = sorted_unique(a)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 6).flatmap(lambda k: st.lists(st.tuples(*[VALUES] * k), min_size=1, max_size=40)),
    st.integers(1, 4),
)
def test_group_codes_of_on_worker_threads_numbers_like_the_reference(rows, workers):
    """group_codes_of (key columns made on worker threads, folded in order) numbers the tuples as the
    sorted distinct tuples do, whatever the number of workers."""
    from tracelab.model.grouping import group_codes_of

    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    ids, k = group_codes_of([lambda c=c: c for c in cols], len(rows), workers)
    want_ids, want_first = reference(cols)
    assert ids.tolist() == want_ids
    assert k == len(want_first)


def test_group_codes_of_few_keys_among_many_rows():
    """The path a big timeline's lanes take: 300,000 rows (worker threads by default), few distinct
    tuples over a narrow and a wide column, a constant one, and a table of few keys in a wide range."""
    from tracelab.model.grouping import PARALLEL_KEYS, group_codes_of

    rng = np.random.default_rng(7)
    n = PARALLEL_KEYS + 100_000
    narrow = rng.integers(-1, 3, n)
    wide = rng.choice(np.array([-1, 1_701_896, 1 << 40]), n)
    const = np.full(n, -1)
    sparse = rng.choice(np.array([0, 5_000_000]), n)
    cols = [narrow, const, wide, sparse]
    ids, k = group_codes_of([lambda c=c: c for c in cols], n)
    tuples = list(zip(*[c.tolist() for c in cols]))
    number = {t: i for i, t in enumerate(sorted(set(tuples)))}
    assert k == len(number)
    assert ids.tolist() == [number[t] for t in tuples]


def test_unique_inverse_is_np_unique():
    """Narrow ranges go through a table of flags, wide ones through a sort: both as np.unique says."""
    from tracelab.model.grouping import unique_inverse

    rng = np.random.default_rng(4)
    for a in (
        np.array([7], np.int32),
        rng.integers(-5, 5, 1000).astype(np.int8),
        rng.integers(0, 3000, 5000).astype(np.int32),  # string ids: a table
        rng.integers(-(1 << 40), 1 << 40, 1000),  # wide: a sort
        rng.choice([0, 70_000, 140_001], 10).astype(np.int64),  # few values over a range past the table's
        rng.integers(0, 200, 1000).astype(np.uint8),
        rng.choice([0, 2**64 - 1], 50).astype(np.uint64),
    ):
        want, want_inv = np.unique(a, return_inverse=True)
        got, inv = unique_inverse(a)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(inv, want_inv.reshape(-1))
        assert got.dtype == want.dtype and inv.dtype == np.int64
