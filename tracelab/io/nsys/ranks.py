"""One rank per process in an nsys export of several GPU processes (`nsys profile torchrun ...`).

nsys records every process of a job in one report; each process that used a GPU is one rank. The rank
number comes from the best evidence the export holds, in this order:

1. NCCL's NVTX payloads: NCCL opens an `ncclCommInitRank*` range whose payload (schema entries "Rank",
   "No. of ranks", "CUDA device") names the process's rank in its communicator. The SQLite export
   carries the payload as JSON (`NVTX_EVENTS.jsonText`) when the report was exported with JSON
   payloads; the largest communicator's rank is taken (the world group).
2. Device order: rank r runs on the r-th GPU used (torchrun's LOCAL_RANK -> cuda:LOCAL_RANK on one
   host); processes sharing a GPU (gloo, two ranks on one GPU) are ordered by process id.

Host events of processes that used no GPU (the launcher, data-loader workers, nsys itself) belong to
no rank; they are left out, as per-rank Kineto files leave them out, and a note counts them.
"""

from __future__ import annotations

import json

import numpy as np

from tracelab.io.nsys.db import NsysDb
from tracelab.io.nsys.host import host_of, pid_of
from tracelab.io.nsys.util import distinct

INIT_RANGE_PREFIX = "ncclCommInitRank"


def _payload_rank(text: str) -> tuple[int, int] | None:
    """(rank, number of ranks) from one NCCL init payload as JSON; None when it names no rank."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    found: dict[str, int] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                k = str(key).lower()
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    if k == "rank":
                        found.setdefault("rank", int(value))
                    elif k in ("no. of ranks", "nranks", "number of ranks"):
                        found.setdefault("nranks", int(value))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    if "rank" not in found:
        return None
    return found["rank"], found.get("nranks", 0)


def nccl_ranks(db: NsysDb) -> dict[int, int]:
    """Process id -> rank from NCCL's `ncclCommInitRank*` payloads ({} when the export has none)."""
    from tracelab.io.nsys.nccl import payload_rows

    best: dict[int, tuple[int, int]] = {}  # pid -> (nranks, rank): the largest communicator wins
    for _start, _end, gtid, _name, text in payload_rows(db, INIT_RANGE_PREFIX + "%"):
        if gtid is None or not isinstance(text, str):
            continue
        got = _payload_rank(text)
        if got is None:
            continue
        rank, nranks = got
        pid = int(pid_of(np.array([int(gtid)], dtype=np.int64))[0])
        if pid not in best or nranks > best[pid][0]:
            best[pid] = (nranks, rank)
    return {pid: rank for pid, (_, rank) in best.items()}


def _device_order(procs: np.ndarray, proc: np.ndarray, device: np.ndarray, gpu: np.ndarray) -> dict[int, int]:
    """Process id -> rank by the lowest GPU index each process used, then by process id."""
    first_device = {}
    on = gpu & (proc >= 0) & (device >= 0)
    order = np.lexsort((device[on], proc[on]))
    p_sorted, d_sorted = proc[on][order], device[on][order]
    starts = np.flatnonzero(np.r_[True, p_sorted[1:] != p_sorted[:-1]]) if len(p_sorted) else []
    for i in starts:
        first_device[int(p_sorted[i])] = int(d_sorted[i])
    ranked = sorted((int(p) for p in procs), key=lambda p: (first_device.get(p, 1 << 30), p))
    return {p: r for r, p in enumerate(ranked)}


def assign_process_ranks(
    db: NsysDb, cols: dict[str, np.ndarray], gpu: np.ndarray, processes: np.ndarray | None = None
) -> tuple[np.ndarray, list[str]]:
    """Give each GPU process of a one-host export its rank (cols["rank"], in place). Returns the rows
    to keep (False for host events of processes that used no GPU) and notes. A one-process export,
    or one of several hosts (a rank per host, set before), is left as it is. `processes`: the distinct
    globalPids (>= 0) of cols["_gpid"] when the caller has them."""
    gpid = cols["_gpid"]
    keep = np.ones(len(gpid), dtype=bool)
    if processes is None:
        processes = distinct(gpid[gpid >= 0])
    if len(distinct(host_of(processes))) > 1:
        return keep, []
    proc = pid_of(gpid)
    procs = distinct(proc[gpu & (proc >= 0)])
    if len(procs) <= 1:
        return keep, []
    from_nccl = nccl_ranks(db)
    ranks_nccl = [from_nccl.get(int(p)) for p in procs]
    if all(r is not None for r in ranks_nccl) and len(set(ranks_nccl)) == len(procs):
        rank_of = {int(p): int(r) for p, r in zip(procs, ranks_nccl)}
        how = "from NCCL's communicator payloads (ncclCommInitRank*)"
    else:
        rank_of = _device_order(procs, proc, cols["device"], gpu)
        how = "in device order (the export holds no NCCL rank payloads)"
    table_p = np.array(sorted(rank_of), dtype=np.int64)
    table_r = np.array([rank_of[p] for p in table_p], dtype=np.int32)
    idx = np.clip(np.searchsorted(table_p, proc), 0, len(table_p) - 1)
    in_rank = table_p[idx] == proc
    cols["rank"] = np.where(in_rank, table_r[idx], cols["rank"]).astype(np.int32)
    keep = in_rank | (gpid < 0)
    notes = [f"{len(procs)} processes used GPUs: one rank each, ranks {how}"]
    dropped = int((~keep).sum())
    if dropped:
        others = len(distinct(proc[~keep]))
        notes.append(
            f"{dropped} host events of {others} process{'es' if others > 1 else ''} that used no GPU (launcher, "
            "data-loader workers, profiler) are in no rank: left out"
        )
    return keep, notes
