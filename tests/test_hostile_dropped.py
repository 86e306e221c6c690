"""Issue 30, class 4: data dropped or mislabelled without a note. Built from the bundled real traces
(tests/data): Kineto kernels written as B/E pairs; a FIFO or a dangling symlink named like a rank file;
three files claiming rank 0; a run directory holding both an nsys export and a Kineto trace; GPU events
years before their launches; correlation ids shared by a launch and a host call that launches nothing;
10,000 overlapping ProfilerStep ranges. Each is exit 0 with a note naming what is doubtful, or exit 2
with one line naming the file; the inputs stay byte-identical."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from hostile_util import DATA, cli, one_error_line

TORCH = DATA / "torch_mixed_small" / "trace.json.gz"
DEMO_RUNS = Path(__file__).resolve().parents[1] / "tracelab" / "demo_runs"


def _doc() -> dict:
    return json.loads(gzip.decompress(TORCH.read_bytes()))


def _write(path: Path, doc: dict) -> Path:
    path.write_bytes(json.dumps(doc).encode())
    return path


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "->" + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(root))] = oct(p.stat().st_mode)
    return out


def _within_budget(t0: float, nbytes: int) -> None:
    assert time.monotonic() - t0 < 10 + 4 * nbytes / 1e6


def _analyze(tmp_path: Path, target: Path) -> dict:
    before = _tree_digest(target.parent)
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", "analyze", str(target), "--json")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else target.stat().st_size
    _within_budget(t0, size)
    assert res.exit_code == 0, (res.exit_code, res.stderr)
    assert _tree_digest(target.parent) == before
    return json.loads(res.stdout)


# ---- Kineto kernels as B/E pairs ------------------------------------------------------------------


def test_kernels_as_begin_end_pairs_are_noted(tmp_path):
    doc = _doc()
    events = []
    n_pairs = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            b = {k: v for k, v in e.items() if k != "dur"}
            events += [{**b, "ph": "B"}, {**b, "ph": "E", "ts": e["ts"] + e["dur"]}]
            n_pairs += 1
        else:
            events.append(e)
    doc["traceEvents"] = events
    (tmp_path / "in").mkdir()
    out = _analyze(tmp_path, _write(tmp_path / "in" / "be.json", doc))
    notes = [n for n in out["notes"] if "not complete 'X' events" in n]
    assert len(notes) == 1, out["notes"]
    assert notes[0].startswith(f"{2 * n_pairs} events") and f"{2 * n_pairs} of them GPU" in notes[0]


# ---- rank directories -------------------------------------------------------------------------------


def _ddp_dir(root: Path) -> Path:
    d = root / "ranks"
    d.mkdir(parents=True)
    for r in (0, 1):
        shutil.copyfile(DATA / "ddp" / f"rank{r}.json.gz", d / f"rank{r}.json.gz")
    return d


@pytest.mark.parametrize("odd", ["fifo", "dangling symlink"])
@pytest.mark.parametrize("command", ["analyze", "import"])
def test_rank_named_fifo_or_dangling_symlink_is_one_line(tmp_path, odd, command):
    d = _ddp_dir(tmp_path)
    bad = d / "rank2.json.gz"
    if odd == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to(tmp_path / "gone.json.gz")
    before = _tree_digest(d)
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", command, str(d))
    _within_budget(t0, 1_000_000)
    line = one_error_line(res, d)
    assert "rank2.json.gz" in line
    assert _tree_digest(d) == before


def test_three_files_claiming_rank_zero_are_noted(tmp_path):
    d = tmp_path / "claims"
    d.mkdir()
    src = gzip.decompress((DATA / "ddp" / "rank0.json.gz").read_bytes())
    assert json.loads(src)["distributedInfo"]["rank"] == 0  # the file says so itself
    for name in ("a", "b", "c"):
        (d / f"{name}.json.gz").write_bytes(gzip.compress(src))
    out = _analyze(tmp_path, d)
    notes = [n for n in out["notes"] if "claim rank 0" in n]
    assert len(notes) == 1 and "3 files" in notes[0], out["notes"]
    assert any("file-name order" in n for n in out["notes"])


def test_run_directory_with_two_traces_names_the_unread_one(tmp_path):
    run = tmp_path / "run"
    with tarfile.open(DEMO_RUNS / "fusion-cuda-nsys.tar.xz") as t:
        t.extractall(tmp_path / "x", filter="data")
    (src,) = [p for p in (tmp_path / "x").iterdir() if p.is_dir()]
    shutil.copytree(src, run)
    with tarfile.open(DEMO_RUNS / "fusion-cuda-torch.tar.xz") as t:
        t.extractall(tmp_path / "y", filter="data")
    (tsrc,) = [p for p in (tmp_path / "y").iterdir() if p.is_dir()]
    shutil.copyfile(tsrc / "trace.json.gz", run / "trace.json.gz")
    meta = json.loads((run / "meta.json").read_text())
    out = _analyze(tmp_path, run)
    notes = [n for n in out["notes"] if "also holds" in n]
    assert len(notes) == 1 and "trace.json.gz" in notes[0] and meta.get("trace_file", "trace.sqlite") in notes[0]


def test_trace_file_symlink_leaving_the_run_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    with tarfile.open(DEMO_RUNS / "fusion-cuda-torch.tar.xz") as t:
        t.extractall(tmp_path / "x", filter="data")
    (src,) = [p for p in (tmp_path / "x").iterdir() if p.is_dir()]
    shutil.copytree(src, run)
    outside = tmp_path / "elsewhere.json.gz"
    (run / "trace.json.gz").rename(outside)
    (run / "trace.json.gz").symlink_to(outside)
    before = _tree_digest(run)
    line = one_error_line(cli(tmp_path / "s.db", "analyze", str(run)), run)
    assert "outside the run directory" in line
    assert _tree_digest(run) == before


# ---- correlation links ----------------------------------------------------------------------------


def _launch_corrs(doc: dict) -> set[int]:
    return {
        e["args"]["correlation"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }


def test_gpu_events_years_before_their_launches_are_noted(tmp_path):
    doc = _doc()
    launches = _launch_corrs(doc)
    three_years_us = 3 * 365 * 86400 * 1e6
    moved = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            e["ts"] -= three_years_us
            moved += e["args"].get("correlation") in launches
    (tmp_path / "in").mkdir()
    out = _analyze(tmp_path, _write(tmp_path / "in" / "skew.json", doc))
    notes = [n for n in out["notes"] if "before the host call" in n]
    assert len(notes) == 1, out["notes"]
    assert notes[0].startswith(f"{moved:,} GPU events")


def test_kernels_linked_to_calls_that_launch_nothing_are_noted(tmp_path):
    """Every cudaLaunchKernel's correlation id is moved to a cudaStreamIsCapturing call (which launches
    nothing) and the launch gets a fresh id: the kernels now link to a non-launch call. One more id is
    shared by a launch and a query: the launch of that kernel is ambiguous."""
    doc = _doc()
    rt = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    queries = [e for e in rt if e["name"] == "cudaStreamIsCapturing"]
    launches = [e for e in rt if e["name"] == "cudaLaunchKernel"]
    kernel_corrs = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    fresh = 10**9
    relinked = 0
    for q, la in zip(queries[1:], launches[1:]):
        q["args"]["correlation"] = la["args"]["correlation"]
        relinked += la["args"]["correlation"] in kernel_corrs
        la["args"]["correlation"] = fresh
        fresh += 1
    queries[0]["args"]["correlation"] = launches[0]["args"]["correlation"]  # shared by two host calls
    (tmp_path / "in").mkdir()
    out = _analyze(tmp_path, _write(tmp_path / "in" / "corr.json", doc))
    nothing = [n for n in out["notes"] if "launches no GPU work" in n]
    shared = [n for n in out["notes"] if "more than one host call" in n]
    assert len(nothing) == 1 and nothing[0].startswith(f"{relinked:,} GPU events"), out["notes"]
    assert "cudaStreamIsCapturing" in nothing[0]
    assert len(shared) == 1 and shared[0].startswith("1 correlation ids"), out["notes"]


# ---- overlapping step markers -------------------------------------------------------------------------


def test_ten_thousand_overlapping_profiler_steps_never_sum_past_the_span(tmp_path):
    doc = _doc()
    host = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    pid, tid = host[0]["pid"], host[0]["tid"]
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = t1 - t0
    n = 10_000
    for i in range(n):  # each starts a little later and lasts a third of the span: all overlap
        doc["traceEvents"].append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": pid, "tid": tid,
             "ts": t0 + i * span / (3 * n), "dur": span / 3}
        )
    (tmp_path / "in").mkdir()
    out = _analyze(tmp_path, _write(tmp_path / "in" / "steps.json", doc))
    steps = out["steps"]
    total = sum(s["end_ns"] - s["start_ns"] for s in steps)
    assert total <= span * 1000 + 1  # never more than the span (was 3,350x)
    assert all(b["start_ns"] >= a["end_ns"] for a, b in itertools.pairwise(steps))
    assert any("overlapping step ranges" in note for note in out["notes"]), out["notes"]
