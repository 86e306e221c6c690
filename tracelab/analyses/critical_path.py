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
  of its thread (edge "host", h = that call's end).

The walk. A step's window is `comm_steps.step_windows` (the host range today; a GPU window when steps
have one). The path starts at the node of the rank that reaches furthest into the window (its end,
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

`bound_by` = each category's share of the path length. The walk itself follows one predecessor per
step on the path (a Python step per node of the path, not per event; the predecessors and hand-overs are
numpy columns); the per-rank and cross-rank paths of every step are walked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import EventKind, Flag, Timeline
from ..model.kinds import OS_CALL_CATEGORY
from .intervals import covered_length, merge

CATEGORIES = ("compute", "comm", "wait", "host", "sync", "idle")
_GPU_KINDS = (int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET))
_API_KINDS = (int(EventKind.RUNTIME), int(EventKind.DRIVER))
# edge kinds
NONE, STREAM, LAUNCH, HOST, SYNC, COLL = 0, 1, 2, 3, 4, 5
MAX_SEGMENTS = 400  # segments per step in the JSON document (the rest are merged into their neighbours)


@dataclass(frozen=True)
class Segment:
    category: str
    rank: int
    start_ns: int
    end_ns: int
    name: str = ""  # the event the time belongs to ("" for links between events)

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class StepPath:
    rank: int
    step: int
    start_ns: int
    end_ns: int
    segments: tuple[Segment, ...]
    across_ranks: bool = False  # followed collectives to the last rank to arrive
    top: tuple[tuple[str, str, int], ...] = ()  # (category, event name, ns on the path), longest first

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns

    def by_category(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for s in self.segments:
            out[s.category] += s.length_ns
        return out


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
        coll_host = np.unique(collectives.call_rows)
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
        tkeys = np.stack([c["rank"][both].astype(np.int64), c["pid"][both], c["tid"][both]], axis=1)
        _, tid_dense = np.unique(tkeys, axis=0, return_inverse=True)
        tid_dense = tid_dense.reshape(-1).astype(np.int64)
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
    return _Graph(rows, is_gpu, rank, start, end, comm, pred, hand, edge, last_start, last_node, thread, alt_pred, alt_hand)


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
    for r in np.unique(q_rank).tolist():  # per rank, vectorized inside
        lo, hi = np.searchsorted(rs, r, "left"), np.searchsorted(rs, r, "right")
        if hi == lo:
            continue
        q = np.flatnonzero(q_rank == r)
        pos = np.searchsorted(es[lo:hi], q_t[q], "right") - 1
        ok = pos >= 0
        out[q[ok]] = order[lo + pos[ok]]
    return out


# ---- the walk ----------------------------------------------------------------------------------------


def _heads(gr: _Graph, windows: dict[int, tuple[np.ndarray, np.ndarray]]) -> dict[int, np.ndarray]:
    """Per rank, the node that reaches furthest into each window (-1 none)."""
    out = {}
    order = np.lexsort((gr.start, gr.rank))
    rs = gr.rank[order]
    for r, (a, b) in windows.items():
        lo, hi = np.searchsorted(rs, r, "left"), np.searchsorted(rs, r, "right")
        mine = order[lo:hi]
        heads = np.full(a.size, -1, dtype=np.int64)
        if mine.size:
            ends = gr.end[mine]
            runmax = np.maximum.accumulate(ends)
            pos = np.arange(mine.size)
            arg = np.maximum.accumulate(np.where(ends == runmax, pos, 0))
            i = np.searchsorted(gr.start[mine], b, "left") - 1
            ok = (i >= 0) & (runmax[np.maximum(i, 0)] > a)
            heads[ok] = mine[arg[i[ok]]]
        out[r] = heads
    return out


def _walk(gr: _Graph, lists: dict[str, list], head: int, w0: int, w1: int, across: bool) -> list[tuple]:
    """The path of one window: (category, rank, start, end, node or -1) from the window's end back."""
    pred, hand, edge = lists["pred"], lists["hand"], lists["edge"]
    start, end, rank, is_gpu, comm = lists["start"], lists["end"], lists["rank"], lists["is_gpu"], lists["comm"]
    last_start, last_node = lists["last_start"], lists["last_node"]
    alt_pred, alt_hand = lists["alt_pred"], lists["alt_hand"]
    segs: list[tuple] = []
    y = head
    out = min(end[y], w1)
    if out < w1:  # after the last node: host time or nothing
        segs.append(("tail", rank[y], out, w1, -1))
    seen = set()
    while y >= 0:
        seen.add(y)
        e = edge[y]
        r = rank[y]
        if across and last_node[y] >= 0:
            e, p, h = COLL, last_node[y], last_start[y]
        else:
            p, h = pred[y], hand[y]
            if e == SYNC and h >= out:  # the wait lies after the time the path needs: the host's own call
                e, p, h = HOST, alt_pred[y], alt_hand[y]
                if p < 0:
                    e = NONE
        h = min(h, out)
        if p in seen:  # a cycle of zero-length hand-overs: nothing before it explains more
            p = -1
        # the node's own time on the path: [b0, out]
        if is_gpu[y] or comm[y]:  # GPU work, or a collective's host range (gloo)
            b0 = max(start[y], h) if e == COLL else start[y]
            if comm[y] and not across and last_node[y] >= 0:
                ls = min(max(last_start[y], b0), out)
                _add(segs, "comm", r, ls, out, y, w0)
                _add(segs, "wait", r, b0, ls, y, w0)
            else:
                _add(segs, "comm" if comm[y] else "compute", r, b0, out, y, w0)
        elif e == SYNC:
            b0 = h
            _add(segs, "sync", r, b0, out, y, w0)
        else:
            b0 = start[y]
            _add(segs, "host", r, b0, out, y, w0)
        if p < 0 or h <= w0:
            link_end = b0
            _add(segs, _link_category(e, is_gpu[y]), r, w0, link_end, -1, w0, link=e)
            break
        _add(segs, _link_category(e, is_gpu[y]), r, h, b0, -1, w0, link=e)
        y, out = p, h
    segs.reverse()
    return segs


def _link_category(e: int, gpu: bool) -> str:
    if e == LAUNCH:
        return "host"
    if e == HOST:
        return "hostgap"  # host time between calls: host or idle by what the thread recorded (below)
    if e == STREAM:
        return "idle"
    if e == NONE:
        return "hostgap" if not gpu else "idle"
    return "idle"


def _add(segs: list, cat: str, r: int, a: int, b: int, node: int, w0: int, link: int = -1) -> None:
    a = max(a, w0)
    if b > a:
        segs.append((cat, r, a, b, node))


def _host_activity(tl: Timeline) -> tuple[np.ndarray, bool, None]:
    """Recorded CPU activity per host thread: CPU ops and API calls (Kineto), or OS calls (nsys, where a
    thread's time outside OS calls counts as host work)."""
    c = tl.cols
    kind = c["kind"]
    cpu = np.flatnonzero(np.isin(kind, (int(EventKind.CPU_OP), *_API_KINDS)))
    # Kineto records CPU ops: a host gap they do not cover is idle; nsys records none (its OS calls say
    # where a thread waited)
    has_cpu_ops = tl.meta.format == "kineto" or bool((kind == int(EventKind.CPU_OP)).any())
    if not has_cpu_ops:
        os_id = [i for i, s in enumerate(tl.strings) if s == OS_CALL_CATEGORY]
        cpu = np.flatnonzero((kind == int(EventKind.OTHER)) & np.isin(c["category"], os_id)) if os_id else cpu[:0]
    return cpu, has_cpu_ops, None


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
    lists = {
        k: getattr(gr, k).tolist()
        for k in (
            "pred", "hand", "edge", "start", "end", "rank", "is_gpu", "comm", "last_start", "last_node", "alt_pred",
            "alt_hand",
        )
    }
    heads = _heads(gr, windows)
    raw: list[tuple[int, int, int, int, bool, list[tuple]]] = []
    for r in sorted(windows):
        a, b = windows[r]
        for i, (w0, w1, hd) in enumerate(zip(a.tolist(), b.tolist(), heads[r].tolist())):
            if hd < 0:
                raw.append((r, i, w0, w1, False, [("hostgap", r, w0, w1, -1)]))
                continue
            raw.append((r, i, w0, w1, False, _walk(gr, lists, hd, w0, w1, across=False)))
    across_raw = []
    multi = len(windows) > 1 and gr.last_node.max(initial=-1) >= 0
    if multi:
        n_steps = min(v[0].size for v in windows.values())
        for i in range(n_steps):  # per step: from the rank whose step ends last
            cands = [(int(windows[r][1][i]), r) for r in windows]
            w1, r = max(cands)
            w0 = int(windows[r][0][i])
            hd = int(heads[r][i])
            if hd >= 0:
                across_raw.append((r, i, w0, w1, True, _walk(gr, lists, hd, w0, w1, across=True)))
    _resolve_host_gaps(tl, gr, raw + across_raw)
    names = tl.cols["name"]
    steps = tuple(_step_path(tl, gr, names, x) for x in raw)
    across = tuple(_step_path(tl, gr, names, x) for x in across_raw)
    return CriticalPath(steps, across)


def _resolve_host_gaps(tl: Timeline, gr: _Graph, paths: list) -> None:
    """Host gaps and tails become `host` where the thread recorded CPU activity and `idle` where not
    (Kineto: CPU ops and API calls; nsys, which has no CPU ops: everything but OS calls is host work)."""
    gaps = [(pi, si, s) for pi, p in enumerate(paths) for si, s in enumerate(p[5]) if s[0] in ("hostgap", "tail")]
    if not gaps:
        return
    act, has_cpu_ops, _ = _host_activity(tl)
    c = tl.cols
    a_rank = c["rank"][act].astype(np.int64)
    by_rank: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in sorted({g[2][1] for g in gaps}):  # the ranks with gaps (threads of a rank pooled)
        sel = act[a_rank == r]
        by_rank[r] = merge(c["start"][sel], c["end"][sel])
    ga = np.array([g[2][2] for g in gaps], dtype=np.int64)
    gb = np.array([g[2][3] for g in gaps], dtype=np.int64)
    gr_ = np.array([g[2][1] for g in gaps], dtype=np.int64)
    covered = np.zeros(len(gaps), dtype=np.int64)
    for r, (us, ue) in by_rank.items():
        m = gr_ == r
        covered[m] = covered_length(us, ue, ga[m], gb[m])
    for k, (pi, si, s) in enumerate(gaps):
        busy = int(covered[k]) if has_cpu_ops else int(gb[k] - ga[k] - covered[k])
        idle = int(gb[k] - ga[k]) - busy
        # split: host part first, then idle (the order inside a gap is not known)
        parts = []
        if busy > 0:
            parts.append(("host", s[1], s[2], s[2] + busy, -1))
        if idle > 0:
            parts.append(("idle", s[1], s[2] + busy, s[3], -1))
        paths[pi][5][si] = parts
    for p in paths:
        flat = []
        for s in p[5]:
            if isinstance(s, list):
                flat.extend(s)
            else:
                flat.append(s)
        p[5][:] = flat


def _step_path(tl: Timeline, gr: _Graph, names: np.ndarray, x: tuple) -> StepPath:
    """Consecutive segments of one category on one rank merged; a merged segment is named after its
    longest event. `top`: the time on the path per (category, event name), longest first."""
    r, i, w0, w1, across, segs = x
    merged: list[list] = []
    named: dict[tuple[str, int], int] = {}
    for cat, rr, a, b, node in segs:
        if node >= 0:
            nid = int(names[gr.row[node]])
            named[(cat, nid)] = named.get((cat, nid), 0) + (b - a)
        if merged and merged[-1][0] == cat and merged[-1][1] == rr and merged[-1][3] == a:
            m = merged[-1]
            m[3] = b
            if node >= 0 and b - a > m[5]:
                m[4], m[5] = node, b - a
            continue
        merged.append([cat, rr, a, b, node, (b - a) if node >= 0 else -1])
    out = tuple(
        Segment(cat, rr, a, b, tl.name(int(names[gr.row[node]])) if node >= 0 else "")
        for cat, rr, a, b, node, _ in merged
    )
    top = tuple((cat, tl.name(nid), ns) for (cat, nid), ns in sorted(named.items(), key=lambda kv: -kv[1])[:8])
    return StepPath(r, i, w0, w1, out, across, top)


# ---- the document ------------------------------------------------------------------------------------


def critical_path_document(cp: CriticalPath) -> dict[str, Any]:
    """`critical_path` of the `analyze --json` document."""

    def step_doc(p: StepPath) -> dict[str, Any]:
        segs = p.segments
        doc: dict[str, Any] = {
            "rank": p.rank,
            "step": p.step,
            "start_ns": p.start_ns,
            "length_ns": p.length_ns,
            "bound_by": {k: v / p.length_ns if p.length_ns else 0.0 for k, v in p.by_category().items()},
        }
        if len(segs) > MAX_SEGMENTS:
            keep = sorted(sorted(range(len(segs)), key=lambda j: -segs[j].length_ns)[:MAX_SEGMENTS])
            doc["segments_total"] = len(segs)
            segs = tuple(segs[j] for j in keep)
        doc["segments"] = [
            {"category": s.category, "rank": s.rank, "start_ns": s.start_ns, "end_ns": s.end_ns, "name": s.name}
            for s in segs
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
    rank = c["rank"][sel]
    for r in np.unique(rank).tolist():
        m = sel[rank == r]
        out[int(r)] = (np.array([c["start"][m].min()], dtype=np.int64), np.array([c["end"][m].max()], dtype=np.int64))
    return out


def critical_path_for(tl: Timeline, analysis: Any, collectives: Any | None = None) -> CriticalPath:
    """The critical path of an analysis's steps (`comm_steps.step_windows`); a run without steps is one
    window per rank (said in a note)."""
    from .comm_steps import step_windows

    windows = step_windows(analysis.steps)
    notes: tuple[str, ...] = ()
    if not windows:
        windows = whole_run_windows(tl)
        notes = ("no steps found: the critical path of the whole run, one window per rank",)
    cp = critical_path(tl, windows, collectives)
    return CriticalPath(cp.steps, cp.across, cp.notes + notes)
