"""Gap cause `input_wait` and rule `input_bound` (issue 29) on hand-made programs written as Kineto JSON
and as nsys SQLite, through the CLI. Expected numbers are computed in the test from the raw files (the
loader's range / OS-wait intervals against the GPU's idle intervals), never taken from tracelab.

Every program: kernel A [0,100) µs then kernel B [300,400) µs on stream 7 (one 200 µs gap [100,300)); B is
launched by thread 1 at 290, so the window up to the launch is [100,290) = 190 µs. input_wait: the
launching thread spent at least half of that window in a data-loading range or an OS wait for data.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import analyze_cli
from trace_builder import Program

US = 1000
LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def ab() -> Program:
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.kernel(300, 100, launch=(290, 4))
    return p


def write(p: Program, fmt: str, tmp_path: Path, name: str = "t") -> Path:
    return p.kineto(tmp_path / f"{name}.json") if fmt == "kineto" else p.nsys(tmp_path / f"{name}.sqlite")


def raw(path: Path) -> dict:
    """From the raw file: GPU op intervals (ns, sorted), launch calls by correlation (start ns, thread), user
    ranges and OS calls as (name, start ns, end ns, thread)."""
    if path.suffix == ".json":
        ev = json.loads(path.read_text())["traceEvents"]
        ns = lambda x: round(x * 1000)
        gpu = sorted((ns(e["ts"]), ns(e["ts"] + e["dur"]), e["args"]["correlation"]) for e in ev
                     if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
        calls = {e["args"]["correlation"]: (ns(e["ts"]), e["tid"]) for e in ev
                 if e["cat"] == "cuda_runtime" and "correlation" in e["args"]}
        ranges = [(e["name"], ns(e["ts"]), ns(e["ts"] + e["dur"]), e["tid"]) for e in ev
                  if e["cat"] == "user_annotation" and not e["name"].startswith("ProfilerStep")]
        return {"gpu": gpu, "calls": calls, "ranges": ranges, "os": [], "main_tid": 1}
    con = sqlite3.connect(path)
    q = lambda sql: con.execute(sql).fetchall()
    gpu = sorted(q("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    calls = {c: (s, t) for s, t, c in q("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                        "WHERE correlationId IS NOT NULL")}
    ranges = [tuple(r) for r in q("SELECT text, start, end, globalTid FROM NVTX_EVENTS WHERE text NOT LIKE 'step %'")]
    tables = {t for (t,) in q("SELECT name FROM sqlite_master WHERE type = 'table'")}
    os_calls = ([tuple(r) for r in q("SELECT s.value, o.start, o.end, o.globalTid FROM OSRT_API o JOIN StringIds s "
                                     "ON s.id = o.nameId WHERE o.end > o.start")] if "OSRT_API" in tables else [])
    con.close()
    main = calls[min(calls)][1]
    return {"gpu": gpu, "calls": calls, "ranges": ranges, "os": os_calls, "main_tid": main}


def covered(intervals: list[tuple[int, int]], a: int, b: int) -> int:
    """Length of [a, b) covered by the union of the intervals (plain Python, independent of tracelab)."""
    pts = sorted((max(s, a), min(e, b)) for s, e in intervals if min(e, b) > max(s, a))
    total, cur_s, cur_e = 0, None, None
    for s, e in pts:
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def gap_windows(r: dict) -> list[tuple[int, int, int]]:
    """Each GPU idle interval (start, end) and the start of the launch of the op that ends it."""
    out = []
    reach = r["gpu"][0][1]
    for s, e, corr in r["gpu"][1:]:
        if s > reach:
            out.append((reach, s, r["calls"][corr][0]))
        reach = max(reach, e)
    return out


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_dataloader_op_covering_the_gap_is_input_wait(fmt, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.user_range(LOADER, 105, 170)  # [105,275): 170 of the 190 µs up to the launch
    path = write(p, fmt, tmp_path)
    r = raw(path)
    ((a, b, launch),) = gap_windows(r)
    frac = covered([(s, e) for n, s, e, t in r["ranges"] if "DataLoader" in n], a, launch) / (launch - a)
    assert frac >= 0.5
    (g,) = analyze_cli(path)["gaps"]
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (a, b, "input_wait")
    pct = round(frac * 100)
    assert f"which was waiting for input data {pct}% of the time up to then" in g["evidence"]
    assert f"{LOADER} from {(105 - 100):.1f} µs into the gap to {(275 - 100):.1f} µs into the gap" in g["evidence"]


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_loader_op_covering_less_than_half_is_not_input_wait(fmt, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.user_range(LOADER, 105, 80)  # 80/190 = 42%
    p.cpu_op("aten::copy_", 185, 100)  # busy on the host after it (Kineto)
    path = write(p, fmt, tmp_path)
    r = raw(path)
    ((a, _, launch),) = gap_windows(r)
    assert covered([(s, e) for _, s, e, _ in r["ranges"]], a, launch) / (launch - a) < 0.5
    (g,) = analyze_cli(path)["gaps"]
    assert g["cause"] == "launch_latency"


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
@pytest.mark.parametrize(("name", "counts"), [("load batch", True), ("get_data", True), ("upload weights", False),
                                              ("aten::batch_norm", False), ("forward", False)])
def test_user_ranges_named_for_data_batch_load(fmt, name, counts, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.user_range(name, 100, 185)
    (g,) = analyze_cli(write(p, fmt, tmp_path))["gaps"]
    assert (g["cause"] == "input_wait") == counts, g["evidence"]
    if not counts:
        # the configurable list: --input-word makes any user range a data-loading one
        word = name.split("::")[-1].split()[0]
        (g,) = analyze_cli(write(p, fmt, tmp_path, "again"), "--input-word", word)["gaps"]
        assert (g["cause"] == "input_wait") == ("::" not in name)


@pytest.mark.parametrize("call", ["poll", "sem_wait", "pthread_cond_wait", "read", "epoll_wait", "recvmsg"])
def test_os_wait_for_data_is_input_wait_naming_the_call(call, tmp_path, monkeypatch):
    """nsys with OS runtime calls: the launching thread blocked in a wait for data (no wake-up call in the
    process: the data came from another process) for most of the window."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.os_call(call, 110, 160)  # [110,270)
    path = p.nsys(tmp_path / "t.sqlite")
    r = raw(path)
    ((a, b, launch),) = gap_windows(r)
    waits = [(s, e) for n, s, e, t in r["os"] if n == call and t == r["main_tid"]]
    frac = covered(waits, a, launch) / (launch - a)
    (g,) = analyze_cli(path)["gaps"]
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (a, b, "input_wait")
    assert f"waiting for input data {round(frac * 100)}% of the time" in g["evidence"]
    assert f"OS call {call} from 10.0 µs into the gap to 170.0 µs into the gap" in g["evidence"]
    # the same program blocked in a sleep is no_work (blocked in the OS, not waiting for data)
    q = ab()
    q.os_call("clock_nanosleep", 110, 160)
    (g,) = analyze_cli(q.nsys(tmp_path / "sleep.sqlite"))["gaps"]
    assert g["cause"] == "no_work"


def test_a_wait_woken_by_its_own_process_is_not_input(tmp_path, monkeypatch):
    """sem_wait [110,270) on thread 1, woken by sem_post at 130 in the same process: blocked only [110,130)
    (20/190): the thread ran from then on (launch_latency)."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = ab()
    p.api("cudaGetDevice", -30, 1, tid=2)
    p.os_call("sem_wait", 110, 160)
    p.os_call("sem_post", 130, 1, tid=2)
    (g,) = analyze_cli(p.nsys(tmp_path / "t.sqlite"))["gaps"]
    assert g["cause"] == "launch_latency"


def loader_loop(stalls: dict[int, float], steps: int = 4) -> Program:
    """`steps` steps of 1000 µs: the loader's __next__ at t (stalls[i] µs long in step i, else 20 µs), then a
    kernel of 600 µs launched right after it; the GPU idles while the loader is slow."""
    p = Program()
    for i in range(steps):
        t = i * 1000.0
        p.step(t, t + 1000)
        d = stalls.get(i, 20.0)
        p.user_range(LOADER, t, d)
        p.kernel(t + d + 10, 600 if d < 600 else 300, launch=(t + d + 1, 4))
    return p


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_input_bound_fires_on_the_starved_steps_with_their_wait(fmt, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = loader_loop({1: 700.0, 3: 800.0})
    path = write(p, fmt, tmp_path)
    r = raw(path)
    steps = [(i * 1000 * US + (r["gpu"][0][0] - 30 * US), (i + 1) * 1000 * US + (r["gpu"][0][0] - 30 * US))
             for i in range(4)]
    loader = [(s, e) for n, s, e, _ in r["ranges"] if "DataLoader" in n]
    # per step: the GPU idle intervals the loader covers for at least half of the time up to the launch,
    # that end in the step (the step that waited for its data)
    expected = []
    for i, (s0, s1) in enumerate(steps):
        wait = sum(b - a for a, b, launch in gap_windows(r)
                   if covered(loader, a, launch) >= 0.5 * (launch - a) and s0 <= b - 1 < s1)
        if wait >= 0.1 * (s1 - s0):
            expected.append((i, wait))
    assert [i for i, _ in expected] == [1, 3]
    doc = analyze_cli(path)
    f = {x["rule"]: x for x in doc["findings"]}["input_bound"]
    assert [(s["step"], s["input_wait_ns"]) for s in f["data"]["steps"]] == expected
    assert f["wasted_ns"] == sum(w for _, w in expected) and f["count"] == 2
    assert f["data"]["loader_ops"][LOADER]["count"] == 4
    assert "num_workers" in f["message"] and "pin_memory" in f["message"] and "persistent_workers" in f["message"]
    # the fast twin (every __next__ 20 µs) does not fire
    doc = analyze_cli(write(loader_loop({}), fmt, tmp_path, "fast"))
    assert "input_bound" not in {x["rule"] for x in doc["findings"]}


def test_a_rank_starved_by_its_loader_is_the_straggler_and_says_input_wait(tmp_path, monkeypatch):
    """Two per-rank Kineto traces of 4 steps ending in an all-reduce: rank 1's loader takes 900 µs before
    each step's compute (rank 0's 20 µs), so rank 1 reaches every all-reduce last and its GPU idle is
    input_wait."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    d = tmp_path / "ranks"
    d.mkdir()
    for rank, stall in ((0, 20.0), (1, 900.0)):
        p = Program()
        for i in range(4):
            t = i * 2000.0
            p.step(t, t + 2000)
            p.user_range(LOADER, t, stall)
            p.kernel(t + stall + 10, 500, launch=(t + stall + 1, 4))
            p.kernel(t + 1500, 100, launch=(t + 1490, 4), name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=9)
        path = p.kineto(d / f"rank{rank}.json")
        doc = json.loads(path.read_text())
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
        path.write_text(json.dumps(doc))
    r1 = raw(d / "rank1.json")
    input_idle = sum(b - a for a, b, launch in gap_windows(r1)
                     if covered([(s, e) for n, s, e, _ in r1["ranges"] if "DataLoader" in n], a, launch)
                     >= 0.5 * (launch - a))
    out = analyze_cli(d)
    (s,) = [x for x in out["stragglers"] if x["rank"] == 1]
    assert s["idle_cause"] == "input_wait" and s["idle_cause_ns"] == input_idle
    assert s["times_last"] == 4  # every all-reduce
    # the text output says it too
    from click.testing import CliRunner

    from tracelab.cli import main

    r = CliRunner().invoke(main, ["analyze", str(d)], catch_exceptions=False)
    (line,) = [x for x in r.output.splitlines() if x.startswith("Stragglers:")]
    assert "rank 1 last 4×" in line and "its GPU idle mostly input_wait" in line


# ---- issue 24 item 7: a host with no recorded activity is no_work in torch.profiler too ----------------
def sleeper(hole_us: float) -> Program:
    """Kernel A [0,100) µs; the host runs ops up to 100, then nothing for hole_us, then an op of 20 µs and the
    launch of kernel B right after it; B starts 10 µs after its launch."""
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.cpu_op("aten::mul", -10, 110)
    t = 100 + hole_us
    p.cpu_op("aten::add", t, 20)
    p.kernel(t + 30, 100, launch=(t + 21, 4))
    return p


@pytest.mark.parametrize(("hole_us", "cause"), [(4000.0, "no_work"), (500.0, "launch_latency")])
def test_torch_profiler_host_without_ops_is_no_work(hole_us, cause, tmp_path, monkeypatch):
    """No CPU op and no CUDA call for a stretch of more than half of the time up to the launch and at least
    1 ms: the host was idle (a sleep) -> no_work; a shorter stretch is Python between ops -> launch_latency.
    The stretch is measured from the raw JSON's ops."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    path = sleeper(hole_us).kineto(tmp_path / "t.json")
    ev = json.loads(path.read_text())["traceEvents"]
    host = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in ev
                  if e["cat"] in ("cpu_op", "cuda_runtime"))
    r = raw(path)
    ((a, b, launch),) = gap_windows(r)
    reach, longest = a, 0
    for s, e in host:
        if e <= a or s >= launch:
            continue
        longest = max(longest, s - reach)
        reach = max(reach, e)
    longest = max(longest, launch - reach)
    idle = longest > 0.5 * (launch - a) and longest >= 1_000_000
    assert idle == (cause == "no_work")
    (g,) = analyze_cli(path)["gaps"]
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (a, b, cause)
    if idle:
        pct = round(100 * longest / (launch - a))
        assert f"ran no recorded CPU op or CUDA call for {pct}% of the time up to then in one stretch: the host was " \
               "idle" in g["evidence"]
    # nsys without OS calls or CPU ops cannot tell: launch_latency, as before
    (g,) = analyze_cli(sleeper(hole_us).nsys(tmp_path / "t.sqlite"))["gaps"]
    assert g["cause"] == "launch_latency"
