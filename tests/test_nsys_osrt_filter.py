"""keep_os_calls_of_host_threads filters read_tables' parts before the merge: the merged result must be
the one the former filter (on the merged columns) gave, for any mix of tables, threads and start times."""

from __future__ import annotations

import numpy as np
import pytest

from tracelab.io.nsys.osrt import keep_os_calls_of_host_threads
from tracelab.io.nsys.read import merge_sorted
from tracelab.model import EventKind

CAT = 5


def _reference(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The filter as it was, on merged columns."""
    kind = cols["kind"]
    os_call = (kind == int(EventKind.OTHER)) & (cols["category"] == CAT)
    if not os_call.any():
        return cols, []
    host = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER), int(EventKind.NVTX_RANGE),
                          int(EventKind.NVTX_MARK)])
    key = lambda m: (cols["pid"][m].astype(np.int64) << 32) | (cols["tid"][m].astype(np.int64) & 0xFFFFFFFF)
    drop = os_call.copy()
    drop[os_call] = ~np.isin(key(os_call), np.unique(key(host)))
    n = int(drop.sum())
    if n == 0:
        return cols, []
    threads = int(np.unique(key(drop)).size)
    note = (f"{n} OS runtime call{'s' * (n != 1)} on {threads} thread{'s' * (threads != 1)} without CUDA calls or "
            "NVTX ranges left out (helper threads)")
    return {k: v[~drop] for k, v in cols.items()}, [note]


def _part(rng: np.random.Generator, n: int, kind: EventKind, threads: int, **extra) -> dict[str, np.ndarray]:
    cols = {
        "start": rng.integers(0, 50, n).astype(np.int64),
        "end": rng.integers(50, 99, n).astype(np.int64),
        "kind": np.full(n, int(kind), dtype=np.int8),
        "name": rng.integers(0, 4, n).astype(np.int32),
        "correlation": rng.integers(0, 9, n).astype(np.int64),
    }
    if threads:
        cols["pid"] = rng.integers(1, 3, n).astype(np.int64)
        cols["tid"] = rng.integers(1, threads + 1, n).astype(np.int64)
        cols["_gpid"] = cols["pid"] << 24
    cols.update(extra)
    return cols


def _copy(parts):
    return [{k: v.copy() for k, v in p.items()} for p in parts]


@pytest.mark.parametrize("seed", range(40))
def test_filter_before_merge_is_the_filter_after_merge(seed):
    rng = np.random.default_rng(seed)
    parts = []
    if rng.random() < 0.7:
        parts.append(_part(rng, int(rng.integers(1, 30)), EventKind.KERNEL, 0))
        parts[-1]["device"] = np.zeros(len(parts[-1]["start"]), np.int64)
    if rng.random() < 0.7:
        parts.append(_part(rng, int(rng.integers(1, 30)), EventKind.RUNTIME, int(rng.integers(1, 4))))
    if rng.random() < 0.4:
        n = int(rng.integers(1, 10))
        parts.append(_part(rng, n, EventKind.NVTX_RANGE, 2, category=rng.integers(-1, 7, n).astype(np.int32)))
    if rng.random() < 0.9:
        n = int(rng.integers(1, 30))
        parts.append(_part(rng, n, EventKind.OTHER, int(rng.integers(1, 6)), category=np.full(n, CAT, np.int32)))
    if not parts:
        return
    want, want_notes = _reference(merge_sorted(_copy(parts)))
    kept, notes = keep_os_calls_of_host_threads(_copy(parts), CAT)
    got = merge_sorted(kept)
    assert notes == want_notes
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
