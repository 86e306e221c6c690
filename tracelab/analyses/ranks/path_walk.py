"""The walk of the critical path (`critical_path`'s module docstring): the node that reaches furthest into
each window, and the predecessors followed back from it to the window start, one Python step per node of
the path except runs of host calls (`path_graph._host_runs`), passed in one binary search."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.ranks.path_graph import COLL, HOST, NONE, SYNC, _Graph


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
    seg, pos = expand_ranges(lo, hi + 1)
    node = gr.host_order[pos]
    nxt = gr.host_order[np.minimum(pos + 1, gr.host_order.size - 1)]
    out = np.where(pos == hi[seg], out_hi[seg], gr.hand[nxt])
    return [ch[seg], node, np.full(node.size, HOST, dtype=np.int64), gr.hand[node], out]

