"""Issue 24: the critical path of a step spans the step's GPU window (the GPU work its host range launched),
not its host range. On the recorded DDP fixtures (2 and 4 H200s, marker-free steps, under nsys and
torch.profiler) each per-rank path starts and ends where the step's GPU window computed from the raw trace
(tests/raw_steps.py: launch call inside the step's host range, by correlation) starts and ends, and its
segments tile that window."""

from __future__ import annotations

from pathlib import Path

import pytest
from multigpu_util import run_dir
from raw_steps import kineto_launches_gpu, nsys_launches_gpu, windows_of_ranges

from tracelab.analyses.ranks.critical_path import critical_path_for
from tracelab.analyses.ranks.view import rank_analysis
from tracelab.api import analyze
from tracelab.io.detect import load_run_dir


def _raw_windows(path: Path, backend: str, host: dict[int, list[tuple[int, int]]]) -> dict[int, list]:
    """rank -> the GPU window (ns) of each of its steps' host ranges (ns), sorted as step_windows sorts
    them (by window start); a step that launched no GPU work keeps its host range."""
    out = {}
    if backend == "torch":
        per = {}
        for f in sorted((path / "ranks").glob("rank*.json.gz")):
            rank, launches, gpu = kineto_launches_gpu(f)
            # Kineto's µs to integer ns (a step inferred at a batch upload starts at that copy's launch
            # exactly: compared in float µs the launch may fall on either side of the boundary)
            ns = lambda us: round(us * 1000)
            per[rank] = ({c: ns(t) for c, t in launches.items()}, [(c, ns(a), ns(b)) for c, a, b in gpu])
    else:
        per = nsys_launches_gpu(path / "trace.sqlite")
    for rank, ranges in host.items():
        launches, gpu = per[rank]
        ranges = sorted(ranges)
        wins = windows_of_ranges(ranges, launches, gpu)
        out[rank] = sorted((lo, hi) if lo is not None else (a, b) for (lo, hi), (a, b) in zip(wins, ranges))
    return out


@pytest.mark.parametrize("backend", ["nsys", "torch"])
@pytest.mark.parametrize("name", ["ddp2_sleep", "ddp4_sleep"])
def test_each_step_path_spans_its_gpu_window(tmp_path, name, backend):
    path = run_dir(f"{name}_{backend}", tmp_path)
    tl = load_run_dir(path)
    an = analyze(tl)
    host: dict[int, list[tuple[int, int]]] = {}
    for s in an.steps:
        host.setdefault(s.rank, []).append((s.start_ns, s.end_ns))
    raw = _raw_windows(path, backend, host)
    cp = critical_path_for(tl, an, rank_analysis(tl, an).collectives)
    tol = 1 if backend == "torch" else 0  # Kineto's µs timestamps: rounding only
    assert {p.rank for p in cp.steps} == set(raw) and len(cp.steps) == sum(len(v) for v in raw.values())
    gpu_longer = 0
    for p in cp.steps:
        lo, hi = raw[p.rank][p.step]
        assert p.start_ns == pytest.approx(lo, abs=tol) and p.end_ns == pytest.approx(hi, abs=tol), (p.rank, p.step)
        # the path's segments tile the window: its categories add up to the GPU step's length
        assert sum(p.by_category().values()) == p.length_ns
        assert p.seg_start.min() == p.start_ns and p.seg_end.max() == p.end_ns
        a, b = sorted(host[p.rank])[p.step]
        gpu_longer += (hi - lo) > (b - a)
    # the windows are not the host ranges (DDP: the GPU keeps working after the host range ends)
    assert gpu_longer > 0
