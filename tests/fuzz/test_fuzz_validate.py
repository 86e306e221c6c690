"""Property test of the validation layer (hypothesis): whatever integer columns a parser hands over,
`validate_columns` either refuses the file with TraceFormatError or returns columns on which every
later int64 computation is exact (times within ±2^62, lengths within 0 … 2^53, their sum below 2^62,
device ids that fit int32), and it drops exactly the rows that break a limit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.errors import TraceFormatError
from tracelab.io.validate import (
    DURATION_LIMIT_NS,
    INT32_LIMIT,
    TIME_LIMIT_NS,
    TOTAL_DURATION_LIMIT_NS,
    us_to_ns_checked,
    validate_columns,
)

I64 = st.integers(-(2**63), 2**63 - 1)
EDGE = st.sampled_from(
    [0, -1, 1, 2**31 - 1, 2**31, 2**32 + 1, 2**53, 2**53 + 1, 2**62 - 1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
)
VALUE = st.one_of(I64, EDGE, st.integers(0, 10**12))


@st.composite
def columns(draw):
    n = draw(st.integers(1, 40))
    start = np.array(draw(st.lists(VALUE, min_size=n, max_size=n)), dtype=np.int64)
    # end: start plus a small length most of the time, anything some of the time
    ends = [
        draw(st.one_of(VALUE, st.integers(0, 10**6).map(lambda d, s=int(s): min(s + d, 2**63 - 1))))
        for s in start.tolist()
    ]
    end = np.array(ends, dtype=np.int64)
    device = np.array(
        draw(st.lists(st.one_of(st.integers(-1, 8), EDGE), min_size=n, max_size=n)), dtype=np.int64
    )
    kind = np.array(draw(st.lists(st.sampled_from([0, 1, 2, 4, 6]), min_size=n, max_size=n)), dtype=np.int8)
    grid = np.array(
        draw(st.lists(st.one_of(st.integers(-1, 1024), EDGE), min_size=n, max_size=n)), dtype=np.int64
    )
    return {
        "start": start,
        "end": end,
        "device": device,
        "kind": kind,
        "grid_x": grid,
        "name": np.zeros(n, dtype=np.int32),
    }


def _expected_keep(cols, min_time):
    s = [int(x) for x in cols["start"]]
    e = [int(x) for x in cols["end"]]
    keep = []
    for i in range(len(s)):  # exact Python integers: no overflow possible in the reference
        lo = -TIME_LIMIT_NS if min_time is None else min_time
        ok = lo <= s[i] < TIME_LIMIT_NS and -TIME_LIMIT_NS < e[i] < TIME_LIMIT_NS and s[i] > -TIME_LIMIT_NS
        ok = ok and 0 <= e[i] - s[i] <= DURATION_LIMIT_NS
        d = int(cols["device"][i])
        gpu = int(cols["kind"][i]) in (0, 1, 2)
        if ok and (d < -1 or d >= INT32_LIMIT) and (gpu or d != -1):
            ok = False
        keep.append(ok)
    return keep


@settings(max_examples=300, deadline=None)
@given(cols=columns(), nsys=st.booleans())
def test_validate_columns_leaves_only_exact_int64_arithmetic(cols, nsys):
    min_time = 0 if nsys else None
    keep = _expected_keep(cols, min_time)
    lengths = [int(e) - int(s) for s, e, k in zip(cols["start"], cols["end"], keep) if k]
    try:
        out, notes = validate_columns(dict(cols), ("k",), "t.json", min_time_ns=min_time)
    except TraceFormatError as exc:
        assert "add up" in str(exc)
        assert sum(lengths) >= TOTAL_DURATION_LIMIT_NS * 0.999
        return
    assert len(out["start"]) == sum(keep)
    assert out["start"].tolist() == [int(x) for x, k in zip(cols["start"], keep) if k]
    s, e = out["start"].astype(object), out["end"].astype(object)
    assert all(-TIME_LIMIT_NS < x < TIME_LIMIT_NS for x in list(s) + list(e))
    assert all(0 <= b - a <= DURATION_LIMIT_NS for a, b in zip(s, e))
    assert sum(b - a for a, b in zip(s, e)) < TOTAL_DURATION_LIMIT_NS
    assert ((out["device"] >= -1) & (out["device"] < INT32_LIMIT)).all()
    assert ((out["grid_x"] >= -1) & (out["grid_x"] < INT32_LIMIT)).all()
    assert bool(notes) == (
        sum(keep) < len(keep) or bool(((cols["grid_x"] < -1) | (cols["grid_x"] >= INT32_LIMIT))[keep].any())
    )


@settings(max_examples=300, deadline=None)
@given(
    ts=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20).map(float)),
    dur=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e6)),
)
def test_microseconds_convert_exactly_or_are_flagged(ts, dur):
    start, end, ok = us_to_ns_checked(np.array([ts]), np.array([dur]))
    if ok[0]:
        assert abs(ts) < TIME_LIMIT_NS / 1000 and 0 <= dur <= DURATION_LIMIT_NS / 1000
        assert abs(int(start[0]) - ts * 1000) <= max(1.0, abs(ts) * 1000 * 2**-52 * 4)
        assert int(end[0]) >= int(start[0])
    else:
        assert not (
            np.isfinite(ts)
            and abs(ts) < TIME_LIMIT_NS / 1000
            and np.isfinite(dur)
            and 0 <= dur <= DURATION_LIMIT_NS / 1000
        )
