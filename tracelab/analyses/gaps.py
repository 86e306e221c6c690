"""Idle gaps on each device and their host-side causes.

A gap is a maximal interval inside a device's span with no GPU activity (kernel, memcpy, memset),
at least `gap_threshold_ns` long. Its cause is read from the host side of the same rank, in this
order (the first that applies wins). "The launching thread" is the host thread whose API call
launched the next GPU operation (the one that ends the gap; found by correlation id).

1. dependency_wait — the next operation had already been launched when the gap began (its launch
   call had returned) AND the trace shows a queued dependency: a cudaStreamWaitEvent (or a profiler
   "wait event" record) issued shortly before that launch. Evidence names the launch and the
   stream-wait record. (A CUDA graph node waiting inside its graph is `unknown`: the graph's edges are
   not in the trace.)
   Already launched without such evidence: `unknown`, and the evidence says what is known.
2. host_sync — the host was blocked waiting for the GPU, in a wait made by the launching thread or
   on this device: a blocking call (stream / device / event synchronize, a synchronous memcpy that
   really blocks, a profiler sync record, or a device-to-host memcpy into pageable memory, which
   blocks like `.item()`) either covers at least half of the gap, or was in progress when the gap
   began. A synchronous cudaMemset to device memory and a device-to-device cudaMemcpy do not block
   the host (CUDA runtime docs, "API synchronization behavior") and are not waits. A wait on another
   thread for another device does not explain this device's gap.
3. unknown — the next operation has no launch in the trace.
4. no_work — the host was absent: the launching thread has no recorded activity before its launch
   (it started, or began being recorded, only then). (Blocked in a recorded OS call would count here
   too; the model does not read nsys OS-runtime ranges yet.)
5. launch_latency — otherwise: the launching thread was between CUDA calls, not waiting for the GPU,
   so it was busy on the host and launched late. This is the same whichever profiler recorded the
   program: an nsys trace without CPU ops shows only the CUDA calls, a torch.profiler trace also the
   CPU ops; neither changes the cause. Evidence gives the share of the time up to the next launch
   that the recorded host activity of the launching thread covers, names which host data the trace
   had, and the outermost CPU op the launching thread was in halfway through (when it has CPU ops).

Every gap carries `host_data`: which host data its rank's trace had ("cpu_ops": CPU ops or NVTX
ranges (e.g. nsys --pytorch=autograd-nvtx) and CUDA API calls, "cuda_api": CUDA API calls only,
"none"). Step ranges (ProfilerStep#N, "step 3") are not host activity.

`idle_intervals` classifies every idle interval (> 0 ns) the same way without evidence text: the
findings' wasted_ns is computed from it, so the display threshold changes no finding.

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
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ..model import CopyKind, EventKind, Flag, MemKind, SyncKind, Timeline
from .devices import DeviceRows, device_rows
from .intervals import covered_length, merge, running_max_index
from .results import Gap
from .units import fmt_rel_many

CLOCK_TOLERANCE_NS = 2_000  # host and GPU timestamps may disagree by about a microsecond
HOST_SYNC_COVERAGE = 0.5
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
STEP_LIKE = re.compile(r"^\s*(train(ing)?[\s_-]?)?(step|iter|iteration)(\s*[#_:-]?\s*\d+)?\s*$", re.IGNORECASE)

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
HostData = Literal["cpu_ops", "cuda_api", "none"]


def _non_blocking_copies(ev: pd.DataFrame, on_rank: np.ndarray) -> np.ndarray:
    """Correlation ids of GPU copies / memsets whose synchronous API call does not block the host
    (CUDA runtime docs, "API synchronization behavior"): device-to-device memcpys ("no host-side
    synchronization is performed") and memsets to device memory ("asynchronous with respect to the
    host except when the target memory is pinned host memory")."""
    kind = ev["kind"].to_numpy()
    ck = ev["copy_kind"].to_numpy()
    dst = ev["dst_mem"].to_numpy()
    dtod = (kind == int(EventKind.MEMCPY)) & np.isin(ck, [int(CopyKind.DTOD), int(CopyKind.PTOP)])
    dev_memset = (kind == int(EventKind.MEMSET)) & ~np.isin(dst, [int(MemKind.PINNED), int(MemKind.PAGEABLE)])
    corr = ev["correlation"].to_numpy()
    return np.unique(corr[on_rank & (dtod | dev_memset) & (corr >= 0)])


class HostView:
    """Sorted host-side arrays of one rank that gap causes and findings look things up in."""

    def __init__(self, timeline: Timeline, rank: int, first_seen: FirstSeen | None = None) -> None:
        self.rank = rank
        self._first_seen = first_seen or {}
        ev = timeline.events
        kind = ev["kind"].to_numpy()
        on_rank = ev["rank"].to_numpy() == rank
        start = ev["start"].to_numpy()
        end = ev["end"].to_numpy()
        names = ev["name"].to_numpy()
        flags = ev["flags"].to_numpy()
        self._flags = flags
        sync = ev["sync_kind"].to_numpy()
        tid = ev["tid"].to_numpy()
        corr = ev["correlation"].to_numpy()
        device = ev["device"].to_numpy()

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

        # GPU op correlated with each API call (for its device and what it really did)
        gpu = np.flatnonzero(on_rank & np.isin(kind, [int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)]))
        self.api_device = np.where(device[api] >= 0, device[api], -1).astype(_I64)
        gi = self.launch_index(corr[gpu])
        ok = gi >= 0
        self.api_device[gi[ok]] = device[gpu[ok]]
        self.n_devices = int(np.unique(device[gpu]).size)
        # A call blocks when its name says so (BLOCKING flag) unless its correlated copy shows it did not:
        # a device-to-device memcpy or a memset to device memory returns without waiting.
        non_blocking = np.isin(api_corr, _non_blocking_copies(ev, on_rank)) & has
        self.api_blocking = ((self.api_flags & Flag.BLOCKING) != 0) & ~non_blocking
        self.api_nonblocking_sync = ((self.api_flags & Flag.BLOCKING) != 0) & non_blocking

        # intervals during which the host waited for the GPU
        blocking = api[self.api_blocking]
        sync_ev = np.flatnonzero(
            on_rank
            & (kind == int(EventKind.SYNC))
            & ~np.isin(sync, [int(SyncKind.STREAM_WAIT_EVENT), int(SyncKind.EVENT_QUERY)])
        )
        # a profiler sync record (Kineto cuda_sync) stands for its API call when that is in the trace:
        # the call's own classification wins (e.g. an "Event Sync" record made by cudaEventQuery)
        sync_ev = sync_ev[self.launch_index(corr[sync_ev]) < 0]
        plain = np.concatenate([blocking, sync_ev])
        plain_dev = np.concatenate([self.api_device[self.api_blocking], device[sync_ev]])
        order = np.argsort(start[plain], kind="stable")
        plain, plain_dev = plain[order], plain_dev[order]
        w_start, w_end, w_name, w_tid, w_dev = [start[plain]], [end[plain]], [names[plain]], [tid[plain]], [plain_dev]
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
            w_dev.append(device[mc])
        w_s = np.concatenate(w_start)
        order = np.argsort(w_s, kind="stable")
        self.wait_start = w_s[order]
        self.wait_end = np.concatenate(w_end)[order]
        self.wait_name = np.concatenate(w_name)[order]
        self.wait_tid = np.concatenate(w_tid)[order].astype(_I64)
        self.wait_dev = np.concatenate(w_dev)[order].astype(_I64)

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

        # any recorded host activity, per thread: API calls, CPU ops and NVTX ranges (nsys
        # --pytorch=autograd-nvtx, record_function): host work between CUDA calls; step annotations excluded
        cpu = on_rank & np.isin(kind, [int(EventKind.CPU_OP), int(EventKind.NVTX_RANGE)])
        if cpu.any():
            step_ids = [i for i, s in enumerate(timeline.strings) if STEP_NAME.match(s) or STEP_LIKE.match(s)]
            if step_ids:
                cpu &= ~np.isin(names, step_ids)
        self.has_cpu_ops = bool(cpu.any())
        act_mask = cpu.copy()
        act_mask[api] = True
        act = np.flatnonzero(act_mask)
        self.act_us, self.act_ue = merge(start[act], end[act], assume_sorted=True)
        self._act_start, self._act_end, self._act_tid = start[act], end[act], tid[act].astype(_I64)
        self._act_by_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.host_data: HostData = "cpu_ops" if self.has_cpu_ops else ("cuda_api" if api.size else "none")

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

    def flags_of(self, rows: np.ndarray) -> np.ndarray:
        """The flags column at event rows."""
        return self._flags[rows]

    def first_seen(self, tid: int) -> int:
        """When the thread was first recorded in the whole trace (before any scope), if known."""
        return self._first_seen.get((self.rank, tid), np.iinfo(np.int64).max)

    def thread_activity(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """Merged recorded activity (CUDA API calls and CPU ops) of one host thread."""
        if tid not in self._act_by_tid:
            m = self._act_tid == tid
            self._act_by_tid[tid] = merge(self._act_start[m], self._act_end[m], assume_sorted=True)
        return self._act_by_tid[tid]

    def waits_for(self, tid: int, device: int) -> WaitSet:
        """The host waits that can explain an idle gap on `device` whose next op thread `tid`
        launches: waits by that thread, or waits on that device (whichever thread made them; a wait
        whose device the trace does not give counts as on it when the rank has one GPU)."""
        on_device = (self.wait_dev == device) | ((self.wait_dev < 0) & (self.n_devices == 1))
        m = on_device if tid < 0 else (self.wait_tid == tid) | on_device
        idx = np.flatnonzero(m)
        s, e = self.wait_start[idx], self.wait_end[idx]
        runmax, arg = running_max_index(e)
        us, ue = merge(s, e, assume_sorted=True)
        return WaitSet(idx, s, runmax, idx[arg] if arg.size else arg, us, ue)

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


@dataclass(frozen=True)
class WaitSet:
    """A subset of a HostView's waits (positions `idx` into its wait_* arrays), sorted by start, with
    the running maximum of their ends (and which wait holds it) and their union."""

    idx: np.ndarray
    start: np.ndarray
    runmax: np.ndarray
    arg: np.ndarray  # index into the HostView's wait_* arrays
    us: np.ndarray
    ue: np.ndarray


def host_views(timeline: Timeline, first_seen: FirstSeen | None = None) -> dict[int, HostView]:
    ranks = np.unique(timeline.events["rank"].to_numpy()).tolist()
    return {int(r): HostView(timeline, int(r), first_seen) for r in ranks}


FirstSeen = dict[tuple[int, int], int]  # (rank, tid) -> start of the thread's first recorded host activity


def thread_first_seen(timeline: Timeline) -> FirstSeen:
    """When each host thread was first recorded (CUDA API calls and CPU ops), per (rank, tid). Computed on
    the whole trace before a --steps / --window scope clips it, so "the launching thread was absent" keeps
    meaning absent from the trace, not from the window."""
    ev = timeline.events
    kind = ev["kind"].to_numpy()
    host = np.isin(kind, [int(EventKind.RUNTIME), int(EventKind.DRIVER), int(EventKind.CPU_OP)])
    if not host.any():
        return {}
    df = pd.DataFrame({"rank": ev["rank"].to_numpy()[host], "tid": ev["tid"].to_numpy()[host],
                       "start": ev["start"].to_numpy()[host]})
    first = df.groupby(["rank", "tid"], sort=False)["start"].min()
    return {(int(r), int(t)): int(v) for (r, t), v in first.items()}


# ---- causes ----------------------------------------------------------------------------------
CAUSES: tuple[str, ...] = ("dependency_wait", "host_sync", "launch_latency", "no_work", "unknown")
_CODE = {c: i for i, c in enumerate(CAUSES)}


@dataclass(frozen=True)
class IdleIntervals:
    """Every idle interval of one device (inside its span, > 0 ns) and its cause (index into CAUSES)."""

    rank: int
    device: int
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray

    def of_cause(self, cause: str) -> tuple[np.ndarray, np.ndarray]:
        m = self.cause == _CODE[cause]
        return self.start[m], self.end[m]


@dataclass(frozen=True)
class _Classified:
    a: np.ndarray  # gap starts
    b: np.ndarray  # gap ends
    nxt: np.ndarray  # row of the GPU op that ends each gap
    cause: np.ndarray  # cause names (object array)
    found: np.ndarray
    lic: np.ndarray
    l_start: np.ndarray
    l_tid: np.ndarray
    covered: np.ndarray
    cov: np.ndarray
    w_cover: np.ndarray
    w_inprog: np.ndarray
    act: np.ndarray
    s_ok: np.ndarray
    s_time: np.ndarray
    s_name: np.ndarray
    dep_unexplained: np.ndarray


def _classify(timeline: Timeline, dr: DeviceRows, host: HostView, min_ns: int) -> _Classified | None:
    """The idle intervals of one device of at least min_ns and their causes (DESIGN.md, "Gap causes"),
    with what the evidence needs. Vectorized; loops only over the launching threads."""
    ev = timeline.events
    rows = dr.rows
    start = ev["start"].to_numpy()[rows]
    end = ev["end"].to_numpy()[rows]
    us, ue, first = merge(start, end, assume_sorted=True, return_index=True)
    if us.size < 2:
        return None
    a = ue[:-1]
    b = us[1:]
    keep = (b - a) >= max(int(min_ns), 1)
    a, b = a[keep], b[keep]
    nxt = rows[first[1:][keep]]  # the GPU op that ends each gap
    if a.size == 0:
        return None
    n = a.size
    dur = b - a

    # the launch of the next op
    li = host.launch_index(ev["correlation"].to_numpy()[nxt])
    found = li >= 0
    lic = np.maximum(li, 0)
    has_api = host.api_start.size > 0
    l_start = np.where(found, host.api_start[lic] if has_api else 0, 0)
    l_end = np.where(found, host.api_end[lic] if has_api else 0, 0)
    l_tid = np.where(found, host.api_tid[lic] if has_api else -1, -1).astype(_I64)
    queued = found & (l_end <= a)

    # per launching thread: its waits (and waits on this device), and its recorded activity
    inprog = np.zeros(n, dtype=bool)
    w_inprog = np.zeros(n, dtype=_I64)
    w_cover = np.zeros(n, dtype=_I64)
    cov = np.zeros(n)
    act = np.zeros(n)
    absent = np.zeros(n, dtype=bool)
    win_end = np.where(found & (l_start > a), np.minimum(l_start, b), b)
    for t in np.unique(l_tid).tolist():
        q = np.flatnonzero(l_tid == t)
        aq, bq = a[q], b[q]
        ws = host.waits_for(int(t), dr.device)
        if ws.start.size:
            wi = np.searchsorted(ws.start, aq, side="right") - 1
            wic = np.maximum(wi, 0)
            inprog[q] = (wi >= 0) & (ws.runmax[wic] >= aq - CLOCK_TOLERANCE_NS)
            w_inprog[q] = ws.arg[wic]
            cov[q] = covered_length(ws.us, ws.ue, aq, bq) / dur[q]
            wj = np.searchsorted(ws.start, bq, side="left") - 1
            w_cover[q] = ws.arg[np.maximum(wj, 0)]
        if t >= 0:
            tu, te = host.thread_activity(int(t))
            act[q] = covered_length(tu, te, aq, win_end[q]) / np.maximum(win_end[q] - aq, 1)
            # the launching thread has no recorded activity before its launch: it was absent
            first = min(int(tu[0]) if tu.size else np.iinfo(np.int64).max,
                        host.first_seen(int(t)))
            absent[q] = first >= l_start[q] - CLOCK_TOLERANCE_NS
        else:
            act[q] = covered_length(host.act_us, host.act_ue, aq, win_end[q]) / np.maximum(win_end[q] - aq, 1)
    covered = cov >= HOST_SYNC_COVERAGE
    sync = covered | inprog

    # evidence of a queued dependency: a stream-wait (event) record issued shortly before the launch
    if host.swait_start.size:
        si = np.searchsorted(host.swait_start, l_start, side="right") - 1
        sic = np.maximum(si, 0)
        s_ok = (si >= 0) & (host.swait_start[sic] >= a - dur - 1_000_000)
        s_time = host.swait_start[sic]
        s_name = host.swait_name[sic]
    else:
        s_ok = np.zeros(n, dtype=bool)
        s_time = s_name = np.zeros(n, dtype=_I64)
    dep = queued & s_ok
    dep_unexplained = queued & ~dep

    cause = np.select(
        [dep, dep_unexplained, sync, ~found, absent],
        ["dependency_wait", "unknown", "host_sync", "unknown", "no_work"],
        default="launch_latency",
    )
    return _Classified(
        a, b, nxt, cause, found, lic, l_start, l_tid, covered, cov, w_cover, w_inprog, act, s_ok, s_time,
        s_name, dep_unexplained,
    )


def idle_intervals(timeline: Timeline, dr: DeviceRows, host: HostView) -> IdleIntervals:
    """All idle intervals (> 0 ns) of a device with their causes, no evidence text."""
    c = _classify(timeline, dr, host, 1)
    if c is None:
        e = np.zeros(0, dtype=_I64)
        return IdleIntervals(dr.rank, dr.device, e, e, np.zeros(0, dtype=np.int8))
    codes = np.zeros(c.a.size, dtype=np.int8)
    for name, code in _CODE.items():
        codes[c.cause == name] = code
    return IdleIntervals(dr.rank, dr.device, c.a, c.b, codes)


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
    c = _classify(timeline, dr, host, threshold_ns)
    if c is None:
        return []
    ev = timeline.events
    n = c.a.size
    has_api = host.api_name.size > 0
    evidence = _evidence(
        timeline.strings,
        c,
        ev["kind"].to_numpy()[c.nxt],
        ev["name"].to_numpy()[c.nxt],
        ev["stream"].to_numpy()[c.nxt],
        host.api_name[c.lic] if has_api else np.zeros(n, dtype=_I64),
        host,
    )
    a_l, b_l, c_l = c.a.tolist(), c.b.tolist(), c.cause.tolist()
    ls = np.where(c.found, c.l_start, -1).tolist()
    lt = c.l_tid.tolist()
    act = np.round(c.act, 4).tolist()
    rank, device, basis = dr.rank, dr.device, host.host_data
    return [
        Gap(
            rank=rank, device=device, start_ns=s, end_ns=e, duration_ns=e - s, cause=k, evidence=t,
            host_data=basis, launch_start_ns=l_s, launch_tid=l_t, host_active=h,
        )
        for s, e, k, t, l_s, l_t, h in zip(a_l, b_l, c_l, evidence.tolist(), ls, lt, act)
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
    names: tuple[str, ...],
    c: _Classified,
    nk: np.ndarray,
    nn: np.ndarray,
    ns: np.ndarray,
    l_name: np.ndarray,
    host: HostView,
) -> np.ndarray:
    """One evidence line per gap, built column-wise (object-array concatenation runs in C; names are
    formatted once per distinct value)."""
    a, b, cause, found, l_start, l_tid = c.a, c.b, c.cause, c.found, c.l_start, c.l_tid
    covered, cov, w_cover, w_inprog, act = c.covered, c.cov, c.w_cover, c.w_inprog, c.act
    s_ok, s_time, s_name = c.s_ok, c.s_time, c.s_name
    graph = (host.flags_of(c.nxt) & Flag.GRAPH) != 0
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

    def queued(m: np.ndarray) -> np.ndarray:
        """'<op> was already launched (<call> at +t) but started only at +t' for the rows m."""
        return what[m] + " was already launched (" + caller[m] + " at " + rel_l[m] + ") but started only at " + rel_b[m]

    m = cause == "dependency_wait"
    if m.any():
        txt = queued(m)
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
        out[m] = (
            caller[m]
            + " has no recorded activity before its launch at "
            + rel_l[m]
            + " ("
            + what[m]
            + "): the launching thread was absent"
        )

    recorded = _HOST_DATA_WORDS[host.host_data]
    m = cause == "launch_latency"
    if m.any():
        txt = (
            what[m]
            + " launched only at "
            + rel_l[m]
            + " by "
            + caller[m]
            + ", which was not waiting for the GPU; host busy "
            + _pct(act[m])
            + "% of the time up to the next launch "
            + recorded
        )
        # what the launching thread was doing halfway between the gap's start and the launch
        j = host.op_at(l_tid[m], a[m] + (l_start[m] - a[m]) // 2)
        k = j >= 0
        if k.any():
            op = _labels(names, lambda x: short_name(nm(x), 60), host.op_name[j[k]])
            txt[k] = txt[k] + " (in " + op + ")"
        out[m] = txt

    m = (cause == "unknown") & ~found
    if m.any():
        out[m] = "next " + what[m] + " at " + rel_b[m] + "; its launch is not in the trace"
    m = (cause == "unknown") & found
    if m.any():
        out[m] = queued(m) + "; no stream-wait or event record shows what it waited for"
        g = m & graph
        if g.any():
            out[g] = out[g] + " (a CUDA graph node: its dependencies inside the graph are not in the trace)"
    return out


_HOST_DATA_WORDS = {
    "cpu_ops": "(host data: CPU ops / NVTX ranges + CUDA API)",
    "cuda_api": "(host data: CUDA API calls only)",
    "none": "(host data: none)",
}


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
