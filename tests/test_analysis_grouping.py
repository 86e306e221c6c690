"""The grouped-once helpers the analyses stand on (issue 13): hashed distinct values, sorted-key look-ups,
events grouped by (rank, kind), name tables. Each against the plain numpy computation it replaces."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.analyses.core.distinct import SortedKeys, distinct, distinct_codes, distinct_counts
from tracelab.analyses.core.rows import kind_rows, names_matching, ranks_of, rows_of
from tracelab.model import EventKind, RunMeta, build_timeline

ints = st.lists(st.integers(-(2**40), 2**40) | st.integers(-5, 5), max_size=200)


@settings(max_examples=200, deadline=None)
@given(ints, st.sampled_from([np.int8, np.int32, np.int64]), st.integers(0, 3))
def test_distinct_is_np_unique(values, dtype, repeat):
    info = np.iinfo(dtype)
    v = np.clip(np.array(values, dtype=np.int64), info.min, info.max).astype(dtype)
    v = np.tile(v, 1 + repeat * 30)  # past the size where hashing starts
    assert np.array_equal(distinct(v), np.unique(v)) and distinct(v).dtype == v.dtype
    u, c = distinct_counts(v)
    u0, c0 = np.unique(v, return_counts=True)
    assert np.array_equal(u, u0) and np.array_equal(c, c0)
    u, inv = distinct_codes(v)
    u0, inv0 = np.unique(v, return_inverse=True)
    assert np.array_equal(u, u0) and np.array_equal(inv, inv0.reshape(-1))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=80), st.lists(st.integers(-5, 70), max_size=40), st.integers(0, 10**9))
def test_sorted_keys_find_is_the_first_equal_key(keys, queries, offset):
    k = np.sort(np.array(keys, dtype=np.int64)) + offset
    q = np.array(queries, dtype=np.int64) + offset
    want = [keys_list.index(x) if x in (keys_list := k.tolist()) else -1 for x in q.tolist()]
    assert SortedKeys(k).find(q).tolist() == want
    sparse = k * 1000  # too sparse for a table: the binary search answers
    assert SortedKeys(sparse).find(q * 1000).tolist() == want


def _timeline(rows):
    cols = {c: np.array([r[i] for r in rows], dtype=np.int64) for i, c in enumerate(("kind", "rank", "start"))}
    cols["end"] = cols["start"] + 1
    gpu = np.isin(cols["kind"], [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET),
                                 int(EventKind.GPU_ANNOTATION)])
    cols["device"] = np.where(gpu, 0, -1)
    cols["stream"] = np.where(gpu, 7, -1)
    cols["pid"] = cols["tid"] = np.where(gpu, -1, 1)
    cols["name"] = np.array([i % 3 for i in range(len(rows))], dtype=np.int64)
    return build_timeline(cols, ("ProfilerStep#1", "step 2", "gemm"), RunMeta(source="t", format="kineto"))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([int(k) for k in EventKind]), st.sampled_from([0, 3, 7]),
                          st.integers(0, 1000)), max_size=60))
def test_rows_of_is_the_mask_of_rank_and_kinds(rows):
    tl = _timeline(rows)
    kind = tl.events["kind"].to_numpy()
    rank = tl.events["rank"].to_numpy()
    assert ranks_of(tl) == tuple(int(r) for r in np.unique(rank))
    assert sum(v.size for v in kind_rows(tl).values()) == len(tl.events)
    for r in (0, 3, 7, 9):
        for kinds in ((EventKind.RUNTIME, EventKind.DRIVER), (EventKind.KERNEL,), tuple(EventKind)):
            want = np.flatnonzero((rank == r) & np.isin(kind, [int(k) for k in kinds]))
            assert rows_of(tl, r, kinds).tolist() == want.tolist()


def test_names_matching_answers_for_every_id_and_for_none():
    tl = _timeline([(int(EventKind.CPU_OP), 0, 5)])
    table = names_matching(tl, re.compile(r"^ProfilerStep#\d+$"), re.compile(r"^step \d+$"))
    assert table.tolist() == [True, True, False, False]  # ..., and id -1 (no name): the last slot
    assert table[np.array([2, -1, 0])].tolist() == [False, False, True]
