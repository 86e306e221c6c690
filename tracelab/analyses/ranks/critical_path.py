"""The critical path of a step: the chain of host launch → GPU work → waits → collectives that sets
its length, per rank and across ranks through the collectives (issue 24, item 6).

The graph (built with numpy, once per timeline). Nodes are the GPU operations (kernels, copies, memsets)
and the host API calls that launch GPU work (`Flag.LAUNCH`) or block the thread (`Flag.BLOCKING`).
Every node has at most one predecessor — the constraint that released it last — and a hand-over
time `h` (when that predecessor let it go):
- a GPU operation waits for the previous operation on its stream (h = that one's end, edge "stream")
  and for its launch call (h = the call's start, edge "launch": a kernel cannot start before the host
  asks for it; HTA's kernel-launch edge). The later of the two is its predecessor, unless an operation
  of another stream of the rank ended later, at or before its start (an event wait between streams, an
  NCCL kernel waiting for the compute stream): then that one (edge "stream"). A collective
  call that arrived before the last rank (`collectives.Collectives`) is released by that last arrival
  (edge "collective", h = the last arrival) when the path is followed across ranks.
- a blocking call (synchronize, synchronous copy) that returned after the GPU operation of its rank
  that ended last before it returned, and started before that operation ended, waited for it (edge
  "sync", h = the operation's end); otherwise, like a launch call, it follows the previous host call
  of its thread (edge "host", h = that call's end) — or, when its thread recorded no CPU op since that
  call and another thread of the rank finished a call later, that call (a `backward()` waiting for the
  autograd thread, DDP for its communication thread).
- gloo / MPI collectives are c10d's host ranges: they join the host calls of their thread, as collectives.

The walk. A step's window is `step_windows.step_windows`: its GPU window (the step table's
`gpu_start_ns`/`gpu_end_ns`: first start to last end of the GPU work its host range launched), its host
range only when it launched no GPU work. The path starts at the node of the rank that reaches furthest into the window (its end,
cut at the window's end) and follows predecessors back until a hand-over falls at or before the window
start. The time from the window start to its end is cut into segments, each in one category:
- `compute`: a GPU operation that is not communication runs (kernels, copies, memsets);
- `comm`: a communication kernel transfers (after the last rank arrived);
- `wait`: a communication kernel waits for another rank to arrive (per-rank paths only: across ranks
  the path goes to that rank instead);
- `host`: the host launches or computes: a launch call, the time from a launch call's start to its
  GPU operation's start (launch overhead and queueing), and host time between calls covered by recorded
  CPU activity (CPU ops, API calls; nsys: time not spent in OS calls);
- `sync`: a blocking call between the end of the GPU work it waited for and its return;
- `idle`: nothing recorded explains the time (a GPU operation that started after both its
  predecessors: e.g. a cross-stream event wait; host time with no recorded activity, or in OS calls).

`bound_by` = each category's share of the path length. The predecessors and hand-overs are numpy
columns; the walk follows them one Python step per node of the path (never per event), except that a
run of host calls that each follow the previous call of their thread is passed in one binary search
(`_host_runs`) and expanded with numpy afterwards; segments are built, merged and named with numpy.
The per-rank and cross-rank paths of every step are walked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracelab.analyses.core.intervals import covered_length, merge
from tracelab.model import EventKind, Flag, Timeline
from tracelab.model.grouping import group_codes, sorted_unique
from tracelab.model.kinds import OS_CALL_CATEGORY

CATEGORIES = ("compute", "comm", "wait", "host", "sync", "idle")
_GPU_KINDS = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_API_KINDS = (int(EventKind.RUNTIME), int(EventKind.DRIVER))
# edge kinds
NONE, STREAM, LAUNCH, HOST, SYNC, COLL = 0, 1, 2, 3, 4, 5
MAX_SEGMENTS = 400  # segments per step in the JSON document (the longest; `segments_total` says how many)
MAX_DOC_SEGMENTS = 50_000  # and in all: many ranks' steps get fewer each (at least 50)


CAT = {c: i for i, c in enumerate(CATEGORIES)}
_HOSTGAP = len(CATEGORIES)  # host time between calls, resolved into host / idle by what the thread recorded


@dataclass(frozen=True)
class Segment:
    category: str
    rank: int
    start_ns: int
    end_ns: int
    name: str = ""  # the (longest) event the time belongs to ("" for links between events)

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, eq=False)
class StepPath:
    """One step's path. Its segments are columns (category code into CATEGORIES, rank, start, end, name
    id into `strings`, -1 none); `segments` makes Segment objects when asked."""

    rank: int
    step: int
    start_ns: int
    end_ns: int
    across_ranks: bool
    cat: np.ndarray
    seg_rank: np.ndarray
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_name: np.ndarray
    strings: tuple[str, ...]
    top: tuple[tuple[str, str, int], ...] = ()  # (category, event name, ns on the path), longest first

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns

    def by_category(self) -> dict[str, int]:
        t = np.bincount(self.cat, weights=self.seg_end - self.seg_start, minlength=len(CATEGORIES))
        return {c: int(t[i]) for i, c in enumerate(CATEGORIES)}

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(
            Segment(CATEGORIES[c], r, a, b, self.strings[n] if 0 <= n < len(self.strings) else "")
            for c, r, a, b, n in zip(
                self.cat.tolist(),
                self.seg_rank.tolist(),
                self.seg_start.tolist(),
                self.seg_end.tolist(),
                self.seg_name.tolist(),
            )
        )


@dataclass(frozen=True)
class CriticalPath:
    steps: tuple[StepPath, ...]  # per rank and step
    across: tuple[StepPath, ...] = ()  # per step index, across ranks (multi-rank runs with collectives)
    notes: tuple[str, ...] = field(default=())

    def bound_by(self, paths: Sequence[StepPath] | None = None) -> dict[str, float]:
        """Each category's share of the paths' total length (the cross-rank paths when there are, else
        the per-rank ones)."""
        paths = paths if paths is not None else (self.across or self.steps)
        tot = dict.fromkeys(CATEGORIES, 0)
        for p in paths:
            for k, v in p.by_category().items():
                tot[k] += v
        whole = sum(tot.values())
        return {k: (v / whole if whole else 0.0) for k, v in tot.items()}


# ---- the graph ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Graph:
    row: np.ndarray  # timeline row of each node
    is_gpu: np.ndarray
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    comm: np.ndarray  # communication kernel
    # per-rank predecessors and hand-overs (no collective edges)
    pred: np.ndarray
    hand: np.ndarray
    edge: np.ndarray
    # collective: last arrival time and the node of the last arrival (-1: not a waiting collective call)
    last_start: np.ndarray
    last_node: np.ndarray
    thread: np.ndarray  # host nodes: dense thread id; -1 GPU
    alt_pred: np.ndarray  # host nodes: the previous call of the thread (a sync's fallback)
    alt_hand: np.ndarray
    # host runs: host nodes in (thread, start) order; run_first[i] = the first position of the run of
    # calls that each follow the previous call of their thread (edge "host") with non-decreasing
    # hand-overs: the walk passes such a run in one step (`_walk`)
    host_order: np.ndarray
    host_pos: np.ndarray  # per node: its position in host_order, -1 for GPU nodes
    run_first: np.ndarray


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


def _build(tl: Timeline, collectives: Any | None) -> _Graph:
    c = tl.cols
    kind, flags = c["kind"], c["flags"]
    gpu_rows = np.flatnonzero(np.isin(kind, _GPU_KINDS))
    host_rows = np.flatnonzero(np.isin(kind, _API_KINDS) & ((flags & (Flag.LAUNCH | Flag.BLOCKING)) != 0))
    coll_host = np.zeros(0, dtype=np.int64)
    if collectives is not None and getattr(collectives, "source", "") == "host ranges":
        # gloo / MPI: the collectives are c10d's host ranges; they join the host calls of their thread
        coll_host = sorted_unique(collectives.call_rows)
        host_rows = np.union1d(host_rows, coll_host)
    ng = gpu_rows.size
    rows = np.concatenate([gpu_rows, host_rows])
    n = rows.size
    is_gpu = np.zeros(n, dtype=bool)
    is_gpu[:ng] = True
    rank = c["rank"][rows].astype(np.int64)
    start = c["start"][rows]
    end = c["end"][rows]
    comm = is_gpu & (kind[rows] == int(EventKind.KERNEL)) & ((flags[rows] & Flag.COMM) != 0)
    if coll_host.size:
        comm[ng:] = np.isin(host_rows, coll_host)
    pred = np.full(n, -1, dtype=np.int64)
    hand = np.zeros(n, dtype=np.int64)
    edge = np.zeros(n, dtype=np.int8)

    # GPU: previous operation on the stream, and the launch call
    g = slice(0, ng)
    sp = _prev_in_group([rank[g], c["device"][gpu_rows].astype(np.int64), c["stream"][gpu_rows]], start[g])
    sp_end = np.where(sp >= 0, end[np.maximum(sp, 0)], np.iinfo(np.int64).min)
    launch = np.full(ng, -1, dtype=np.int64)
    corr_g = c["correlation"][gpu_rows]
    hl = host_rows[(flags[host_rows] & Flag.LAUNCH) != 0] if host_rows.size else host_rows
    if ng and hl.size:
        launch_nodes = ng + np.searchsorted(host_rows, hl)
        key_h = (c["rank"][hl].astype(np.int64) << 40) | (c["correlation"][hl] & ((1 << 40) - 1))
        order = np.argsort(key_h, kind="stable")
        key_s = key_h[order]
        key_g = (rank[g] << 40) | (corr_g & ((1 << 40) - 1))
        pos = np.minimum(np.searchsorted(key_s, key_g), key_s.size - 1)
        ok = (key_s[pos] == key_g) & (corr_g >= 0) & (c["correlation"][hl][order][pos] >= 0)
        launch[ok] = launch_nodes[order[pos[ok]]]
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

    # host: previous call of the thread; blocking calls that waited: the GPU operation they waited for
    thread = np.full(n, -1, dtype=np.int64)
    alt_pred = np.full(n, -1, dtype=np.int64)  # a sync's host predecessor (when the sync edge does not apply)
    alt_hand = np.zeros(n, dtype=np.int64)
    if host_rows.size:
        h = slice(ng, n)
        cpu = np.flatnonzero(kind == int(EventKind.CPU_OP))
        both = np.concatenate([host_rows, cpu])
        tid_dense, _ = group_codes(iter((c["rank"][both], c["pid"][both], c["tid"][both])))
        tid_dense = np.asarray(tid_dense, dtype=np.int64)
        thread[h] = tid_dense[: host_rows.size]
        cpu_thread = tid_dense[host_rows.size :]
        hp = _prev_in_group([thread[h]], start[h])
        hp_node = np.where(hp >= 0, ng + hp, -1)
        hp_end = np.where(hp >= 0, end[np.maximum(hp_node, 0)], 0)
        pred[h] = hp_node
        hand[h] = np.minimum(hp_end, start[h])
        edge[h] = np.where(hp >= 0, HOST, NONE)
        alt_pred[h] = hp_node
        alt_hand[h] = np.minimum(hp_end, start[h])
        _other_threads(rank, start, end, thread, cpu_thread, c["start"][cpu], pred, hand, edge, ng, n)
        blocking = np.flatnonzero((flags[host_rows] & Flag.BLOCKING) != 0)
        if blocking.size and ng:
            b_nodes = ng + blocking
            gw = _latest_end_before(rank[g], end[g], rank[b_nodes], end[b_nodes])
            waited = (gw >= 0) & (end[np.maximum(gw, 0)] > start[b_nodes])
            w = b_nodes[waited]
            pred[w] = gw[waited]
            hand[w] = end[gw[waited]]
            edge[w] = SYNC
    # a hand-over never falls after the node starts, except a sync's, which lies inside the call
    hand = np.where(edge == SYNC, np.minimum(np.maximum(hand, start), end), np.minimum(hand, start))

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
    host_order, host_pos, run_first = _host_runs(thread, start, pred, hand, edge, last_node, ng, n)
    if n < 2**31 - 1:  # node indices as int32: half the memory of the graph's index columns
        pred, alt_pred, last_node, thread, host_order, host_pos, run_first = (
            x.astype(np.int32) for x in (pred, alt_pred, last_node, thread, host_order, host_pos, run_first)
        )
    return _Graph(
        rows, is_gpu, rank, start, end, comm, pred, hand, edge, last_start, last_node, thread, alt_pred, alt_hand,
        host_order, host_pos, run_first,
    )


def _host_runs(
    thread: np.ndarray, start: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray,
    last_node: np.ndarray, ng: int, n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        cont[1:] = (
            (edge[cur] == HOST) & (pred[cur] == prev) & (last_node[cur] < 0) & (last_node[prev] < 0)
            & (hand[cur] >= np.where(edge[prev] == HOST, hand[prev], np.iinfo(np.int64).min))
        )
    idx = np.arange(order.size)
    run_first = np.maximum.accumulate(np.where(cont, 0, idx)) if order.size else idx
    return order, pos, run_first


def _other_threads(
    rank: np.ndarray, start: np.ndarray, end: np.ndarray, thread: np.ndarray, cpu_thread: np.ndarray,
    cpu_start: np.ndarray, pred: np.ndarray, hand: np.ndarray, edge: np.ndarray, ng: int, n: int,
) -> None:
    """A host call whose thread recorded no CPU op since its previous call, while another thread of its
    rank finished a call (or a collective's range) later than that: the thread waited for that one (a
    `backward()` waiting for the autograd thread, DDP waiting for its communication thread). Its
    predecessor becomes that call (edge "host"). In place."""
    h = np.arange(ng, n)
    other = _latest_end_before(rank[h], end[h], rank[h], start[h])
    ok = other >= 0
    o = ng + np.where(ok, other, 0)
    own_from = np.where(pred[h] >= 0, hand[h], np.iinfo(np.int64).min // 4)
    later = ok & (thread[o] != thread[h]) & (end[o] > own_from)
    if not later.any():
        return
    cand, src = h[later], o[later]
    busy = np.zeros(cand.size, dtype=bool)
    if cpu_start.size:
        # CPU ops of the waiting thread starting between its own hand-over and the other call's end:
        # one sorted key per op, thread in the high bits, time (from the earliest) in the low 44
        t0 = int(min(start.min(), cpu_start.min()))
        span = 1 << 44
        key = np.sort(cpu_thread * span + np.clip(cpu_start - t0, 0, span - 1))
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


# ---- the walk ----------------------------------------------------------------------------------------


def _heads(gr: _Graph, windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[int, np.ndarray]:
    """Per rank, the node that reaches furthest into each window (-1 none): the GPU operation that reaches
    its end when there is one (a step's GPU window ends where its last GPU operation ends: a host call
    still running then, a sync returning or the next step's launches, does not set the step's length),
    else any node."""
    out = {}
    every = np.lexsort((gr.start, gr.rank))
    gpu = every[gr.is_gpu[every]]
    r_every, r_gpu = gr.rank[every], gr.rank[gpu]
    for r, (a, b) in windows.items():
        heads = _reach(gr, every[np.searchsorted(r_every, r, "left") : np.searchsorted(r_every, r, "right")], a, b)
        on_gpu = _reach(gr, gpu[np.searchsorted(r_gpu, r, "left") : np.searchsorted(r_gpu, r, "right")], a, b)
        ok = (on_gpu >= 0) & (gr.end[np.maximum(on_gpu, 0)] >= b)
        out[r] = np.where(ok, on_gpu, heads)
    return out


def _reach(gr: _Graph, mine: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a, b), the node of `mine` (nodes in start order) that started before b and ends last,
    the latest-starting one among equals; -1 when none ends after a."""
    heads = np.full(a.size, -1, dtype=np.int64)
    if mine.size:
        ends = gr.end[mine]
        runmax = np.maximum.accumulate(ends)
        pos = np.arange(mine.size)
        arg = np.maximum.accumulate(np.where(ends == runmax, pos, 0))
        i = np.searchsorted(gr.start[mine], b, "left") - 1
        ok = (i >= 0) & (runmax[np.maximum(i, 0)] > a)
        heads[ok] = mine[arg[i[ok]]]
    return heads


def _walk(lists: tuple, runs: tuple, head: int, w0: int, w1: int, across: bool, chain: int, acc: list, rng: list) -> None:
    """Follow predecessors from `head` back to the window start; append (chain, node, edge, hand-over,
    out) of every node of the path to `acc`, and pass a run of host calls (`_host_runs`) in one step,
    recorded in `rng` as (chain, first position, last position, out). One Python step per node of the
    path outside such runs: kept lean."""
    pred, hand, edge, end, last_start, last_node, alt_pred, alt_hand = lists
    host_pos, run_first, hand_sorted, host_order = runs
    cs, ys, es, hs, outs = (x.append for x in acc)
    y = head
    out = min(end[y], w1)
    same: set[int] = set()  # nodes passed without time going back (a cycle of zero-length hand-overs)
    while True:
        e = edge[y]
        if e == HOST and not (across and last_node[y] >= 0):
            j = host_pos[y]
            r0 = run_first[j]
            if r0 < j - 1:
                # the run's calls up to where a hand-over reaches the window start: hand_sorted[i + 1] is
                # the hand-over that leaves position i + 1 for position i
                lo, hi = r0, j
                while lo < hi:  # first i in [r0, j) with hand_sorted[i + 1] > w0 (non-decreasing)
                    mid = (lo + hi) // 2
                    if hand_sorted[mid + 1] > w0:
                        hi = mid
                    else:
                        lo = mid + 1
                if lo < j - 1:
                    rng.append((chain, lo + 1, j, out))
                    y = host_order[lo]
                    out = hand_sorted[lo + 1]
                    same = set()
                    continue
        if across and last_node[y] >= 0:
            e, p, h = COLL, last_node[y], last_start[y]
        else:
            p = pred[y]
            h = hand[y]
            if e == SYNC and h >= out:  # the wait lies after the time the path needs: the call's own time
                p = alt_pred[y]
                h = alt_hand[y]
                e = HOST if p >= 0 else NONE
        if h >= out:
            h = out
            if p in same:
                p = -1
            same.add(y)
        elif same:
            same = set()
        cs(chain)
        ys(y)
        es(e)
        outs(out)
        if p < 0 or h <= w0:
            hs(w0)
            return
        hs(h)
        y = p
        out = h


def _expand_runs(gr: _Graph, rng: list) -> list[np.ndarray]:
    """The nodes of the runs `_walk` passed in one step: (chain, node, edge, hand-over, out) each."""
    if not rng:
        z = np.zeros(0, dtype=np.int64)
        return [z, z, z, z, z]
    r = np.asarray(rng, dtype=np.int64)
    ch, lo, hi, out_hi = r[:, 0], r[:, 1], r[:, 2], r[:, 3]
    cnt = hi - lo + 1
    offs = np.repeat(np.cumsum(cnt) - cnt, cnt)
    pos = np.repeat(lo, cnt) + (np.arange(cnt.sum()) - offs)
    node = gr.host_order[pos]
    h = gr.hand[node]
    last = pos == np.repeat(hi, cnt)
    nxt = gr.host_order[np.minimum(pos + 1, gr.host_order.size - 1)]
    out = np.where(last, np.repeat(out_hi, cnt), gr.hand[nxt])
    return [np.repeat(ch, cnt), node, np.full(node.size, HOST, dtype=np.int64), h, out]


def _host_activity(tl: Timeline, rank: int) -> tuple[np.ndarray, bool]:
    """Rows of a rank's recorded CPU activity: CPU ops and API calls (Kineto), or OS calls (nsys, where a
    thread's time outside OS calls counts as host work); and which of the two. From the per-(rank, kind)
    rows the analysis already grouped (`analyses.rows`), not a pass over every event."""
    from tracelab.analyses.core.rows import rows_of

    kind_cpu = int(EventKind.CPU_OP)
    # Kineto records CPU ops: a host gap they do not cover is idle; nsys records none (its OS calls say
    # where a thread waited)
    has_cpu_ops = tl.meta.format == "kineto" or rows_of(tl, rank, (kind_cpu,)).size > 0
    if has_cpu_ops:
        return rows_of(tl, rank, (kind_cpu, *_API_KINDS)), True
    os_id = [i for i, s in enumerate(tl.strings) if s == OS_CALL_CATEGORY]
    other = rows_of(tl, rank, (int(EventKind.OTHER),))
    return (other[np.isin(tl.cols["category"][other], os_id)] if os_id else other[:0]), False


def critical_path(
    tl: Timeline,
    windows: dict[int, tuple[np.ndarray, np.ndarray]],
    collectives: Any | None = None,
) -> CriticalPath:
    """The critical path of every step window of every rank, and across ranks (module docstring)."""
    if not windows:
        return CriticalPath((), (), ("no steps: the critical path is found per step",))
    gr = _build(tl, collectives)
    if not gr.row.size:
        return CriticalPath((), (), ("no GPU work or host launches: no critical path",))
    # read one element at a time through memoryviews: Python ints without a list of the whole column
    lists = tuple(
        memoryview(np.ascontiguousarray(getattr(gr, k)))
        for k in ("pred", "hand", "edge", "end", "last_start", "last_node", "alt_pred", "alt_hand")
    )
    heads = _heads(gr, windows)
    chains: list[tuple[int, int, int, int, bool, int]] = []  # rank, step, w0, w1, across, head
    for r in sorted(windows):
        a, b = windows[r]
        for i, (w0, w1, hd) in enumerate(zip(a.tolist(), b.tolist(), heads[r].tolist())):
            chains.append((r, i, w0, w1, False, hd))
    if len(windows) > 1 and gr.last_node.max(initial=-1) >= 0:
        for i in range(min(v[0].size for v in windows.values())):  # per step: the rank whose step ends last
            w1, r = max((int(windows[r][1][i]), r) for r in windows)
            chains.append((r, i, int(windows[r][0][i]), w1, True, int(heads[r][i])))
    hand_sorted = gr.hand[gr.host_order]
    runs = tuple(memoryview(np.ascontiguousarray(x)) for x in (gr.host_pos, gr.run_first, hand_sorted, gr.host_order))
    acc: list[list] = [[], [], [], [], []]
    rng: list[tuple[int, int, int, int]] = []
    for k, (_r, _i, w0, w1, across, hd) in enumerate(chains):
        if hd >= 0:
            _walk(lists, runs, hd, w0, w1, across, k, acc, rng)
    walked = [np.asarray(x, dtype=np.int64) for x in acc]
    more = _expand_runs(gr, rng)
    paths = _segments(tl, gr, chains, [np.concatenate([a, b]) for a, b in zip(walked, more)])
    steps = tuple(p for p in paths if not p.across_ranks)
    across = tuple(p for p in paths if p.across_ranks)
    return CriticalPath(steps, across)


def _segments(tl: Timeline, gr: _Graph, chains: list, acc: list[np.ndarray]) -> list[StepPath]:
    """The walked nodes -> each chain's segments, with numpy (module docstring: bodies and links)."""
    chain, y, e, h, out = acc
    nch = len(chains)
    w0 = np.array([c[2] for c in chains], dtype=np.int64)
    w1 = np.array([c[3] for c in chains], dtype=np.int64)
    across = np.array([c[4] for c in chains], dtype=bool)
    head_rank = np.array([c[0] for c in chains], dtype=np.int64)
    names = tl.cols["name"]
    start, is_gpu, comm, rank = gr.start[y], gr.is_gpu[y], gr.comm[y], gr.rank[y]
    name = names[gr.row[y]].astype(np.int64)
    coll = is_gpu | comm
    b0 = np.where(coll & (e == COLL), np.maximum(start, h), np.where(~coll & (e == SYNC), h, start))
    b0 = np.minimum(b0, out)
    body_cat = np.where(coll, np.where(comm, CAT["comm"], CAT["compute"]), np.where(e == SYNC, CAT["sync"], CAT["host"]))
    # per-rank paths: a collective call that waited for the last rank waits, then transfers
    waited = comm & ~across[chain] & (gr.last_node[y] >= 0)
    ls = np.where(waited, np.clip(gr.last_start[y], b0, out), b0)
    link_cat = np.full(y.size, CAT["idle"], dtype=np.int64)
    link_cat[e == LAUNCH] = CAT["host"]
    link_cat[(e == HOST) | ((e == NONE) & ~coll)] = _HOSTGAP
    # the tail of each chain: after its head, up to the window's end
    heads = np.array([c[5] for c in chains], dtype=np.int64)
    tail_chain = np.flatnonzero(heads >= 0)
    tail_a = np.minimum(gr.end[heads[tail_chain]], w1[tail_chain])
    empty = np.flatnonzero(heads < 0)  # no node in the window
    parts = [
        (chain, body_cat, rank, ls, out, name),  # body (or its transfer part)
        (chain, np.full(y.size, CAT["wait"]), rank, b0, ls, name),  # the wait before the last arrival
        (chain, link_cat, rank, h, b0, np.full(y.size, -1)),  # the link to the predecessor
        (tail_chain, np.full(tail_chain.size, _HOSTGAP), gr.rank[heads[tail_chain]], tail_a, w1[tail_chain],
         np.full(tail_chain.size, -1)),
        (empty, np.full(empty.size, _HOSTGAP), head_rank[empty], w0[empty], w1[empty], np.full(empty.size, -1)),
    ]
    ch, cat, rk, a, b, nm = (np.concatenate([np.asarray(p[k]) for p in parts]).astype(np.int64) for k in range(6))
    a = np.maximum(a, w0[ch])
    keep = b > a
    ch, cat, rk, a, b, nm = ch[keep], cat[keep], rk[keep], a[keep], b[keep], nm[keep]
    ch, cat, rk, a, b, nm = _resolve_host_gaps(tl, ch, cat, rk, a, b, nm)
    order = np.lexsort((a, ch))
    ch, cat, rk, a, b, nm = ch[order], cat[order], rk[order], a[order], b[order], nm[order]
    top = _top_names(tl, ch, cat, nm, b - a, nch)
    # merge neighbours of one category on one rank; a merged segment is named after its longest event
    n = ch.size
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (ch[1:] != ch[:-1]) | (cat[1:] != cat[:-1]) | (rk[1:] != rk[:-1]) | (a[1:] != b[:-1])
    grp = np.cumsum(new) - 1
    g_first = np.flatnonzero(new)
    g_last = np.r_[g_first[1:] - 1, n - 1] if n else g_first
    ln = np.where(nm >= 0, b - a, -1)
    best = np.lexsort((-ln, grp))
    best_first = best[np.r_[0, np.flatnonzero(np.diff(grp[best])) + 1]] if n else best
    m_ch, m_cat, m_rk = ch[g_first], cat[g_first], rk[g_first]
    m_a, m_b, m_nm = a[g_first], b[g_last], nm[best_first]
    cut = np.searchsorted(m_ch, np.arange(nch + 1))
    strings = tl.strings
    out_paths = []
    for k, (r, i, c0, c1, acr, _hd) in enumerate(chains):
        s_, e_ = cut[k], cut[k + 1]
        out_paths.append(
            StepPath(
                r, i, c0, c1, acr,
                m_cat[s_:e_].astype(np.int8), m_rk[s_:e_].astype(np.int32), m_a[s_:e_], m_b[s_:e_],
                m_nm[s_:e_].astype(np.int32), strings, top[k],
            )
        )
    return out_paths


def _top_names(tl: Timeline, ch: np.ndarray, cat: np.ndarray, nm: np.ndarray, ln: np.ndarray, nch: int) -> list:
    """Per chain, the time on the path per (category, event name), the 8 longest."""
    top: list[tuple] = [() for _ in range(nch)]
    sel = np.flatnonzero(nm >= 0)
    if not sel.size:
        return top
    key = (ch[sel] * (len(CATEGORIES) + 1) + cat[sel]) * (len(tl.strings) + 1) + nm[sel]
    o = np.argsort(key, kind="stable")
    ks = key[o]
    first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    uk = ks[first]
    tot = np.add.reduceat(ln[sel][o], first).astype(np.int64)
    k_nm = uk % (len(tl.strings) + 1)
    k_cat = (uk // (len(tl.strings) + 1)) % (len(CATEGORIES) + 1)
    k_ch = uk // ((len(tl.strings) + 1) * (len(CATEGORIES) + 1))
    order = np.lexsort((-tot, k_ch))
    starts = np.searchsorted(k_ch[order], np.arange(nch + 1))
    for c in sorted_unique(k_ch).tolist():  # per chain with named segments: its 8 longest
        idx = order[starts[c] : min(starts[c] + 8, starts[c + 1])]
        top[c] = tuple((CATEGORIES[int(k_cat[j])], tl.strings[int(k_nm[j])], int(tot[j])) for j in idx.tolist())
    return top


def _resolve_host_gaps(tl: Timeline, ch, cat, rk, a, b, nm) -> tuple[np.ndarray, ...]:
    """Host gaps and tails become `host` where the rank recorded CPU activity and `idle` where not
    (Kineto: CPU ops and API calls; nsys, which has no CPU ops: everything but OS calls is host work);
    the host part first (the order inside a gap is not known)."""
    gap = cat == _HOSTGAP
    if not gap.any():
        return ch, cat, rk, a, b, nm
    c = tl.cols
    ga, gb, gr_ = a[gap], b[gap], rk[gap]
    covered = np.zeros(ga.size, dtype=np.int64)
    busy = np.zeros(ga.size, dtype=np.int64)
    g_order = np.argsort(gr_, kind="stable")
    g_rs = gr_[g_order]
    for r in sorted_unique(gr_).tolist():  # the ranks with gaps (threads of a rank pooled)
        sel, has_cpu_ops = _host_activity(tl, int(r))
        us, ue = merge(c["start"][sel], c["end"][sel], assume_sorted=True)  # rows in start order
        m = g_order[np.searchsorted(g_rs, r, "left") : np.searchsorted(g_rs, r, "right")]
        covered[m] = covered_length(us, ue, ga[m], gb[m])
        busy[m] = covered[m] if has_cpu_ops else (gb[m] - ga[m]) - covered[m]
    keep = ~gap
    z = np.full(ga.size, -1, dtype=np.int64)
    cols = [
        np.concatenate([x[keep], xg, xg])
        for x, xg in ((ch, ch[gap]), (rk, rk[gap]))
    ]
    cat2 = np.concatenate([cat[keep], np.full(ga.size, CAT["host"]), np.full(ga.size, CAT["idle"])])
    a2 = np.concatenate([a[keep], ga, ga + busy])
    b2 = np.concatenate([b[keep], ga + busy, gb])
    nm2 = np.concatenate([nm[keep], z, z])
    ok = b2 > a2
    return cols[0][ok], cat2[ok], cols[1][ok], a2[ok], b2[ok], nm2[ok]


# ---- the document ------------------------------------------------------------------------------------


def critical_path_document(cp: CriticalPath) -> dict[str, Any]:
    """`critical_path` of the `analyze --json` document: `bound_by` (shares), per rank and step its
    length, own shares and segments (at most MAX_SEGMENTS, the longest, in time order, with
    `segments_total` when cut), the same per step across ranks, and notes."""

    n_paths = len(cp.steps) + len(cp.across)
    cap = max(50, min(MAX_SEGMENTS, MAX_DOC_SEGMENTS // max(n_paths, 1)))

    def step_doc(p: StepPath) -> dict[str, Any]:
        idx = np.arange(p.cat.size)
        doc: dict[str, Any] = {
            "rank": p.rank,
            "step": p.step,
            "start_ns": p.start_ns,
            "length_ns": p.length_ns,
            "bound_by": {k: v / p.length_ns if p.length_ns else 0.0 for k, v in p.by_category().items()},
        }
        if idx.size > cap:
            idx = np.sort(np.argsort(-(p.seg_end - p.seg_start), kind="stable")[:cap])
            doc["segments_total"] = int(p.cat.size)
        s = p.strings
        doc["segments"] = [
            {"category": CATEGORIES[c], "rank": r, "start_ns": a, "end_ns": b, "name": s[n] if 0 <= n < len(s) else ""}
            for c, r, a, b, n in zip(
                p.cat[idx].tolist(),
                p.seg_rank[idx].tolist(),
                p.seg_start[idx].tolist(),
                p.seg_end[idx].tolist(),
                p.seg_name[idx].tolist(),
            )
        ]
        return doc

    return {
        "bound_by": cp.bound_by(),
        "steps": [step_doc(p) for p in cp.steps],
        "across_ranks": [step_doc(p) for p in cp.across],
        "notes": list(cp.notes),
    }


def whole_run_windows(tl: Timeline) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """One window per rank from its first to its last GPU operation or host launch / sync call (runs
    without steps)."""
    c = tl.cols
    kind, flags = c["kind"], c["flags"]
    sel = np.flatnonzero(
        np.isin(kind, _GPU_KINDS) | (np.isin(kind, _API_KINDS) & ((flags & (Flag.LAUNCH | Flag.BLOCKING)) != 0))
    )
    out = {}
    if not sel.size:
        return out
    rank = c["rank"][sel].astype(np.int64)
    ranks = sorted_unique(rank)
    code = np.searchsorted(ranks, rank)
    lo = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ranks.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, code, c["start"][sel])
    np.maximum.at(hi, code, c["end"][sel])
    for i, r in enumerate(ranks.tolist()):
        out[int(r)] = (lo[i : i + 1].copy(), hi[i : i + 1].copy())
    return out


def critical_path_for(tl: Timeline, analysis: Any, collectives: Any | None = None) -> CriticalPath:
    """The critical path of an analysis's steps, each over its GPU window (`step_windows.step_windows` of
    the step table's rows, which carry it; a step that launched no GPU work keeps its host range); a run
    without steps is one window per rank (said in a note)."""
    from tracelab.analyses.steps.windows import step_windows

    windows = step_windows(analysis.step_rows or analysis.steps)
    notes: tuple[str, ...] = ()
    if not windows:
        windows = whole_run_windows(tl)
        notes = ("no steps found: the critical path of the whole run, one window per rank",)
    cp = critical_path(tl, windows, collectives)
    return CriticalPath(cp.steps, cp.across, cp.notes + notes)
