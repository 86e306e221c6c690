"""Collectives matched across ranks: who arrived last, and how long the others waited for it.

A participant is one GPU of one rank. Its communication kernels (NCCL / RCCL: `Flag.COMM` or a
collective name) are its collective calls, in start order. Every call is labelled with its operation,
read from the kernel name (`ncclKernel_AllReduce_RING_LL_Sum_float` and
`ncclDevKernel_AllReduce_Sum_f32_RING_LL` are both `AllReduce`; `SendRecv` is what all_to_all and
send/recv run as); other communication kernels keep their own name. Calls are matched across
participants by collective sequence: the k-th `AllReduce` of every participant is one collective (NCCL
requires every member of a communicator to issue its collectives in the same order). A matched
collective needs at least two participants.

gloo (and MPI / UCC) run collectives on the host, with no kernel on the GPU. When fewer than two GPUs
have communication kernels, the calls are the host ranges c10d records around each collective
(`gloo:all_reduce`, `nccl:all_to_all`, ...; participant = the rank, device -1, operation = the part
after the colon), matched the same way; `Collectives.source` says which.

For each matched collective: arrival of a participant = the start of its kernel (when its stream
reached the collective); `skew_ns` = last arrival − first arrival; `last_rank` = the rank that arrived
last; `wait_ns` = Σ over participants of (last arrival − own arrival), the time the others spent in
the collective waiting for the last one. Stragglers: per rank, how often it was last and the wait it
caused. Ranks' clocks must be comparable (Kineto writes epoch-based µs; nsys exports of one session
share a clock): a matched collective whose kernels do not all overlap in time is counted in
`inconsistent` and said in a note, because on one communicator they must overlap.

Bytes, dtype, process group and bandwidths of each collective (`_call_info`, below): torch.profiler
(PyTorch ≥ 2.1) writes them in each NCCL kernel's args (`Collective name`, `In msg nelems`, `Out msg
nelems`, `Group size`, `dtype`, `Process Group Name` / `Description`); the Kineto parser keeps them per kernel (`parsers/kineto_comm_args`,
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

import re
from collections.abc import Sequence

import msgspec
import numpy as np

from tracelab.model import EventKind, Flag, Timeline
from tracelab.model.api_names import comm_mask
from tracelab.model.grouping import sorted_unique

_NCCL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_HOST_OP = re.compile(r"^(?:nccl|gloo|mpi|ucc|xccl):([a-z_]+)$")


class Collective(msgspec.Struct, frozen=True):
    """One collective call matched across ranks."""

    name: str  # the operation (AllReduce, SendRecv, ...)
    seq: int  # its position among this operation's calls on each participant (0-based)
    count: int  # participants (GPUs of ranks) that took part
    ranks: tuple[int, ...]
    start_ns: int  # first arrival
    last_start_ns: int  # last arrival
    end_ns: int  # last participant's kernel end
    skew_ns: int
    last_rank: int
    wait_ns: int
    group: str | None = None  # process group name (and description), from the kernels' args
    bytes: int | None = None  # NCCL-tests' size (module docstring); None unknown
    dtype: str | None = None
    group_size: int | None = None
    transfer_ns: int = 0  # duration on the last rank to arrive
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    # (rank, device, start_ns, wait_ns, transfer_ns) per participant, in arrival order
    per_rank: tuple[tuple[int, int, int, int, int], ...] = ()


class Straggler(msgspec.Struct, frozen=True):
    rank: int
    times_last: int  # matched collectives in which this rank arrived last
    caused_wait_ns: int  # the others' wait in those collectives


class Collectives(msgspec.Struct, frozen=True, eq=False):
    calls: tuple[Collective, ...]  # in order of first arrival
    stragglers: tuple[Straggler, ...]  # ranks that were ever last, the one the others waited longest for first
    participants: tuple[tuple[int, int], ...]  # (rank, device) with communication kernels
    unmatched: int  # communication kernels no other participant has a counterpart for
    inconsistent: int  # matched collectives whose kernels do not all overlap in time
    # per participant waits: (rank, device, start, end) of the time spent waiting for the last arrival
    wait_rank: np.ndarray
    wait_start: np.ndarray
    wait_end: np.ndarray
    notes: tuple[str, ...] = ()
    source: str = "kernels"  # what the calls are: "kernels" (NCCL / RCCL) or "host ranges" (c10d, e.g. gloo)

    rank_waits: dict[int, int] = msgspec.field(default_factory=dict)  # rank -> time waited in matched collectives
    rank_calls: dict[int, int] = msgspec.field(default_factory=dict)  # rank -> matched collectives it took part in
    # every call of a matched collective: its timeline row, the last arrival of its collective, and the
    # timeline row of that last arrival's call (critical path: who a waiting rank waited for)
    call_rows: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    call_last_start: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    call_last_row: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def wait_of(self, rank: int) -> int:
        return self.rank_waits.get(rank, 0)

    def calls_of(self, rank: int) -> int:
        return self.rank_calls.get(rank, 0)


def operation(kernel_name: str) -> str:
    """The collective operation a communication kernel runs (its own name when not NCCL/RCCL)."""
    m = _NCCL_OP.search(kernel_name) or _HOST_OP.match(kernel_name)
    if m:
        return m.group(1)
    return kernel_name.split("(", 1)[0].strip() or kernel_name


def rank_stragglers(calls: Sequence[Collective]) -> tuple[Straggler, ...]:
    """The ranks that arrived last in `calls`, the one the others waited longest for first: after the first
    collective of a step has lined the ranks up, which rank arrives last at the next ones is a toss-up."""
    tally: dict[int, list[int]] = {}
    for c in calls:  # matched collectives (thousands at most), not events
        t = tally.setdefault(c.last_rank, [0, 0])
        t[0] += 1
        t[1] += c.wait_ns
    return tuple(sorted((Straggler(r, v[0], v[1]) for r, v in tally.items()),
                        key=lambda s: (-s.caused_wait_ns, -s.times_last, s.rank)))


def _empty(notes: tuple[str, ...], participants=(), unmatched: int = 0) -> Collectives:
    z = np.zeros(0, dtype=np.int64)
    return Collectives((), (), tuple(participants), unmatched, 0, z, z, z, notes)


def _comm_kernel_rows(timeline: Timeline) -> np.ndarray:
    """The communication kernels (flagged, or named like a collective), from the columns (no pandas)."""
    kern = np.flatnonzero(timeline.col("kind") == int(EventKind.KERNEL))
    if kern.size == 0:
        return kern
    names = timeline.col("name")[kern]
    return kern[((timeline.col("flags")[kern] & Flag.COMM) != 0) | comm_mask(timeline.strings, names)]


def _host_collective_rows(timeline: Timeline) -> np.ndarray:
    """Host ranges c10d writes around each collective (`nccl:all_reduce`, `gloo:all_reduce`, ...)."""
    ids = [i for i, s in enumerate(timeline.strings) if _HOST_OP.match(s)]
    if not ids:
        return np.zeros(0, dtype=np.int64)
    ev = timeline.events
    host = np.isin(ev["kind"].to_numpy(), [int(EventKind.NVTX_RANGE), int(EventKind.CPU_OP)])
    return np.flatnonzero(host & np.isin(ev["name"].to_numpy(), ids))


def _participant_count(timeline: Timeline, rows: np.ndarray) -> int:
    ev = timeline.events
    keys = ev["rank"].to_numpy()[rows].astype(np.int64) << 32 | (ev["device"].to_numpy()[rows].astype(np.int64) + 1)
    return int(sorted_unique(keys).size)

def _collective_rows(timeline: Timeline) -> tuple[np.ndarray, str]:
    """The rows of the collective calls and what they are: the communication kernels, or, when fewer than
    two GPUs have any, c10d's host ranges when at least two ranks have them."""
    rows = _comm_kernel_rows(timeline)
    source = "kernels"
    if _participant_count(timeline, rows) < 2:
        host = _host_collective_rows(timeline)
        if _participant_count(timeline, host) >= 2:
            rows, source = host, "host ranges"
    return rows, source


def _operations(timeline: Timeline, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The operation labels (sorted) and each call's label code, from the calls' name ids: once per
    distinct kernel name, never per event."""
    uniq_names, name_inv = np.unique(names, return_inverse=True)
    op_of_name = [operation(timeline.name(int(i))) for i in uniq_names.tolist()]
    op_labels, op_of_uniq = np.unique(np.array(op_of_name, dtype=object), return_inverse=True)
    return op_labels, op_of_uniq[name_inv].astype(np.int64)


def _sequence(part: np.ndarray, op: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per call: k for the k-th call of its operation on its participant (0-based, in start order)."""
    order = np.lexsort((start, op, part))
    part_s, op_s = part[order], op[order]
    new_run = np.ones(order.size, dtype=bool)
    new_run[1:] = (part_s[1:] != part_s[:-1]) | (op_s[1:] != op_s[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(order.size), 0))
    seq = np.empty(order.size, dtype=np.int64)
    seq[order] = np.arange(order.size) - run_start
    return seq


def _notes(n_incons: int, n_matched: int, unmatched: int) -> list[str]:
    notes = []
    if n_incons:
        notes.append(f"{n_incons} of {n_matched} matched collectives have kernels that do not all overlap in "
                     "time: the ranks' clocks may not be aligned, or their collective sequences differ")
    if unmatched:
        notes.append(f"{unmatched} communication kernels have no counterpart on another rank")
    return notes


def match_collectives(timeline: Timeline) -> Collectives:
    """Match the collective calls of all ranks (module docstring): the communication kernels, or, when
    fewer than two GPUs have any (gloo runs its collectives on the host), c10d's host ranges."""
    ev = timeline.events
    rows, source = _collective_rows(timeline)
    if rows.size == 0:
        return _empty(("no communication kernels (NCCL / RCCL) or c10d collective ranges in this trace",))
    rank = ev["rank"].to_numpy()[rows].astype(np.int64)
    device = ev["device"].to_numpy()[rows].astype(np.int64)
    start = ev["start"].to_numpy()[rows]
    end = ev["end"].to_numpy()[rows]
    op_labels, op = _operations(timeline, ev["name"].to_numpy()[rows])
    pkeys, part = np.unique(np.stack([rank, device], axis=1), axis=0, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    participants = tuple((int(r), int(d)) for r, d in pkeys.tolist())
    if len(participants) < 2:
        return _empty(("communication kernels on one GPU only: nothing to match across ranks",), participants,
                      rows.size)

    seq = _sequence(part, op, start)
    # group by (operation, seq)
    gkeys, group = np.unique(np.stack([op, seq], axis=1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    n_groups = len(gkeys)
    count = np.bincount(group, minlength=n_groups)
    first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    min_end = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    max_end = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    for out, ufunc, x in ((first, np.minimum, start), (last, np.maximum, start), (min_end, np.minimum, end),
                          (max_end, np.maximum, end)):
        ufunc.at(out, group, x)
    # the last arrival: latest start, ties to the highest (rank, device) so the choice is reproducible
    by_arrival = np.lexsort((part, start, group))
    last_row = by_arrival[np.r_[np.flatnonzero(np.diff(group[by_arrival])), by_arrival.size - 1]]
    waited = last[group] - start
    wait = np.bincount(group, weights=waited, minlength=n_groups).astype(np.int64)

    matched = count >= 2
    unmatched = int(count[~matched].sum())
    inconsistent_mask = matched & (last > min_end)
    meta_of, entries = _args_lookup(timeline, rank, ev["correlation"].to_numpy()[rows].astype(np.int64))
    calls = _calls((gkeys, group, count, first, last, max_end, last_row, wait), matched, op_labels, rank, device,
                   start, end, part, meta_of, entries)
    in_matched = matched[group] & (waited > 0)
    n_incons = int(inconsistent_mask.sum())
    return Collectives(
        calls=tuple(calls), stragglers=rank_stragglers(calls), participants=participants, unmatched=unmatched,
        inconsistent=n_incons, wait_rank=rank[in_matched], wait_start=start[in_matched],
        wait_end=last[group][in_matched], notes=tuple(_notes(n_incons, int(matched.sum()), unmatched)),
        source=source, rank_waits=_sum_by(rank[in_matched], (last[group] - start)[in_matched]),
        rank_calls=_count_pairs(rank[matched[group]], group[matched[group]]),
        call_rows=rows[matched[group]].astype(np.int64),
        call_last_start=last[group][matched[group]].astype(np.int64),
        call_last_row=rows[last_row[group]][matched[group]].astype(np.int64),
    )


def _calls(groups: tuple[np.ndarray, ...], matched: np.ndarray, op_labels: np.ndarray, rank: np.ndarray,
           device: np.ndarray, start: np.ndarray, end: np.ndarray, part: np.ndarray, meta_of: np.ndarray,
           entries: list[dict]) -> list[Collective]:
    """One Collective per matched group, in order of first arrival. `groups`: the calls grouped by (operation,
    seq), one group per collective: per group its key, each call's group, per group the members' count, first
    and last arrival, last end, the call of the last arrival and the others' wait."""
    gkeys, group, count, first, last, max_end, last_row, wait = groups
    calls = []
    by_group = np.argsort(group, kind="stable")  # members of group g: by_group[bounds[g]:bounds[g + 1]]
    bounds = np.concatenate([[0], np.cumsum(count)])
    for g in np.flatnonzero(matched)[np.argsort(first[matched], kind="stable")].tolist():
        members = by_group[bounds[g] : bounds[g + 1]]
        lr = int(last_row[g])
        name = str(op_labels[gkeys[g, 0]])
        transfer = int(end[lr] - start[lr])
        lg = int(last[g])
        arrival = members[np.lexsort((part[members], start[members]))]
        per_rank = tuple((int(r), int(d), int(s0), lg - int(s0), max(0, int(e0) - lg))
                         for r, d, s0, e0 in zip(*(x[arrival].tolist() for x in (rank, device, start, end))))
        info = _call_info(name, int(count[g]), transfer, meta_of, entries, lr, members)
        calls.append(Collective(
            name=name, seq=int(gkeys[g, 1]), count=int(count[g]),
            ranks=tuple(sorted({int(r) for r in rank[members].tolist()})), start_ns=int(first[g]), last_start_ns=lg, end_ns=int(max_end[g]), skew_ns=int(last[g] - first[g]),
            last_rank=int(rank[lr]), wait_ns=int(wait[g]), transfer_ns=transfer, per_rank=per_rank, **info,
        ))
    return calls


def _sum_by(keys: np.ndarray, values: np.ndarray) -> dict[int, int]:
    uniq, inv = np.unique(keys, return_inverse=True)
    sums = np.bincount(inv.reshape(-1), weights=values, minlength=len(uniq)) if len(uniq) else np.zeros(0)
    return {int(k): int(v) for k, v in zip(uniq.tolist(), sums.tolist())}


def _count_pairs(keys: np.ndarray, groups: np.ndarray) -> dict[int, int]:
    """Per key, the number of distinct groups it appears in."""
    if not len(keys):
        return {}
    pairs = np.unique(np.stack([keys.astype(np.int64), groups.astype(np.int64)], axis=1), axis=0)
    uniq, counts = np.unique(pairs[:, 0], return_counts=True)
    return {int(k): int(c) for k, c in zip(uniq.tolist(), counts.tolist())}


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
