"""`api.start_extras` begins the per-rank edges of the critical path's graph on a helper thread before the
analysis (a big timeline's `analyze --json`). The critical path then taken from the context is the one
computed from scratch without any helper thread: every step's segments, on the recorded DDP fixtures (NCCL
collectives, both profilers) and on a gloo run, whose c10d host-range collectives join the graph's host
calls (there the edges started early are not the ones the path needs, and the path must not use them)."""

from __future__ import annotations

import numpy as np
import pytest
from multigpu_util import run_dir

from tracelab import api
from tracelab.analyses import parallel
from tracelab.io.detect import load_run_dir
from tracelab.model import EventKind, RunMeta, build_timeline


def _same_paths(a, b) -> None:
    assert len(a.steps) == len(b.steps) and len(a.across) == len(b.across) and a.notes == b.notes
    for p, q in zip(a.steps + a.across, b.steps + b.across):
        assert (p.rank, p.step, p.start_ns, p.end_ns, p.across_ranks) == (q.rank, q.step, q.start_ns, q.end_ns, q.across_ranks)
        for col in ("cat", "seg_rank", "seg_start", "seg_end"):
            assert np.array_equal(getattr(p, col), getattr(q, col)), (p.rank, p.step, col)
        assert [p.strings[i] for i in p.seg_name.tolist() if i >= 0] == [q.strings[i] for i in q.seg_name.tolist() if i >= 0]


def _started_and_fresh(tl, monkeypatch):
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 0)  # helper threads on for these small runs
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    context = api.AnalysisContext(tl)
    api.start_extras(tl, context)
    an = api.analyze(tl, context=context)
    ranks = api.rank_analysis(tl, an, context) if len(an.trace.ranks) > 1 else None
    started = api.critical_path(tl, an, ranks, context)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    fresh_ctx = api.AnalysisContext(tl)
    an2 = api.analyze(tl, context=fresh_ctx)
    ranks2 = api.rank_analysis(tl, an2, fresh_ctx) if len(an2.trace.ranks) > 1 else None
    return started, api.critical_path(tl, an2, ranks2, fresh_ctx), ranks


@pytest.mark.parametrize("name", ["ddp2_sleep_nsys", "ddp2_sleep_torch", "ddp4_sleep_torch"])
def test_path_with_edges_started_early_equals_the_fresh_path(tmp_path, name, monkeypatch):
    tl = load_run_dir(run_dir(name, tmp_path))
    started, fresh, ranks = _started_and_fresh(tl, monkeypatch)
    assert ranks is not None and ranks.collectives.source != "host ranges"
    assert started.steps and started.across  # per rank and across ranks
    _same_paths(started, fresh)


def test_gloo_path_does_not_use_the_edges_started_early(monkeypatch):
    """Two ranks, three steps: c10d `gloo:all_reduce` ranges (rank 1 arrives 3 µs late) then a kernel."""
    strings = ["gloo:all_reduce", "gemm", "cudaLaunchKernel"]
    rows = []
    for rank, late in ((0, 0), (1, 3000)):
        for step in range(3):
            t = 100_000 * step
            rows.append((int(EventKind.NVTX_RANGE), rank, -1, 0, t + late, t + 5000, -1))
            rows.append((int(EventKind.RUNTIME), rank, -1, 2, t + 5200, t + 5400, 10 * step + rank))
            rows.append((int(EventKind.KERNEL), rank, 0, 1, t + 6000, t + 9000, 10 * step + rank))
    cols = {
        "kind": np.array([r[0] for r in rows]),
        "rank": np.array([r[1] for r in rows]),
        "device": np.array([r[2] for r in rows]),
        "name": np.array([r[3] for r in rows]),
        "start": np.array([r[4] for r in rows]),
        "end": np.array([r[5] for r in rows]),
        "correlation": np.array([r[6] for r in rows]),
        "stream": np.array([7 if r[2] >= 0 else -1 for r in rows]),
        "pid": np.array([1] * len(rows)),
        "tid": np.array([1 if r[2] < 0 else -1 for r in rows]),
    }
    tl = build_timeline(cols, strings, RunMeta(source="gloo", format="kineto", ranks=(0, 1)))
    started, fresh, ranks = _started_and_fresh(tl, monkeypatch)
    assert ranks is not None and ranks.collectives.source == "host ranges"
    _same_paths(started, fresh)
    # the graph of this run has the collective ranges as (communication) host nodes; the edges started early do not
    from tracelab.analyses.ranks.path_graph import _build, per_rank_edges

    coll_rows = np.flatnonzero(tl.col("kind") == int(EventKind.NVTX_RANGE))
    graph = _build(tl, ranks.collectives)
    assert set(coll_rows.tolist()) <= set(graph.rows.tolist())
    assert graph.comm[np.isin(graph.rows, coll_rows)].all()
    assert not set(coll_rows.tolist()) & set(per_rank_edges(tl).rows.tolist())


@pytest.mark.parametrize(
    "name",
    ["sync_pitfalls-item_every_step-nsys", "input_pipeline-slow_loader-torch", "graphs-graph-torch", "copy_pageable_torch"],
)
def test_one_rank_path_begun_with_the_steps_is_the_one_taken(tmp_path, name, monkeypatch):
    """A one-rank run: `start_path` (begun before the analysis) finds the steps' windows the analysis's step
    table gives (`step_windows` of its rows), and that path is the one `critical_path` returns, equal to the
    path computed from scratch (marked steps, inferred steps, a CUDA-graph loop, a marker-free copy loop)."""
    from tracelab.analyses.core import memo as memo_module
    from tracelab.analyses.ranks import critical_path as cp_module
    from tracelab.analyses.steps.windows import step_windows
    from tracelab.demo import demo_run

    tl = load_run_dir(run_dir(name, tmp_path)) if name.startswith("copy_") else api.load(demo_run(name))
    started, fresh, ranks = _started_and_fresh(tl, monkeypatch)
    assert ranks is None
    _same_paths(started, fresh)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    context = api.AnalysisContext(tl)
    api.start_extras(tl, context)
    an = api.analyze(tl, context=context)
    with context.active():
        begun = memo_module.begun(tl, cp_module._STARTED)
    assert begun is not None
    want = step_windows(an.step_rows)
    assert want and cp_module._same_windows(begun[0], want)
    assert api.critical_path(tl, an, None, context) is not None
