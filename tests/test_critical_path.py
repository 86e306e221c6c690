"""Issue 24, items 5 and 6: collectives with bytes and the time split, and the critical path of a step.

Hand-made Kineto traces whose answer is known by construction (the expected numbers are computed here
from the events the test writes), HTA's critical-path corpus traces (HTA's own result: the events its
overlaid output marks `critical`), and the NCCL metadata of a real trace read back from its raw JSON."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from tracelab.analyses import analyze
from tracelab.analyses.ranks import path_segments
from tracelab.analyses.ranks.collectives import bus_factor, dtype_bytes, match_collectives
from tracelab.analyses.ranks.comm_steps import step_windows
from tracelab.analyses.ranks.critical_path import critical_path, critical_path_for
from tracelab.analyses.ranks.rank_document import rank_document_of
from tracelab.analyses.ranks.view import rank_analysis
from tracelab.io import load_trace

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRACELAB_CORPUS") or ROOT.parent / "shared" / "corpus")
HTA = CORPUS / "hta"
needs_corpus = pytest.mark.skipif(not HTA.is_dir(), reason="needs ../shared/corpus")


def X(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, **args) -> dict:
    return X("kernel", name, ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr, **args)


def launch(ts: float, dur: float, corr: int) -> dict:
    return X("cuda_runtime", "cudaLaunchKernel", ts, dur, correlation=corr)


def sync(ts: float, dur: float, corr: int) -> dict:
    return X("cuda_runtime", "cudaDeviceSynchronize", ts, dur, correlation=corr)


def _ns(us: float) -> int:
    """µs (as the JSON holds them) -> ns, exactly (epoch µs × 1000 does not fit a float's mantissa)."""
    return int((Decimal(repr(us)) * 1000).to_integral_value())


# ---- one rank: a host-bound step and a GPU-bound step ---------------------------------------------------

ONE = [
    X("user_annotation", "ProfilerStep#0", 0, 100),
    X("user_annotation", "ProfilerStep#1", 100, 100),
    # step 0: the host sleeps from 20 to 60 µs, then launches k3 and waits for it
    X("cpu_op", "aten::a", 1, 9), launch(5, 3, 1), kernel("k1", 10, 30, 1), launch(9, 2, 2), kernel("k2", 40, 15, 2),
    X("cpu_op", "aten::b", 12, 8), launch(60, 2, 3), kernel("k3", 64, 16, 3), sync(62, 19, 10),
    X("cpu_op", "aten::c", 82, 13),
    # step 1: two kernels back to back, the host waits
    launch(101, 2, 4), kernel("k4", 104, 46, 4), launch(103, 2, 5), kernel("k5", 150, 40, 5), sync(105, 86, 11),
]


def _write(path: Path, events: list[dict], rank: int = 0, world: int = 1) -> Path:
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}))
    return path


def _by_name(events: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in events}


@pytest.mark.parametrize("blocks", [False, True])
def test_one_rank_known_path(tmp_path: Path, blocks: bool, monkeypatch) -> None:
    if blocks:  # the segments one chain at a time, the host activity merged two rows at a time
        monkeypatch.setattr(path_segments, "SEGMENT_BLOCK", 1)
        monkeypatch.setattr(path_segments, "MERGE_BLOCK", 2)
    tl = load_trace(_write(tmp_path / "one.json", ONE))
    an = analyze(tl)
    cp = critical_path_for(tl, an)
    assert [(p.rank, p.step) for p in cp.steps] == [(0, 0), (0, 1)]
    e = _by_name(ONE)
    s0, s1 = cp.steps
    got0 = s0.by_category()
    # issue 24: a step's path spans its GPU window, the GPU work its host range launched: step 0 from k1's
    # start to k3's end (the sync returns after the GPU work is over: outside the window)
    assert (s0.start_ns, s0.end_ns) == (_ns(e["k1"]["ts"]), _ns(e["k3"]["ts"] + e["k3"]["dur"]))
    # k3 runs (compute); before it the host: launch 3's start to k3's start, CPU ops in the gap between
    # launch 2 and launch 3 (aten::b), the part of launch 2 inside the window; the rest of that gap is idle
    assert got0["compute"] == _ns(e["k3"]["dur"])
    assert got0["sync"] == 0
    host = (
        (64 - 60)  # launch 3's start to k3's start
        + 8  # aten::b in the sleep gap [11, 60)
        + (11 - 10)  # launch 2 [9, 11) from the window start
    )
    assert got0["host"] == _ns(host)
    assert got0["idle"] == _ns(60 - 11 - 8)
    assert sum(got0.values()) == s0.length_ns == _ns(80 - 10)
    # step 1: k4 then k5 on the stream fill the GPU window [k4 start, k5 end)
    got1 = s1.by_category()
    assert (s1.start_ns, s1.end_ns) == (_ns(e["k4"]["ts"]), _ns(e["k5"]["ts"] + e["k5"]["dur"]))
    assert got1["compute"] == _ns(e["k4"]["dur"] + e["k5"]["dur"]) == s1.length_ns
    assert got1["sync"] == got1["host"] == got1["idle"] == 0
    # the segments tile each step, in time order
    for p in cp.steps:
        assert p.segments[0].start_ns == p.start_ns and p.segments[-1].end_ns == p.end_ns
        assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(p.segments))
    assert {s.name for s in s1.segments if s.category == "compute"} <= {"k4", "k5"}


# ---- two ranks over NCCL: rank 1's host idles 400 µs before each step's work --------------------------

NELEMS, DTYPE = 1 << 20, "Float"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COLL_ARGS = {
    "Collective name": "allreduce",
    "In msg nelems": NELEMS,
    "Out msg nelems": NELEMS,
    "Group size": 2,
    "dtype": DTYPE,
    "Process Group Name": "0",
    "Process Group Description": "default_pg",
}
STEP_US, LATE_US = 1000, 400


def _rank_events(rank: int, steps: int = 3) -> list[dict]:
    t0 = 1_700_000_000_000_000.0  # epoch µs, both ranks on one clock
    out = []
    for k in range(steps):
        b = t0 + k * STEP_US
        d = LATE_US if rank == 1 else 0
        c = 10 * k
        out += [
            X("user_annotation", f"ProfilerStep#{k}", b, STEP_US),
            launch(b + d + 10, 5, c + 1),
            kernel("gemm", b + d + 20, 200, c + 1),
            launch(b + d + 25, 5, c + 2),
            # rank 0's NCCL kernel starts after its gemm and waits for rank 1 (which arrives at +630)
            kernel(NCCL, b + (230 if rank == 0 else 630), 500 if rank == 0 else 100, c + 2, stream=20, **COLL_ARGS),
            sync(b + d + 35, 735 - d - 35, c + 3),
        ]
    return out


@pytest.fixture()
def two_ranks(tmp_path: Path) -> tuple[Path, dict[int, list[dict]]]:
    raw = {r: _rank_events(r) for r in (0, 1)}
    d = tmp_path / "ranks"
    d.mkdir()
    for r, ev in raw.items():
        _write(d / f"rank{r}.json", ev, rank=r, world=2)
    return d, raw


def _nccl(raw: list[dict]) -> list[dict]:
    return sorted((e for e in raw if e["cat"] == "kernel" and e["name"].startswith("nccl")), key=lambda e: e["ts"])


def test_collectives_bytes_and_time_split(two_ranks) -> None:
    d, raw = two_ranks
    tl = load_trace(d)
    col = match_collectives(tl)
    assert len(col.calls) == 3
    for k, c in enumerate(col.calls):
        a = {r: _nccl(raw[r])[k] for r in (0, 1)}
        args = a[0]["args"]
        nbytes = max(args["In msg nelems"], args["Out msg nelems"]) * 4  # Float
        last = max(a, key=lambda r: a[r]["ts"])
        transfer = _ns(a[last]["dur"])
        assert (c.bytes, c.dtype, c.group, c.group_size) == (nbytes, "Float", "0 (default_pg)", 2)
        assert c.last_rank == last == 1
        assert c.transfer_ns == transfer
        assert c.algbw_gbps == pytest.approx(nbytes / transfer)
        assert c.busbw_gbps == pytest.approx(nbytes / transfer * 2 * (2 - 1) / 2)
        last_ts = _ns(a[last]["ts"])
        assert [(p[0], p[2], p[3], p[4]) for p in c.per_rank] == [
            (r, _ns(a[r]["ts"]), last_ts - _ns(a[r]["ts"]), _ns(a[r]["ts"] + a[r]["dur"]) - last_ts) for r in (0, 1)
        ]


def test_comm_per_step_and_straggler_cause(two_ranks) -> None:
    d, raw = two_ranks
    tl = load_trace(d)
    an = analyze(tl)
    ra = rank_analysis(tl, an)
    doc = rank_document_of(ra)
    rows = {(x["rank"], x["step"]): x for x in doc["comm_by_step"]}
    assert len(rows) == 6
    for r in (0, 1):
        ev = raw[r]
        for k in range(3):
            nccl = _nccl(ev)[k]
            gemm = sorted((e for e in ev if e["name"] == "gemm"), key=lambda e: e["ts"])[k]
            other = _nccl(raw[1 - r])[k]
            comm = _ns(nccl["dur"])
            overlap = max(0, min(nccl["ts"] + nccl["dur"], gemm["ts"] + gemm["dur"]) - max(nccl["ts"], gemm["ts"]))
            wait = max(0, _ns(other["ts"]) - _ns(nccl["ts"]))
            assert rows[(r, k)]["comm_ns"] == comm
            assert rows[(r, k)]["exposed_comm_ns"] == comm - _ns(overlap)
            assert rows[(r, k)]["wait_ns"] == wait
    strag = doc["stragglers"][0]
    late = [_ns(_nccl(raw[1])[k]["ts"]) - _ns(_nccl(raw[0])[k]["ts"]) for k in range(3)]
    assert strag["rank"] == 1 and strag["late_ns"] == int(np.median(late))
    assert (strag["steps_late"], strag["steps"]) == (3, 3)
    # before each late arrival rank 1's GPU idles from its previous collective (or the trace start) to
    # its gemm: the longest gap the analysis found in between
    assert strag["idle_before_ns"] > 0
    assert strag["explanation"].startswith("rank 1 arrives 400.0 µs late in 3 of 3 steps; before each, its GPU is idle")


@pytest.mark.parametrize("blocks", [False, True])
def test_two_ranks_critical_path(two_ranks, blocks: bool, monkeypatch) -> None:
    if blocks:  # the segments one chain at a time, the host activity merged two rows at a time
        monkeypatch.setattr(path_segments, "SEGMENT_BLOCK", 1)
        monkeypatch.setattr(path_segments, "MERGE_BLOCK", 2)
    d, raw = two_ranks
    tl = load_trace(d)
    an = analyze(tl)
    col = match_collectives(tl)
    cp = critical_path(tl, step_windows(an.steps), col)
    per = {(p.rank, p.step): p.by_category() for p in cp.steps}
    for k in range(3):
        n0, n1 = _nccl(raw[0])[k], _nccl(raw[1])[k]
        g0 = sorted((e for e in raw[0] if e["name"] == "gemm"), key=lambda e: e["ts"])[k]
        got = per[(0, k)]
        # rank 0 alone: its gemm, then its NCCL kernel waiting for rank 1, then the transfer
        assert got["compute"] == _ns(g0["dur"])
        assert got["wait"] == _ns(n1["ts"] - n0["ts"])
        assert got["comm"] == _ns(n0["ts"] + n0["dur"] - n1["ts"])
        assert sum(got.values()) == _ns(STEP_US)
    # across ranks, the path goes to rank 1 (the last to arrive): its idle host before the step's work
    # sets the length; nothing on the path waits
    for p in cp.across:
        got = p.by_category()
        assert got["wait"] == 0
        g1 = sorted((e for e in raw[1] if e["name"] == "gemm"), key=lambda e: e["ts"])[p.step]
        n1 = _nccl(raw[1])[p.step]
        assert got["compute"] == _ns(g1["dur"])
        assert got["comm"] == _ns(n1["dur"])
        first_launch = min(e["ts"] for e in raw[1] if e["name"] == "cudaLaunchKernel" and e["ts"] >= g1["ts"] - 100)
        step_start = first_launch - LATE_US - 10
        assert any(s.rank == 1 and s.category == "idle" and s.length_ns >= _ns(first_launch - step_start) for s in p.segments)
    bound = cp.bound_by()
    assert max(bound, key=bound.get) == "idle"


# ---- HTA's critical path on its own corpus traces ----------------------------------------------------


def _load_json(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)


@pytest.mark.corpus
@needs_corpus
def test_agrees_with_hta_simple_add() -> None:
    """HTA's overlaid output marks the events on its critical path (`args.critical`); its input is the
    corpus `critical_path__simple_add` trace. The path runs over the `[param|cuda]` range. Every GPU
    operation on tracelab's path is one HTA marks critical; the GPU operations HTA marks that tracelab
    does not are those a cudaDeviceSynchronize covered after they had finished (HTA's zero-weight sync edge;
    the GPU did not hold the host there)."""
    src = HTA / "critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"
    out = HTA / "critical_path__end_to_end__simple_add__output__overlaid_critical_path_trace.json.gz"
    raw = [e for e in _load_json(out)["traceEvents"] if e.get("ph") == "X"]
    hta_gpu = {
        (_ns(e["ts"]), _ns(e["dur"]))
        for e in raw
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and (e.get("args") or {}).get("critical")
    }
    ann = next(e for e in raw if e["name"] == "[param|cuda]")
    w0, w1 = _ns(ann["ts"]), _ns(ann["ts"] + ann["dur"])
    tl = load_trace(src)
    cp = critical_path(tl, {0: (np.array([w0]), np.array([w1]))})
    (p,) = cp.steps
    ours = {(s.start_ns, s.length_ns) for s in p.segments if s.category in ("compute", "comm")}
    assert ours and ours <= hta_gpu
    syncs = sorted(_ns(e["ts"]) for e in raw if e["name"] == "cudaDeviceSynchronize")
    for ts, dur in hta_gpu - ours:
        # a device sync that started after it ended, with no GPU work of the path in between
        nxt = next(s for s in syncs if s >= ts)
        assert ts + dur <= nxt
    # both paths are host-bound: the GPU time on tracelab's path is the GPU time HTA's path holds but
    # those last few operations
    assert p.by_category()["compute"] == sum(d for _, d in ours)
    assert p.by_category()["host"] / p.length_ns > 0.95


@pytest.mark.corpus
@needs_corpus
def test_event_sync_edge_as_hta() -> None:
    """HTA's test on `critical_path__cuda_event_sync`: the spin kernel's end releases cudaEventSynchronize
    (a GPU → CPU sync edge). On tracelab's path: the spin kernel, then a `sync` segment that ends where
    cudaEventSynchronize returns."""
    src = HTA / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    raw = [e for e in _load_json(src)["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in raw if e["name"].startswith("ProfilerStep"))
    spin = next(e for e in raw if e["name"].startswith("at::cuda::(anonymous namespace)::spin_kernel"))
    ev_sync = next(e for e in raw if e["name"] == "cudaEventSynchronize")
    tl = load_trace(src)
    cp = critical_path(tl, {0: (np.array([_ns(step["ts"])]), np.array([_ns(step["ts"] + step["dur"])]))})
    segs = cp.steps[0].segments
    i = next(i for i, s in enumerate(segs) if s.name == spin["name"])
    assert (segs[i].start_ns, segs[i].end_ns) == (_ns(spin["ts"]), _ns(spin["ts"] + spin["dur"]))
    assert segs[i + 1].category == "sync" and segs[i + 1].end_ns == _ns(ev_sync["ts"] + ev_sync["dur"])


# ---- NCCL metadata of a real trace -----------------------------------------------------------------


@pytest.mark.corpus
@needs_corpus
def test_kineto_collective_args_match_raw_json() -> None:
    src = HTA / "nccl_parser_config__nccl_data.json.gz"
    raw = [
        e
        for e in _load_json(src)["traceEvents"]
        if "Collective name" in (e.get("args") or {}) and "correlation" in e["args"]
    ]
    got = load_trace(src).meta.extra["collective_args"]
    want = sorted(
        (
            e["args"]["correlation"],
            e["args"]["Collective name"],
            e["args"]["In msg nelems"],
            e["args"]["Out msg nelems"],
            e["args"]["dtype"],
            e["args"]["Process Group Name"],
        )
        for e in raw
    )
    have = sorted(
        zip(got["correlation"], got["name"], got["in_nelems"], got["out_nelems"], got["dtype"], got["group"])
    )
    assert have == want and len(want) == 21


def test_bandwidth_factors_and_dtypes() -> None:
    # nccl-tests PERFORMANCE.md
    assert bus_factor("AllReduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("allgather", 8) == pytest.approx(7 / 8)
    assert bus_factor("_reduce_scatter_base", 4) == pytest.approx(3 / 4)
    assert bus_factor("all_to_all", 4) == pytest.approx(3 / 4)
    assert bus_factor("broadcast", 4) == 1.0 and bus_factor("Reduce", 4) == 1.0
    assert (dtype_bytes("Float"), dtype_bytes("BFloat16"), dtype_bytes("Float8_e4m3fn"), dtype_bytes("x")) == (4, 2, 1, None)


def test_cli_analyze_json_has_the_new_fields(two_ranks) -> None:
    d, _raw = two_ranks
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "tracelab", "analyze", str(d), "--json"], capture_output=True, env=env, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    c = doc["collectives"][0]
    assert {"name", "group", "bytes", "dtype", "algbw_gbps", "busbw_gbps", "last_rank", "skew_ns", "per_rank"} <= set(c)
    assert c["bytes"] == NELEMS * 4 and [p["rank"] for p in c["per_rank"]] == [0, 1]
    cp = doc["critical_path"]
    assert set(cp["bound_by"]) == {"compute", "comm", "wait", "host", "sync", "idle"}
    assert sum(cp["bound_by"].values()) == pytest.approx(1.0)
    assert {(s["rank"], s["step"]) for s in cp["steps"]} == {(r, k) for r in (0, 1) for k in range(3)}
    for s in cp["steps"]:
        # each step's GPU window: its gemm's start to its NCCL kernel's end (issue 24)
        gemm = sorted((e for e in _raw[s["rank"]] if e["name"] == "gemm"), key=lambda e: e["ts"])[s["step"]]
        nccl = _nccl(_raw[s["rank"]])[s["step"]]
        assert s["length_ns"] == _ns(nccl["ts"] + nccl["dur"]) - _ns(gemm["ts"])
        assert sum(x["end_ns"] - x["start_ns"] for x in s["segments"]) == s["length_ns"]
    text = subprocess.run(
        [sys.executable, "-m", "tracelab", "analyze", str(d)], capture_output=True, env=env, text=True, timeout=300, check=True
    ).stdout
    assert "Critical path" in text and "rank 1 arrives 400.0 µs late in 3 of 3 steps" in text
    # the same from a stored run: the collective metadata travels with the run's metadata
    env["TRACELAB_DB"] = str(d.parent / "store.db")
    rid = subprocess.run(
        [sys.executable, "-m", "tracelab", "import", str(d)], capture_output=True, env=env, text=True, timeout=300,
        check=True,
    ).stdout.split()[-1]
    stored = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tracelab", "analyze", rid, "--json"], capture_output=True, env=env, timeout=300,
            check=True,
        ).stdout
    )
    assert stored["collectives"] == doc["collectives"]
    assert stored["critical_path"]["bound_by"] == pytest.approx(cp["bound_by"])


def test_reports_show_the_critical_path(two_ranks, tmp_path: Path) -> None:
    """The Markdown report's Critical path table: across ranks, each category's share of the steps is
    the one known by construction (rank 1's GPU window: its gemm, the idle rest, its transfer)."""
    from tracelab.api import report as write_report

    d, raw = two_ranks
    tl = load_trace(d)
    an = analyze(tl)
    write_report(tmp_path / "r.md", an, tl)
    md = (tmp_path / "r.md").read_text()
    assert "## Critical path" in md
    row = next(line for line in md.splitlines() if line.startswith("| across ranks |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # across ranks each step ends with rank 1's NCCL kernel (both ranks' end together; rank 1 arrived last):
    # its GPU window from its gemm's start: the gemm, the idle wait for the NCCL stream, the transfer
    g = next(e for e in raw[1] if e["name"] == "gemm")
    n = _nccl(raw[1])[0]
    window = n["ts"] + n["dur"] - g["ts"]
    want = {
        "compute": g["dur"] / window,
        "comm": n["dur"] / window,
        "wait": 0.0,
        "host": 0.0,
        "sync": 0.0,
    }
    want["idle"] = 1 - sum(want.values())
    assert cells[1] == "3"
    assert cells[3:9] == [f"{100 * want[c]:.0f}%" for c in ("compute", "comm", "wait", "host", "sync", "idle")]
    write_report(tmp_path / "r.json", an, tl)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["critical_path"]["bound_by"] == pytest.approx(want)


def test_collective_args_scanner_across_block_cuts() -> None:
    """The reader's scan finds every kernel's args however the text is cut into blocks, skips the key
    outside args and the CPU op without a correlation, and survives a '}' inside a string."""
    from tracelab.io.kineto.comm_args import CommArgs

    events = [
        X("cpu_op", "record_param_comms", 1, 1, **COLL_ARGS),  # no correlation: not a kernel
        X("cpu_op", 'name with "Collective name" in it', 2, 1),
        *(kernel(NCCL, 10 * i, 5, 100 + i, **{**COLL_ARGS, "In msg nelems": i, "Process Group Description": "a}b"})
          for i in range(1, 40)),
    ]
    text = json.dumps({"traceEvents": events}).encode()
    for block in (7, 64, 333, 4096, len(text)):
        c = CommArgs()
        for i in range(0, len(text), block):
            c.feed(bytearray(text[i : i + block]))
        got = c.result()
        assert got["correlation"] == list(range(101, 140)), block
        assert got["in_nelems"] == list(range(1, 40)) and set(got["group_desc"]) == {"a}b"}


@pytest.mark.corpus
@needs_corpus
def test_cross_stream_edge_as_hta_alexnet() -> None:
    """HTA's test on `critical_path__alexnet` (annotation `[param|pytorch.model.alex_net|0|0|0|measure|
    forward]`, instance 1): a GPU → GPU sync edge from the fft kernel on stream 20 (correlation 5606) to
    the elementwise kernel on stream 7 (5629). On tracelab's path the one follows the other."""
    src = HTA / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    raw = [e for e in _load_json(src)["traceEvents"] if e.get("ph") == "X"]
    ann = sorted((e for e in raw if e["name"] == "[param|pytorch.model.alex_net|0|0|0|measure|forward]"),
                 key=lambda e: e["ts"])[1]
    kern = {e["args"].get("correlation"): e for e in raw if e.get("cat") == "kernel"}
    fft, elw = kern[5606], kern[5629]
    assert (fft["args"]["stream"], elw["args"]["stream"]) == (20, 7)
    tl = load_trace(src)
    cp = critical_path(tl, {0: (np.array([_ns(ann["ts"])]), np.array([_ns(ann["ts"] + ann["dur"])]))})
    segs = [s for s in cp.steps[0].segments if s.category == "compute"]
    i = next(i for i, s in enumerate(segs) if s.start_ns == _ns(fft["ts"]) and s.name == fft["name"])
    assert segs[i].end_ns == _ns(fft["ts"] + fft["dur"])
    assert segs[i + 1].name == elw["name"] and segs[i + 1].start_ns == _ns(elw["ts"])


def test_both_formats_agree_on_the_small_mixed_program(tmp_path: Path) -> None:
    """tests/data's small mixed program (5 steps, recorded separately under nsys and torch.profiler):
    both formats find the steps bound by the host side (launches between tiny kernels): host + idle
    within 10 points of each other, and the GPU side too; every step's segments tile it. (How the
    host side splits differs by format: Kineto records no Python time between CPU ops, so it is `idle`
    there, while nsys counts a thread's time outside OS calls as host work.)"""
    import lzma

    data = ROOT / "tests" / "data"
    nsys = tmp_path / "mixed.sqlite"
    nsys.write_bytes(lzma.decompress((data / "nsys_mixed_small.sqlite.xz").read_bytes()))
    shares = []
    for src in (nsys, data / "torch_mixed_small"):
        tl = load_trace(src)
        cp = critical_path_for(tl, analyze(tl))
        assert len(cp.steps) == 5
        for p in cp.steps:
            segs = p.segments
            assert segs[0].start_ns == p.start_ns and segs[-1].end_ns == p.end_ns
            assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(segs))
        b = cp.bound_by(cp.steps[1:])  # after the warm-up step
        assert max(b, key=b.get) == "host"
        shares.append((b["host"] + b["idle"], b["compute"] + b["comm"] + b["sync"] + b["wait"]))
    assert abs(shares[0][0] - shares[1][0]) <= 0.10 and abs(shares[0][1] - shares[1][1]) <= 0.10
    assert shares[0][0] > 0.9 and shares[1][0] > 0.9


def test_hostile_collective_args(tmp_path: Path) -> None:
    """Collective args of the wrong type or absurd size give null, never a failed document."""
    raw = {r: _rank_events(r, steps=1) for r in (0, 1)}
    for ev in raw[1]:  # the last to arrive: its args are the ones used
        if ev["name"] == NCCL:
            ev["args"].update({"In msg nelems": 2**63 - 1, "Out msg nelems": "x", "Group size": True})
    d = tmp_path / "ranks"
    d.mkdir()
    for r, ev in raw.items():
        _write(d / f"rank{r}.json", ev, rank=r, world=2)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "tracelab", "analyze", str(d), "--json"], capture_output=True, env=env, timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    c = json.loads(res.stdout)["collectives"][0]
    assert c["last_rank"] == 1 and c["bytes"] is None and c["algbw_gbps"] is None and c["busbw_gbps"] is None
    assert c["dtype"] == "Float" and c["group_size"] == 2  # a boolean group size: the participants counted
