"""The size of a matched collective: bytes, dtype, process group and bandwidths, from the NCCL kernels'
metadata (`collectives` matches the calls).

Bytes, dtype and process group (issue 24): torch.profiler (PyTorch ≥ 2.1) writes them in each NCCL
kernel's args (`Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`, `Process
Group Name` / `Description`); the Kineto parser keeps them per kernel (`parsers/kineto_comm_args`,
`RunMeta.extra["collective_args"]`, per rank under `rank_extra` in a rank set) and they are joined to
the kernels here by (rank, correlation). A collective's `bytes` is NCCL-tests' size: the larger of its
input and output buffers (max(in, out) nelems × the dtype's size: the whole buffer for all-reduce,
all-to-all and broadcast, the gathered output of all-gather, the input of reduce-scatter); `null` where
the trace has no such args (older PyTorch, nsys, gloo). Per participant: `start_ns` (arrival), `wait_ns`
(last arrival − own arrival) and `transfer_ns` (own end − last arrival: the collective once everyone is
in). The collective's `transfer_ns` is its duration on the last rank to arrive; `algbw_gbps` = bytes /
transfer (GB/s, 1e9 bytes), `busbw_gbps` = algbw × NCCL's factor for the operation with n ranks
(nccl-tests PERFORMANCE.md): all-reduce 2(n−1)/n, all-gather, reduce-scatter and all-to-all (n−1)/n,
broadcast, reduce and send/recv 1.
"""

from __future__ import annotations

import numpy as np

from tracelab.model import Timeline

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16, "complexhalf": 4,
}  # torch's dtype names as Kineto writes them (lower-cased); float8 variants: 1 byte (below)


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a torch dtype name ("Float", "BFloat16", "Float8_e4m3fn", ...); None unknown."""
    if not dtype:
        return None
    d = dtype.strip().lower().removeprefix("torch.")
    if d.startswith("float8"):
        return 1
    return _DTYPE_BYTES.get(d)


def _canonical(op: str) -> str:
    """allreduce / AllReduce / all_reduce / _allgather_base / reduce_scatter_tensor -> one spelling."""
    o = op.lower().replace("_", "")
    for suffix in ("base", "coalesced", "intotensor", "tensor"):
        o = o.removesuffix(suffix)
    return o


def bus_factor(op: str, n: int) -> float | None:
    """NCCL's bus-bandwidth factor (nccl-tests PERFORMANCE.md) for an operation over n ranks."""
    if n < 1:
        return None
    o = _canonical(op)
    if o == "allreduce":
        return 2 * (n - 1) / n
    if o in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return (n - 1) / n
    if o in ("broadcast", "reduce", "sendrecv", "send", "recv"):
        return 1.0
    return None


def _args_tables(timeline: Timeline) -> list[tuple[int, dict]]:
    """(rank, collective_args) of every rank whose Kineto file had NCCL kernel metadata."""
    extra = timeline.meta.extra or {}
    out = []
    if extra.get("collective_args") and len(timeline.meta.ranks) == 1:
        out.append((int(timeline.meta.ranks[0]), extra["collective_args"]))
    for r, e in (extra.get("rank_extra") or {}).items():
        if isinstance(e, dict) and e.get("collective_args"):
            try:
                out.append((int(r), e["collective_args"]))
            except ValueError:
                continue
    return out


def _args_lookup(timeline: Timeline, rank: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """For calls (rank, correlation): the index into the returned entries of their metadata, -1 none."""
    found = np.full(rank.size, -1, dtype=np.int64)
    entries: list[dict] = []
    for r, table in _args_tables(timeline):
        c = np.asarray(table.get("correlation", []), dtype=np.int64)
        if not c.size:
            continue
        order = np.argsort(c, kind="stable")
        mine = np.flatnonzero((rank == r) & (corr >= 0))
        if not mine.size:
            continue
        pos = np.searchsorted(c[order], corr[mine])
        ok = pos < c.size
        ok[ok] = c[order][pos[ok]] == corr[mine][ok]
        hit = order[pos[ok]]
        base = len(entries)
        keys = [k for k in table if k != "correlation"]
        for i in hit.tolist():  # one dict per matched NCCL kernel (a few thousand at most), not per event
            entries.append({k: table[k][i] if i < len(table[k]) else None for k in keys})
        found[mine[ok]] = base + np.arange(hit.size)
    return found, entries


def _call_info(op: str, count: int, transfer: int, meta_of: np.ndarray, entries: list[dict], last: int,
               members: np.ndarray) -> dict:
    """group, bytes, dtype, group size and bandwidths of one collective from its calls' metadata (the
    last arrival's, else any participant's)."""
    idx = int(meta_of[last]) if meta_of.size and meta_of[last] >= 0 else -1
    if idx < 0 and meta_of.size:
        have = meta_of[members]
        have = have[have >= 0]
        idx = int(have[0]) if have.size else -1
    out: dict = {}
    if idx < 0:
        return out
    e = entries[idx]
    group = e.get("group")
    desc = e.get("group_desc")
    out["group"] = f"{group} ({desc})" if group is not None and desc else group if group is not None else desc
    out["dtype"] = e.get("dtype")
    size = dtype_bytes(e.get("dtype"))
    nel = [v for v in (e.get("in_nelems"), e.get("out_nelems")) if isinstance(v, int) and v >= 0]
    nbytes = max(nel) * size if nel and size else None
    if nbytes is None and isinstance(e.get("bytes"), int) and e["bytes"] >= 0:  # nsys: NCCL's payload
        nbytes = int(e["bytes"])
    if nbytes is not None and nbytes >= 1 << 62:  # not a real message size (and past JSON's int64)
        nbytes = None
    out["bytes"] = nbytes
    n = e.get("group_size") if isinstance(e.get("group_size"), int) and e.get("group_size") > 0 else count
    out["group_size"] = n
    if nbytes is not None and transfer > 0:
        algbw = nbytes / transfer  # bytes per ns = GB/s
        factor = bus_factor(str(e.get("name") or op), n)
        if factor is None:
            factor = bus_factor(op, n)
        out["algbw_gbps"] = algbw
        out["busbw_gbps"] = algbw * factor if factor is not None else None
    return out
