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

from typing import Any

import numpy as np

from tracelab.analyses.core.intervals import expand_ranges
from tracelab.analyses.core.memo import begun, memo
from tracelab.analyses.ranks.path_graph import _API_KINDS, _GPU_KINDS, COLL, HOST, NONE, SYNC, _build, _Graph
from tracelab.analyses.ranks.path_model import CriticalPath, StepPath
from tracelab.analyses.ranks.path_segments import _segments
from tracelab.model import Flag, Timeline
from tracelab.model.grouping import sorted_unique

MAX_SEGMENTS = 400  # segments per step in the JSON document (the longest; `segments_total` says how many)
MAX_DOC_SEGMENTS = 50_000  # and in all: many ranks' steps get fewer each (at least 50)


def critical_path(tl: Timeline, windows: dict[int, tuple[np.ndarray, np.ndarray]], collectives: Any | None = None,
                  ) -> CriticalPath:
    """The critical path of every step window of every rank, and across ranks (module docstring)."""
    if not windows:
        return CriticalPath((), (), ("no steps: the critical path is found per step",))
    gr = _build(tl, collectives)
    if not gr.rows.size:
        return CriticalPath((), (), ("no GPU work or host launches: no critical path",))
    # read one element at a time through memoryviews: Python ints without a list of the whole column
    lists = tuple(memoryview(np.ascontiguousarray(getattr(gr, k)))
                  for k in ("pred", "hand", "edge", "end", "last_start", "last_node", "alt_pred", "alt_hand"))
    heads = _heads(gr, windows)
    chains: list[tuple[int, int, int, int, bool, int]] = [  # rank, step, w0, w1, across, head
        (r, i, w0, w1, False, hd) for r in sorted(windows)
        for i, (w0, w1, hd) in enumerate(zip(windows[r][0].tolist(), windows[r][1].tolist(), heads[r].tolist()))]
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
    del acc  # the walk's Python lists and arrays go before the segments' temporaries come
    more = _expand_runs(gr, rng)
    del rng
    nodes = [np.concatenate([a, b]) for a, b in zip(walked, more)]
    del walked, more
    paths = _segments(tl, gr, chains, nodes)
    return CriticalPath(tuple(p for p in paths if not p.across_ranks), tuple(p for p in paths if p.across_ranks))


def critical_path_document(cp: CriticalPath) -> dict[str, Any]:
    """`critical_path` of the `analyze --json` document: `bound_by` (shares), per rank and step its
    length, own shares and segments (at most MAX_SEGMENTS, the longest, in time order, with
    `segments_total` when cut), the same per step across ranks, and notes."""
    n_paths = len(cp.steps) + len(cp.across)
    cap = max(50, min(MAX_SEGMENTS, MAX_DOC_SEGMENTS // max(n_paths, 1)))

    def step_doc(p: StepPath) -> dict[str, Any]:
        idx = np.arange(p.cat.size)
        doc: dict[str, Any] = {
            "rank": p.rank, "step": p.step, "start_ns": p.start_ns, "length_ns": p.length_ns,
            "bound_by": {k: v / p.length_ns if p.length_ns else 0.0 for k, v in p.by_category().items()},
        }
        if idx.size > cap:
            idx = np.sort(np.argsort(-(p.seg_end - p.seg_start), kind="stable")[:cap])
            doc["segments_total"] = int(p.cat.size)
        keys = ("category", "rank", "start_ns", "end_ns", "name")
        doc["segments"] = [dict(zip(keys, x)) for x in p.segment_rows(idx)]
        return doc

    return {"bound_by": cp.bound_by(), "steps": [step_doc(p) for p in cp.steps],
            "across_ranks": [step_doc(p) for p in cp.across], "notes": list(cp.notes)}


def whole_run_windows(tl: Timeline) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """One window per rank from its first to its last GPU operation or host launch / sync call (runs
    without steps)."""
    c = tl.cols
    kind, flags = c["kind"], c["flags"]
    sel = np.flatnonzero(np.isin(kind, _GPU_KINDS) | (np.isin(kind, _API_KINDS) & ((flags & (Flag.LAUNCH | Flag.BLOCKING)) != 0)))
    if not sel.size:
        return {}
    rank = c["rank"][sel].astype(np.int64)
    ranks = sorted_unique(rank)
    code = np.searchsorted(ranks, rank)
    lo = np.full(ranks.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ranks.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, code, c["start"][sel])
    np.maximum.at(hi, code, c["end"][sel])
    return {int(r): (lo[i : i + 1].copy(), hi[i : i + 1].copy()) for i, r in enumerate(ranks.tolist())}


def critical_path_for(tl: Timeline, analysis: Any, collectives: Any | None = None) -> CriticalPath:
    """The critical path of an analysis's steps, each over its GPU window (`step_windows.step_windows` of
    the step table's rows, which carry it; a step that launched no GPU work keeps its host range); a run
    without steps is one window per rank (said in a note). The path `start_path` began for the same
    windows is taken when there is one (a one-rank run: no collectives)."""
    from tracelab.analyses.steps.windows import step_windows

    windows = step_windows(analysis.step_rows or analysis.steps)
    notes: tuple[str, ...] = ()
    if not windows:
        windows = whole_run_windows(tl)
        notes = ("no steps found: the critical path of the whole run, one window per rank",)
    started = begun(tl, _STARTED) if collectives is None else None  # what start_path found
    same = started is not None and _same_windows(started[0], windows)
    cp = started[1] if same else critical_path(tl, windows, collectives)
    return CriticalPath(cp.steps, cp.across, cp.notes + notes)


_STARTED = ("critical path", "started")


def start_path(tl: Timeline) -> None:
    """The critical path of a one-rank timeline's steps (`find_steps`, the step table's windows), computed
    here as soon as the steps are found, for `critical_path_for` to take when its windows are the same.
    Run on a helper thread before the analysis (`api.start_extras`), with the analysis context active."""
    from tracelab.analyses.core.rows import ranks_of
    from tracelab.analyses.steps.infer import find_steps
    from tracelab.analyses.steps.table import windows_of_steps

    def path() -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], CriticalPath] | None:
        if len(ranks_of(tl)) != 1:
            return None
        windows = windows_of_steps(tl, find_steps(tl))
        return (windows, critical_path(tl, windows)) if windows else None

    memo(tl, _STARTED, path)


def _same_windows(a: dict[int, tuple[np.ndarray, np.ndarray]], b: dict[int, tuple[np.ndarray, np.ndarray]]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[r][0], b[r][0]) and np.array_equal(a[r][1], b[r][1]) for r in a)


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
