"""A recorded program whose host blocks in OS calls between steps (tests/data/programs/host_blocked.py,
recorded on an H200 with `tracelab record --backend nsys|torch -- python3 ...`: tests/data/README.md).

Each of its 8 steps first blocks ~3 ms (even steps in `read` on a pipe a feeder thread fills late, odd
steps in `time.sleep`, i.e. clock_nanosleep), then uploads a batch (one pinned HtoD copy) and launches a
small forward pass; nothing waits for the GPU inside the loop. So the GPU idles before each step's copy
while the only launching thread is blocked in the OS.

Expected values come from the raw files (SQL on the nsys export, plain Python over the Kineto JSON) and the
program's own clock, never from tracelab: under nsys (OS runtime calls traced) the 8 gaps before the loop's
copies name the call: the 4 reads from the pipe are `input_wait` (a wait for data, issue 29), the 4 sleeps
`no_work`; under torch.profiler, which records no OS calls, the same 8 gaps are `no_work` (no CPU op or CUDA
call for most of the gap: the host idle, issue 24 item 7; it used to be `launch_latency`)."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracelab.cli import main

DATA = Path(__file__).parent / "data"
STEPS = 8


@pytest.fixture(scope="module")
def nsys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("host_blocked_nsys")
    shutil.copy(DATA / "host_blocked_nsys.meta.json", d / "meta.json")
    with lzma.open(DATA / "host_blocked_nsys.sqlite.xz") as src, open(d / "trace.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return d


def analyze_json(path: Path, tmp_path: Path) -> dict:
    r = CliRunner().invoke(main, ["analyze", str(path), "--json"], env={"TRACELAB_DB": str(tmp_path / "t.db")},
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def per_step(d: Path) -> list[dict]:
    steps = json.loads((d / "meta.json").read_text())["program"]["per_step"]
    assert [s["blocked_in"] for s in steps] == ["read", "sleep"] * (STEPS // 2)
    return steps


def test_nsys_gaps_before_each_step_are_no_work_naming_the_call(nsys_dir: Path, tmp_path: Path) -> None:
    con = sqlite3.connect(f"file:{nsys_dir / 'trace.sqlite'}?mode=ro", uri=True)
    q = con.execute
    # the main thread: the one with the most CUDA runtime calls
    (main_tid,) = q("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid ORDER BY count(*) DESC "
                    "LIMIT 1").fetchone()
    # the loop's HtoD copies (pinned): the last STEPS of them (the first two are the warm-up's)
    copies = [s for (s,) in q("SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 1 "
                              "ORDER BY start").fetchall()][-STEPS:]
    # the main thread's OS calls longer than 2 ms in the loop (from 10 ms before its first copy)
    calls = q("SELECT s.value, o.start, o.end FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
              "WHERE o.globalTid = ? AND o.end - o.start > 2000000 AND o.start > ? ORDER BY o.start",
              (main_tid, copies[0] - 10_000_000)).fetchall()
    con.close()
    steps = per_step(nsys_dir)
    # the program's clock and the trace agree: each step blocked once, in the call it says, as long
    assert [c[0] for c in calls] == ["read", "clock_nanosleep"] * (STEPS // 2)
    for (name, s, e), step in zip(calls, steps):
        assert abs((e - s) / 1e6 - step["blocked_ms"]) < 0.1, (name, e - s, step)

    doc = analyze_json(nsys_dir, tmp_path)
    # issue 29: a read on a pipe another thread fills is a wait for data (input_wait); the sleep is no_work
    blocked = [g for g in doc["gaps"] if g["cause"] in ("no_work", "input_wait")]
    assert len(blocked) == STEPS
    assert [g["end_ns"] for g in blocked] == copies  # the gap before each step's copy, and only those
    for g, (name, s, e) in zip(blocked, calls):
        assert g["start_ns"] < e and s < g["end_ns"]  # the blocking call lies in the gap it explains
        if name == "read":
            assert g["cause"] == "input_wait" and f"OS call {name} from " in g["evidence"]
        else:
            assert g["cause"] == "no_work"
            assert "which was blocked in OS calls" in g["evidence"] and f"({name} from " in g["evidence"]
        assert g["host_data"] == "cpu_ops+os_calls"  # recorded with --pytorch=autograd-nvtx and osrt
        assert g["duration_ns"] > 0.9 * (e - s)


def test_torch_profiler_has_no_os_calls_but_the_same_gaps_are_no_work(tmp_path: Path) -> None:
    d = DATA / "host_blocked_torch"
    raw = json.loads(gzip.decompress((d / "trace.json.gz").read_bytes()))
    copies = sorted(round(e["ts"] * 1000) for e in raw["traceEvents"]
                    if e.get("cat") == "gpu_memcpy" and e.get("name", "").startswith("Memcpy HtoD (Pinned"))[-STEPS:]
    per_step(d)
    doc = analyze_json(d, tmp_path)
    before = {g["end_ns"]: g for g in doc["gaps"]}
    for c in copies:
        g = before[c]  # Kineto µs -> ns as the parser rounds them
        # issue 24 item 7: no CPU op or CUDA call on the launching thread for most of the gap: the host was
        # idle (no_work), not busy (it used to be launch_latency); torch.profiler cannot say in which call
        assert g["cause"] == "no_work" and g["host_data"] == "cpu_ops"
        assert g["duration_ns"] > 2_000_000 and "OS calls" not in g["evidence"]
        assert "the host was idle (host data: CPU ops / NVTX ranges + CUDA API)" in g["evidence"]
    # ... and only those: the 8 stalls are the no_work gaps of the loop
    assert sorted(g["end_ns"] for g in doc["gaps"] if g["cause"] == "no_work" and g["end_ns"] >= copies[0]) == copies
