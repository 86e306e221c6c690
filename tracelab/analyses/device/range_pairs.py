"""The (range, op) pairs of the range projection (`range_projection`), a bounded block at a time: a
range's ops are one slice of the launched GPU ops in launch order, so the pairs are made from the slices
for BLOCK pairs (or ranges, or names) at a time and their temporaries stay bounded on big traces."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.intervals import (
    bounded_blocks,
    expand_ranges,
    grouped_union_lengths,
    merge_grouped,
)
from tracelab.model.grouping import stable_order
from tracelab.model.kinds import EventKind
from tracelab.model.timeline import Timeline

_I64 = np.int64
BLOCK = 1 << 17  # (range, op) pairs materialised at once


def unions(which: np.ndarray, op_rank: np.ndarray, s_rank: np.ndarray, e_rank: np.ndarray,
           n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union length per group of the (group, op) pairs (no pair twice), ops named by their place in start
    order (`s_rank`, `e_rank` their intervals in that order): the pairs sorted by (group, start) through
    one sort of an int64 key. Returns (lengths, the pairs' groups and op places in that order)."""
    m = int(s_rank.size)
    if which.size == 0:
        return np.zeros(n_groups, _I64), which, op_rank
    if n_groups * m >= 1 << 62:
        order = np.lexsort((op_rank, which))
        g, r = which[order], op_rank[order]
        return grouped_union_lengths(s_rank[r], e_rank[r], g, n_groups), g, r
    key = which * m
    key += op_rank
    if key.size > 1 and (key[1:] < key[:-1]).any():  # a range's ops mostly come in start order already
        key.sort()
    g, r = np.divmod(key, m)
    del key
    return grouped_union_lengths(s_rank[r], e_rank[r], g, n_groups, presorted=True), g, r


class PairOps(msgspec.Struct, frozen=True, eq=False):
    """The launched GPU ops: `op_rank[i]` is the place in start (row) order of the i-th op in launch order;
    s/e/k_rank: their start, end and kernel time in start order; each range (in (thread, start) order)
    holds the ops olo[j] .. olo[j] + count[j] - 1 of the launch order."""

    op_rank: np.ndarray
    s_rank: np.ndarray
    e_rank: np.ndarray
    k_rank: np.ndarray
    olo: np.ndarray
    count: np.ndarray


def instance_figures(timeline: Timeline, ops: np.ndarray, op_rank: np.ndarray, olo: np.ndarray, ohi: np.ndarray,
                     ) -> tuple[PairOps, np.ndarray, np.ndarray]:
    """Per range (in (thread, start) order): projected start and end (-1 without ops); and the ops'
    figures in start order (`PairOps`)."""
    start, end, kind = timeline.col("start"), timeline.col("end"), timeline.col("kind")
    n = olo.size
    os_, oe = start[ops].astype(_I64, copy=False), end[ops].astype(_I64, copy=False)
    kdur = (oe - os_) * (kind[ops] == EventKind.KERNEL).astype(_I64)
    count = ohi - olo
    # the ops by start: op_rank[i] is op i's place among them (the launched GPU rows, in start order)
    by_rank = np.empty_like(op_rank)
    by_rank[op_rank] = np.arange(op_rank.size, dtype=op_rank.dtype)
    narrow = np.int32 if max(ops.size, n) < 2**31 - 1 else _I64  # positions: half the memory they keep
    o = PairOps(op_rank.astype(narrow), os_[by_rank], oe[by_rank], kdur[by_rank], olo.astype(narrow),
                count.astype(narrow))
    del by_rank, kdur
    gpu_start = np.full(n, -1, _I64)
    gpu_end = np.full(n, -1, _I64)
    for a, b in bounded_blocks(count, BLOCK):  # the (range, op) pairs a block at a time
        item = expand_ranges(olo[a:b], olo[a:b] + count[a:b])[1]
        if item.size:
            has = count[a:b] > 0
            bounds = (np.cumsum(count[a:b]) - count[a:b])[has]
            gpu_start[a:b][has] = np.minimum.reduceat(os_[item], bounds)
            gpu_end[a:b][has] = np.maximum.reduceat(oe[item], bounds)
    return o, gpu_start, gpu_end


def instance_kernel_ns(o: PairOps) -> np.ndarray:
    """Per range (in (thread, start) order): the summed duration of its ops that are kernels."""
    kcum = np.concatenate([[0], np.cumsum(o.k_rank[o.op_rank])])  # kernel time in launch order, summed
    lo = o.olo.astype(_I64)
    return kcum[lo + o.count] - kcum[lo]


def instance_unions(o: PairOps, by: np.ndarray) -> np.ndarray:
    """Per instance (timeline row order): the union of its ops' GPU intervals, ranges a block at a time."""
    lengths = np.zeros(by.size, _I64)
    for a, b in bounded_blocks(o.count, BLOCK):
        which, item = expand_ranges(o.olo[a:b], o.olo[a:b] + o.count[a:b])
        lengths[a:b] = unions(which, o.op_rank[item], o.s_rank, o.e_rank, b - a)[0]
    out = np.empty_like(lengths)
    out[by] = lengths
    return out


def name_ops(o: PairOps, inv_by: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per name: its distinct ops (an op once however many of its instances hold it), their GPU union and
    summed kernel time. A name's instances hold slices of the ops in launch order, so its distinct ops are
    the union of those slices (merged as intervals of positions). Names are taken a block at a time: their
    instances, then their ops (`BLOCK`)."""
    ops_n = np.zeros(g, _I64)
    gpu = np.zeros(g, _I64)
    kern = np.zeros(g, np.float64)
    inst = np.flatnonzero(o.count > 0)  # the instances with ops, by name
    group = inv_by[inst]
    order = stable_order(group)
    inst, group = inst[order], group[order]
    del order
    cut = np.searchsorted(group, np.arange(g + 1))
    for a, b in bounded_blocks(np.diff(cut), BLOCK):
        sel = inst[cut[a] : cut[b]]
        lo = o.olo[sel].astype(_I64)
        ma, mb, mg = merge_grouped(lo, lo + o.count[sel], group[cut[a] : cut[b]])
        del sel, lo
        size = mb - ma
        ops_n[a:b] = np.bincount(mg - a, weights=size, minlength=b - a)
        at = np.searchsorted(mg, np.arange(a, b + 1))
        for a2, b2 in bounded_blocks(ops_n[a:b], BLOCK):
            which, item = expand_ranges(ma[at[a2] : at[b2]], mb[at[a2] : at[b2]])
            pair_group = mg[at[a2] : at[b2]][which]
            pair_group -= a + a2
            del which
            lengths, pg, pr = unions(pair_group, o.op_rank[item], o.s_rank, o.e_rank, b2 - a2)
            del pair_group, item
            gpu[a + a2 : a + b2] = lengths
            kern[a + a2 : a + b2] = np.bincount(pg, weights=o.k_rank[pr], minlength=b2 - a2)
    return ops_n, gpu, kern
