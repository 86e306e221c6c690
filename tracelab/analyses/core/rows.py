"""GPU activity rows grouped by device, once per timeline (memo), and which of them are
communication kernels. Every per-device analysis takes its rows from here instead of masking all
events once per device, so analysing many devices costs one pass over the events, not one each."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.intervals import merge
from tracelab.analyses.core.memo import column, memo
from tracelab.model import EventKind, Flag, Timeline
from tracelab.model.api_names import is_comm_name
from tracelab.model.grouping import any_of, sorted_unique, stable_order

_GPU_KINDS = np.array([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)], dtype=np.int8)


class DeviceRows(msgspec.Struct, frozen=True):
    """The GPU activity rows (positions into timeline.events, in start order) of one device."""

    rank: int
    device: int
    rows: np.ndarray


def device_rows(timeline: Timeline) -> list[DeviceRows]:
    """GPU activity rows grouped by (rank, device), devices in (rank, device) order. One pass over the
    events, once per timeline (memo): every per-device analysis takes its rows from here instead of
    masking all events once per device."""
    return list(memo(timeline, "device_rows", lambda: _device_rows(timeline)))


def _device_rows(timeline: Timeline) -> tuple[DeviceRows, ...]:
    pos = np.flatnonzero(any_of(column(timeline, "kind"), _GPU_KINDS.tolist()))
    if pos.size == 0:
        return ()
    rank = column(timeline, "rank")[pos].astype(np.int64)
    dev = column(timeline, "device")[pos].astype(np.int64)
    key = (rank << 32) | (dev & 0xFFFFFFFF)
    out = []
    for k, p in positions_by(key).items():  # keys ascending; a stable sort keeps start order inside a device
        rows = pos[p]
        rows.flags.writeable = False  # shared by every analysis of this timeline
        out.append(DeviceRows(rank=k >> 32, device=k & 0xFFFFFFFF, rows=rows))
    return tuple(out)


_EMPTY_ROWS = np.zeros(0, dtype=np.int64)
_EMPTY_ROWS.flags.writeable = False


def device_union(timeline: Timeline, dr: DeviceRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of a device's GPU activity as `intervals.merge(..., return_index=True)` gives it (starts,
    ends, the row index opening each), merged once per timeline and device (read-only): the device
    summary, its idle intervals and the rules each needed it."""

    def compute() -> tuple[np.ndarray, ...]:
        got = merge(column(timeline, "start")[dr.rows], column(timeline, "end")[dr.rows], assume_sorted=True,
                    return_index=True)
        for a in got:
            a.flags.writeable = False
        return (dr.rows, *got)

    hit = memo(timeline, ("device_union", dr.rank, dr.device), compute)
    if hit[0] is not dr.rows:  # rows other than device_rows' for this device: merged here, not shared
        return merge(column(timeline, "start")[dr.rows], column(timeline, "end")[dr.rows], assume_sorted=True,
                     return_index=True)
    return hit[1], hit[2], hit[3]


def rows_of_device(timeline: Timeline, rank: int, device: int) -> np.ndarray:
    """The GPU activity rows of one device, in start order (empty when it has none)."""
    by_key = memo(timeline, "device_rows_by_key", lambda: {(d.rank, d.device): d.rows for d in device_rows(timeline)})
    return by_key.get((rank, device), _EMPTY_ROWS)


def comm_names(timeline: Timeline) -> np.ndarray:
    """For every string id, whether it names a communication kernel (one regex test per distinct
    string, once per timeline); the extra last slot answers for id -1."""
    def compute() -> np.ndarray:
        table = np.zeros(len(timeline.strings) + 1, dtype=bool)
        table[:-1] = [is_comm_name(s) for s in timeline.strings]
        return table

    return memo(timeline, "comm_names", compute)


def comm_kernels(timeline: Timeline, rows: np.ndarray) -> np.ndarray:
    """Communication kernels among rows: flagged COMM by the parser or named like a collective."""
    is_kernel = column(timeline, "kind")[rows] == int(EventKind.KERNEL)
    flagged = (column(timeline, "flags")[rows] & Flag.COMM) != 0
    names = column(timeline, "name")[rows]
    table = comm_names(timeline)
    named = table[np.where((names >= 0) & (names < len(table) - 1), names, len(table) - 1)]
    return is_kernel & (flagged | named)


def positions_by(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of `keys` grouped by value ({value: positions in ascending order}): one stable sort
    instead of one full mask per value."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return {}
    # the keys' order-preserving codes (a count or a hash, no sort of the rows), then a stable sort of
    # the codes (a radix sort when they are few): the order of a stable sort of the keys
    uniq, codes = distinct_codes(keys)
    if uniq.size == 1:
        return {int(uniq[0]): np.arange(keys.size)}
    order = stable_order(codes)
    bounds = np.zeros(uniq.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(codes, minlength=uniq.size), out=bounds[1:])
    return {int(u): order[a:b] for u, (a, b) in zip(uniq.tolist(), itertools.pairwise(bounds.tolist()))}


def rank_rows(timeline: Timeline) -> dict[int, np.ndarray]:
    """The GPU activity rows of each rank (all its devices), in start order."""

    def compute() -> dict[int, np.ndarray]:
        by_rank: dict[int, list[np.ndarray]] = {}
        for d in device_rows(timeline):
            by_rank.setdefault(d.rank, []).append(d.rows)
        return {r: np.sort(np.concatenate(parts)) for r, parts in by_rank.items()}

    return memo(timeline, "rank_rows", compute)


N_KINDS = 16  # EventKind codes are below this


def ranks_of(timeline: Timeline) -> tuple[int, ...]:
    """The ranks that have events, in order (once per timeline)."""

    def compute() -> tuple[int, ...]:
        rank = column(timeline, "rank")
        if rank.size == 0:
            return ()
        lo, hi = int(rank.min()), int(rank.max())
        if lo == hi:
            return (lo,)
        return tuple(int(r) for r in sorted_unique(rank))

    return memo(timeline, "ranks_of", compute)


def kind_rows(timeline: Timeline) -> dict[tuple[int, int], np.ndarray]:
    """The events grouped by (rank, kind): {(rank, kind): positions in ascending order}. One stable
    radix sort of a 16-bit key (rank index × N_KINDS + kind) over all events (one rank: a mask per kind),
    once per timeline; every per-rank analysis takes its rows from here instead of masking all events once
    per rank."""

    def compute() -> dict[tuple[int, int], np.ndarray]:
        kind = column(timeline, "kind")
        ranks = ranks_of(timeline)
        if kind.size == 0:
            return {}
        if len(ranks) == 1 and 0 <= int(kind.min()) and int(kind.max()) < N_KINDS:
            return _one_rank_kind_rows(kind, ranks[0])
        if len(ranks) == 1:
            code = kind.astype(np.int64)
        else:
            rank_index = np.searchsorted(np.array(ranks, dtype=np.int64), column(timeline, "rank"))
            code = rank_index.astype(np.int64) * N_KINDS + kind
        dtype = np.int16 if len(ranks) * N_KINDS < (1 << 15) else np.int64  # int16: numpy sorts by radix
        order = np.argsort(code.astype(dtype), kind="stable")
        sk = code[order]
        cut = np.flatnonzero(sk[1:] != sk[:-1]) + 1
        bounds = [0, *cut.tolist(), sk.size]
        out = {}
        for a, b in itertools.pairwise(bounds):
            r, k = divmod(int(sk[a]), N_KINDS)
            rows = order[a:b]
            rows.flags.writeable = False
            out[(ranks[r], k)] = rows
        return out

    return memo(timeline, "kind_rows", compute)


def _one_rank_kind_rows(kind: np.ndarray, rank: int) -> dict[tuple[int, int], np.ndarray]:
    """kind_rows of a single-rank timeline: one mask per kind present (a few passes over a byte column
    are cheaper than sorting every event), in kind order as the sort gives them."""
    out = {}
    for k in np.flatnonzero(np.bincount(kind.astype(np.intp), minlength=N_KINDS)).tolist():
        rows = np.flatnonzero(kind == k)
        rows.flags.writeable = False
        out[(rank, k)] = rows
    return out


def rows_of(timeline: Timeline, rank: int, kinds: Iterable[int]) -> np.ndarray:
    """Positions (ascending, read-only) of the events of `rank` whose kind is one of `kinds`. Several
    kinds are merged once per timeline (the host views, step inference and rules ask for the same
    combinations: on a big trace each merge is a sort of millions of rows)."""
    groups = kind_rows(timeline)
    wanted = sorted({int(k) for k in kinds if (rank, int(k)) in groups})
    if not wanted:
        return _EMPTY_ROWS
    if len(wanted) == 1:
        return groups[(rank, wanted[0])]

    def compute() -> np.ndarray:
        parts = sorted((groups[(rank, k)] for k in wanted), key=len)
        if len(parts) == 2 and parts[0].size * 16 < parts[1].size:  # a few rows into many (driver into runtime calls)
            small, big = parts
            rows = np.insert(big, np.searchsorted(big, small), small)  # positions are distinct: the sorted merge
        else:
            rows = np.sort(np.concatenate(parts), kind="stable")  # sorted runs: merged in linear time
        rows.flags.writeable = False
        return rows

    return memo(timeline, ("rows_of", rank, *wanted), compute)


def names_matching(timeline: Timeline, *patterns: re.Pattern[str]) -> np.ndarray:
    """For every string id, whether one of the patterns finds a match in it (`search`); the extra last
    slot answers for id -1 (no name), so `names_matching(tl, p)[names]` tests a name column. One regex
    pass over the string table per timeline and patterns, never per rank or per event."""
    key = ("names_matching", *((p.pattern, p.flags) for p in patterns))

    def compute() -> np.ndarray:
        table = np.zeros(len(timeline.strings) + 1, dtype=bool)
        table[:-1] = [any(p.search(s) for p in patterns) for s in timeline.strings]
        table.flags.writeable = False
        return table

    return memo(timeline, key, compute)
