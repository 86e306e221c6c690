"""The walked nodes of the critical path -> each chain's segments (`critical_path`'s module docstring:
bodies and links), their categories (host gaps resolved by what the rank recorded) and the longest named
events, with numpy."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.intervals import bounded_blocks, covered_length, merge
from tracelab.analyses.ranks.path_graph import _API_KINDS, COLL, HOST, LAUNCH, NONE, SYNC, _Graph
from tracelab.analyses.ranks.path_model import _HOSTGAP, CAT, CATEGORIES, StepPath
from tracelab.model import EventKind, Timeline
from tracelab.model.grouping import sorted_unique
from tracelab.model.kinds import OS_CALL_CATEGORY


def _host_activity(tl: Timeline, rank: int) -> tuple[list[np.ndarray], bool]:
    """Rows of a rank's recorded CPU activity, per kind (ascending): CPU ops and API calls (Kineto), or OS
    calls (nsys, where a thread's time outside OS calls counts as host work); and which of the two. From
    the per-(rank, kind) rows the analysis already grouped (`analyses.rows`), not a pass over every event
    (and not their merge into one array: `_merged` takes them a block at a time)."""
    from tracelab.analyses.core.rows import rows_of

    kind_cpu = int(EventKind.CPU_OP)
    # Kineto records CPU ops: a host gap they do not cover is idle; nsys records none (its OS calls say
    # where a thread waited)
    has_cpu_ops = tl.meta.format == "kineto" or rows_of(tl, rank, (kind_cpu,)).size > 0
    if has_cpu_ops:
        return [rows_of(tl, rank, (k,)) for k in (kind_cpu, *_API_KINDS)], True
    os_id = [i for i, s in enumerate(tl.strings) if s == OS_CALL_CATEGORY]
    other = rows_of(tl, rank, (int(EventKind.OTHER),))
    return [other[np.isin(tl.cols["category"][other], os_id)] if os_id else other[:0]], False


SEGMENT_BLOCK = 1 << 16  # walked nodes turned into segments at once (chains are independent)
MERGE_BLOCK = 1 << 18  # rows of a rank's CPU activity merged at once


def _segments(tl: Timeline, gr: _Graph, chains: list, acc: list[np.ndarray]) -> list[StepPath]:
    """The walked nodes -> each chain's segments, with numpy (module docstring: bodies and links), for
    blocks of whole chains of at most SEGMENT_BLOCK nodes (or one longer chain) at a time: a chain's
    segments depend on its own nodes only, so the blocks' temporaries stay bounded on big traces. Within
    a chain the nodes keep their order in `acc`."""
    per_chain = np.bincount(acc[0], minlength=len(chains)) if acc[0].size else np.zeros(len(chains), np.int64)
    blocks = bounded_blocks(per_chain, SEGMENT_BLOCK)  # whole chains, at most SEGMENT_BLOCK nodes each
    host: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}  # per rank: its merged CPU activity
    if len(blocks) <= 1:
        return _block_segments(tl, gr, chains, acc, host)
    order = np.argsort(acc[0], kind="stable")  # by chain, acc order within one
    cut = np.concatenate([[0], np.cumsum(per_chain)])
    out: list[StepPath] = []
    for k0, k1 in blocks:
        sel = order[cut[k0] : cut[k1]]
        part = [x[sel] for x in acc]
        part[0] -= k0
        out += _block_segments(tl, gr, chains[k0:k1], part, host)
    return out


def _block_segments(tl: Timeline, gr: _Graph, chains: list, acc: list[np.ndarray],
                    host: dict[int, tuple[np.ndarray, np.ndarray, bool]]) -> list[StepPath]:
    """`_segments` of some chains (acc's chain column numbers them from 0)."""
    chain, y, e, h, out = acc
    nch = len(chains)
    w0 = np.array([c[2] for c in chains], dtype=np.int64)
    w1 = np.array([c[3] for c in chains], dtype=np.int64)
    across = np.array([c[4] for c in chains], dtype=bool)
    head_rank = np.array([c[0] for c in chains], dtype=np.int64)
    names = tl.cols["name"]
    start, is_gpu, comm, rank = gr.start[y], gr.is_gpu[y], gr.comm[y], gr.rank[y]
    name = names[gr.rows[y]].astype(np.int64)
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
    ch, cat, rk, a, b, nm = _resolve_host_gaps(tl, ch, cat, rk, a, b, nm, host)
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
        out_paths.append(StepPath(r, i, c0, c1, acr, m_cat[s_:e_].astype(np.int8), m_rk[s_:e_].astype(np.int32),
                                  m_a[s_:e_], m_b[s_:e_], m_nm[s_:e_].astype(np.int32), strings, top[k]))
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


def _resolve_host_gaps(tl: Timeline, ch, cat, rk, a, b, nm, host: dict | None = None) -> tuple[np.ndarray, ...]:
    """Host gaps and tails become `host` where the rank recorded CPU activity and `idle` where not
    (Kineto: CPU ops and API calls; nsys, which has no CPU ops: everything but OS calls is host work);
    the host part first (the order inside a gap is not known). `host` keeps each rank's merged activity
    for the next call."""
    gap = cat == _HOSTGAP
    if not gap.any():
        return ch, cat, rk, a, b, nm
    c = tl.cols
    ga, gb, gr_ = a[gap], b[gap], rk[gap]
    covered = np.zeros(ga.size, dtype=np.int64)
    busy = np.zeros(ga.size, dtype=np.int64)
    g_order = np.argsort(gr_, kind="stable")
    g_rs = gr_[g_order]
    host = {} if host is None else host
    for r in sorted_unique(gr_).tolist():  # the ranks with gaps (threads of a rank pooled)
        if r not in host:
            sel, has_cpu_ops = _host_activity(tl, int(r))
            host[r] = (*_merged(c["start"], c["end"], sel), has_cpu_ops)
        us, ue, has_cpu_ops = host[r]
        m = g_order[np.searchsorted(g_rs, r, "left") : np.searchsorted(g_rs, r, "right")]
        covered[m] = covered_length(us, ue, ga[m], gb[m])
        busy[m] = covered[m] if has_cpu_ops else (gb[m] - ga[m]) - covered[m]
    keep = ~gap
    z = np.full(ga.size, -1, dtype=np.int64)
    cols = [np.concatenate([x[keep], xg, xg]) for x, xg in ((ch, ch[gap]), (rk, rk[gap]))]
    cat2 = np.concatenate([cat[keep], np.full(ga.size, CAT["host"]), np.full(ga.size, CAT["idle"])])
    a2 = np.concatenate([a[keep], ga, ga + busy])
    b2 = np.concatenate([b[keep], ga + busy, gb])
    nm2 = np.concatenate([nm[keep], z, z])
    ok = b2 > a2
    return cols[0][ok], cat2[ok], cols[1][ok], a2[ok], b2[ok], nm2[ok]


def _merged(start: np.ndarray, end: np.ndarray, sels: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals of the rows of `sels` (each ascending, so in start order), a block of
    timeline positions at a time (about MERGE_BLOCK rows of the largest): the union of the blocks' unions
    is the same disjoint intervals, without temporaries of every row."""
    sels = [x for x in sels if x.size]
    if len(sels) <= 1 and sum(x.size for x in sels) <= MERGE_BLOCK:
        rows = sels[0] if sels else np.zeros(0, dtype=np.int64)
        return merge(start[rows], end[rows], assume_sorted=True)
    cuts = max(sels, key=len)[MERGE_BLOCK::MERGE_BLOCK]  # the positions where blocks begin
    at = [np.concatenate([[0], np.searchsorted(x, cuts), [x.size]]) for x in sels]
    parts = []
    for j in range(cuts.size + 1):
        rows = np.concatenate([x[k[j] : k[j + 1]] for x, k in zip(sels, at)])
        rows.sort()
        parts.append(merge(start[rows], end[rows], assume_sorted=True))
    return merge(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), assume_sorted=True)
