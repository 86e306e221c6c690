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

from dataclasses import dataclass

import numpy as np

from tracelab.analyses.core.intervals import grouped_union_lengths, merge_grouped
from tracelab.model.grouping import sorted_unique, unique_inverse
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
    gpu_ns: np.ndarray  # union of its ops
    kernel_ns: np.ndarray
    stats: tuple[RangeStat, ...]
    reference_ns: int  # what `share` divides by
    reference: str  # "steps" or "gpu span" or "none"
    unlaunched_ops: int  # GPU ops whose launch call is not in the trace (belong to no range)

    @property
    def n(self) -> int:
        return int(self.rows.size)


def _is(kind: np.ndarray, kinds: tuple) -> np.ndarray:
    """np.isin for a few kinds, without np.isin's np.unique (it imports numpy.ma)."""
    out = np.zeros(kind.shape, dtype=bool)
    for k in kinds:
        out |= kind == int(k)
    return out


def _thread_codes(*keys: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """A small int per (rank, pid, tid), consistent over several row sets: each column factorized alone
    (1-D unique), the codes combined into one integer, that factorized again."""
    sizes = [r.size for r, _p, _t in keys]
    if not sum(sizes):
        return [np.zeros(0, _I64) for _ in keys]
    combined = np.zeros(sum(sizes), _I64)
    for j in range(3):
        col = np.concatenate([k[j].astype(_I64) for k in keys])
        uniq, inv = unique_inverse(col)
        combined = combined * (uniq.size + 1) + inv
    inv = unique_inverse(combined)[1]
    out, at = [], 0
    for n in sizes:
        out.append(inv[at : at + n])
        at += n
    return out


def _depths(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range on its thread: the other ranges of the thread that contain its start
    (count of starts <= s minus ends <= s, less itself)."""
    if thread.size == 0:
        return np.zeros(0, _I64)
    t0 = int(min(start.min(), end.min()))
    width = int(max(start.max(), end.max())) - t0 + 1
    ks = np.sort(thread * width + (start - t0))
    ke = np.sort(thread * width + (end - t0))
    q = thread * width + (start - t0)
    opened = np.searchsorted(ks, q, side="right")
    closed = np.searchsorted(ke, q, side="right")
    # ranges of earlier threads: all opened and all closed; they cancel out
    return np.maximum(opened - closed - 1, 0).astype(_I64)


def _parents(thread: np.ndarray, depth: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The innermost enclosing range of each range: the last range of the same thread one level up that
    starts at or before it (ranges of one thread nest)."""
    n = thread.size
    out = np.full(n, -1, _I64)
    if n == 0:
        return out
    t0 = int(start.min())
    width = int(start.max()) - t0 + 1
    levels = int(depth.max()) + 2
    key = (thread * levels + depth) * width + (start - t0)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    q = (thread * levels + depth - 1) * width + (start - t0)
    at = np.searchsorted(sk, q, side="right") - 1
    ok = (depth > 0) & (at >= 0)
    cand = order[np.maximum(at, 0)]
    ok &= (thread[cand] == thread) & (depth[cand] == depth - 1)
    out[ok] = cand[ok]
    return out


def project_ranges(timeline: Timeline, reference_ns: int = 0, reference: str = "steps") -> RangeProjection:
    """Project every host range of the timeline onto the GPU (see the module doc). `reference_ns`: what
    each name's `share` divides its GPU time by (the steps' total time; 0: the GPU span is used)."""
    kind = timeline.col("kind")
    start = timeline.col("start").astype(_I64, copy=False)
    end = timeline.col("end").astype(_I64, copy=False)
    rank = timeline.col("rank")
    pid, tid = timeline.col("pid"), timeline.col("tid")
    corr = timeline.col("correlation").astype(_I64, copy=False)
    rr = np.flatnonzero(_is(kind, RANGE_KINDS) & (tid >= 0) & (end > start))
    lr = np.flatnonzero(_is(kind, LAUNCH_KINDS) & (corr >= 0))
    gr = np.flatnonzero(_is(kind, GPU_KINDS))
    n = rr.size
    zeros = np.zeros(n, _I64)
    if gr.size:
        gpu_span = int(end[gr].max() - start[gr].min())
    else:
        gpu_span = 0
    if reference_ns <= 0:
        reference_ns, reference = gpu_span, ("gpu span" if gpu_span else "none")
    r_thread, l_thread = _thread_codes((rank[rr], pid[rr], tid[rr]), (rank[lr], pid[lr], tid[lr]))
    depth = _depths(r_thread, start[rr], end[rr])
    parent = _parents(r_thread, depth, start[rr])
    # launches by (thread, start)
    t0 = int(start.min()) if start.size else 0
    width = int(max(int(end.max()) if end.size else 0, int(start.max()) if start.size else 0)) - t0 + 2
    lkey = l_thread * width + (start[lr] - t0)
    lorder = np.argsort(lkey, kind="stable")
    lkey = lkey[lorder]
    lrows = lr[lorder]
    # each GPU op's launch position (same rank, same correlation id; the first such call)
    ckey_l = rank[lrows].astype(_I64) << 40 | (corr[lrows] & ((1 << 40) - 1))
    gcorr = corr[gr]
    ckey_g = rank[gr].astype(_I64) << 40 | (gcorr & ((1 << 40) - 1))
    corder = np.argsort(ckey_l, kind="stable")
    sorted_c = ckey_l[corder]
    at = np.searchsorted(sorted_c, ckey_g)
    ok = (gcorr >= 0) & (at < sorted_c.size)
    ok[ok] &= sorted_c[at[ok]] == ckey_g[ok]
    unlaunched = int((~ok).sum())
    ops = gr[ok]
    op_pos = corder[at[ok]]  # position in the (thread, start) launch order
    oo = np.argsort(op_pos, kind="stable")
    ops, op_pos = ops[oo], op_pos[oo]
    # each range's launches [lo, hi), then its ops [olo, ohi)
    rkey_s = r_thread * width + (start[rr] - t0)
    rkey_e = r_thread * width + (end[rr] - t0)
    lo = np.searchsorted(lkey, rkey_s, side="left")
    hi = np.searchsorted(lkey, rkey_e, side="left")
    olo = np.searchsorted(op_pos, lo, side="left")
    ohi = np.searchsorted(op_pos, hi, side="left")
    count = (ohi - olo).astype(_I64)
    os_, oe = start[ops], end[ops]
    is_kernel = (kind[ops] == EventKind.KERNEL).astype(_I64)
    kdur = (oe - os_) * is_kernel
    kcum = np.concatenate([[0], np.cumsum(kdur)])
    kernel_ns = kcum[ohi] - kcum[olo]
    # (range, op) pairs
    total = int(count.sum())
    pair_range = np.repeat(np.arange(n, dtype=_I64), count)
    offs = np.arange(total, dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
    pair_op = np.repeat(olo.astype(_I64), count) + offs
    gpu_ns = grouped_union_lengths(os_[pair_op], oe[pair_op], pair_range, n) if total else zeros.copy()
    gpu_start = np.full(n, -1, _I64)
    gpu_end = np.full(n, -1, _I64)
    has = count > 0
    if total:
        bounds = (np.cumsum(count) - count)[has]
        gpu_start[has] = np.minimum.reduceat(os_[pair_op], bounds)
        gpu_end[has] = np.maximum.reduceat(oe[pair_op], bounds)
    stats = _by_name(timeline, rr, depth, count, gpu_start, gpu_end, pair_range, pair_op, os_, oe, kdur,
                     start, end, reference_ns, parent)
    return RangeProjection(
        rows=rr, depth=depth, parent=parent, gpu_ops=count, gpu_start=gpu_start, gpu_end=gpu_end, gpu_ns=gpu_ns,
        kernel_ns=kernel_ns.astype(_I64), stats=stats, reference_ns=int(reference_ns), reference=reference,
        unlaunched_ops=unlaunched,
    )


def _by_name(timeline, rr, depth, count, gpu_start, gpu_end, pair_range, pair_op, os_, oe, kdur, start, end,
             reference_ns, parent) -> tuple[RangeStat, ...]:
    if rr.size == 0:
        return ()
    names = timeline.col("name")[rr].astype(_I64)
    kinds = timeline.col("kind")[rr]
    # a name's key: (name id, kind), so an NVTX range and a CPU op of the same name stay apart
    key = names * 16 + kinds.astype(_I64)
    ukeys, inv = unique_inverse(key)
    g = ukeys.size
    calls = np.bincount(inv, minlength=g)
    host = np.bincount(inv, weights=(end[rr] - start[rr]), minlength=g)
    has = count > 0
    span = np.bincount(inv[has], weights=(gpu_end - gpu_start)[has], minlength=g)
    min_depth = np.full(g, np.iinfo(_I64).max, _I64)
    np.minimum.at(min_depth, inv, depth)
    # distinct (name, op) pairs
    if pair_op.size:
        pg = inv[pair_range]
        pk = sorted_unique(pg * (int(pair_op.max()) + 1) + pair_op)
        pg_u, po_u = pk // (int(pair_op.max()) + 1), pk % (int(pair_op.max()) + 1)
        ops_n = np.bincount(pg_u, minlength=g)
        gpu = grouped_union_lengths(os_[po_u], oe[po_u], pg_u, g)
        kern = np.bincount(pg_u, weights=kdur[po_u], minlength=g)
    else:
        ops_n = np.zeros(g, _I64)
        gpu = np.zeros(g, _I64)
        kern = np.zeros(g, _I64)
    strings = timeline.strings
    first = np.full(g, rr.size, _I64)
    np.minimum.at(first, inv, np.arange(rr.size, dtype=_I64))  # each name's first instance (rows in start order)
    pname = np.where(parent >= 0, names[np.maximum(parent, 0)], -1)
    first_end = np.maximum(end[rr], gpu_end)

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
                first_start_ns=int(start[rr][first[i]]),
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
