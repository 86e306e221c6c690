"""The graph of the critical path (`critical_path`'s module docstring): per node (GPU operation, launching or
blocking host call, c10d host-range collective) its predecessor, hand-over time and edge kind, built with
numpy once per timeline."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import FirstPosition
from tracelab.analyses.core.memo import begun, memo
from tracelab.analyses.core.thread_codes import thread_codes
from tracelab.model import EventKind, Flag, Timeline
from tracelab.model.grouping import sorted_unique

_GPU_KINDS = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_API_KINDS = (int(EventKind.RUNTIME), int(EventKind.DRIVER))
# edge kinds
NONE, STREAM, LAUNCH, HOST, SYNC, COLL = 0, 1, 2, 3, 4, 5


def _prev_in_group(keys: list[np.ndarray], start: np.ndarray) -> np.ndarray:
    """For each item, the item before it in its group (same keys) by start; -1 for the first."""
    n = start.size
    prev = np.full(n, -1, dtype=np.int64)
    if not n:
        return prev
    order = np.lexsort((start, *reversed(keys)))
    same = np.ones(n - 1, dtype=bool)
    for k in keys:
        ks = k[order]
        same &= ks[1:] == ks[:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


class _Edges(msgspec.Struct, frozen=True, eq=False):
    """The per-rank part of the graph (no collective edges): what `_build` finishes with a run's collectives."""

    rows: np.ndarray  # timeline row of each node (the ng GPU nodes first)
    ng: int
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    comm: np.ndarray  # communication kernel
    pred: np.ndarray
    hand: np.ndarray
    edge: np.ndarray
    thread: np.ndarray  # host nodes: dense thread id; -1 GPU
    alt_pred: np.ndarray  # host nodes: the previous call of the thread (a sync's fallback)
    alt_hand: np.ndarray


class _Graph(_Edges, frozen=True, eq=False):
    is_gpu: np.ndarray
    # collective: last arrival time and the node of the last arrival (-1: not a waiting collective call)
    last_start: np.ndarray
    last_node: np.ndarray
    # host runs: host nodes in (thread, start) order; run_first[i] = the first position of the run of
    # calls that each follow the previous call of their thread (edge "host") with non-decreasing
    # hand-overs: the walk passes such a run in one step (`_walk`)
    host_order: np.ndarray
    host_pos: np.ndarray  # per node: its position in host_order, -1 for GPU nodes
    run_first: np.ndarray


def per_rank_edges(tl: Timeline) -> _Edges:
    """The per-rank part of the graph of `tl` without c10d host-range collectives (every run but a gloo /
    MPI one), once per analysis context: `api.start_extras` begins it on a helper thread before the
    analysis, which the critical path does not need for it."""
    return memo(tl, _EDGES, lambda: _edges(tl, np.zeros(0, dtype=np.int64)))


_EDGES = ("critical path edges",)


def _build(tl: Timeline, collectives: Any | None) -> _Graph:
    """The graph of a timeline's GPU operations and launching / blocking host calls, with the collective
    edges of `collectives` (`critical_path`'s module docstring)."""
    if collectives is not None and getattr(collectives, "source", "") == "host ranges":
        # gloo / MPI: the collectives are c10d's host ranges; they join the host calls of their thread
        e = _edges(tl, sorted_unique(collectives.call_rows))
    else:  # begun early (`per_rank_edges`), else made here and not kept
        e = begun(tl, _EDGES) or _edges(tl, np.zeros(0, dtype=np.int64))
    n, ng = e.rows.size, e.ng
    is_gpu = np.zeros(n, dtype=bool)
    is_gpu[:ng] = True
    last_start, last_node = _collective_edges(collectives, e.rows, e.start)
    host_order, host_pos, run_first = _host_runs(e.thread, e.start, e.pred, e.hand, e.edge, last_node, ng, n)
    if n < 2**31 - 1:  # node indices as int32: half the memory of the graph's index columns (one at a time)
        last_node = last_node.astype(np.int32)
        host_order, host_pos, run_first = host_order.astype(np.int32), host_pos.astype(np.int32), run_first.astype(np.int32)
    return _Graph(**msgspec.structs.asdict(e), is_gpu=is_gpu, last_start=last_start, last_node=last_node, host_order=host_order,
                  host_pos=host_pos, run_first=run_first)


def _edges(tl: Timeline, coll_host: np.ndarray) -> _Edges:
    """Nodes, predecessors and hand-overs of the graph within each rank; `coll_host` = the rows of c10d
    host-range collectives (they join the host calls of their thread, as communication)."""
    c = tl.cols
    kind, flags = c["kind"], c["flags"]
    gpu_rows = np.flatnonzero(np.isin(kind, _GPU_KINDS))
    host_rows = np.flatnonzero(np.isin(kind, _API_KINDS) & ((flags & (Flag.LAUNCH | Flag.BLOCKING)) != 0))
    if coll_host.size:
        host_rows = np.union1d(host_rows, coll_host)
    ng = gpu_rows.size
    rows = np.concatenate([gpu_rows, host_rows])
    n = rows.size
    rank = c["rank"][rows].astype(np.int64)
    start = c["start"][rows]
    end = c["end"][rows]
    comm = np.zeros(n, dtype=bool)
    comm[:ng] = (kind[gpu_rows] == int(EventKind.KERNEL)) & ((flags[gpu_rows] & Flag.COMM) != 0)
    if coll_host.size:
        comm[ng:] = np.isin(host_rows, coll_host)
    pred = np.full(n, -1, dtype=np.int64)
    hand = np.zeros(n, dtype=np.int64)
    edge = np.zeros(n, dtype=np.int8)
    _gpu_edges(c, gpu_rows, host_rows, rank, start, end, pred, hand, edge)
    thread, alt_pred, alt_hand = _host_edges(tl, gpu_rows, host_rows, rank, start, end, pred, hand, edge)
    # a hand-over never falls after the node starts, except a sync's, which lies inside the call
    hand = np.where(edge == SYNC, np.minimum(np.maximum(hand, start), end), np.minimum(hand, start))
    if n < 2**31 - 1:  # node indices as int32: half the memory of the graph's index columns (one at a time)
        pred = pred.astype(np.int32)
        alt_pred = alt_pred.astype(np.int32)
        thread = thread.astype(np.int32)
    if tl.n_events < 2**31 - 1:  # timeline rows and ranks (an int32 column) as int32 too
        rows, rank = rows.astype(np.int32), rank.astype(np.int32)
    return _Edges(rows, ng, rank, start, end, comm, pred, hand, edge, thread, alt_pred, alt_hand)


def _gpu_edges(c: Any, gpu_rows: np.ndarray, host_rows: np.ndarray, rank: np.ndarray, start: np.ndarray,
               end: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray) -> None:
    """A GPU operation's predecessor: the previous operation on its stream, its launch call, or another
    stream's operation that ended after both (module docstring of `critical_path`). In place."""
    flags = c["flags"]
    ng = gpu_rows.size
    g = slice(0, ng)
    sp = _prev_in_group([rank[g], c["device"][gpu_rows].astype(np.int64), c["stream"][gpu_rows]], start[g])
    sp_end = np.where(sp >= 0, end[np.maximum(sp, 0)], np.iinfo(np.int64).min)
    launch = np.full(ng, -1, dtype=np.int64)
    corr_g = c["correlation"][gpu_rows]
    hl = host_rows[(flags[host_rows] & Flag.LAUNCH) != 0] if host_rows.size else host_rows
    if ng and hl.size:
        launch_nodes = ng + np.searchsorted(host_rows, hl)
        key_h = (c["rank"][hl].astype(np.int64) << 40) | (c["correlation"][hl] & ((1 << 40) - 1))
        key_g = (rank[g] << 40) | (corr_g & ((1 << 40) - 1))
        pos = FirstPosition(key_h).find(key_g)  # the first launch call with the key (a table for packed ids)
        ok = (pos >= 0) & (corr_g >= 0)
        ok[ok] &= c["correlation"][hl[pos[ok]]] >= 0
        launch[ok] = launch_nodes[pos[ok]]
        del launch_nodes, key_h, key_g, pos, ok
    del corr_g, hl
    la_t = np.where(launch >= 0, start[np.maximum(launch, 0)], np.iinfo(np.int64).min)
    # another stream's operation that ended after both (an event wait between streams, NCCL waiting
    # for the compute stream): the latest end at or before the start, on the rank's GPUs
    dep = _latest_end_before(rank[g], end[g], rank[g], start[g]) if ng else np.zeros(0, dtype=np.int64)
    dep_end = np.where(dep >= 0, end[np.maximum(dep, 0)], np.iinfo(np.int64).min)
    by_dep = (dep >= 0) & (dep != np.arange(ng)) & (dep_end > np.maximum(la_t, sp_end))
    sp = np.where(by_dep, dep, sp)
    sp_end = np.where(by_dep, dep_end, sp_end)
    by_launch = (launch >= 0) & (la_t > sp_end)
    by_stream = ~by_launch & (sp >= 0)
    pred[:ng] = np.where(by_launch, launch, np.where(by_stream, sp, -1))
    hand[:ng] = np.where(by_launch, la_t, np.where(by_stream, sp_end, 0))
    edge[:ng] = np.where(by_launch, LAUNCH, np.where(by_stream, STREAM, NONE))


def _host_edges(tl: Timeline, gpu_rows: np.ndarray, host_rows: np.ndarray, rank: np.ndarray,
                start: np.ndarray, end: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A host call's predecessor: the previous call of its thread, or of another thread it waited for;
    a blocking call that waited: the GPU operation it waited for (in place). Returns each node's thread
    and a sync's host predecessor and hand-over (when the sync edge does not apply)."""
    c = tl.cols
    kind, flags = c["kind"], c["flags"]
    ng = gpu_rows.size
    n = ng + host_rows.size
    g = slice(0, ng)
    # host: previous call of the thread; blocking calls that waited: the GPU operation they waited for
    thread = np.full(n, -1, dtype=np.int64)
    alt_pred = np.full(n, -1, dtype=np.int64)  # a sync's host predecessor (when the sync edge does not apply)
    alt_hand = np.zeros(n, dtype=np.int64)
    if host_rows.size:
        h = slice(ng, n)
        cpu = np.flatnonzero(kind == int(EventKind.CPU_OP))
        thread[h], cpu_thread = thread_codes(tl, host_rows, cpu)
        hp = _prev_in_group([thread[h]], start[h])
        hp_node = np.where(hp >= 0, ng + hp, -1)
        hp_end = np.where(hp >= 0, end[np.maximum(hp_node, 0)], 0)
        pred[h] = alt_pred[h] = hp_node
        hand[h] = alt_hand[h] = np.minimum(hp_end, start[h])
        edge[h] = np.where(hp >= 0, HOST, NONE)
        del hp, hp_node, hp_end
        cpu_start = c["start"][cpu]
        del cpu
        _other_threads(rank, start, end, thread, cpu_thread, cpu_start, pred, hand, edge, ng, n)
        del cpu_thread, cpu_start
        blocking = np.flatnonzero((flags[host_rows] & Flag.BLOCKING) != 0)
        if blocking.size and ng:
            b_nodes = ng + blocking
            gw = _latest_end_before(rank[g], end[g], rank[b_nodes], end[b_nodes])
            waited = (gw >= 0) & (end[np.maximum(gw, 0)] > start[b_nodes])
            w = b_nodes[waited]
            pred[w] = gw[waited]
            hand[w] = end[gw[waited]]
            edge[w] = SYNC
    return thread, alt_pred, alt_hand


def _collective_edges(collectives: Any | None, rows: np.ndarray,
                      start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node: the last arrival of its collective and that arrival's node, when the call arrived before
    it (a collective edge across ranks); the minimum and -1 otherwise."""
    n = rows.size
    last_start = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    last_node = np.full(n, -1, dtype=np.int64)
    if collectives is not None and getattr(collectives, "call_rows", np.zeros(0)).size and n:
        by_row = np.argsort(rows, kind="stable")
        sorted_rows = rows[by_row]

        def node_of(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            pos = np.minimum(np.searchsorted(sorted_rows, r), n - 1)
            return by_row[pos], sorted_rows[pos] == r

        node, ok = node_of(collectives.call_rows)
        lnode, ok2 = node_of(collectives.call_last_row)
        ok &= ok2
        waited = ok & (collectives.call_last_start > start[node])
        last_start[node[waited]] = collectives.call_last_start[waited]
        last_node[node[waited]] = lnode[waited]
    return last_start, last_node


def _host_runs(thread: np.ndarray, start: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray,
               last_node: np.ndarray, ng: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host nodes in (thread, start) order, each node's position there, and per position the first
    position of its run: a node continues the run when its predecessor is the call before it on its
    thread (edge "host"), it is not a collective that waited, and its hand-over is not before the one
    of the call before it (so the earliest hand-over of a run is its second call's)."""
    h = np.arange(ng, n)
    order = h[np.lexsort((start[h], thread[h]))]
    pos = np.full(n, -1, dtype=np.int64)
    pos[order] = np.arange(order.size)
    cont = np.zeros(order.size, dtype=bool)
    if order.size > 1:
        cur, prev = order[1:], order[:-1]
        cont[1:] = ((edge[cur] == HOST) & (pred[cur] == prev) & (last_node[cur] < 0) & (last_node[prev] < 0)
                    & (hand[cur] >= np.where(edge[prev] == HOST, hand[prev], np.iinfo(np.int64).min)))
    idx = np.arange(order.size)
    run_first = np.maximum.accumulate(np.where(cont, 0, idx)) if order.size else idx
    return order, pos, run_first


def _other_threads(rank: np.ndarray, start: np.ndarray, end: np.ndarray, thread: np.ndarray, cpu_thread: np.ndarray,
                   cpu_start: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray, ng: int, n: int,
                   ) -> None:
    """A host call whose thread recorded no CPU op since its previous call, while another thread of its
    rank finished a call (or a collective's range) later than that: the thread waited for that one (a
    `backward()` waiting for the autograd thread, DDP waiting for its communication thread). Its
    predecessor becomes that call (edge "host"). In place."""
    h = slice(ng, n)  # the host nodes: views, not copies
    other = _latest_end_before(rank[h], end[h], rank[h], start[h])
    ok = other >= 0
    o = ng + np.where(ok, other, 0)
    del other
    own_from = np.where(pred[h] >= 0, hand[h], np.iinfo(np.int64).min // 4)
    later = ok & (thread[o] != thread[h]) & (end[o] > own_from)
    del ok
    if not later.any():
        return
    cand, src = ng + np.flatnonzero(later), o[later]
    del o
    busy = np.zeros(cand.size, dtype=bool)
    if cpu_start.size:
        # CPU ops of the waiting thread starting between its own hand-over and the other call's end:
        # one sorted key per op, thread in the high bits, time (from the earliest) in the low 44
        t0 = int(min(start.min(), cpu_start.min()))
        span = 1 << 44
        key = cpu_start - t0
        np.clip(key, 0, span - 1, out=key)
        key += cpu_thread * span
        key.sort()
        lo_t = np.clip(np.maximum(own_from[later], t0) - t0, 0, span - 1)
        hi_t = np.clip(end[src] - t0, 0, span - 1)
        lo = np.searchsorted(key, thread[cand] * span + lo_t, "left")
        hi = np.searchsorted(key, thread[cand] * span + hi_t, "left")
        busy = hi > lo
    sel, src = cand[~busy], src[~busy]
    pred[sel] = src
    hand[sel] = np.minimum(end[src], start[sel])
    edge[sel] = HOST


def _latest_end_before(g_rank: np.ndarray, g_end: np.ndarray, q_rank: np.ndarray, q_t: np.ndarray) -> np.ndarray:
    """For each query (rank, t): the GPU node of that rank with the latest end ≤ t; -1 none."""
    out = np.full(q_rank.size, -1, dtype=np.int64)
    if g_rank.size and q_rank.size and int(g_rank.min()) == int(g_rank.max()) == int(q_rank.min()) == int(q_rank.max()):
        # one rank (most traces): one sort by end, without the per-rank slices' copies
        order = np.argsort(g_end, kind="stable")
        pos = np.searchsorted(g_end[order], q_t, "right")
        pos -= 1
        ok = pos >= 0
        out[ok] = order[pos[ok]]
        return out
    order = np.lexsort((g_end, g_rank))
    rs, es = g_rank[order], g_end[order]
    q_order = np.argsort(q_rank, kind="stable")  # each rank's queries as one slice (no mask per rank)
    q_rs = q_rank[q_order]
    for r in sorted_unique(q_rank).tolist():  # per rank, vectorized inside
        lo, hi = np.searchsorted(rs, r, "left"), np.searchsorted(rs, r, "right")
        if hi == lo:
            continue
        q = q_order[np.searchsorted(q_rs, r, "left") : np.searchsorted(q_rs, r, "right")]
        pos = np.searchsorted(es[lo:hi], q_t[q], "right") - 1
        ok = pos >= 0
        out[q[ok]] = order[lo + pos[ok]]
    return out
