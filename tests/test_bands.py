"""analyses/core/bands.py: per-group unions, differences and covered lengths computed once with every
group in its own band equal the same computed group by group (intervals.merge / subtract / covered_length
per group, and plain Python sums of integer lengths), on random integer intervals; too-wide bands say None."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.bands import Bands, band_sums, group_index
from tracelab.analyses.core.intervals import covered_length, merge, subtract


def _random_groups(seed: int, n_groups: int = 7):
    rng = np.random.default_rng(seed)
    base = 1_700_000_000_000_000_000  # epoch ns, as traces hold them
    g = rng.integers(0, n_groups, 400)
    s = base + rng.integers(0, 50_000, g.size)
    e = s + rng.integers(0, 3_000, g.size)  # zero-length ones too
    wa = base + rng.integers(-1_000, 52_000, 60)
    wb = wa + rng.integers(0, 20_000, wa.size)
    wg = rng.integers(0, n_groups, wa.size)
    return g, s, e, wg, wa, wb


def _per_group_union_length(s, e):
    us, ue = merge(s, e)
    return sum(int(b) - int(a) for a, b in zip(us.tolist(), ue.tolist()))


def test_banded_covered_length_and_sums_equal_group_by_group():
    for seed in range(5):
        g, s, e, wg, wa, wb = _random_groups(seed)
        n = 7
        bands = Bands.of(n, s, e, wa, wb)
        assert bands is not None
        bs, be = bands.shift(s, g), bands.shift(e, g)
        us, ue = merge(bs, be)
        got = covered_length(us, ue, bands.shift(wa, wg), bands.shift(wb, wg))
        sums = band_sums(bands, us, ue - us, n)
        for k in range(n):
            m = g == k
            gu, ge = merge(s[m], e[m])
            w = wg == k
            assert got[w].tolist() == covered_length(gu, ge, wa[w], wb[w]).tolist()
            assert int(sums[k]) == _per_group_union_length(s[m], e[m])


def test_banded_subtract_equals_group_by_group():
    g, s, e, _wg, wa, wb = _random_groups(11)
    bands = Bands.of(7, s, e, wa, wb)
    half = np.arange(s.size) % 2 == 0
    a = merge(bands.shift(s[half], g[half]), bands.shift(e[half], g[half]))
    b = merge(bands.shift(s[~half], g[~half]), bands.shift(e[~half], g[~half]))
    xs, xe = subtract(*a, *b)
    sums = band_sums(bands, xs, xe - xs, 7)
    for k in range(7):
        ma, mb = half & (g == k), ~half & (g == k)
        ps, pe = subtract(*merge(s[ma], e[ma]), *merge(s[mb], e[mb]))
        assert int(sums[k]) == sum(int(y) - int(x) for x, y in zip(ps.tolist(), pe.tolist()))


def test_too_wide_bands_and_group_index():
    t = np.array([0, 1 << 58], dtype=np.int64)
    assert Bands.of(8, t) is None  # 8 bands of 2^58 pass 2^60
    assert Bands.of(2, t) is not None
    i, ok = group_index(np.array([3, 5, 9]), np.array([5, 4, 9, 10, 3]))
    assert ok.tolist() == [True, False, True, False, True]
    assert i[ok].tolist() == [1, 2, 0]
