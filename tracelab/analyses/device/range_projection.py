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
from functools import cached_property, partial

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import FirstPosition
from tracelab.analyses.core.thread_codes import thread_codes
from tracelab.analyses.device import range_pairs
from tracelab.analyses.device.range_pairs import (
    PairOps,
    instance_figures,
    instance_kernel_ns,
    instance_unions,
    name_ops,
)
from tracelab.model.grouping import any_of, first_rows, stable_order, unique_inverse
from tracelab.model.kinds import EventKind
from tracelab.model.timeline import Timeline

_I64 = np.int64
RANGE_KINDS = (EventKind.NVTX_RANGE, EventKind.CPU_OP)
GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
LAUNCH_KINDS = (EventKind.RUNTIME, EventKind.DRIVER)


class RangeStat(msgspec.Struct, frozen=True):
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


class RangeInstances(msgspec.Struct, frozen=True, eq=False, dict=True):
    """Per instance: arrays, one row per host range, in timeline row order."""

    rows: np.ndarray  # timeline rows of the range instances
    depth: np.ndarray  # nesting depth on its thread
    parent: np.ndarray  # index (into these arrays) of the innermost enclosing instance, -1 at the top
    gpu_ops: np.ndarray  # ops launched inside
    gpu_start: np.ndarray  # projected start (-1 when no op)
    gpu_end: np.ndarray  # projected end (-1 when no op)
    kernel_ns: np.ndarray
    unions: Callable[[], np.ndarray]  # computes `gpu_ns`

    @cached_property
    def gpu_ns(self) -> np.ndarray:
        """The union of each instance's ops, computed when first asked for."""
        return self.unions()


class RangeProjection(msgspec.Struct, frozen=True, eq=False, dict=True):
    """Per name (`stats`, largest GPU time first) and per instance (`RangeInstances`' arrays: `rows`,
    `depth`, `parent`, `gpu_ops`, `gpu_start`, `gpu_end`, `kernel_ns`, `gpu_ns`). The per-instance arrays
    are made when first asked for, unless `project_ranges` was asked to keep them: the per-name figures
    (all that `analyze --json` lists) do not need them, and on a big trace they are hundreds of MB."""

    stats: tuple[RangeStat, ...]
    reference_ns: int  # what `share` divides by
    reference: str  # "steps" or "gpu span" or "none"
    unlaunched_ops: int  # GPU ops whose launch call is not in the trace (belong to no range)
    n: int  # range instances
    instances: Callable[[], RangeInstances]  # makes (or returns) the per-instance arrays

    @cached_property
    def per_instance(self) -> RangeInstances:
        return self.instances()

    def __getattr__(self, name: str) -> np.ndarray:
        """The per-instance arrays (`rows`, `depth`, ...) read as attributes of the projection."""
        if name in _INSTANCE_ARRAYS:
            return getattr(self.per_instance, name)
        raise AttributeError(name)


_INSTANCE_ARRAYS = frozenset(("rows", "depth", "parent", "gpu_ops", "gpu_start", "gpu_end", "kernel_ns", "gpu_ns"))


def _thread_order(thread: np.ndarray, start: np.ndarray) -> np.ndarray:
    """np.argsort(thread * W + start, kind="stable") for rows in start order (a timeline's): a stable sort
    by thread alone, by radix on 16-bit codes when they allow."""
    if start.size > 1 and (start[1:] < start[:-1]).any():
        return np.lexsort((start, thread))
    return stable_order(thread)


def _keys(thread: np.ndarray, width: int, t: np.ndarray, t0: int) -> np.ndarray:
    """thread * width + (t - t0) as one new int64 array, built in place (int64 wraps alike either way)."""
    k = thread * width
    k += t
    k -= t0
    return k


def _index_type(n: int) -> type:
    """int32 for positions into n items when they fit (half the memory of int64), else int64."""
    return np.int32 if n < 2**31 - 1 else _I64


def _depths(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range on its thread, for ranges sorted by (thread, start): the other ranges of
    the thread that contain its start (count of starts <= s minus ends <= s, less itself); searched
    BLOCK ranges at a time."""
    n = thread.size
    d = np.zeros(n, _index_type(n))
    if n == 0:
        return d
    t0 = int(min(start.min(), end.min()))
    width = int(max(start.max(), end.max())) - t0 + 1
    q = _keys(thread, width, start, t0)  # sorted: the searches below take the keys in order
    ke = _keys(thread, width, end, t0)
    ke.sort()
    block = range_pairs.BLOCK
    for a in range(0, n, block):
        qa = q[a : a + block]
        # ranges of earlier threads: all opened and all closed
        x = np.searchsorted(q, qa, side="right") - np.searchsorted(ke, qa, side="right") - 1
        d[a : a + block] = np.maximum(x, 0, out=x)
    return d


def _parents(thread: np.ndarray, depth: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The innermost enclosing range of each range, for ranges sorted by (thread, start): the last range of
    the same thread one level up that starts at or before it (ranges of one thread nest)."""
    n = thread.size
    out = np.full(n, -1, _index_type(n))
    if n == 0:
        return out
    t0 = int(start.min())
    width = int(start.max()) - t0 + 1
    level = thread * (int(depth.max()) + 2)
    level += depth
    # by (thread, depth, start): a stable sort by (thread, depth) of rows in (thread, start) order
    order = stable_order(level)
    sk = _keys(level[order], width, start[order], t0)
    del level
    at = np.empty(n, _I64)
    block = range_pairs.BLOCK
    for a in range(0, n, block):  # one level up, in key order
        at[order[a : a + block]] = np.searchsorted(sk, sk[a : a + block] - width, side="right") - 1
    del sk
    ok = (depth > 0) & (at >= 0)
    cand = order[np.maximum(at, 0, out=at)]
    del at, order
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
    del ckey_l, ckey_g
    ok = (gcorr >= 0) & (at >= 0)
    unlaunched = int((~ok).sum())
    ops = gr[ok]
    op_pos = at[ok]  # position in the (thread, start) launch order
    oo = np.argsort(op_pos, kind="stable")
    return ops[oo], op_pos[oo], oo, unlaunched


def _launches(timeline: Timeline, lr: np.ndarray, l_thread: np.ndarray, gr: np.ndarray,
              ) -> tuple[np.ndarray, int, int, np.ndarray, np.ndarray, np.ndarray, int]:
    """The launch calls by (thread, start) as keys (thread * width + start - t0, and width, t0), and the
    launched GPU ops sorted by their launch's place in that order: (keys, width, t0, ops, their launches'
    places, each op's place among the launched ops in row order, how many ops have no launch)."""
    start = timeline.col("start").astype(_I64, copy=False)
    end = timeline.col("end").astype(_I64, copy=False)
    t0 = int(start.min()) if start.size else 0
    width = int(max(int(end.max()) if end.size else 0, int(start.max()) if start.size else 0)) - t0 + 2
    lorder = _thread_order(l_thread, start[lr])
    lrows = lr[lorder]
    lkey = _keys(l_thread[lorder], width, start[lrows], t0)
    del lorder
    corr = timeline.col("correlation").astype(_I64, copy=False)
    ops, op_pos, op_rank, unlaunched = _launch_of_ops(timeline.col("rank"), corr, lrows, gr)
    return lkey, width, t0, ops, op_pos, op_rank, unlaunched


def _slices(lkey: np.ndarray, width: int, t0: int, op_pos: np.ndarray, r_thread: np.ndarray, rs: np.ndarray,
            re_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each range's ops (ranges sorted by (thread, start)) as one slice [olo, ohi) of the launched ops:
    its launches [lo, hi) by its thread and host interval, then the ops of those launches; BLOCK ranges at
    a time."""
    n = r_thread.size
    olo = np.empty(n, _I64)
    ohi = np.empty(n, _I64)
    block = range_pairs.BLOCK
    for a in range(0, n, block):
        th = r_thread[a : a + block]
        lo = np.searchsorted(lkey, _keys(th, width, rs[a : a + block], t0), side="left")
        olo[a : a + block] = np.searchsorted(op_pos, lo, side="left")
        hi = np.searchsorted(lkey, _keys(th, width, re_[a : a + block], t0), side="left")
        ohi[a : a + block] = np.searchsorted(op_pos, hi, side="left")
    return olo, ohi


class _Projected(msgspec.Struct, frozen=True, eq=False):
    """project_ranges' arrays, per instance in (thread, start) order (`by`: their timeline row order
    positions), and `rows`: the instances' timeline rows (row order)."""

    rows: np.ndarray
    by: np.ndarray  # the instances in (thread, start) order, as positions in `rows`
    depth: np.ndarray
    parent: np.ndarray  # (thread, start) position of the innermost enclosing instance, -1 at the top
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    ops: PairOps
    unlaunched: int
    gpu_span: int

    def instances(self) -> RangeInstances:
        """The per-instance arrays, in timeline row order."""
        by = self.by

        def original(a: np.ndarray) -> np.ndarray:
            out = np.empty(a.shape, _I64)
            out[by] = a
            return out

        parent = original(np.where(self.parent >= 0, by[np.maximum(self.parent, 0)], -1))
        return RangeInstances(
            self.rows.astype(_I64), original(self.depth), parent, original(self.ops.count), original(self.gpu_start),
            original(self.gpu_end), original(instance_kernel_ns(self.ops)), partial(instance_unions, self.ops, by),
        )


def _project(timeline: Timeline) -> _Projected:
    """Every host range of the timeline projected onto the GPU, per instance (module doc)."""
    kind = timeline.col("kind")
    start = timeline.col("start").astype(_I64, copy=False)
    end = timeline.col("end").astype(_I64, copy=False)
    tid = timeline.col("tid")
    corr = timeline.col("correlation")
    rr = np.flatnonzero(any_of(kind, RANGE_KINDS) & (tid >= 0) & (end > start))
    lr = np.flatnonzero(any_of(kind, LAUNCH_KINDS) & (corr >= 0))
    gr = np.flatnonzero(any_of(kind, GPU_KINDS))
    gpu_span = int(end[gr].max() - start[gr].min()) if gr.size else 0
    r_thread, l_thread = thread_codes(timeline, rr, lr)
    rr = rr.astype(_index_type(timeline.n_events))  # kept: int32 when it fits (int64 when the rows are asked for)
    # the launches and their ops first (before the ranges' arrays: their temporaries do not add up)
    lkey, width, t0, ops, op_pos, op_rank, unlaunched = _launches(timeline, lr, l_thread, gr)
    del lr, l_thread, gr
    # the ranges by (thread, start): every search below takes its keys in order
    by = _thread_order(r_thread, start[rr]).astype(_index_type(rr.size), copy=False)
    r_thread = r_thread[by]
    sorted_rows = rr[by]
    rs, re_ = start[sorted_rows], end[sorted_rows]
    del sorted_rows
    depth = _depths(r_thread, rs, re_)
    parent = _parents(r_thread, depth, rs)
    olo, ohi = _slices(lkey, width, t0, op_pos, r_thread, rs, re_)
    del lkey, op_pos, r_thread, rs, re_
    o, gpu_start, gpu_end = instance_figures(timeline, ops, op_rank, olo, ohi)
    return _Projected(rr, by, depth, parent, gpu_start, gpu_end, o, unlaunched, gpu_span)


def _instances_of(timeline: Timeline) -> RangeInstances:
    return _project(timeline).instances()


def project_ranges(timeline: Timeline, reference_ns: int = 0, reference: str = "steps",
                   keep_instances: bool = False) -> RangeProjection:
    """Project every host range of the timeline onto the GPU (see the module doc). `reference_ns`: what
    each name's `share` divides its GPU time by (the steps' total time; 0: the GPU span is used).
    `keep_instances`: keep the per-instance arrays (else they are projected again when first asked for)."""
    x = _project(timeline)
    if reference_ns <= 0:
        reference_ns, reference = x.gpu_span, ("gpu span" if x.gpu_span else "none")
    start = timeline.col("start").astype(_I64, copy=False)
    end = timeline.col("end").astype(_I64, copy=False)
    stats = _by_name(timeline, x, start, end, reference_ns)
    return RangeProjection(
        stats=stats, reference_ns=int(reference_ns), reference=reference, unlaunched_ops=x.unlaunched,
        n=int(x.rows.size), instances=partial(lambda i: i, x.instances()) if keep_instances else partial(_instances_of, timeline),
    )


def with_reference(projection: RangeProjection, reference_ns: int, reference: str) -> RangeProjection:
    """The same projection with each name's `share` of `reference_ns` (> 0) instead: what
    `project_ranges(timeline, reference_ns, reference)` gives, without projecting again (the projection
    may start before the steps that give the reference are known)."""
    stats = tuple(msgspec.structs.replace(s, share=float(s.gpu_ns) / reference_ns) for s in projection.stats)
    return msgspec.structs.replace(projection, stats=stats, reference_ns=int(reference_ns), reference=reference)


def _by_name(timeline: Timeline, x: _Projected, start: np.ndarray, end: np.ndarray, reference_ns: int,
             ) -> tuple[RangeStat, ...]:
    rr, by = x.rows, x.by
    if rr.size == 0:
        return ()
    # a name's key: (name id, kind), so an NVTX range and a CPU op of the same name stay apart
    key = timeline.col("name")[rr].astype(_I64)
    key *= 16
    key += timeline.col("kind")[rr]
    ukeys, inv = unique_inverse(key)  # rows in start order
    del key
    g = ukeys.size
    calls = np.bincount(inv, minlength=g)
    w = end[rr]
    w -= start[rr]
    host = np.bincount(inv, weights=w, minlength=g)
    w[by] = x.gpu_end - x.gpu_start  # 0 (-1 - -1) without ops: adds nothing
    span = np.bincount(inv, weights=w, minlength=g)
    first = first_rows(inv, g)  # each name's first instance (rows in start order)
    w[by] = np.arange(rr.size)
    first_at = w[first]  # ... and its place in (thread, start) order
    del w
    inv_by = inv[by].astype(_index_type(g))
    del inv
    min_depth = np.full(g, np.iinfo(_I64).max, _I64)
    np.minimum.at(min_depth, inv_by, x.depth)
    ops_n, gpu, kern = name_ops(x.ops, inv_by, g)
    del inv_by
    pf = x.parent[first_at]
    pname = np.where(pf >= 0, timeline.col("name")[rr[by[np.maximum(pf, 0)]]], -1)
    first_start = start[rr[first]]
    first_end = np.maximum(end[rr[first]], x.gpu_end[first_at])
    strings = timeline.strings

    def text(nid: int) -> str:
        return strings[nid] if 0 <= nid < len(strings) else ""

    out = []
    for i in np.argsort(-gpu, kind="stable").tolist():
        nid, k = divmod(int(ukeys[i]), 16)
        out.append(RangeStat(
            text(nid), "cpu_op" if k == EventKind.CPU_OP else "nvtx", int(calls[i]), int(host[i]), int(ops_n[i]),
            int(gpu[i]), int(kern[i]), int(span[i]), float(gpu[i]) / reference_ns if reference_ns > 0 else 0.0,
            int(min_depth[i]), text(int(pname[i])), int(first_start[i]), int(first_end[i])))
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


__all__ = ["RangeInstances", "RangeProjection", "RangeStat", "project_ranges"]
