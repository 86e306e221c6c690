"""Issue 24: the straggler ranking and the Ranks table's "last" column count the collectives inside the steps on
the GPU (`ranks.view.steps_stragglers`): a collective counts when its last arrival lies in that rank's loop
steps' GPU span (first loop step's GPU start to last loop step's GPU end; a warm-up first step left out), no
longer every collective from the earliest first step's host start on.

Expected numbers come from the raw traces, never through tracelab's step or collective code:
- the comm_overlap demo runs (two H200s, both profilers; `step N` markers): each rank's marked steps read from
  the Kineto JSON / the nsys SQLite, their GPU windows from the GPU work their launch calls issued
  (tests/raw_steps.py), NCCL kernels matched across ranks by operation and sequence, the last arrival of each.
  The program's closing all-reduce runs after the last step: counted from the host start on, it made its last
  rank "last" once more; inside the GPU windows it is not counted.
- the marker-free 2-rank DDP run whose rank 1 sleeps 40 ms before each forward (tests/data/multigpu/ddp2_sleep_*,
  tests/data/programs/ddp_straggler.py): the program warms the communicator up (an all-reduce and a barrier)
  before its loop and ends with a barrier after it; rank 1 arrives last in every collective between the two and
  rank 0 in the closing barrier. From both profilers: rank 1 last in all of the loop's collectives, rank 0 never.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pytest
from multigpu_util import run_dir
from raw_steps import windows_of_ranges

from tracelab.analyses.ranks.rank_document import rank_document_of
from tracelab.analyses.ranks.view import rank_analysis
from tracelab.analyses.steps.table import OUTLIER_FACTOR
from tracelab.api import analyze
from tracelab.demo import demo_run
from tracelab.io.detect import load_run_dir

OP = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
STEP = re.compile(r"^step \d+$")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
API_CATS = {"cuda_runtime", "cuda_driver"}


def _top(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    top: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if not top or a >= top[-1][1]:
            top.append((a, b))
    return top


def _kineto(path: Path) -> dict[int, dict]:
    """rank -> {"steps": [(start, end)] ns, "launches", "gpu" (ns), "nccl": [(op, start ns)]} per rank file."""
    out = {}
    for f in sorted((path / "ranks").glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        steps, launches, gpu, nccl = [], {}, [], []
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            cat, args = e.get("cat", ""), e.get("args") or {}
            s, t = round(float(e["ts"]) * 1000), round((float(e["ts"]) + float(e.get("dur", 0))) * 1000)
            if cat in GPU_CATS and "correlation" in args:
                gpu.append((args["correlation"], s, t))
            elif cat in API_CATS and "correlation" in args:
                launches.setdefault(args["correlation"], s)
            elif cat in ("user_annotation", "cpu_op") and STEP.match(str(e.get("name", ""))):
                steps.append((s, t))
            if cat == "kernel" and OP.search(e.get("name", "")):
                nccl.append((OP.search(e["name"]).group(1), s))
        out[doc["distributedInfo"]["rank"]] = {"steps": _top(steps), "launches": launches, "gpu": gpu, "nccl": nccl}
    return out


def _nsys(db_path: Path) -> dict[int, dict]:
    """The same per process of an nsys export: a process's rank is the "Rank" of its ncclCommInitRank payload
    when the export has one, else its place in device order."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    per: dict[int, dict] = {}

    def of(pid: int) -> dict:
        return per.setdefault(pid, {"steps": [], "launches": {}, "gpu": [], "nccl": []})

    rank_of = {}
    for s, e, text, tid, gtid, payload in db.execute(
        "SELECT start, end, text, textId, globalTid, jsonText FROM NVTX_EVENTS WHERE end IS NOT NULL"
    ):
        name = text if text is not None else strings.get(tid, "")
        pid = (gtid >> 24) & 0xFFFFFF
        if STEP.match(name or ""):
            of(pid)["steps"].append((s, e))
        if (name or "").startswith("ncclCommInitRank") and payload:
            rank_of[pid] = json.loads(payload)["Rank"]
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table in tables:
            for s, corr, gtid in db.execute(f"SELECT start, correlationId, globalTid FROM {table} ORDER BY start"):
                of((gtid >> 24) & 0xFFFFFF)["launches"].setdefault(corr, s)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            for s, e, corr, gpid in db.execute(f"SELECT start, end, correlationId, globalPid FROM {table}"):
                of((gpid >> 24) & 0xFFFFFF)["gpu"].append((corr, s, e))
    device_of = {}
    for s, gpid, dev, sid in db.execute("SELECT start, globalPid, deviceId, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        pid = (gpid >> 24) & 0xFFFFFF
        device_of[pid] = min(device_of.get(pid, dev), dev)
        m = OP.search(strings.get(sid, ""))
        if m:
            of(pid)["nccl"].append((m.group(1), s))
    db.close()
    order = sorted(device_of, key=lambda p: (device_of[p], p))
    out = {}
    for pid, d in per.items():
        if pid in device_of:
            d["steps"] = _top(d["steps"])
            out[rank_of.get(pid, order.index(pid))] = d
    return out


def _raw(path: Path) -> dict[int, dict]:
    sqlite = path / "trace.sqlite"
    return _nsys(sqlite) if sqlite.exists() else _kineto(path)


def _matched(raw: dict[int, dict]) -> list[dict]:
    """Collectives matched across ranks by (operation, sequence): first and last arrival, the last rank."""
    arrivals: dict[tuple[str, int], dict[int, int]] = {}
    for rank, d in raw.items():
        seq: dict[str, int] = {}
        for op, s in sorted(d["nccl"], key=lambda x: x[1]):
            arrivals.setdefault((op, seq.get(op, 0)), {})[rank] = s
            seq[op] = seq.get(op, 0) + 1
    out = []
    for key, per in arrivals.items():
        if len(per) >= 2:
            last = max(per, key=lambda r: per[r])
            out.append({"key": key, "first": min(per.values()), "last_at": per[last], "last_rank": last})
    return sorted(out, key=lambda c: c["first"])


def _loop(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The loop's steps: a first step longer than OUTLIER_FACTOR × the median of at least 2 later ones left out."""
    later = sorted(b - a for a, b in steps[1:])
    if len(later) >= 2:
        med = (later[(len(later) - 1) // 2] + later[len(later) // 2]) / 2
        if steps[0][1] - steps[0][0] > OUTLIER_FACTOR * med:
            return steps[1:]
    return steps


def _loop_windows(d: dict) -> list[tuple[int, int]]:
    """The GPU window of each loop step (its host range when it launched no GPU work)."""
    steps = _loop(d["steps"])
    wins = windows_of_ranges(steps, d["launches"], d["gpu"])
    return [(lo, hi) if lo is not None else h for (lo, hi), h in zip(wins, steps, strict=True)]


def _expected(raw: dict[int, dict]) -> tuple[dict[int, int], dict[int, int]]:
    """(times last per rank over the collectives inside the steps on the GPU, the same counted from the earliest
    first loop step's host start on)."""
    span, first_host = {}, []
    for rank, d in raw.items():
        wins = _loop_windows(d)
        span[rank] = (min(w[0] for w in wins), max(w[1] for w in wins))
        first_host.append(_loop(d["steps"])[0][0])
    since = min(first_host)
    gpu: dict[int, int] = {}
    host: dict[int, int] = {}
    for c in _matched(raw):
        lo, hi = span[c["last_rank"]]
        if lo <= c["last_at"] < hi:
            gpu[c["last_rank"]] = gpu.get(c["last_rank"], 0) + 1
        if c["first"] >= since:
            host[c["last_rank"]] = host.get(c["last_rank"], 0) + 1
    return gpu, host


@pytest.mark.parametrize("backend", ["nsys", "torch"])
@pytest.mark.parametrize("variant", ["sequential", "streams", "green_ctx"])
def test_stragglers_count_the_collectives_inside_the_gpu_windows(tmp_path, variant, backend):
    path = demo_run(f"comm_overlap-{variant}-{backend}", tmp_path)
    raw = _raw(path)
    want, from_host = _expected(raw)
    assert want != from_host  # the closing all-reduce after the last step: counted from the host start only
    assert sum(from_host.values()) == sum(want.values()) + 1
    tl = load_run_dir(path)
    ra = rank_analysis(tl, analyze(tl))
    assert {s.rank: s.times_last for s in ra.collectives.stragglers} == want
    assert {r.rank: r.times_last for r in ra.ranks} == {r: want.get(r, 0) for r in raw}
    doc = rank_document_of(ra)
    assert {x["rank"]: x["times_last"] for x in doc["ranks"]} == {r: want.get(r, 0) for r in raw}
    assert any("inside the steps on the GPU" in n for n in ra.collectives.notes)
    # the straggler's cause: the loop steps (GPU windows) in which it took part in a collective, and those in
    # which it arrived last (on the host ranges, asynchronous launches put most arrivals in no step: 0 or 1 of 3)
    calls = _matched(raw)
    assert ra.straggler_causes
    for cause in ra.straggler_causes:
        wins = _loop_windows(raw[cause.rank])
        mine = [t for op, t in raw[cause.rank]["nccl"]]
        late = [c["last_at"] for c in calls if c["last_rank"] == cause.rank]
        assert cause.steps == sum(any(a <= t < b for t in mine) for a, b in wins) == 3
        assert cause.steps_late == sum(any(a <= t < b for t in late) for a, b in wins)


@pytest.fixture(scope="module")
def ddp_sleep(tmp_path_factory):
    out = {}
    for backend in ("nsys", "torch"):
        path = run_dir(f"ddp2_sleep_{backend}", tmp_path_factory.mktemp(backend))
        tl = load_run_dir(path)
        out[backend] = (path, rank_analysis(tl, analyze(tl)))
    return out


@pytest.mark.parametrize("backend", ["nsys", "torch"])
def test_the_straggler_of_a_ddp_loop_from_both_profilers(ddp_sleep, backend):
    """Rank 1 (the program's slow rank) is last in every collective of the loop after its first iteration (a
    warm-up step, 253 ms of the program's own step times); rank 0 only in collectives before the loop and in the
    closing barrier after it, which the steps' GPU windows leave out (counted from the first step's host start
    on, the closing barrier made rank 0 "last" once)."""
    path, ra = ddp_sleep[backend]
    meta = json.loads((path / "program_meta.json").read_text())
    assert meta["step_wall_ms"][0] > OUTLIER_FACTOR * sorted(meta["step_wall_ms"][1:])[len(meta["step_wall_ms"]) // 2]
    calls = _matched(_raw(path))
    # the program: a warm-up all-reduce and a barrier (all-reduces 0 and 1) before the loop, a barrier after it;
    # DDP rebuilds its buckets at the start of the second iteration (broadcasts): the loop after its first iteration
    warm_barrier = next(i for i, c in enumerate(calls) if c["key"] == ("AllReduce", 1))
    loop, closing = calls[warm_barrier + 1 : -1], calls[-1]
    after_first = loop[next(i for i, c in enumerate(loop) if c["key"][0] == "Broadcast") :]
    assert closing["key"][0] == "AllReduce" and closing["last_rank"] == 0
    assert all(c["last_rank"] == meta["slow_rank"] for c in after_first)
    assert len(after_first) > 80
    got = {s.rank: s.times_last for s in ra.collectives.stragglers}
    assert got == {meta["slow_rank"]: len(after_first)}
    assert {r.rank: r.times_last for r in ra.ranks} == {0: 0, 1: len(after_first)}


def test_both_profilers_rank_the_same_straggler(ddp_sleep):
    (_, a), (_, b) = ddp_sleep["nsys"], ddp_sleep["torch"]
    assert [(s.rank, s.times_last) for s in a.collectives.stragglers] == [
        (s.rank, s.times_last) for s in b.collectives.stragglers
    ]
    assert [r.times_last for r in a.ranks] == [r.times_last for r in b.ranks]


# ---- hand-made: a set-up collective that runs after the first step's host start, before its GPU work -------

T0 = 1_700_000_000_000_000.0  # epoch µs, both ranks on one clock
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _ev(cat: str, name: str, ts: float, dur: float, corr: int, gpu: bool = False) -> dict:
    args = {"correlation": corr, **({"device": 0, "stream": 7} if gpu else {})}
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 1, "tid": 7 if gpu else 1,
            "ts": T0 + ts, "dur": dur, "args": args}


def _hand_made_rank(rank: int) -> list[dict]:
    """Set-up: an all-reduce launched at 0 µs that the GPU runs at 40 µs (rank 1) and 60 µs (rank 0: last),
    after the first step's host start (20 µs) and before its GPU work (170 µs on). Three steps of 1000 µs:
    a matmul launched at +10 µs that the GPU runs at +150 µs, an all-reduce launched at +20 µs, where rank 1
    arrives 100 µs after rank 0 (last)."""
    out = [_ev("cuda_runtime", "cudaLaunchKernel", 0, 5, 900), _ev("kernel", NCCL, 60 if rank == 0 else 40, 40, 900, True)]
    for k in range(3):
        b = 20 + 1000 * k
        late = 100 if rank == 1 else 0
        out += [
            _ev("user_annotation", f"step {k}", b, 1000, -1),
            _ev("cuda_runtime", "cudaLaunchKernel", b + 10, 5, 10 * k + 1),
            _ev("kernel", "ampere_sgemm_128x64_nn", b + 150, 450, 10 * k + 1, True),
            _ev("cuda_runtime", "cudaLaunchKernel", b + 20, 5, 10 * k + 2),
            _ev("kernel", NCCL, b + 600 + late, 300 - late, 10 * k + 2, True),
        ]
    for e in out:
        if e["args"]["correlation"] < 0:
            del e["args"]["correlation"]
    return out


def test_a_set_up_collective_before_the_first_gpu_window_is_no_steps_collective(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for rank in (0, 1):
        with gzip.open(d / f"rank{rank}.json.gz", "wt") as fh:
            json.dump({"traceEvents": _hand_made_rank(rank), "distributedInfo": {"rank": rank, "world_size": 2}}, fh)
    raw = _kineto(tmp_path)
    want, from_host = _expected(raw)
    assert want == {1: 3}
    assert from_host == {1: 3, 0: 1}  # the set-up all-reduce starts after the first step's host start
    from tracelab.io import load_trace

    tl = load_trace(d)
    an = analyze(tl)
    assert {r.rank: r.gpu_start_ns for r in an.step_rows if r.index == 0} == {
        r: int(T0) * 1000 + 170_000 for r in (0, 1)
    }
    ra = rank_analysis(tl, an)
    assert {s.rank: s.times_last for s in ra.collectives.stragglers} == want
    assert {r.rank: r.times_last for r in ra.ranks} == {0: 0, 1: 3}
