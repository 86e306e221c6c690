"""One comparison of two parses of the same file (two code paths that must agree): the whole Timeline,
or the same one-line error."""

from __future__ import annotations

import numpy as np


def assert_same_timeline(a, b) -> None:
    """a and b are Timelines or error lines ('TraceFormatError: ...'); equal string tables, columns in
    the same order with the same values and dtypes, lanes, metadata and devices."""
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.strings == b.strings
    assert list(a.events.columns) == list(b.events.columns)
    for c in a.events.columns:
        np.testing.assert_array_equal(a.events[c].to_numpy(), b.events[c].to_numpy(), err_msg=c)
        assert a.events[c].dtype == b.events[c].dtype
    assert a.lanes.equals(b.lanes)
    assert _plain(a.meta) == _plain(b.meta)
    assert a.devices == b.devices


def _plain(meta) -> dict:
    """RunMeta's fields with numpy arrays (the Kineto `[memory]` columns in `extra`) as lists, so that
    two metas compare by value."""

    def plain(v):
        if isinstance(v, np.ndarray):
            return (str(v.dtype), v.tolist())
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {f: plain(getattr(meta, f)) for f in meta.__struct_fields__}
