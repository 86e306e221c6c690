"""Idle gaps on each device and their host-side causes.

A gap is a maximal interval inside a device's span with no GPU activity (kernel, memcpy, memset),
at least `gap_threshold_ns` long. Its cause is read from the host side of the same rank, in this
order (the first that applies wins):

1. dependency_wait — the next GPU operation (the one that ends the gap) had already been launched
   when the gap began (its launch call, found by correlation id, had returned): work was queued but
   waited on an event, another stream or a graph dependency. Evidence names the launch and the last
   cudaStreamWaitEvent (or profiler "wait event" record) before it, when there is one.
2. host_sync — the host was blocked waiting for the GPU: a blocking call (stream / device / event
   synchronize, a synchronous memcpy, a profiler sync record, or a device-to-host memcpy into
   pageable memory, which blocks like `.item()`) either covers at least half of the gap, or was in
   progress when the gap began (so the queue ran dry while the host waited, and nothing new could be
   launched until it returned).
3. no_work — CUDA API calls and CPU ops of the rank cover less than 10% of the time from the gap's
   start to the next launch: the host recorded no activity (Python work, data loading, sleep).
4. launch_latency — the next operation's launch call was issued (or still running) only after the
   gap began: the host was busy and launched too late. Evidence names the outermost CPU op the
   launching thread was in halfway through (when the trace has CPU ops).
5. unknown — nothing above applies (e.g. the next operation has no launch in the trace).

Gaps are returned in time order (rank, device, start); renderers sort them by duration if they want.
All per-gap work is vectorized (searchsorted over sorted host intervals); only the evidence strings
are formatted one per gap.
"""

from __future__ import annotations

import gc
import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd

from ..model import CopyKind, EventKind, Flag, MemKind, SyncKind, Timeline
from .devices import DeviceRows, device_rows
from .intervals import covered_length, merge, running_max_index
from .results import Gap
from .units import fmt_rel_many

CLOCK_TOLERANCE_NS = 2_000  # host and GPU timestamps may disagree by about a microsecond
HOST_SYNC_COVERAGE = 0.5
NO_WORK_COVERAGE = 0.1
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")

_I64 = np.int64


# ---- formatting ------------------------------------------------------------------------------
def _collapse(s: str, open_: str, close: str) -> str:
    """Replace every top-level open_ ... close group with open_ + '…' + close."""
    out, depth = [], 0
    for ch in s:
        if ch == open_:
            if depth == 0:
                out.append(open_ + "…")
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                out.append(close)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: str, limit: int = 70) -> str:
    """A kernel or op name short enough for one line: drops 'void ', the trailing argument list
    and, when still long, template arguments."""
    s = name.strip()
    s = s.removeprefix("void ")
    if s.endswith(")"):  # cut the trailing (matching) argument list
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                if i > 0:
                    s = s[:i]
                break
    if len(s) > limit:
        s = _collapse(s, "<", ">")
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.strip() or "?"


# ---- the host side of one rank ---------------------------------------------------------------
class HostView:
    """Sorted host-side arrays of one rank that gap causes and findings look things up in."""

    def __init__(self, timeline: Timeline, rank: int) -> None:
        ev = timeline.events
        kind = ev["kind"].to_numpy()
        on_rank = ev["rank"].to_numpy() == rank
        start = ev["start"].to_numpy()
        end = ev["end"].to_numpy()
        names = ev["name"].to_numpy()
        flags = ev["flags"].to_numpy()
        sync = ev["sync_kind"].to_numpy()
        tid = ev["tid"].to_numpy()
        corr = ev["correlation"].to_numpy()

        # host API calls (RUNTIME / DRIVER), in start order
        api = np.flatnonzero(on_rank & ((kind == int(EventKind.RUNTIME)) | (kind == int(EventKind.DRIVER))))
        self.api_rows = api
        self.api_start = start[api]
        self.api_end = end[api]
        self.api_tid = tid[api]
        self.api_name = names[api]
        self.api_flags = flags[api]
        self.api_sync = sync[api]
        api_corr = corr[api]
        has = api_corr >= 0
        order = np.argsort(api_corr[has], kind="stable")
        self._corr_sorted = api_corr[has][order]
        self._corr_pos = np.flatnonzero(has)[order]  # index into the api_* arrays

        # intervals during which the host waited for the GPU
        blocking = api[(self.api_flags & Flag.BLOCKING) != 0]
        sync_ev = np.flatnonzero(
            on_rank
            & (kind == int(EventKind.SYNC))
            & ~np.isin(sync, [int(SyncKind.STREAM_WAIT_EVENT), int(SyncKind.EVENT_QUERY)])
        )
        # a profiler sync record (Kineto cuda_sync) stands for its API call when that is in the trace:
        # the call's own classification wins (e.g. an "Event Sync" record made by cudaEventQuery)
        sync_ev = sync_ev[self.launch_index(corr[sync_ev]) < 0]
        plain = np.sort(np.concatenate([blocking, sync_ev]))
        w_start, w_end, w_name, w_tid = [start[plain]], [end[plain]], [names[plain]], [tid[plain]]
        # A device-to-host copy into pageable memory blocks the calling thread (.item(), .cpu()) from
        # the moment the copy runs until the call returns; before that the call is only launching it.
        mc = np.flatnonzero(
            on_rank
            & (kind == int(EventKind.MEMCPY))
            & (ev["copy_kind"].to_numpy() == int(CopyKind.DTOH))
            & (ev["dst_mem"].to_numpy() == int(MemKind.PAGEABLE))
        )
        if mc.size:
            li = self.launch_index(corr[mc])
            ok = li >= 0
            mc, li = mc[ok], li[ok]
            w_start.append(np.minimum(np.maximum(self.api_start[li], start[mc]), self.api_end[li]))
            w_end.append(self.api_end[li])
            w_name.append(self.api_name[li])
            w_tid.append(self.api_tid[li])
        w_s = np.concatenate(w_start)
        order = np.argsort(w_s, kind="stable")
        self.wait_start = w_s[order]
        self.wait_end = np.concatenate(w_end)[order]
        self.wait_name = np.concatenate(w_name)[order]
        self.wait_tid = np.concatenate(w_tid)[order]
        self.wait_runmax, self.wait_arg = running_max_index(self.wait_end)
        self.wait_us, self.wait_ue = merge(self.wait_start, self.wait_end, assume_sorted=True)

        # GPU-side dependencies issued from the host: cudaStreamWaitEvent calls and sync records
        sw = np.flatnonzero(
            on_rank
            & np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER), int(EventKind.SYNC)])
            & (sync == int(SyncKind.STREAM_WAIT_EVENT))
        )
        is_api = kind[sw] != int(EventKind.SYNC)
        order = np.lexsort((is_api, start[sw]))  # on ties the API call (a readable name) comes last
        self.swait_start = start[sw][order]
        self.swait_name = names[sw][order]

        # any recorded host activity: API calls and CPU ops (step annotations excluded)
        cpu = on_rank & (kind == int(EventKind.CPU_OP))
        if cpu.any():
            step_ids = [i for i, s in enumerate(timeline.strings) if STEP_NAME.match(s)]
            if step_ids:
                cpu &= ~np.isin(names, step_ids)
        act_mask = cpu.copy()
        act_mask[api] = True
        act = np.flatnonzero(act_mask)
        self.act_us, self.act_ue = merge(start[act], end[act], assume_sorted=True)

        # CPU ops per thread, for "what was the launching thread doing": sorted by (thread, start)
        ops = np.flatnonzero(cpu)
        ops = ops[np.lexsort((start[ops], tid[ops]))]
        self.op_tid = tid[ops]
        self.op_start = start[ops]
        self.op_end = end[ops]
        self.op_name = names[ops]
        # segmented running maximum of the ends (per thread): the outermost op that started by t
        self.op_reach = np.empty(ops.size, dtype=_I64)
        self.op_arg = np.empty(ops.size, dtype=_I64)
        if ops.size:
            bounds = np.flatnonzero(np.r_[True, self.op_tid[1:] != self.op_tid[:-1], True])
            for lo, hi in itertools.pairwise(bounds.tolist()):  # one per host thread
                r, g = running_max_index(self.op_end[lo:hi])
                self.op_reach[lo:hi] = r
                self.op_arg[lo:hi] = g + lo

    def op_at(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index (into the op_* arrays) of the outermost CPU op running on thread tid at time t, or -1."""
        tid = np.asarray(tid, dtype=_I64)
        t = np.asarray(t, dtype=_I64)
        out = np.full(t.shape, -1, dtype=_I64)
        if self.op_start.size == 0:
            return out
        lo = np.searchsorted(self.op_tid, tid, side="left")
        hi = np.searchsorted(self.op_tid, tid, side="right")
        for th in np.unique(tid[hi > lo]).tolist():  # one searchsorted per host thread
            q = np.flatnonzero(tid == th)
            a, b = int(lo[q[0]]), int(hi[q[0]])
            i = np.searchsorted(self.op_start[a:b], t[q], side="right") - 1
            ic = np.maximum(i, 0) + a
            hit = (i >= 0) & (self.op_reach[ic] > t[q])
            out[q[hit]] = self.op_arg[ic][hit]
        return out

    def launch_index(self, correlation: np.ndarray) -> np.ndarray:
        """Index into the api_* arrays of the call with each correlation id, or -1."""
        c = np.asarray(correlation, dtype=_I64)
        if self._corr_sorted.size == 0:
            return np.full(c.shape, -1, dtype=_I64)
        i = np.searchsorted(self._corr_sorted, c)
        i_c = np.minimum(i, self._corr_sorted.size - 1)
        ok = (c >= 0) & (self._corr_sorted[i_c] == c)
        return np.where(ok, self._corr_pos[i_c], -1)


def host_views(timeline: Timeline) -> dict[int, HostView]:
    ranks = np.unique(timeline.events["rank"].to_numpy()).tolist()
    return {int(r): HostView(timeline, int(r)) for r in ranks}


# ---- gaps ------------------------------------------------------------------------------------
def find_gaps(
    timeline: Timeline,
    threshold_ns: int = 10_000,
    rows: list[DeviceRows] | None = None,
    hosts: dict[int, HostView] | None = None,
) -> tuple[Gap, ...]:
    """All idle gaps of at least threshold_ns on every device, with cause and evidence, in time
    order per device (devices in (rank, device) order)."""
    rows = device_rows(timeline) if rows is None else rows
    hosts = host_views(timeline) if hosts is None else hosts
    out: list[Gap] = []
    with _bulk_allocation():
        for dr in rows:
            out.extend(_device_gaps(timeline, dr, hosts[dr.rank], threshold_ns))
    return tuple(out)


@contextmanager
def _bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector while hundreds of thousands of acyclic result objects are
    made (it would rescan them over and over: a third of the time on a 2M-event trace)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _device_gaps(timeline: Timeline, dr: DeviceRows, host: HostView, threshold_ns: int) -> list[Gap]:
    ev = timeline.events
    rows = dr.rows
    start = ev["start"].to_numpy()[rows]
    end = ev["end"].to_numpy()[rows]
    us, ue, first = merge(start, end, assume_sorted=True, return_index=True)
    if us.size < 2:
        return []
    a = ue[:-1]
    b = us[1:]
    keep = (b - a) >= max(int(threshold_ns), 1)
    a, b = a[keep], b[keep]
    nxt = rows[first[1:][keep]]  # the GPU op that ends each gap
    if a.size == 0:
        return []
    n = a.size
    dur = b - a

    # the launch of the next op
    li = host.launch_index(ev["correlation"].to_numpy()[nxt])
    found = li >= 0
    lic = np.maximum(li, 0)
    l_start = np.where(found, host.api_start[lic] if host.api_start.size else 0, 0)
    l_end = np.where(found, host.api_end[lic] if host.api_end.size else 0, 0)
    dep = found & (l_end <= a)

    # a wait in progress when the gap began, and wait coverage of the gap
    if host.wait_start.size:
        wi = np.searchsorted(host.wait_start, a, side="right") - 1
        wic = np.maximum(wi, 0)
        inprog = (wi >= 0) & (host.wait_runmax[wic] >= a - CLOCK_TOLERANCE_NS)
        w_inprog = host.wait_arg[wic]
        cov = covered_length(host.wait_us, host.wait_ue, a, b) / dur
        wj = np.searchsorted(host.wait_start, b, side="left") - 1
        w_cover = host.wait_arg[np.maximum(wj, 0)]
    else:
        inprog = np.zeros(n, dtype=bool)
        w_inprog = w_cover = np.zeros(n, dtype=_I64)
        cov = np.zeros(n)
    covered = cov >= HOST_SYNC_COVERAGE
    sync = covered | inprog

    # host activity from the gap's start to the next launch (or the gap's end)
    win_end = np.where(found & (l_start > a), np.minimum(l_start, b), b)
    act = covered_length(host.act_us, host.act_ue, a, win_end) / np.maximum(win_end - a, 1)
    idle_host = act < NO_WORK_COVERAGE
    late = found & (l_end > a)

    cause = np.select(
        [dep, sync, idle_host, late],
        ["dependency_wait", "host_sync", "no_work", "launch_latency"],
        default="unknown",
    )

    # last stream-wait call before each dependent launch, within a window before the gap
    if host.swait_start.size:
        si = np.searchsorted(host.swait_start, l_start, side="right") - 1
        sic = np.maximum(si, 0)
        s_ok = (si >= 0) & (host.swait_start[sic] >= a - dur - 1_000_000)
        s_time = host.swait_start[sic]
        s_name = host.swait_name[sic]
    else:
        s_ok = np.zeros(n, dtype=bool)
        s_time = s_name = np.zeros(n, dtype=_I64)

    names = timeline.strings
    evidence = _evidence(
        names,
        cause,
        a,
        b,
        ev["kind"].to_numpy()[nxt],
        ev["name"].to_numpy()[nxt],
        ev["stream"].to_numpy()[nxt],
        found,
        l_start,
        host.api_name[lic] if host.api_name.size else np.zeros(n, dtype=_I64),
        host.api_tid[lic] if host.api_tid.size else np.zeros(n, dtype=_I64),
        covered,
        cov,
        w_cover,
        w_inprog,
        host,
        act,
        s_ok,
        s_time,
        s_name,
    )
    a_l, b_l, c_l = a.tolist(), b.tolist(), cause.tolist()
    rank, device = dr.rank, dr.device
    return [
        Gap(rank=rank, device=device, start_ns=s, end_ns=e, duration_ns=e - s, cause=c, evidence=t)
        for s, e, c, t in zip(a_l, b_l, c_l, evidence.tolist())
    ]


def _labels(names: tuple[str, ...], fmt, *cols: np.ndarray) -> np.ndarray:
    """An object array of fmt(*values) per row, formatted once per distinct combination of cols."""
    if len(cols[0]) == 0:
        return np.zeros(0, dtype=object)
    codes, first = _factorize(*cols)
    table = np.array([fmt(*(int(c[j]) for c in cols)) for j in first.tolist()] + [""], dtype=object)
    return table[codes]


def _pct(x: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(x) * 100).astype(np.int64).astype(str).astype(object)


def _evidence(
    names,
    cause,
    a,
    b,
    nk,
    nn,
    ns,
    found,
    l_start,
    l_name,
    l_tid,
    covered,
    cov,
    w_cover,
    w_inprog,
    host: HostView,
    act,
    s_ok,
    s_time,
    s_name,
) -> np.ndarray:
    """One evidence line per gap, built column-wise (object-array concatenation runs in C; names are
    formatted once per distinct value)."""
    n = a.size
    nm = lambda sid: names[sid] if 0 <= sid < len(names) else "?"
    obj = lambda x: np.asarray(x, dtype=object)
    what = _labels(names, lambda k, m, st: f"{_op_label(k, nm(m))} on stream {st}", nk, nn, ns)

    def on_thread(name_ids: np.ndarray, tids: np.ndarray) -> np.ndarray:
        """'<name> on thread <tid>' per element (formatted once per distinct pair)."""
        return _labels(names, lambda x, t: f"{nm(x)} on thread {t}", name_ids, tids)

    caller = on_thread(l_name, l_tid)
    rel_b = obj(fmt_rel_many(b - a))
    rel_l = obj(fmt_rel_many(l_start - a))
    out = np.empty(n, dtype=object)

    m = cause == "dependency_wait"
    if m.any():
        txt = (
            what[m]
            + " was already launched ("
            + caller[m]
            + " at "
            + rel_l[m]
            + ") but started only at "
            + rel_b[m]
        )
        k = s_ok[m]
        if k.any():
            last = "; last " + _labels(names, lambda x: nm(x), s_name[m][k]) + " at "
            txt[k] = txt[k] + last + obj(fmt_rel_many(s_time[m][k] - a[m][k]))
        out[m] = txt

    m = (cause == "host_sync") & covered
    if m.any():
        j = w_cover[m]
        who = on_thread(host.wait_name[j], host.wait_tid[j])
        out[m] = (
            who
            + " from "
            + obj(fmt_rel_many(host.wait_start[j] - a[m]))
            + " covers "
            + _pct(cov[m])
            + "% of the gap"
        )
    m = (cause == "host_sync") & ~covered
    if m.any():
        j = w_inprog[m]
        who = on_thread(host.wait_name[j], host.wait_tid[j])
        nxt = np.where(
            found[m],
            "next launch only at " + rel_l[m] + " (" + caller[m] + ")",
            "next " + what[m] + " at " + rel_b[m],
        )
        txt = (
            who
            + " was waiting when the GPU went idle and returned at "
            + obj(fmt_rel_many(host.wait_end[j] - a[m]))
            + "; "
            + nxt
        )
        # what the launching thread did between the wait's return and the next launch
        back = np.minimum(np.maximum(host.wait_end[j], a[m]), b[m])
        op = host.op_at(l_tid[m], back + (np.maximum(l_start[m], back) - back) // 2)
        k = found[m] & (op >= 0)
        if k.any():
            txt[k] = (
                txt[k]
                + " (host in "
                + _labels(names, lambda x: short_name(nm(x), 60), host.op_name[op[k]])
                + ")"
            )
        out[m] = txt

    m = cause == "no_work"
    if m.any():
        nxt = np.where(
            found[m],
            "next launch " + caller[m] + " at " + rel_l[m] + " (" + what[m] + ")",
            "next " + what[m] + " at " + rel_b[m],
        )
        out[m] = "no CUDA API call or CPU op recorded for " + _pct(1 - act[m]) + "% of the gap; " + nxt

    m = cause == "launch_latency"
    if m.any():
        txt = (
            what[m]
            + " launched only at "
            + rel_l[m]
            + " by "
            + caller[m]
            + "; host busy "
            + _pct(act[m])
            + "% of the gap"
        )
        # what the launching thread was doing halfway between the gap's start and the launch
        j = host.op_at(l_tid[m], a[m] + (l_start[m] - a[m]) // 2)
        k = j >= 0
        if k.any():
            op = _labels(names, lambda x: short_name(nm(x), 60), host.op_name[j[k]])
            txt[k] = txt[k] + " (in " + op + ")"
        out[m] = txt

    m = cause == "unknown"
    if m.any():
        out[m] = "next " + what[m] + " at " + rel_b[m] + "; its launch is not in the trace"
    return out


def _factorize(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group ids of the rows by the given integer columns, and the first row of each group."""
    codes = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:  # fold one column at a time into a dense code (hash-based, O(n))
        sub, uniq = pd.factorize(np.asarray(c))
        codes = pd.factorize(codes * max(len(uniq), 1) + sub)[0]
    first = np.unique(codes, return_index=True)[1]
    return codes, first


def _op_label(kind: int, name: str) -> str:
    if kind == int(EventKind.KERNEL):
        return f"kernel {short_name(name)}"
    if kind == int(EventKind.MEMCPY):
        return f"copy '{name[:60]}'"
    return f"memset '{name[:60]}'"
