"""Issue 24: the last inferred step covers its whole iteration (forward, backward with its gradient all-reduces,
optimizer), on the host and on the GPU.

The marker-free 2- and 4-rank DDP runs (tests/data/multigpu/ddp{2,4}_sleep_*, tests/data/programs/ddp_straggler.py;
both profilers) cut their steps at each iteration's batch upload. Each step but the last ends where the next begins;
the last used to end one median step length after its start, and where the last iteration ran longer (rank 0 of
ddp2_sleep from torch.profiler: 51.1 ms against a 48.6 ms median; rank 3 of ddp4_sleep from both) its backward
pass's all-reduces and its optimizer were launched after that end, so neither the step's host range nor its GPU
window held them.

Expected values come from the raw traces (Kineto JSON / nsys SQLite read here with json / sqlite3), never through
tracelab's step code: per rank, the loop's thread is the one that launches the batch uploads (host-to-device
copies); the backward pass's all-reduces are the NCCL kernels launched from the other (autograd) thread, grouped
into iterations where the launches pause more than CLUSTER_GAP; the last iteration's optimizer is what the loop's
thread launches after the last all-reduce launch and before the program's closing cudaDeviceSynchronize.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from multigpu_util import MULTI, run_dir

from tracelab.api import analyze
from tracelab.io.detect import load_run_dir

CLUSTER_GAP = 5_000_000  # ns: launches of one backward pass are far closer (the iterations are ~48 ms apart)


@dataclass
class Call:
    start: int  # ns
    end: int  # ns
    tid: int
    name: str
    gpu: list[tuple[int, int, str]]  # (start, end, name) of the GPU work it launched


@dataclass
class LastIteration:
    allreduce_launches: list[Call]
    optimizer_launches: list[Call]


def _last_iteration(calls: list[Call], htod_launch_tids: list[int]) -> LastIteration:
    main = Counter(htod_launch_tids).most_common(1)[0][0]
    calls = sorted(calls, key=lambda c: c.start)
    ar = [c for c in calls if c.tid != main and any("nccl" in g[2].lower() for g in c.gpu)]
    assert ar, "no all-reduce launched from the autograd thread"
    last = [ar[-1]]
    for c in reversed(ar[:-1]):
        if last[0].start - c.end > CLUSTER_GAP:
            break
        last.insert(0, c)
    t = last[-1].start
    sync = min(c.start for c in calls if c.tid == main and c.start > t and c.name.startswith("cudaDeviceSynchronize"))
    opt = [c for c in calls if c.tid == main and t < c.start < sync and c.gpu]
    assert opt, "no optimizer launch between the last all-reduce and the closing synchronize"
    return LastIteration(last, opt)


def _kineto(path: Path) -> dict[int, LastIteration]:
    out = {}
    for f in sorted((path / "ranks").glob("rank*.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        calls: dict[int, Call] = {}
        gpu = []
        for e in doc["traceEvents"]:
            if e.get("ph") != "X" or "correlation" not in (e.get("args") or {}):
                continue
            corr = e["args"]["correlation"]
            s, d = round(float(e["ts"]) * 1000), round(float(e.get("dur", 0)) * 1000)
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                calls.setdefault(corr, Call(s, s + d, int(e["tid"]), e["name"], []))
            elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                gpu.append((corr, s, s + d, e["name"]))
        htod = []
        for corr, s, e, name in gpu:
            if corr in calls:
                calls[corr].gpu.append((s, e, name))
                if name.startswith("Memcpy HtoD"):
                    htod.append(calls[corr].tid)
        out[doc["distributedInfo"]["rank"]] = _last_iteration(list(calls.values()), htod)
    return out


def _nsys(db_path: Path) -> dict[int, LastIteration]:
    """Per process; a process's rank is its place in device order (the export has no ncclCommInitRank payload)."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    calls: dict[tuple[int, int], Call] = {}
    for s, e, gtid, corr, name in db.execute(
        "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    ):
        calls.setdefault(((gtid >> 24) & 0xFFFFFF, corr), Call(s, e, gtid & 0xFFFFFF, strings[name], []))
    htod: dict[int, list[int]] = {}
    device: dict[int, int] = {}
    for s, e, corr, gpid, name, dev in db.execute(
        "SELECT start, end, correlationId, globalPid, shortName, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        pid = (gpid >> 24) & 0xFFFFFF
        device[pid] = min(device.get(pid, dev), dev)
        if (pid, corr) in calls:
            calls[(pid, corr)].gpu.append((s, e, strings[name]))
    for s, e, corr, gpid, kind in db.execute(
        "SELECT start, end, correlationId, globalPid, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ):
        pid = (gpid >> 24) & 0xFFFFFF
        c = calls.get((pid, corr))
        if c is not None:
            c.gpu.append((s, e, "memcpy"))
            if kind == 1:  # host to device
                htod.setdefault(pid, []).append(c.tid)
    db.close()
    order = sorted(device, key=lambda p: (device[p], p))
    return {
        order.index(pid): _last_iteration([c for (p, _), c in calls.items() if p == pid], htod[pid]) for pid in order
    }


@pytest.fixture(scope="module", params=["ddp2_sleep_torch", "ddp2_sleep_nsys", "ddp4_sleep_torch", "ddp4_sleep_nsys"])
def recorded(request, tmp_path_factory):
    name = request.param
    path = run_dir(name, tmp_path_factory.mktemp(name))
    raw = _nsys(path / "trace.sqlite") if name.endswith("nsys") else _kineto(path)
    an = analyze(load_run_dir(path))
    return name, raw, an


def test_last_step_covers_its_iteration(recorded) -> None:
    name, raw, an = recorded
    program = json.loads((MULTI / name / "program_meta.json").read_text())
    assert set(raw) == set(range(program["world_size"]))
    program_steps = program["steps"]
    for rank, it in raw.items():
        rows = sorted((r for r in an.step_rows if r.rank == rank), key=lambda r: r.start_ns)
        assert abs(len(rows) - program_steps) <= 1
        last = rows[-1]
        assert {r.source for r in rows} == {"inferred"}
        host = it.allreduce_launches + it.optimizer_launches
        # the host range holds the iteration's last all-reduce and optimizer launches, start to return
        assert last.start_ns <= min(c.start for c in host)
        assert last.end_ns >= max(c.end for c in host)
        # the GPU window holds their GPU work (the all-reduce kernels, the optimizer's kernels)
        work = [g for c in host for g in c.gpu]
        assert last.gpu_start_ns <= min(g[0] for g in work)
        assert last.gpu_end_ns >= max(g[1] for g in work)
        # and the step before ends before the last iteration's all-reduces are launched
        assert rows[-2].end_ns <= min(c.start for c in it.allreduce_launches)
