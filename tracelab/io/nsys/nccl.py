"""Collective metadata from NCCL's NVTX payloads in an nsys export (issue 24, item 5).

NCCL ≥ 2.19 opens an NVTX range around each collective call (`ncclAllReduce`, `ncclAllGather`, …) with
a payload: "NCCL communicator ID", "Message size [bytes]", and per operation "Reduction operation" or
"Root"; `ncclCommInitRank*` carries "No. of ranks". nsys writes the payloads as JSON
(`NVTX_EVENTS.jsonText`) when exported with `--include-json true` (`tracelab record` does so for torchrun
launches). Each range is joined to the NCCL kernel its thread launched inside it (same process and
thread, by correlation) and the result has the shape of the Kineto collective args
(`RunMeta.extra["rank_extra"][rank]["collective_args"]`, read by analyses/ranks/collectives.py), with `bytes`
given directly: NCCL's message size, times the communicator's ranks for all-gather and reduce-scatter
(nccl-tests counts the whole gathered / scattered buffer). `group` is the communicator id; dtype is not
in the payload (`null`).
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from tracelab.io.nsys.db import NsysDb
from tracelab.io.nsys.host import pid_of, tid_of
from tracelab.model import EventKind

OPS = {
    "ncclAllReduce": "allreduce",
    "ncclAllGather": "allgather",
    "ncclReduceScatter": "reducescatter",
    "ncclBroadcast": "broadcast",
    "ncclReduce": "reduce",
    "ncclAllToAll": "alltoall",
    "ncclSend": "send",
    "ncclRecv": "recv",
}
GATHERED = ("allgather", "reducescatter")  # nccl-tests size: the whole buffer, ranks × the message


def payload_rows(db: NsysDb, name_like: str) -> list[tuple]:
    """(start, end, globalTid, name, jsonText) of the NVTX ranges named LIKE `name_like` that carry a JSON
    payload (an export made with `--include-json true`); [] when the export has none."""
    if not db.has("NVTX_EVENTS", "jsonText", "globalTid"):
        return []
    has_ids = db.has("NVTX_EVENTS", "textId") and "StringIds" in db.tables
    name = "COALESCE(e.text, s.value)" if has_ids else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if has_ids else ""
    try:
        return db.rows(
            f"SELECT e.start, e.end, e.globalTid, {name}, e.jsonText FROM NVTX_EVENTS e {join} "
            f"WHERE e.jsonText IS NOT NULL AND {name} LIKE ?",
            (name_like,),
        )
    except sqlite3.Error:
        return []


def _payloads(db: NsysDb) -> list[tuple[int, int, int, str, dict]]:
    """(start, end, globalTid, op, payload) of the NCCL collective ranges that carry a JSON payload."""
    rows = payload_rows(db, "nccl%")
    out = []
    for start, end, gtid, op, text in rows:  # one per NCCL call (thousands), not per event
        if op not in OPS and not str(op).startswith("ncclCommInitRank"):
            continue
        try:
            payload = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(payload, dict) and start is not None and end is not None and gtid is not None:
            out.append((int(start), int(end), int(gtid), str(op), payload))
    return out


def nccl_collective_args(db: NsysDb, cols: dict[str, np.ndarray], comm: np.ndarray) -> dict[str, dict]:
    """{rank: {"collective_args": columns}} for the NCCL kernels (rows `comm` of cols) whose launch lies
    in a collective range with a payload; {} when the export has none."""
    found = _payloads(db)
    if not found or comm.size == 0:
        return {}
    nranks = {}
    for _s, _e, _g, op, p in found:
        if op.startswith("ncclCommInitRank") and isinstance(p.get("No. of ranks"), int):
            nranks[p.get("NCCL communicator ID")] = int(p["No. of ranks"])
    calls = [f for f in found if f[3] in OPS]
    if not calls:
        return {}
    corr = cols["correlation"]
    kind = cols["kind"]
    api = np.flatnonzero(np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER)]) & np.isin(corr, corr[comm]))
    if api.size == 0:
        return {}
    key = cols["pid"][api] * (1 << 24) + cols["tid"][api]
    order = np.lexsort((cols["start"][api], key))
    api, key = api[order], key[order]
    a_start = cols["start"][api]
    k_of_corr = dict(zip(corr[comm].tolist(), comm.tolist()))
    out: dict[str, dict[str, list]] = {}
    g = np.array([c[2] for c in calls], dtype=np.int64)
    ckey = pid_of(g) * (1 << 24) + tid_of(g)
    lo_k = np.searchsorted(key, ckey, side="left")
    hi_k = np.searchsorted(key, ckey, side="right")
    for i, (start, end, _gtid, op, p) in enumerate(calls):
        a, b = int(lo_k[i]), int(hi_k[i])
        j = a + int(np.searchsorted(a_start[a:b], start, side="left"))
        if j >= b or a_start[j] > end:
            continue
        k = k_of_corr.get(int(corr[api[j]]))
        if k is None:
            continue
        name = OPS[op]
        size = p.get("Message size [bytes]")
        n = nranks.get(p.get("NCCL communicator ID"))
        nbytes = int(size) * (n if name in GATHERED and n else 1) if isinstance(size, int) else None
        cols_r = out.setdefault(str(int(cols["rank"][k])), {
            "correlation": [], "device": [], "name": [], "bytes": [], "group_size": [], "dtype": [],
            "group": [], "group_desc": [],
        })
        cols_r["correlation"].append(int(corr[k]))
        cols_r["device"].append(int(cols["device"][k]))
        cols_r["name"].append(name)
        cols_r["bytes"].append(nbytes)
        cols_r["group_size"].append(n)
        cols_r["dtype"].append(None)
        comm_id = p.get("NCCL communicator ID")
        cols_r["group"].append(None if comm_id is None else f"nccl comm {comm_id:x}" if isinstance(comm_id, int) else str(comm_id))
        cols_r["group_desc"].append(None)
    return {r: {"collective_args": c} for r, c in out.items()}
