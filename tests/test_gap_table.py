"""Gaps as columns (issue 13): `analyze` returns a GapTable that stands for the tuple of Gaps it holds,
and classifies every idle interval once: the gaps are the idle intervals of at least the threshold, and
the causes of any subset of intervals are those the whole classification gives them."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

from tracelab.analyses import analyze
from tracelab.analyses.core.host import host_views
from tracelab.analyses.device.devices import device_rows
from tracelab.analyses.gaps.idle import Classification, idle_intervals
from tracelab.analyses.results import CAUSES, AnalysisOptions, GapTable, cause_totals, longest_gaps
from tracelab.demo import demo_run
from tracelab.io import load_trace
from tracelab.render.text.gap_evidence import gap_evidence

RUNS = ("sync_pitfalls-item_every_step-nsys", "overlap-streams_pageable-torch")


@pytest.fixture(scope="module", params=RUNS)
def timeline(request, tmp_path_factory):
    return load_trace(demo_run(request.param, tmp_path_factory.mktemp("demo")))


def test_gap_table_behaves_like_the_tuple_of_its_gaps(timeline):
    gaps = analyze(timeline).gaps
    assert isinstance(gaps, GapTable) and len(gaps) > 10
    as_tuple = tuple(gaps)  # every Gap, made once
    assert gaps == as_tuple and gaps == list(as_tuple) and as_tuple == tuple(gaps)
    assert [g.detail for g in as_tuple] == list(range(len(gaps)))
    assert gaps[0] == as_tuple[0] and gaps[-1] == as_tuple[-1] and gaps[3:7] == as_tuple[3:7]
    fresh = pickle.loads(pickle.dumps(gaps))  # a new table without the made objects
    assert fresh == gaps and fresh[5] == as_tuple[5] and fresh[2:4] == as_tuple[2:4]
    with pytest.raises(IndexError):
        fresh[len(gaps)]
    for g in as_tuple:  # columns and objects say the same
        assert g.duration_ns == g.end_ns - g.start_ns and g.cause in CAUSES
    # the longest gaps as a sort of the objects gives them, ties in table order
    want = sorted(as_tuple, key=lambda g: -g.duration_ns)
    assert longest_gaps(fresh, 5) == want[:5] and longest_gaps(fresh) == want
    assert longest_gaps(list(as_tuple), 5) == want[:5]
    # per-cause totals, counted over the objects in plain Python
    count, total, first = Counter(), Counter(), {}
    for i, g in enumerate(want):
        count[g.cause] += 1
        total[g.cause] += g.duration_ns
        first.setdefault(g.cause, i)
    order = sorted(count, key=lambda c: (-total[c], first[c]))
    assert cause_totals(fresh) == [(c, count[c], total[c]) for c in order]
    assert GapTable.of(as_tuple) == gaps
    # a part of the table keeps each gap's detail row, so its evidence is that of those gaps
    a = analyze(timeline)
    part = a.gaps.rows(3, 9)
    assert tuple(part) == as_tuple[3:9] and [g.detail for g in part] == list(range(3, 9))
    assert gap_evidence(a, part) == gap_evidence(a)[3:9] == gap_evidence(a, list(as_tuple[3:9]))


@pytest.mark.parametrize("threshold", [1, 10_000, 50_000])
def test_gaps_and_idle_intervals_share_one_classification(timeline, threshold):
    rows = device_rows(timeline)
    hosts = host_views(timeline)
    c = Classification(timeline, threshold, rows=rows, hosts=hosts)
    gaps, details = c.gaps()
    assert len(details) == len(gaps)
    idle = c.idle()
    rng = np.random.default_rng(threshold)
    for dr in rows:
        whole = idle_intervals(timeline, dr, hosts[dr.rank])  # every interval classified in one call
        mine = idle[(dr.rank, dr.device)]
        assert np.array_equal(mine.start, whole.start) and np.array_equal(mine.end, whole.end)
        m = rng.random(whole.start.size) < 0.3
        assert np.array_equal(mine.causes_of(m), whole.cause[m])  # a subset, classified alone
        assert np.array_equal(mine.cause, whole.cause)
        long = (whole.end - whole.start) >= threshold
        on_dev = (gaps.column("rank") == dr.rank) & (gaps.column("device") == dr.device)
        assert np.array_equal(gaps.column("start")[on_dev], whole.start[long])
        assert np.array_equal(gaps.column("cause")[on_dev], whole.cause[long])
    # the analysis with that threshold has those gaps
    assert analyze(timeline, AnalysisOptions(gap_threshold_ns=threshold)).gaps == gaps
