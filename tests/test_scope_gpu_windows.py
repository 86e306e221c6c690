"""Issue 24: `--steps A:B` scopes on the chosen steps' GPU windows, not their host ranges. On the bundled
comm_overlap runs (2 H200s, asynchronous: the host enqueues a step in ~0.6 ms while its GPU work takes ~7 ms
and starts long after), the scoped busy time and kernel count are those of the raw trace's GPU work inside
the GPU windows of the chosen steps (tests/raw_steps.py: the GPU work whose launch call starts in each
`step N` range), computed here from the Kineto JSON / nsys SQLite without tracelab."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from raw_steps import GPU_CATS, kineto_step_windows, nsys_step_windows

from tracelab.api import analyze
from tracelab.demo import demo_run
from tracelab.io.detect import load_run_dir

FIRST, STOP = 1, 3  # --steps 1:3


def _union_in(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of the intervals clipped to [lo, hi)."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _raw_torch(path: Path) -> dict[int, dict[str, float]]:
    """rank -> GPU span of steps FIRST..STOP-1, busy in it and kernels overlapping it (ns), and the kernels
    overlapping the same steps' host ranges (what the old clip kept)."""
    out = {}
    for f in sorted((path / "ranks").glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        rank = doc["distributedInfo"]["rank"]
        wins = kineto_step_windows(f)[FIRST:STOP]
        lo, hi = min(w[0] for w in wins), max(w[1] for w in wins)
        gpu, kernels, steps = [], [], []
        for ev in doc["traceEvents"]:
            if ev.get("ph") != "X":
                continue
            a, b = float(ev["ts"]), float(ev["ts"]) + float(ev.get("dur", 0))
            if ev.get("cat") in GPU_CATS:
                gpu.append((a, b))
                if ev["cat"] == "kernel":
                    kernels.append((a, b))
            elif ev.get("cat") in ("user_annotation", "cpu_op") and str(ev.get("name", "")).startswith("step "):
                steps.append((a, b))
        steps = sorted(steps)[FIRST:STOP]
        h_lo, h_hi = steps[0][0], steps[-1][1]
        out[rank] = {
            "lo": lo * 1e3, "hi": hi * 1e3,
            "busy": _union_in(gpu, lo, hi) * 1e3,
            "kernels": sum(1 for a, b in kernels if b > lo and a < hi),
            "host_kernels": sum(1 for a, b in kernels if b > h_lo and a < h_hi),
        }
    return out


def _raw_nsys(path: Path) -> dict[int, dict[str, float]]:
    db = sqlite3.connect(f"file:{path / 'trace.sqlite'}?mode=ro", uri=True)
    device_of = dict(db.execute(
        "SELECT (globalPid >> 24) & 16777215, MIN(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    order = sorted(device_of, key=lambda p: (device_of[p], p))
    gpu: dict[int, list] = {p: [] for p in order}
    kernels: dict[int, list] = {p: [] for p in order}
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table not in tables:
            continue
        for s, e, gpid in db.execute(f"SELECT start, end, globalPid FROM {table}"):
            pid = (gpid >> 24) & 0xFFFFFF
            gpu.setdefault(pid, []).append((s, e))
            if table.endswith("KERNEL"):
                kernels.setdefault(pid, []).append((s, e))
    db.close()
    out = {}
    for pid, wins in nsys_step_windows(path / "trace.sqlite").items():
        if pid not in device_of:
            continue
        wins = wins[FIRST:STOP]
        lo, hi = min(w[0] for w in wins), max(w[1] for w in wins)
        out[order.index(pid)] = {
            "lo": lo, "hi": hi, "busy": _union_in(gpu[pid], lo, hi),
            "kernels": sum(1 for a, b in kernels[pid] if b > lo and a < hi),
        }
    return out


@pytest.mark.parametrize("backend", ["torch", "nsys"])
def test_steps_scope_covers_the_gpu_windows(tmp_path, backend):
    path = demo_run(f"comm_overlap-streams-{backend}", tmp_path)
    raw = _raw_torch(path) if backend == "torch" else _raw_nsys(path)
    tl = load_run_dir(path)
    an = analyze(tl, steps=f"{FIRST}:{STOP}")
    tol = 2_000 if backend == "torch" else 0  # Kineto's µs timestamps: rounding only
    assert {d.rank for d in an.devices} == set(raw) == {0, 1}
    for rank, want in raw.items():
        devs = [d for d in an.devices if d.rank == rank]
        assert sum(d.kernels for d in devs) == want["kernels"]
        assert sum(d.busy_ns for d in devs) == pytest.approx(want["busy"], abs=tol)
        assert min(d.start_ns for d in devs) == pytest.approx(want["lo"], abs=tol)
        assert max(d.end_ns for d in devs) == pytest.approx(want["hi"], abs=tol)
        if "host_kernels" in want:  # the host ranges would have counted other kernels (async)
            assert want["host_kernels"] != want["kernels"]
        # the scoped step table keeps the chosen steps, whole, with their GPU windows
        rows = [r for r in an.step_rows if r.rank == rank]
        assert [r.index for r in rows] == list(range(FIRST, STOP))
        assert min(r.gpu_start_ns for r in rows) == pytest.approx(want["lo"], abs=tol)
        assert max(r.gpu_end_ns for r in rows) == pytest.approx(want["hi"], abs=tol)


def test_cli_steps_scope_json_is_the_gpu_span(tmp_path):
    """The same through `tracelab analyze --steps 1:3 --json` in a subprocess."""
    path = demo_run("comm_overlap-streams-torch", tmp_path)
    raw = _raw_torch(path)
    env = {"TRACELAB_DB": str(tmp_path / "t.db"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path), "--steps", "1:3", "--json"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    for rank, want in raw.items():
        devs = [d for d in doc["devices"] if d["rank"] == rank]
        assert sum(d["busy_ns"] for d in devs) == pytest.approx(want["busy"], abs=2_000)
        assert sum(st["kernels"] for d in devs for st in d["streams"]) == want["kernels"]
