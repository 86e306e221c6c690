"""Idle gaps on each device and their host-side causes.

A gap is a maximal interval inside a device's span with no GPU activity (kernel, memcpy, memset),
at least `gap_threshold_ns` long. Its cause is read from the host side of the same rank, in this
order (the first that applies wins). "The launching thread" is the host thread whose API call
launched the next GPU operation (the one that ends the gap; found by correlation id).

1. dependency_wait — the next operation had already been launched when the gap began (its launch
   call had returned) AND the trace shows a queued dependency: a cudaStreamWaitEvent (or a profiler
   "wait event" record) issued shortly before that launch. (A CUDA graph node waiting inside its
   graph is `unknown`: the graph's edges are not in the trace.)
   Already launched without such evidence: `unknown`.
2. profiler — the profiler's own work covers at least half of the gap: nsys PROFILER_OVERHEAD intervals
   (CUPTI buffer flushes, the flush at cudaProfilerStop, CUPTI set-up) on the rank's processes (every process
   of a one-rank trace), or Kineto's CUPTI "overhead" events (pid -1: every process of the rank). The host
   was held up by the profiler, not by itself (TraceLens#728, nsys-ai#599).
3. host_sync — the host was blocked waiting for the GPU, in a wait made by the launching thread or
   on this device: a blocking call (stream / device / event synchronize, a synchronous memcpy that
   really blocks, a profiler sync record, or a device-to-host memcpy into pageable memory, which
   blocks like `.item()`) covers at least half of the gap. A synchronous cudaMemset to device memory
   and a device-to-device cudaMemcpy do not block the host (CUDA runtime docs, "API synchronization
   behavior") and are not waits. A wait on another thread for another device does not explain this
   device's gap. A wait in progress when the gap began that covers less than half of it does not make
   it host_sync (issue 24 item 7): the rules below classify the time after it returned (every share is
   measured from its return).
4. input_wait — the launching thread spent at least half of the time up to the next launch waiting for
   input data: in data-loading ranges (DataLoader iterator ops, user ranges named for data / batch /
   load) or blocked in OS waits for data (tracelab.analyses.gaps.input_wait).
5. no_work — the host was blocked in the OS (nsys OS runtime calls): up to the next launch, the
   launching thread spent at least half of the time in OS calls outside its CUDA calls, and for at
   least half of it no launching thread of its process ran (each in an OS call, waiting for the GPU or
   outside its recorded life). A wait for another thread counts only until the last wake-up call made
   in the process while it waited (tracelab.analyses.core.host.HostView.os_calls).
6. unknown — the next operation has no launch in the trace.
7. no_work — the host was absent: the launching thread has no recorded host event (CUDA call, CPU op,
   NVTX range, OS call) before its launch (it started, or began being recorded, only then).
8. no_work — the host idle (torch.profiler CPU ops, no OS calls): no launching thread of the process ran
   a recorded CPU op or CUDA call for one stretch of more than half of the time up to the launch and at
   least 1 ms.
9. launch_latency — otherwise: the launching thread was between CUDA calls, not waiting for the GPU
   and not blocked in the OS, so it was busy on the host and launched late. An nsys trace without CPU
   ops shows only the CUDA calls; that is not "no work".

Every gap carries `host_data`: which host data its rank's trace had ("cpu_ops": CPU ops or NVTX
ranges (e.g. nsys --pytorch=autograd-nvtx) and CUDA API calls, "cuda_api": CUDA API calls only,
"none"; "+os_calls" when OS runtime calls were traced). Step ranges (ProfilerStep#N, "step 3") are not
host activity.

The evidence is structured (`GapDetails`: the ops, calls and fractions each cause rests on, as
columns); tracelab.render.text.gap_evidence writes the sentences, only for the gaps that are shown.
`idle_intervals` classifies every idle interval (> 0 ns) the same way without details: the findings'
wasted_ns is computed from it, so the display threshold changes no finding.

Gaps are returned in time order (rank, device, start); renderers sort them by duration if they want.
All per-gap work is vectorized (searchsorted over sorted host intervals); loops run only over devices
and launching threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.host import HostData, HostView, host_views
from tracelab.analyses.core.host_sets import WaitSet
from tracelab.analyses.core.host_threads import FirstSeen, thread_first_seen
from tracelab.analyses.core.intervals import covered_length, running_max_index
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.overhead import Overhead, overhead_names, rank_overhead
from tracelab.analyses.core.rows import device_union
from tracelab.analyses.device.devices import DeviceRows, device_rows
from tracelab.analyses.gaps.input_wait import INPUT_FRACTION
from tracelab.analyses.results import CAUSES, HOST_DATA, GapDetails, GapTable
from tracelab.model import Flag, Timeline

__all__ = [
    "CAUSES", "CLOCK_TOLERANCE_NS", "HOST_SYNC_COVERAGE", "FirstSeen", "HostData", "HostView", "IdleIntervals",
    "WaitSet", "find_gaps", "find_gaps_with_details", "host_views", "idle_intervals", "thread_first_seen",
]

CLOCK_TOLERANCE_NS = 2_000  # host and GPU timestamps may disagree by about a microsecond
HOST_SYNC_COVERAGE = 0.5
PROFILER_COVERAGE = 0.5  # the profiler's own work covers at least this share of the gap: cause profiler
OS_BLOCKED_FRACTION = 0.5
HOST_IDLE_FRACTION = 0.5  # torch.profiler: no op or CUDA call on any launching thread for more than this share
HOST_IDLE_MIN_NS = 1_000_000  # ... and at least this long (Python between ops can take tens of µs, not ms)

_I64 = np.int64
_CODE = {c: i for i, c in enumerate(CAUSES)}
_DEP, _HOST_SYNC, _INPUT, _LAUNCH, _NO_WORK, _UNKNOWN, _PROFILER = (
    _CODE[c] for c in ("dependency_wait", "host_sync", "input_wait", "launch_latency", "no_work", "unknown", "profiler"))


class IdleIntervals:
    """Every idle interval of one device (inside its span, > 0 ns) and its cause (index into CAUSES).
    The causes are classified when asked for: all of them (`cause`), or only those of some intervals
    (`causes_of`: a rule that needs the causes inside some steps classifies those alone)."""

    def __init__(self, rank: int, device: int, start: np.ndarray, end: np.ndarray,
                 cause: np.ndarray | None = None, classify: Callable[[np.ndarray], np.ndarray] | None = None,
                 drained: np.ndarray | Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """Either `cause` (index into CAUSES per interval) or `classify` (a boolean mask over the intervals
        -> the causes of those). `drained`: per interval (or a mask -> those), whether it began while the
        host waited for the GPU and is launch_latency / unknown after the wait returned (the sync drained the
        queue: `sync_caused_of`); None: none did."""
        if cause is None and classify is None:
            raise ValueError("IdleIntervals needs the causes or a way to classify them")
        self.rank, self.device, self.start, self.end = rank, device, start, end
        self._cause, self._classify = cause, classify
        self._drained = drained

    @property
    def cause(self) -> np.ndarray:
        if self._cause is None:
            assert self._classify is not None
            self._cause = self._classify(np.ones(self.start.size, dtype=bool))
        return self._cause

    def causes_of(self, m: np.ndarray) -> np.ndarray:
        """The causes of the intervals m (a boolean mask)."""
        if self._cause is not None or self._classify is None:
            return self.cause[m]
        return self._classify(m)

    def of_cause(self, cause: str) -> tuple[np.ndarray, np.ndarray]:
        m = self.cause == _CODE[cause]
        return self.start[m], self.end[m]

    def sync_caused_of(self, m: np.ndarray) -> np.ndarray:
        """Whether each interval m (a boolean mask) is the GPU idle a host sync caused: host_sync (a wait
        covers most of it), or it began while the host waited and the host was only relaunching after the
        wait returned (the sync drained the queue; issue 24 item 7 gives it the cause of that time)."""
        sync = self.causes_of(m) == _HOST_SYNC
        if self._drained is None:
            return sync
        d = self._drained[m] if isinstance(self._drained, np.ndarray) else self._drained(m)
        return sync | d


@dataclass(frozen=True)
class _OsEvidence:
    """Per gap, what the launching thread's OS runtime calls say (zeros without OS-call data)."""

    blocked: np.ndarray  # no_work because the host was blocked in the OS (the rule below)
    self_frac: np.ndarray  # share of [gap start, next launch) the launching thread was in OS calls
    all_frac: np.ndarray  # share of it no launching thread of the process ran
    threads: np.ndarray  # launching threads of the process
    calls: np.ndarray  # the launching thread's OS calls overlapping that window
    name: np.ndarray  # the call that names it (-1: none), its start and end
    start: np.ndarray
    end: np.ndarray

    @staticmethod
    def empty(n: int) -> _OsEvidence:
        z = np.zeros(n, dtype=_I64)
        return _OsEvidence(np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n), z, z.copy(), np.full(n, -1, _I64),
                           z.copy(), z.copy())


@dataclass(frozen=True)
class _InputEvidence:
    """Per gap, the launching thread's input waits (tracelab.analyses.gaps.input_wait) up to its launch."""

    frac: np.ndarray  # share of the window spent in data-loading ranges or OS waits for data
    name: np.ndarray  # the range or OS call that names it (-1: none), its start and end
    start: np.ndarray
    end: np.ndarray
    os_call: np.ndarray  # the one named is an OS call (else a range)

    @staticmethod
    def empty(n: int) -> _InputEvidence:
        z = np.zeros(n, dtype=_I64)
        return _InputEvidence(np.zeros(n), np.full(n, -1, _I64), z, z.copy(), np.zeros(n, dtype=bool))


@dataclass(frozen=True)
class _ProfilerEvidence:
    """Per gap, the profiler's own work on the rank's processes (nsys PROFILER_OVERHEAD, Kineto "overhead"
    events) inside it."""

    frac: np.ndarray  # share of the gap the overhead intervals cover
    name: np.ndarray  # the interval that names it (index into overhead_names; -1: none), its start and end
    start: np.ndarray
    end: np.ndarray


def _profiler_evidence(ov: Overhead, a: np.ndarray, b: np.ndarray, details: bool) -> _ProfilerEvidence:
    """The share of each gap [a, b) that profiler overhead covers and (with details) the interval running
    halfway through it, else, of those overlapping it, the one that reaches furthest (vectorized)."""
    n = a.size
    z = np.zeros(n, dtype=_I64)
    if ov.start.size == 0:
        return _ProfilerEvidence(np.zeros(n), np.full(n, -1, _I64), z, z.copy())
    frac = covered_length(ov.us, ov.ue, a, b) / np.maximum(b - a, 1)
    if not details:
        return _ProfilerEvidence(frac, np.full(n, -1, _I64), z, z.copy())
    mid = a + (b - a) // 2
    i = np.searchsorted(ov.start, mid, side="right") - 1
    ic = np.maximum(i, 0)
    at_mid = (i >= 0) & (ov.runmax[ic] > mid)
    j = np.where(at_mid, ov.arg[ic], -1)
    # else, of the intervals starting before b, the one reaching furthest, if it reaches past a
    k = np.searchsorted(ov.start, b, side="left") - 1
    kc = np.maximum(k, 0)
    j = np.where(~at_mid & (k >= 0) & (ov.runmax[kc] > a), ov.arg[kc], j)
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (frac > 0)
    return _ProfilerEvidence(frac, np.where(ok, ov.name[jc], -1), np.where(ok, ov.start[jc], 0),
                             np.where(ok, ov.end[jc], 0))


@dataclass(frozen=True)
class _Classified:
    """The gaps of one device, their causes (codes into CAUSES) and what their evidence rests on."""

    a: np.ndarray  # gap starts
    b: np.ndarray  # gap ends
    nxt: np.ndarray  # row of the GPU op that ends each gap
    cause: np.ndarray
    found: np.ndarray  # the next op's launch is in the trace
    lic: np.ndarray  # index of that launch into host.api_* (0 when not found)
    l_start: np.ndarray
    l_tid: np.ndarray
    covered: np.ndarray  # a wait covers >= HOST_SYNC_COVERAGE of the gap
    cov: np.ndarray
    w_cover: np.ndarray  # the wait that covers most recently (index into host.wait_*)
    w_inprog: np.ndarray  # the wait in progress at the gap start
    after_wait: np.ndarray  # such a wait did not cover the gap: the time after it returned was classified
    w_back: np.ndarray  # when it returned (the gap start when none)
    drained: np.ndarray  # after_wait, the next op not queued, and launch_latency / unknown: the sync's idle
    act: np.ndarray  # host_active (from the gap start, or from the return of a wait in progress then)
    host_idle: np.ndarray  # no_work: no recorded activity for most of the window (torch.profiler)
    idle_frac: np.ndarray  # the longest stretch without recorded activity, as a share of the window
    s_ok: np.ndarray
    s_time: np.ndarray
    s_name: np.ndarray
    os: _OsEvidence
    inp: _InputEvidence
    prof: _ProfilerEvidence


@dataclass(frozen=True)
class _Idle:
    """Every idle interval (> 0 ns) of one device inside its span, and the GPU op that ends each."""

    a: np.ndarray
    b: np.ndarray
    nxt: np.ndarray  # row of the GPU op that ends each interval

    def take(self, m: np.ndarray) -> _Idle:
        return _Idle(self.a[m], self.b[m], self.nxt[m])


def _idle_of(timeline: Timeline, dr: DeviceRows) -> _Idle | None:
    """The device's idle intervals (None when it has none)."""
    rows = dr.rows
    us, ue, first = device_union(timeline, dr)
    if us.size < 2:
        return None
    # merged intervals are separated by at least 1 ns: every one is an idle interval
    return _Idle(ue[:-1], us[1:], rows[first[1:]])


def _classify(timeline: Timeline, dr: DeviceRows, host: HostView, idle: _Idle,
              details: bool = True) -> _Classified | None:
    """The causes of some idle intervals of one device (DESIGN.md, "Gap causes"), with what the evidence
    needs. Each interval's cause depends on it alone, so any subset classifies the same. Vectorized;
    loops only over the launching threads. `details=False` computes only what the causes rest on (the
    findings classify every short idle interval, about one per kernel, and show no evidence of them): the
    host-active fraction, the wait each gap names and the OS call that names it are left zero."""
    a, b, nxt = idle.a, idle.b, idle.nxt
    if a.size == 0:
        return None
    n = a.size
    dur = b - a

    # the launch of the next op
    li = host.launch_index(column(timeline, "correlation")[nxt])
    found = li >= 0
    lic = np.maximum(li, 0)
    has_api = host.api_start.size > 0
    l_start = np.where(found, host.api_start[lic] if has_api else 0, 0)
    l_end = np.where(found, host.api_end[lic] if has_api else 0, 0)
    l_tid = np.where(found, host.api_tid[lic] if has_api else -1, -1).astype(_I64)
    queued = found & (l_end <= a)

    # per launching thread: its waits (and waits on this device), its recorded activity, its input waits
    inprog = np.zeros(n, dtype=bool)
    w_inprog = np.zeros(n, dtype=_I64)
    w_cover = np.zeros(n, dtype=_I64)
    w_back = a.copy()  # when the wait in progress at the gap start returned (a: none)
    cov = np.zeros(n)
    act = np.zeros(n)
    idle_frac = np.zeros(n)
    idle_len = np.zeros(n, dtype=_I64)
    absent = np.zeros(n, dtype=bool)
    win_end = np.where(found & (l_start > a), np.minimum(l_start, b), b)
    os_ev = _OsEvidence.empty(n)
    inp = _InputEvidence.empty(n)
    for t in distinct(l_tid).tolist():
        q = np.flatnonzero(l_tid == t)
        aq, bq = a[q], b[q]
        ws = host.waits_for(int(t), dr.device)
        if ws.start.size:
            wi = np.searchsorted(ws.start, aq, side="right") - 1
            wic = np.maximum(wi, 0)
            inprog[q] = (wi >= 0) & (ws.runmax[wic] >= aq - CLOCK_TOLERANCE_NS)
            w_back[q] = np.where(inprog[q], np.maximum(ws.runmax[wic], aq), aq)
            cov[q] = covered_length(ws.us, ws.ue, aq, bq) / dur[q]
            if details:
                w_inprog[q] = ws.arg[wic]
                wj = np.searchsorted(ws.start, bq, side="left") - 1
                w_cover[q] = ws.arg[np.maximum(wj, 0)]
        # the time after a wait in progress at the gap start returned is classified on its own
        a0 = np.minimum(w_back[q], win_end[q])
        if t >= 0:
            tu, te = host.thread_activity(int(t))
            act[q] = covered_length(tu, te, a0, win_end[q]) / np.maximum(win_end[q] - a0, 1)
            pid = int(host.api_pid[lic[q[0]]]) if host.api_pid.size else 0
            if host.has_op_events and not host.os_data:
                pu, pe = host.process_activity(pid, int(t))
                idle_len[q] = longest_hole(pu, pe, a0, win_end[q])
                idle_frac[q] = idle_len[q] / np.maximum(win_end[q] - a0, 1)
            # the launching thread was not recorded at all before its launch (no CUDA call, CPU op, NVTX range
            # or OS call): it was absent
            absent[q] = host.thread_first(int(t)) >= l_start[q] - CLOCK_TOLERANCE_NS
            if host.os_data:
                _os_evidence(host, int(t), pid, q, a0, win_end[q], os_ev, details)
            _input_evidence(host, int(t), q, a0, win_end[q], inp, details)
        elif details:
            act[q] = covered_length(host.act_us, host.act_ue, a0, win_end[q]) / np.maximum(win_end[q] - a0, 1)
    covered = cov >= HOST_SYNC_COVERAGE

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

    # blocked in the OS: the launching thread spent at least half of the time up to its launch in OS calls,
    # and for at least half of it no launching thread of its process ran (each in an OS call, waiting for
    # the GPU or not alive): nothing was producing GPU work. A thread waiting for another thread that is
    # busy (PyTorch's autograd thread in pthread_cond_wait while the main thread runs the forward) is not.
    os_blocked = found & (os_ev.self_frac >= OS_BLOCKED_FRACTION) & (os_ev.all_frac >= OS_BLOCKED_FRACTION)
    # waiting for input: the launching thread spent at least half of the time up to its launch inside a
    # data-loading range or blocked in an OS wait for data (tracelab.analyses.gaps.input_wait)
    input_wait = found & (inp.frac >= INPUT_FRACTION)
    # the host idle (torch.profiler): no CPU op and no CUDA call on any launching thread of the process for a
    # stretch of more than half of the time up to the launch and at least 1 ms (a sleeping host; Python between
    # ops leaves short holes; a thread waiting for another that runs ops, e.g. the autograd thread, is not idle)
    host_idle = found & (idle_frac > HOST_IDLE_FRACTION) & (idle_len >= HOST_IDLE_MIN_NS)
    # the profiler's own work (nsys PROFILER_OVERHEAD: buffer flushes, CUPTI set-up) on the rank's processes
    # covers at least half of the gap: the profiler's doing, not a host cause (unless the next op was queued
    # before the gap began: then the host did not hold it back)
    prof = _profiler_evidence(rank_overhead(timeline, host), a, b, details)
    profiler = prof.frac >= PROFILER_COVERAGE
    cause = np.select(
        [dep, queued, profiler, covered, input_wait, os_blocked, ~found, absent, host_idle],
        [_DEP, _UNKNOWN, _PROFILER, _HOST_SYNC, _INPUT, _NO_WORK, _UNKNOWN, _NO_WORK, _NO_WORK],
        default=_LAUNCH,
    ).astype(np.int8)
    os_ev.blocked[:] = os_blocked & (cause == _NO_WORK)
    idle = host_idle & (cause == _NO_WORK) & ~os_ev.blocked & ~absent
    return _Classified(
        a, b, nxt, cause, found, lic, l_start, l_tid, covered, cov, w_cover, w_inprog, inprog & ~covered, w_back,
        inprog & ~covered & ~queued & ((cause == _LAUNCH) | (cause == _UNKNOWN)),
        act, idle & (idle_frac > 0), idle_frac, s_ok, s_time, s_name, os_ev, inp, prof,
    )


def _os_evidence(host: HostView, tid: int, pid: int, q: np.ndarray, a: np.ndarray, w: np.ndarray,
                 out: _OsEvidence, details: bool = True) -> None:
    """Fill `out` at rows q (gaps launched by thread tid of process pid; windows [a, w)), vectorized;
    without `details`, only the two fractions the cause rests on."""
    oc = host.os_calls(tid)
    span = np.maximum(w - a, 1)
    out.self_frac[q] = covered_length(oc.blocked_start, oc.blocked_end, a, w) / span
    bu, be, n_threads = host.host_blocked(pid, tid)
    out.all_frac[q] = covered_length(bu, be, a, w) / span
    if not details:
        return
    out.threads[q] = n_threads
    if oc.start.size == 0:
        return
    out.calls[q] = np.searchsorted(oc.start, w, side="left") - np.searchsorted(oc.ends_sorted, a, side="right")
    # the call that names it: the one running halfway through the window, else the last one in it
    mid = a + (w - a) // 2
    i = np.searchsorted(oc.start, mid, side="right") - 1
    ic = np.maximum(i, 0)
    j = np.where((i >= 0) & (oc.runmax[ic] > mid), oc.arg[ic], np.searchsorted(oc.start, w, side="left") - 1)
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (oc.end[jc] > a) & (oc.start[jc] < w)
    out.name[q] = np.where(ok, oc.name[jc], -1)
    out.start[q] = np.where(ok, oc.start[jc], 0)
    out.end[q] = np.where(ok, oc.end[jc], 0)


def _input_evidence(host: HostView, tid: int, q: np.ndarray, a: np.ndarray, w: np.ndarray,
                    out: _InputEvidence, details: bool = True) -> None:
    """Fill `out` at rows q (gaps launched by thread tid; windows [a, w)), vectorized: the share of each
    window the thread waited for input and (with details) the range or OS call that names it: the range
    running halfway through the window, else the OS wait for data running then, else the last range in it."""
    sp = host.input_spans(tid)
    if sp.wait_start.size == 0:
        return
    out.frac[q] = covered_length(sp.wait_start, sp.wait_end, a, w) / np.maximum(w - a, 1)
    if not details:
        return
    mid = a + (w - a) // 2
    name = np.full(q.size, -1, dtype=_I64)
    st = np.zeros(q.size, dtype=_I64)
    en = np.zeros(q.size, dtype=_I64)
    is_os = np.zeros(q.size, dtype=bool)
    if sp.start.size:
        i = np.searchsorted(sp.start, mid, side="right") - 1
        ic = np.maximum(i, 0)
        j = np.where((i >= 0) & (sp.runmax[ic] > mid), sp.arg[ic], np.searchsorted(sp.start, w, side="left") - 1)
        jc = np.maximum(j, 0)
        ok = (j >= 0) & (sp.end[jc] > a) & (sp.start[jc] < w)
        name = np.where(ok, sp.name[jc], -1)
        st, en = np.where(ok, sp.start[jc], 0), np.where(ok, sp.end[jc], 0)
        at_mid = ok & (sp.start[jc] <= mid) & (sp.end[jc] > mid)
    else:
        at_mid = np.zeros(q.size, dtype=bool)
    if host.os_data:
        oc = host.os_calls(tid)
        k = np.flatnonzero(oc.is_input)
        if k.size:
            cs, ce, cn = oc.start[k], oc.end[k], oc.name[k]
            runmax, arg = running_max_index(ce)
            i = np.searchsorted(cs, mid, side="right") - 1
            ic = np.maximum(i, 0)
            hit = (i >= 0) & (runmax[ic] > mid) & ~at_mid
            g = arg[ic]
            name = np.where(hit, cn[g], name)
            st, en = np.where(hit, cs[g], st), np.where(hit, ce[g], en)
            is_os = hit
    out.name[q], out.start[q], out.end[q], out.os_call[q] = name, st, en, is_os


def longest_hole(us: np.ndarray, ue: np.ndarray, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per window [a, w): the longest stretch inside it not covered by the sorted disjoint union (us, ue),
    vectorized (a range maximum over the holes between the union's intervals, by reduceat)."""
    a = np.asarray(a, dtype=_I64)
    w = np.maximum(np.asarray(w, dtype=_I64), a)
    if us.size == 0:
        return w - a
    # holes: (-inf, us[0]), (ue[k], us[k+1]), (ue[-1], +inf)
    big = np.iinfo(_I64).max // 4
    hs = np.concatenate([[-big], ue])
    he = np.concatenate([us, [big]])
    first = np.searchsorted(he, a, side="right")  # first hole ending after a
    last = np.searchsorted(hs, w, side="left") - 1  # last hole starting before w
    # the two end holes clipped to the window; the ones between lie inside it
    f_len = np.clip(np.minimum(he[np.minimum(first, he.size - 1)], w) - np.maximum(hs[np.minimum(first, hs.size - 1)], a), 0, None)
    l_len = np.clip(np.minimum(he[np.maximum(last, 0)], w) - np.maximum(hs[np.maximum(last, 0)], a), 0, None)
    best = np.maximum(np.where(first <= last, f_len, 0), np.where(last >= first, l_len, 0))
    inner = np.flatnonzero(last - first >= 2)
    if inner.size:
        lens = he - hs
        idx = np.empty(2 * inner.size, dtype=_I64)
        idx[0::2] = first[inner] + 1
        idx[1::2] = last[inner]
        mx = np.maximum.reduceat(lens, idx)[0::2]
        best[inner] = np.maximum(best[inner], mx)
    return best


def idle_intervals(timeline: Timeline, dr: DeviceRows, host: HostView) -> IdleIntervals:
    """All idle intervals (> 0 ns) of a device with their causes, no details."""
    idle = _idle_of(timeline, dr)
    c = _classify(timeline, dr, host, idle, details=False) if idle is not None else None
    if c is None:
        e = np.zeros(0, dtype=_I64)
        return IdleIntervals(dr.rank, dr.device, e, e, np.zeros(0, dtype=np.int8))
    return IdleIntervals(dr.rank, dr.device, c.a, c.b, c.cause, drained=c.drained)


# ---- gaps ------------------------------------------------------------------------------------
def find_gaps(
    timeline: Timeline,
    threshold_ns: int = 10_000,
    rows: list[DeviceRows] | None = None,
    hosts: dict[int, HostView] | None = None,
) -> GapTable:
    """All idle gaps of at least threshold_ns on every device, with their causes, in time order per
    device (devices in (rank, device) order)."""
    return find_gaps_with_details(timeline, threshold_ns, rows, hosts)[0]


def find_gaps_with_details(
    timeline: Timeline,
    threshold_ns: int = 10_000,
    rows: list[DeviceRows] | None = None,
    hosts: dict[int, HostView] | None = None,
) -> tuple[GapTable, GapDetails]:
    """`find_gaps` and the gaps' structured evidence (row `Gap.detail` of the GapDetails)."""
    return Classification(timeline, threshold_ns, rows, hosts).gaps()


class Classification:
    """The idle intervals of every device, the causes of the gaps (those of at least the threshold)
    classified once, and the causes of the shorter intervals classified on first use (`idle`, what the
    findings' wasted_ns is computed from): no interval is classified twice."""

    def __init__(
        self,
        timeline: Timeline,
        threshold_ns: int = 10_000,
        rows: list[DeviceRows] | None = None,
        hosts: dict[int, HostView] | None = None,
    ) -> None:
        self.timeline = timeline
        self.rows = device_rows(timeline) if rows is None else rows
        self.hosts = host_views(timeline) if hosts is None else hosts
        self._parts: list[tuple[DeviceRows, _Idle | None, np.ndarray, _Classified | None]] = []
        for dr in self.rows:
            idle = _idle_of(timeline, dr)
            if idle is None:
                self._parts.append((dr, None, np.zeros(0, dtype=bool), None))
                continue
            sel = (idle.b - idle.a) >= max(int(threshold_ns), 1)
            self._parts.append((dr, idle, sel, _classify(timeline, dr, self.hosts[dr.rank], idle.take(sel))))
        self._idle: dict[tuple[int, int], IdleIntervals] | None = None

    def gaps(self) -> tuple[GapTable, GapDetails]:
        """The gaps (in time order per device, devices in the order of `rows`) and their evidence."""
        tables: list[GapTable] = []
        parts: list[dict[str, np.ndarray]] = []
        row = 0
        for dr, _, _, c in self._parts:
            if c is not None:
                host = self.hosts[dr.rank]
                tables.append(_device_gaps(dr, host, c, row))
                parts.append(_details(self.timeline, host, c))
                row += c.a.size
        # profiler-overhead names follow the timeline's strings (GapDetails.profiler_name)
        strings = self.timeline.strings + overhead_names(self.timeline)
        return GapTable.concat(tables), GapDetails.concat(strings, parts)

    def idle(self) -> dict[tuple[int, int], IdleIntervals]:
        """Every idle interval (> 0 ns) of every device; the causes of those shorter than the threshold
        are classified when asked for (IdleIntervals.cause / causes_of)."""
        if self._idle is None:
            out = {}
            for dr, idle, sel, c in self._parts:
                if idle is None:
                    e = np.zeros(0, dtype=_I64)
                    out[(dr.rank, dr.device)] = IdleIntervals(dr.rank, dr.device, e, e, np.zeros(0, dtype=np.int8))
                    continue
                classify, drained = self._classifier(dr, idle, sel, c)
                out[(dr.rank, dr.device)] = IdleIntervals(dr.rank, dr.device, idle.a, idle.b, classify=classify,
                                                          drained=drained)
            self._idle = out
        return self._idle

    def _classifier(self, dr: DeviceRows, idle: _Idle, sel: np.ndarray, c: _Classified | None
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        known = np.full(idle.a.size, -1, dtype=np.int8)  # the causes classified already (the gaps' first)
        drained = np.zeros(idle.a.size, dtype=bool)
        if c is not None:
            known[sel] = c.cause
            drained[sel] = c.drained

        def classify(m: np.ndarray) -> np.ndarray:
            out = known[m]
            todo = out < 0
            if todo.any():
                rows = np.flatnonzero(m)[todo]
                rest = _classify(self.timeline, dr, self.hosts[dr.rank], idle.take(rows), details=False)
                assert rest is not None
                out[todo] = known[rows] = rest.cause
                drained[rows] = rest.drained
            return out

        def drained_of(m: np.ndarray) -> np.ndarray:
            classify(m)
            return drained[m]

        return classify, drained_of


def _device_gaps(dr: DeviceRows, host: HostView, c: _Classified, first_row: int) -> GapTable:
    n = c.a.size
    return GapTable(
        rank=np.full(n, dr.rank, dtype=_I64), device=np.full(n, dr.device, dtype=_I64), start=c.a, end=c.b,
        cause=c.cause, host_data=np.zeros(n, dtype=_I64),
        host_data_labels=(host.host_data + ("+os_calls" if host.os_data else ""),),
        launch_start=np.where(c.found, c.l_start, -1), launch_tid=c.l_tid, host_active=np.round(c.act, 4),
        detail=np.arange(first_row, first_row + n, dtype=_I64),
    )


def _details(timeline: Timeline, host: HostView, c: _Classified) -> dict[str, np.ndarray]:
    """The structured evidence of one device's gaps (GapDetails columns), vectorized."""
    n = c.a.size
    none = np.full(n, -1, dtype=_I64)
    has_api = host.api_name.size > 0
    sync = c.cause == _HOST_SYNC
    # the wait each host_sync gap names (the one that covers it); for a gap a wait was in progress at whose
    # start but did not cover, that wait (the evidence says when it returned)
    w = np.where(c.covered, c.w_cover, c.w_inprog)
    has_wait = (sync | c.after_wait) & (host.wait_start.size > 0)
    wc = np.where(has_wait, w, 0)

    def wait_col(col: np.ndarray) -> np.ndarray:
        return np.where(has_wait, col[wc], -1) if col.size else none

    # the outermost CPU op the launching thread was in: halfway to the launch (launch_latency), or
    # halfway from the wait's return to the launch (host_sync; launch_latency after a wait in progress)
    back = np.minimum(np.maximum(wait_col(host.wait_end), c.a), c.b)
    t_sync = back + (np.maximum(c.l_start, back) - back) // 2
    t_launch = c.a + (c.l_start - c.a) // 2
    looked = c.found & (sync | (c.cause == _LAUNCH))
    op = host.op_at(c.l_tid[looked], np.where(sync | c.after_wait, t_sync, t_launch)[looked])
    host_op = none.copy()
    host_op[looked] = np.where(op >= 0, host.op_name[np.maximum(op, 0)] if host.op_name.size else -1, -1)
    dep = c.cause == _DEP
    return {
        "start": c.a,
        "end": c.b,
        "cause": c.cause,
        "host_data": np.full(n, HOST_DATA.index(host.host_data), dtype=np.int8),
        "next_kind": column(timeline, "kind")[c.nxt].astype(np.int8),
        "next_name": column(timeline, "name")[c.nxt].astype(_I64),
        "next_stream": column(timeline, "stream")[c.nxt].astype(_I64),
        "next_graph": (host.flags_of(c.nxt) & Flag.GRAPH) != 0,
        "launch_found": c.found,
        "launch_name": np.where(c.found, host.api_name[c.lic] if has_api else -1, -1).astype(_I64),
        "launch_tid": c.l_tid,
        "launch_start": np.where(c.found, c.l_start, 0).astype(_I64),
        "wait_covers": c.covered & sync,
        "wait_name": wait_col(host.wait_name).astype(_I64),
        "wait_tid": wait_col(host.wait_tid).astype(_I64),
        "wait_start": wait_col(host.wait_start).astype(_I64),
        "wait_end": wait_col(host.wait_end).astype(_I64),
        "wait_fraction": np.where(sync, c.cov, 0.0),
        "host_active": c.act,
        "host_op": host_op,
        "dep_name": np.where(dep & c.s_ok, c.s_name, -1).astype(_I64),
        "dep_start": np.where(dep & c.s_ok, c.s_time, -1).astype(_I64),
        "os_data": np.full(n, host.os_data, dtype=bool),
        "os_blocked": c.os.blocked,
        "os_self": c.os.self_frac,
        "os_all": c.os.all_frac,
        "os_threads": c.os.threads,
        "os_calls": c.os.calls,
        "os_name": c.os.name.astype(_I64),
        "os_start": c.os.start,
        "os_end": c.os.end,
        "input_fraction": c.inp.frac,
        "input_name": c.inp.name.astype(_I64),
        "input_start": c.inp.start,
        "input_end": c.inp.end,
        "input_os": c.inp.os_call,
        "host_idle": c.host_idle,
        "idle_fraction": c.idle_frac,
        "after_wait": c.after_wait,
        "profiler_fraction": c.prof.frac,
        "profiler_name": np.where(c.prof.name >= 0, len(timeline.strings) + c.prof.name, -1).astype(_I64),
        "profiler_start": c.prof.start,
        "profiler_end": c.prof.end,
    }
