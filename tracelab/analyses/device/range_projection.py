"""GPU time by host range (NVTX, torch `record_function` / `user_annotation`, Kineto `cpu_op`).

A host range is projected onto the GPU through launch correlation: a GPU op (kernel, memcpy, memset)
belongs to a range when the host call that launched it (a RUNTIME / DRIVER row with the op's correlation
id, same rank) STARTS inside the range [start, end) on the range's own thread (rank, pid, tid). For each
range instance: the GPU ops it encloses, the projected range (first enclosed op's start to the last one's
end), the union of those ops' GPU time and the summed kernel time. Per range name: calls (instances),
GPU time = union of the ops of all its instances (an op counted once per name even when instances of that
name nest), kernel time, projected span (sum over instances). Nested ranges are NOT subtracted from their
parents: a parent's figures include its children's ops.

Vectorized: launches sorted by (thread, start); a range's launches are one slice of that order (two
searchsorted), its ops one slice of the ops sorted by their launch's position; the (range, op) pairs are
materialised once (ops x nesting depth) for the unions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np

from tracelab.analyses.core.distinct import FirstPosition
from tracelab.analyses.core.intervals import grouped_union_lengths, merge_grouped
from tracelab.analyses.core.thread_codes import thread_codes
from tracelab.model.grouping import any_of, sorted_unique, stable_order, unique_inverse
from tracelab.model.kinds import EventKind
from tracelab.model.timeline import Timeline

_I64 = np.int64
RANGE_KINDS = (EventKind.NVTX_RANGE, EventKind.CPU_OP)
GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
LAUNCH_KINDS = (EventKind.RUNTIME, EventKind.DRIVER)


@dataclass(frozen=True)
class RangeStat:
    """One range name's projection (all instances of that name on every thread and rank)."""

    name: str
    kind: str  # "nvtx" (NVTX / record_function / user_annotation) or "cpu_op"
    calls: int  # instances
    host_ns: int  # summed host duration of the instances
    gpu_ops: int  # distinct GPU ops launched inside its instances
    gpu_ns: int  # union of those ops' GPU intervals
    kernel_ns: int  # summed duration of those ops that are kernels
    span_ns: int  # summed projected span (first op start to last op end) of the instances
    share: float  # gpu_ns / the reference time (the steps' total, else the GPU span); 0 when unknown
    depth: int  # smallest nesting depth of its instances on their threads (0 = outermost)
    parent: str = ""  # the name of the range enclosing its first instance ("" at the top)
    first_start_ns: int = -1  # its first instance: host start ...
    first_end_ns: int = -1  # ... to the later of its host end and its projected end


@dataclass(frozen=True, eq=False)
class RangeProjection:
    """Per instance (arrays, one row per host range, in timeline row order) and per name (`stats`,
    largest GPU time first)."""

    rows: np.ndarray  # timeline rows of the range instances
    depth: np.ndarray  # nesting depth on its thread
    parent: np.ndarray  # index (into these arrays) of the innermost enclosing instance, -1 at the top
    gpu_ops: np.ndarray  # ops launched inside
    gpu_start: np.ndarray  # projected start (-1 when no op)
    gpu_end: np.ndarray  # projected end (-1 when no op)
    kernel_ns: np.ndarray
    stats: tuple[RangeStat, ...]
    reference_ns: int  # what `share` divides by
    reference: str  # "steps" or "gpu span" or "none"
    unlaunched_ops: int  # GPU ops whose launch call is not in the trace (belong to no range)
    unions: Callable[[], np.ndarray] = field(repr=False)  # computes `gpu_ns`

    @property
    def n(self) -> int:
        return int(self.rows.size)

    @cached_property
    def gpu_ns(self) -> np.ndarray:
        """The union of each instance's ops, computed when first asked for: the per-name figures (`stats`,
        all that `analyze --json` lists) do not need it."""
        return self.unions()


def _thread_order(thread: np.ndarray, start: np.ndarray) -> np.ndarray:
    """np.argsort(thread * W + start, kind="stable") for rows in start order (a timeline's): a stable sort
    by thread alone, by radix on 16-bit codes when they allow."""
    if start.size > 1 and (start[1:] < start[:-1]).any():
        return np.lexsort((start, thread))
    return stable_order(thread)


def _depths(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range on its thread, for ranges sorted by (thread, start): the other ranges of
    the thread that contain its start (count of starts <= s minus ends <= s, less itself)."""
    if thread.size == 0:
        return np.zeros(0, _I64)
    t0 = int(min(start.min(), end.min()))
    width = int(max(start.max(), end.max())) - t0 + 1
    q = thread * width + (start - t0)  # sorted: the searches below take the keys in order
    ke = np.sort(thread * width + (end - t0))
    opened = np.searchsorted(q, q, side="right")
    closed = np.searchsorted(ke, q, side="right")
    # ranges of earlier threads: all opened and all closed; they cancel out
    return np.maximum(opened - closed - 1, 0).astype(_I64)


def _parents(thread: np.ndarray, depth: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The innermost enclosing range of each range, for ranges sorted by (thread, start): the last range of
    the same thread one level up that starts at or before it (ranges of one thread nest)."""
    n = thread.size
    out = np.full(n, -1, _I64)
    if n == 0:
        return out
    t0 = int(start.min())
    width = int(start.max()) - t0 + 1
    levels = int(depth.max()) + 2
    level = thread * levels + depth
    # by (thread, depth, start): a stable sort by (thread, depth) of rows in (thread, start) order
    order = stable_order(level)
    sk = level[order] * width + (start[order] - t0)
    at_sorted = np.searchsorted(sk, sk - width, side="right") - 1  # one level up, in key order
    at = np.empty(n, _I64)
    at[order] = at_sorted
    ok = (depth > 0) & (at >= 0)
    cand = order[np.maximum(at, 0)]
    ok &= (thread[cand] == thread) & (depth[cand] == depth - 1)
    out[ok] = cand[ok]
    return out


def _launch_of_ops(rank, corr, lrows, gr) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Each GPU op's launch (same rank, same correlation id; the first such call of `lrows`): the ops with
    one sorted by the launch's position in `lrows`, those positions, each one's position in `gr` (rows in
    start order) and how many ops have none."""
    ckey_l = rank[lrows].astype(_I64) << 40 | (corr[lrows] & ((1 << 40) - 1))
    gcorr = corr[gr]
    ckey_g = rank[gr].astype(_I64) << 40 | (gcorr & ((1 << 40) - 1))
    at = FirstPosition(ckey_l).find(ckey_g)  # a table when the ids are packed (one rank), else a sort
    ok = (gcorr >= 0) & (at >= 0)
    unlaunched = int((~ok).sum())
    ops = gr[ok]
    op_pos = at[ok]  # position in the (thread, start) launch order
    oo = np.argsort(op_pos, kind="stable")
    return ops[oo], op_pos[oo], oo, unlaunched


def _pairs(olo: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (range, op) pairs: range i with ops olo[i] .. olo[i] + count[i] - 1."""
    total = int(count.sum())
    pair_range = np.repeat(np.arange(count.size, dtype=_I64), count)
    offs = np.arange(total, dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
    return pair_range, np.repeat(olo.astype(_I64), count) + offs


def _union_by_group(group: np.ndarray, op_rank: np.ndarray, s_by_rank: np.ndarray, e_by_rank: np.ndarray,
                    n_groups: int, unique: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union length per group of the ops of (group, op) pairs, ops named by their rank in start order
    (`s_by_rank`, `e_by_rank` their intervals in that order): the pairs sorted by (group, start) through
    one sort of an int64 key, not a sort by start and one by group. With `unique`, equal pairs count
    once. Returns (lengths, the pairs' groups and op ranks in that order)."""
    m = int(s_by_rank.size)
    if group.size == 0:
        return np.zeros(n_groups, _I64), group, op_rank
    if n_groups * m >= 1 << 62:
        g, r = (group, op_rank) if not unique else _distinct(group, op_rank)
        return grouped_union_lengths(s_by_rank[r], e_by_rank[r], g, n_groups), g, r
    key = group * m + op_rank
    if unique:
        key = sorted_unique(key)
    elif key.size > 1 and (key[1:] < key[:-1]).any():  # a range's ops mostly come in start order already
        key = np.sort(key)
    g, r = np.divmod(key, m)
    return grouped_union_lengths(s_by_rank[r], e_by_rank[r], g, n_groups, presorted=True), g, r


def _distinct(group: np.ndarray, op_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, op) pairs (when group * ops does not fit an int64 key)."""
    keys = np.stack([group, op_rank], axis=1)
    keys = keys[np.lexsort((op_rank, group))]
    keep = np.ones(len(keys), dtype=bool)
    keep[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    return keys[keep, 0], keys[keep, 1]


def project_ranges(timeline: Timeline, reference_ns: int = 0, reference: str = "steps") -> RangeProjection:
    """Project every host range of the timeline onto the GPU (see the module doc). `reference_ns`: what
    each name's `share` divides its GPU time by (the steps' total time; 0: the GPU span is used)."""
    kind = timeline.col("kind")
    start = timeline.col("start").astype(_I64, copy=False)
    end = timeline.col("end").astype(_I64, copy=False)
    rank = timeline.col("rank")
    tid = timeline.col("tid")
    corr = timeline.col("correlation").astype(_I64, copy=False)
    rr = np.flatnonzero(any_of(kind, RANGE_KINDS) & (tid >= 0) & (end > start))
    lr = np.flatnonzero(any_of(kind, LAUNCH_KINDS) & (corr >= 0))
    gr = np.flatnonzero(any_of(kind, GPU_KINDS))
    n = rr.size
    gpu_span = int(end[gr].max() - start[gr].min()) if gr.size else 0
    if reference_ns <= 0:
        reference_ns, reference = gpu_span, ("gpu span" if gpu_span else "none")
    r_thread, l_thread = thread_codes(timeline, rr, lr)
    # the ranges by (thread, start): every search below takes its keys in order; results go back to rr order
    by = _thread_order(r_thread, start[rr])
    r_thread, rs, re_ = r_thread[by], start[rr[by]], end[rr[by]]
    depth = _depths(r_thread, rs, re_)
    parent = _parents(r_thread, depth, rs)
    # launches by (thread, start)
    t0 = int(start.min()) if start.size else 0
    width = int(max(int(end.max()) if end.size else 0, int(start.max()) if start.size else 0)) - t0 + 2
    lorder = _thread_order(l_thread, start[lr])
    lkey = l_thread[lorder] * width + (start[lr[lorder]] - t0)
    ops, op_pos, op_rank, unlaunched = _launch_of_ops(rank, corr, lr[lorder], gr)
    # each range's launches [lo, hi), then its ops [olo, ohi)
    lo = np.searchsorted(lkey, r_thread * width + (rs - t0), side="left")
    hi = np.searchsorted(lkey, r_thread * width + (re_ - t0), side="left")
    olo = np.searchsorted(op_pos, lo, side="left")
    ohi = np.searchsorted(op_pos, hi, side="left")
    count = (ohi - olo).astype(_I64)
    os_, oe = start[ops], end[ops]
    kdur = (oe - os_) * (kind[ops] == EventKind.KERNEL).astype(_I64)
    kcum = np.concatenate([[0], np.cumsum(kdur)])
    kernel_ns = kcum[ohi] - kcum[olo]
    # the ops by start: op_rank[i] is op i's place among them (the launched GPU rows, in start order)
    by_rank = np.empty_like(op_rank)
    by_rank[op_rank] = np.arange(op_rank.size, dtype=op_rank.dtype)
    s_rank, e_rank, k_rank = os_[by_rank], oe[by_rank], kdur[by_rank]
    pair_range, pair_op = _pairs(olo, count)
    pair_rank = op_rank[pair_op]
    gpu_start = np.full(n, -1, _I64)
    gpu_end = np.full(n, -1, _I64)
    has = count > 0
    if pair_op.size:
        bounds = (np.cumsum(count) - count)[has]
        gpu_start[has] = np.minimum.reduceat(os_[pair_op], bounds)
        gpu_end[has] = np.maximum.reduceat(oe[pair_op], bounds)
    def original(a: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        out[by] = a
        return out

    depth, count, gpu_start, gpu_end = original(depth), original(count), original(gpu_start), original(gpu_end)
    parent = original(np.where(parent >= 0, by[np.maximum(parent, 0)], -1))
    pairs = (by[pair_range], pair_rank, s_rank, e_rank, k_rank)
    stats = _by_name(timeline, rr, depth, count, gpu_start, gpu_end, pairs, start, end, reference_ns, parent)
    return RangeProjection(
        rows=rr, depth=depth, parent=parent, gpu_ops=count, gpu_start=gpu_start, gpu_end=gpu_end,
        kernel_ns=original(kernel_ns.astype(_I64)), stats=stats, reference_ns=int(reference_ns),
        reference=reference, unlaunched_ops=unlaunched, unions=partial(_range_unions, pair_range, pair_rank, s_rank,
                                                                         e_rank, by),
    )


def with_reference(projection: RangeProjection, reference_ns: int, reference: str) -> RangeProjection:
    """The same projection with each name's `share` of `reference_ns` (> 0) instead: what
    `project_ranges(timeline, reference_ns, reference)` gives, without projecting again (the projection
    may start before the steps that give the reference are known)."""
    stats = tuple(replace(s, share=float(s.gpu_ns) / reference_ns) for s in projection.stats)
    return replace(projection, stats=stats, reference_ns=int(reference_ns), reference=reference)


def _range_unions(pair_range: np.ndarray, pair_rank: np.ndarray, s_rank: np.ndarray, e_rank: np.ndarray,
                  by: np.ndarray) -> np.ndarray:
    """Per instance (timeline row order): the union of its ops' GPU intervals, from the (range, op) pairs
    of the ranges in `by` order."""
    lengths = _union_by_group(pair_range, pair_rank, s_rank, e_rank, by.size)[0]
    out = np.empty_like(lengths)
    out[by] = lengths
    return out


def _by_name(timeline, rr, depth, count, gpu_start, gpu_end, pairs, start, end, reference_ns,
             parent) -> tuple[RangeStat, ...]:
    if rr.size == 0:
        return ()
    pair_range, pair_rank, s_rank, e_rank, k_rank = pairs
    names = timeline.col("name")[rr].astype(_I64)
    kinds = timeline.col("kind")[rr]
    # a name's key: (name id, kind), so an NVTX range and a CPU op of the same name stay apart
    key = names * 16 + kinds.astype(_I64)
    ukeys, inv = unique_inverse(key)
    g = ukeys.size
    calls = np.bincount(inv, minlength=g)
    rs, re_ = start[rr], end[rr]
    host = np.bincount(inv, weights=(re_ - rs), minlength=g)
    has = count > 0
    span = np.bincount(inv[has], weights=(gpu_end - gpu_start)[has], minlength=g)
    min_depth = np.full(g, np.iinfo(_I64).max, _I64)
    np.minimum.at(min_depth, inv, depth)
    # distinct (name, op) pairs
    gpu, pg_u, pr_u = _union_by_group(inv[pair_range], pair_rank, s_rank, e_rank, g, unique=True)
    ops_n = np.bincount(pg_u, minlength=g)
    kern = np.bincount(pg_u, weights=k_rank[pr_u], minlength=g) if pr_u.size else np.zeros(g, _I64)
    strings = timeline.strings
    first = np.full(g, rr.size, _I64)
    np.minimum.at(first, inv, np.arange(rr.size, dtype=_I64))  # each name's first instance (rows in start order)
    pname = np.where(parent >= 0, names[np.maximum(parent, 0)], -1)
    first_end = np.maximum(re_, gpu_end)

    def text(nid: int) -> str:
        return strings[nid] if 0 <= nid < len(strings) else ""

    out = []
    for i in np.argsort(-gpu, kind="stable").tolist():
        nid, k = divmod(int(ukeys[i]), 16)
        out.append(
            RangeStat(
                name=text(nid),
                kind="cpu_op" if k == EventKind.CPU_OP else "nvtx",
                calls=int(calls[i]),
                host_ns=int(host[i]),
                gpu_ops=int(ops_n[i]),
                gpu_ns=int(gpu[i]),
                kernel_ns=int(kern[i]),
                span_ns=int(span[i]),
                share=float(gpu[i]) / reference_ns if reference_ns > 0 else 0.0,
                depth=int(min_depth[i]),
                parent=text(int(pname[first[i]])),
                first_start_ns=int(rs[first[i]]),
                first_end_ns=int(first_end[first[i]]),
            )
        )
    return tuple(out)


def tree_order(stats: tuple[RangeStat, ...]) -> list[tuple[int, RangeStat]]:
    """The names as a tree by nesting (a name under the name that encloses its first instance), each level
    largest GPU time first: (level, stat) in display order."""
    names = {s.name for s in stats}
    children: dict[str, list[RangeStat]] = {}
    for s in stats:  # stats come largest GPU time first: children keep that order
        children.setdefault(s.parent if s.parent in names and s.parent != s.name else "", []).append(s)
    out: list[tuple[int, RangeStat]] = []
    seen: set[tuple[str, str]] = set()
    stack = [(0, s) for s in reversed(children.get("", []))]
    while stack:
        level, s = stack.pop()
        if (s.name, s.kind) in seen:
            continue
        seen.add((s.name, s.kind))
        out.append((level, s))
        stack += [(level + 1, c) for c in reversed(children.get(s.name, []))]
    out += [(0, s) for s in stats if (s.name, s.kind) not in seen]  # parent cycles: at the top
    return out


def projected_intervals(p: RangeProjection) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The projected ranges that enclose GPU work: (timeline rows, start, end) — the timeline lane."""
    has = p.gpu_ops > 0
    return p.rows[has], p.gpu_start[has], p.gpu_end[has]


__all__ = ["RangeProjection", "RangeStat", "merge_grouped", "project_ranges", "projected_intervals"]
