"""Steps inferred on a real, marker-free training loop (tests/data/programs/train_plain.py) recorded
on an H100 under both backends (tests/data/README.md): the program wrote down how many steps it ran
and how long each took (meta.json "program"), independently of any trace."""

from __future__ import annotations

import json
import lzma
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tracelab.analyses import analyze
from tracelab.analyses.gaps.idle import Classification
from tracelab.analyses.scope import apply_scope, parse_scope
from tracelab.analyses.steps.infer import find_steps
from tracelab.analyses.steps.table import step_rows
from tracelab.io.detect import load_run_dir
from tracelab.model import Timeline

DATA = Path(__file__).parent / "data"
SYNC_STEP_FRACTION = 0.8  # sync_per_iteration's rule: ≥ 80% of ≥ 3 steps wait for the GPU


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Timeline, dict]]:
    nsys_dir = tmp_path_factory.mktemp("train_plain_nsys")
    shutil.copy(DATA / "train_plain_nsys.meta.json", nsys_dir / "meta.json")
    with (
        lzma.open(DATA / "train_plain_nsys.sqlite.xz") as src,
        open(nsys_dir / "trace.sqlite", "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    out = {}
    for backend, d in (("nsys", nsys_dir), ("torch", DATA / "train_plain_torch")):
        meta = json.loads((d / "meta.json").read_text())
        out[backend] = (load_run_dir(d), meta["program"])
    return out


@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_steps_are_inferred_with_the_right_count(runs, backend: str) -> None:
    tl, program = runs[backend]
    steps = find_steps(tl)
    assert program["steps"] == 10
    assert {s.source for s in steps.steps} == {"inferred"}
    assert abs(len(steps) - program["steps"]) <= 2
    assert "inferred from the launch sequence" in steps.notes[0]


@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_inferred_step_lengths_match_the_programs_own_clock(runs, backend: str) -> None:
    """After the warm-up, each inferred step lasts what the program measured with perf_counter
    around its loop body (sync to sync vs. forward to print: they differ by the print)."""
    tl, program = runs[backend]
    s, e = find_steps(tl).of_rank(0)
    wall = np.array(program["step_wall_ms"]) * 1e6
    n = min(s.size, wall.size)
    rel = np.abs((e - s)[1:n] - wall[1:n]) / wall[1:n]
    assert np.median(rel) < 0.05 and rel.max() < 0.15


@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_every_step_waits_for_the_gpu(runs, backend: str) -> None:
    """`print(f"... {loss.item()}")` every step: sync_per_iteration's condition holds, with a count
    within 2 of the program's steps (evaluated on the step table: the rule itself reads steps
    from tracelab.analyses.steps.infer once i10-core wires it)."""
    tl, program = runs[backend]
    steps = find_steps(tl)
    rows = step_rows(tl, steps, Classification(tl).gaps()[0])
    syncing = sum(1 for r in rows if r.blocking_syncs >= 1)
    assert len(rows) >= 3 and syncing >= SYNC_STEP_FRACTION * len(rows)
    assert abs(syncing - program["steps"]) <= 2
    assert [r.blocking_syncs for r in rows] == [program["syncs_per_step"]] * len(rows)
    # kernels per step: the same after the warm-up step, which launches more (AdamW state init)
    kernels = [r.kernels for r in rows]
    assert len(set(kernels[1:])) == 1 and kernels[0] > kernels[1]
    assert rows[0].warmup and rows[0].outlier and not any(r.outlier for r in rows[1:])


def test_both_recordings_find_the_same_step_structure(runs) -> None:
    per = {}
    for backend, (tl, _) in runs.items():
        rows = step_rows(tl, find_steps(tl), Classification(tl).gaps()[0])
        per[backend] = [r.kernels for r in rows]
    assert per["nsys"] == per["torch"]


def _idle_shares_after_warmup(tl: Timeline) -> dict[str, float]:
    scoped, _ = apply_scope(tl, parse_scope("1:", None), find_steps(tl))
    gaps = analyze(scoped).gaps
    total = sum(g.duration_ns for g in gaps)
    by = Counter()
    for g in gaps:
        by[g.cause] += g.duration_ns
    return {c: v / total for c, v in by.items()}


def test_cause_shares_after_warmup_agree_between_backends(runs) -> None:
    a = _idle_shares_after_warmup(runs["nsys"][0])
    b = _idle_shares_after_warmup(runs["torch"][0])
    for cause in set(a) | set(b):
        assert abs(a.get(cause, 0.0) - b.get(cause, 0.0)) <= 0.10, (cause, a, b)


@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_sync_per_iteration_fires_through_analyze(runs, backend: str) -> None:
    tl, program = runs[backend]
    found = {f.rule: f for f in analyze(tl).findings}
    assert "sync_per_iteration" in found
    assert abs(found["sync_per_iteration"].count - program["steps"]) <= 2
