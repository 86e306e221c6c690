"""Interval math against a brute-force reference: each integer unit [t, t+1) is a cell."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.analyses.core import intervals as iv

T = 60  # time axis 0..T


def intervals_strategy(max_size=25, groups=1):
    one = st.tuples(st.integers(0, T), st.integers(0, 20), st.integers(0, groups - 1)).map(
        lambda x: (x[0], min(T, x[0] + x[1]), x[2])
    )
    return st.lists(one, max_size=max_size)


def arrays(items):
    a = np.array(items, dtype=np.int64).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2]


def cells(starts, ends):
    c = np.zeros(T, dtype=bool)
    for s, e in zip(starts.tolist(), ends.tolist()):
        c[s:e] = True
    return c


@settings(max_examples=300, deadline=None)
@given(intervals_strategy())
def test_merge_matches_cells(items):
    s, e, _ = arrays(items)
    us, ue = iv.merge(s, e)
    assert iv.union_length(s, e) == cells(s, e).sum()
    assert (ue >= us).all()
    # disjoint, sorted, not touching
    assert (us[1:] > ue[:-1]).all()
    # same covered cells
    assert np.array_equal(cells(us, ue), cells(s, e))
    # busy <= span
    if s.size:
        assert iv.union_length(s, e) <= e.max() - s.min()


@settings(max_examples=300, deadline=None)
@given(intervals_strategy(), intervals_strategy())
def test_intersection_exact_and_bounded(a, b):
    as_, ae, _ = arrays(a)
    bs, be, _ = arrays(b)
    inter = iv.intersection_length(as_, ae, bs, be)
    assert inter == (cells(as_, ae) & cells(bs, be)).sum()
    assert inter <= iv.union_length(as_, ae)
    assert inter <= iv.union_length(bs, be)


@settings(max_examples=300, deadline=None)
@given(intervals_strategy(max_size=30, groups=4), st.integers(1, 3))
def test_coverage_at_least_k_groups(items, k):
    s, e, g = arrays(items)
    depth = np.zeros(T, dtype=int)
    for grp in range(4):
        m = g == grp
        depth += cells(s[m], e[m])
    assert iv.coverage_at_least(s, e, g, k) == (depth >= k).sum()
    if k == 2:
        # overlap between streams is at most the busy time of the union
        assert iv.coverage_at_least(s, e, g, 2) <= iv.union_length(s, e)


@settings(max_examples=200, deadline=None)
@given(intervals_strategy(max_size=30, groups=5))
def test_grouped_union_lengths(items):
    s, e, g = arrays(items)
    got = iv.grouped_union_lengths(s, e, g, 5)
    for grp in range(5):
        m = g == grp
        assert got[grp] == cells(s[m], e[m]).sum()


@settings(max_examples=300, deadline=None)
@given(
    intervals_strategy(),
    st.lists(st.tuples(st.integers(0, T), st.integers(0, T)), max_size=10),
)
def test_covered_length(items, windows):
    s, e, _ = arrays(items)
    us, ue = iv.merge(s, e)
    c = cells(s, e)
    if windows:
        a = np.array([min(x) for x in windows], dtype=np.int64)
        b = np.array([max(x) for x in windows], dtype=np.int64)
        got = iv.covered_length(us, ue, a, b)
        want = [c[x:y].sum() for x, y in zip(a.tolist(), b.tolist())]
        assert got.tolist() == want


def test_points_add_no_length():
    s = np.array([0, 50, 100], dtype=np.int64)
    e = np.array([10, 50, 120], dtype=np.int64)
    us, ue = iv.merge(s, e)
    assert iv.length(us, ue) == 30


def test_merge_return_index_points_at_opening_interval():
    s = np.array([30, 0, 5, 40], dtype=np.int64)
    e = np.array([35, 10, 8, 41], dtype=np.int64)
    us, ue, idx = iv.merge(s, e, return_index=True)
    assert us.tolist() == [0, 30, 40] and ue.tolist() == [10, 35, 41]
    assert idx.tolist() == [1, 0, 3]


def test_large_epoch_times_do_not_overflow():
    base = 1_700_000_000_000_000_000  # epoch ns
    s = base + np.array([0, 5, 100, 0, 50], dtype=np.int64)
    e = base + np.array([10, 20, 110, 60, 70], dtype=np.int64)
    g = np.array([0, 0, 0, 1, 1])
    assert iv.grouped_union_lengths(s, e, g, 2).tolist() == [30, 70]
    assert iv.coverage_at_least(s, e, g, 2) == 20  # [0, 20) only


def test_running_max_index():
    e = np.array([5, 3, 9, 9, 4], dtype=np.int64)
    runmax, arg = iv.running_max_index(e)
    assert runmax.tolist() == [5, 5, 9, 9, 9]
    assert arg.tolist() == [0, 0, 2, 3, 3]


def _union_with_points(items):
    """A union as `merge` returns it: disjoint, sorted, possibly zero-length points."""
    s, e, _ = arrays(items)
    return iv.merge(s, e)


@settings(max_examples=400, deadline=None)
@given(intervals_strategy(), intervals_strategy())
def test_intersect_and_subtract_match_cells(a, b):
    """intersect / subtract of two unions (points included) against the cell-wise answer: pieces are
    sorted, positive, pairwise disjoint, and cover exactly the cells of A and B (of A and not B)."""
    a_s, a_e = _union_with_points(a)
    b_s, b_e = _union_with_points(b)
    ca, cb = cells(a_s, a_e), cells(b_s, b_e)
    for (s, e), want in ((iv.intersect(a_s, a_e, b_s, b_e), ca & cb), (iv.subtract(a_s, a_e, b_s, b_e), ca & ~cb)):
        assert (e > s).all()
        assert (s[1:] >= e[:-1]).all()  # sorted, no overlap (touching pieces allowed)
        assert np.array_equal(cells(np.clip(s, 0, T), np.clip(e, 0, T)), want)
        assert int((e - s).sum()) == int(want.sum())


def test_a_point_of_the_union_splits_its_complement():
    """Subtracting a zero-length interval (a GPU op rounded to 0 µs) leaves the time whole, in two pieces
    that touch (what the sweep this replaced gave too)."""
    s, e = iv.subtract(np.array([0]), np.array([10]), np.array([4]), np.array([4]))
    assert s.tolist() == [0, 4] and e.tolist() == [4, 10]
    s, e = iv.intersect(np.array([0, 20]), np.array([10, 30]), np.array([5, 25]), np.array([22, 40]))
    assert s.tolist() == [5, 20, 25] and e.tolist() == [10, 22, 30]
