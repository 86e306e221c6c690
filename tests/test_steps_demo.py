"""Steps inferred on every bundled demo run with its step markers ignored, checked against those
markers read straight from the raw trace file (nsys: NVTX_EVENTS in the SQLite export through
sqlite3; torch.profiler: the `step N` events of the JSON), never through tracelab's step code.

Each workload marks its measured steps with `rng("step N")` (tracelab/workloads/base.py): an NVTX
range for nsys and a record_function for torch.profiler. `infer_steps` never reads them (it looks at
CUDA calls and, to place a boundary, at non-step host ranges), so calling it is inference with the
markers ignored.

Checked per run: the number of inferred steps is within 2 of the marked ones; every marked step's
start and end is within BOUNDARY of the median marked step length of the inferred one's, or else
the trace recorded no host activity at all between the two times (the boundary lies inside an
unrecorded stretch of host time: nothing in the trace can place it better; docs/DESIGN.md "Steps")."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tracelab.analyses.steps.infer import infer_steps
from tracelab.demo import demo_archives, demo_run
from tracelab.io.detect import load_run_dir
from tracelab.model import EventKind, Timeline

STEP = re.compile(r"^step \d+$")
BOUNDARY = 0.05  # of the median marked step length
# one-process runs (the two-rank comm_overlap runs are checked by tests/test_gpu_steps.py)
NAMES = [a.name[: -len(".tar.xz")] for a in demo_archives() if not a.name.startswith("comm_overlap-")]


def raw_marked_steps(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns of the `step N` ranges, from the raw trace file, sorted by start."""
    sqlite = run / "trace.sqlite"
    if sqlite.exists():
        con = sqlite3.connect(f"file:{sqlite}?mode=ro&immutable=1", uri=True)
        try:
            rows = con.execute(
                "SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL"
            ).fetchall()
        finally:
            con.close()
        spans = [(int(a), int(b)) for a, b, text in rows if text and STEP.match(text)]
    else:
        with gzip.open(run / "trace.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        spans = [
            (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
            for e in events
            if e.get("ph") == "X" and STEP.match(str(e.get("name", "")))
        ]
    spans.sort()
    return np.array([a for a, _ in spans], dtype=np.int64), np.array([b for _, b in spans], dtype=np.int64)


@cache
def run_data(name: str) -> tuple[Timeline, np.ndarray, np.ndarray]:
    run = demo_run(name)
    return load_run_dir(run), *raw_marked_steps(run)


def host_activity(tl: Timeline, rank: int) -> np.ndarray:
    """Sorted start times of every host event of the rank (CUDA calls, CPU ops, NVTX and
    record_function ranges) but the step markers."""
    ev = tl.events
    kind = ev["kind"].to_numpy()
    host = np.isin(
        kind, [int(k) for k in (EventKind.RUNTIME, EventKind.DRIVER, EventKind.CPU_OP, EventKind.NVTX_RANGE)]
    )
    marker_ids = [i for i, s in enumerate(tl.strings) if STEP.match(s)]
    keep = host & (ev["rank"].to_numpy() == rank) & ~np.isin(ev["name"].to_numpy(), marker_ids)
    return np.sort(ev["start"].to_numpy()[keep])


def test_every_demo_run_is_checked() -> None:
    assert len(NAMES) == 58 + 4 + 2  # + input_pipeline (issue 29), sync_pitfalls keep_outputs (issue 27)
    for name in ("overlap-serial-nsys", "graphs-graph-torch", "fusion-compiled-nsys"):
        assert name in NAMES


# input_pipeline/fast_loader under torch.profiler: the warm-up step's first call lies in the batch upload's
# range, after the DataLoader's first, slow fetch; it started at that range (6.5% of a step from its marker,
# a strict xfail) until the first step took in the ranges before it as the other steps do
# (step_cut._lead_in): 0.05 ms from its marker now.
# input_pipeline-slow_loader-torch, re-recorded on 2026-11-28 21:04 UTC (the cause-share pair of issue 29): its
# steps are 8-42 ms long (a starved loader); the inferred start of marked step 6 lay 0.72 median steps from the
# marker, with host activity between (a strict xfail until issue 24's third session): its batch fetch ("load
# batch") had 11 µs less idle host time before it than its upload ("h2d"), so the step started at the upload
# while the other 11 start at the fetch. A step now starts at the range most steps start at, where three in four
# do (steps.anchor._same_head): 0.001 median steps from its marker.
# sync_pitfalls-keep_outputs-{nsys,torch} (issue 27's memory-traced variant, recorded 2026-11-28): each step keeps
# its logits on the GPU, so the caching allocator asks for a new block (cudaStreamIsCapturing + cudaMalloc) every
# second step and the launch sequence repeats with a period of two steps: 9 steps were inferred for 20 marked,
# under both profilers (a strict xfail until issue 24's third session); the allocator's calls are now left out
# of the sequence where they break the period (steps.infer._steady): 20 of 20.
STEP_XFAIL: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=STEP_XFAIL[n])) if n in STEP_XFAIL else n
     for n in NAMES],
)
def test_inferred_steps_match_the_markers(name: str) -> None:
    tl, ms, me = run_data(name)
    assert ms.size >= 3, "every workload marks at least 3 measured steps"
    rank = int(np.unique(tl.events["rank"].to_numpy())[0])
    s, e, note = infer_steps(tl, rank)
    assert abs(s.size - ms.size) <= 2, note
    assert "inferred" in note
    # match each marked step with the inferred one that starts nearest to it
    j = np.clip(np.searchsorted(s, ms), 1, s.size - 1)
    j = np.where(np.abs(s[j - 1] - ms) <= np.abs(s[j] - ms), j - 1, j)
    median = float(np.median(me - ms))
    activity = host_activity(tl, rank)
    for got, want, what in ((s[j], ms, "start"), (e[j], me, "end")):
        lo, hi = np.minimum(got, want), np.maximum(got, want)
        recorded_between = np.searchsorted(activity, hi, "left") - np.searchsorted(activity, lo, "left")
        close = np.abs(got - want) <= BOUNDARY * median
        bad = np.flatnonzero(~close & (recorded_between > 0))
        assert bad.size == 0, (
            f"{what}s of marked steps {bad.tolist()} are {np.abs(got - want)[bad] / median} median steps "
            f"from the inferred ones, with host activity recorded between; {note}"
        )


def test_most_boundaries_are_within_a_few_percent() -> None:
    """Over all runs: the share of marked step starts within BOUNDARY of the inferred ones (the rest
    lie in host time the trace did not record, as the test above checks)."""
    near = total = 0
    for name in NAMES:
        tl, ms, _me = run_data(name)
        s, _, _ = infer_steps(tl, int(np.unique(tl.events["rank"].to_numpy())[0]))
        j = np.clip(np.searchsorted(s, ms), 1, s.size - 1)
        j = np.where(np.abs(s[j - 1] - ms) <= np.abs(s[j] - ms), j - 1, j)
        near += int(np.count_nonzero(np.abs(s[j] - ms) <= BOUNDARY * np.median(_me - ms)))
        total += ms.size
    assert total > 500 and near / total >= 0.5, (near, total)  # measured: 289 of 548
