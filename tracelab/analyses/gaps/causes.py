"""The cause of each idle interval of a device (DESIGN.md, "Gap causes"; the order of the rules is in
tracelab.analyses.gaps.idle): the launch of the op that ends it, what the launching thread was doing, and the
rules that pick the cause from that evidence (tracelab.analyses.gaps.evidence)."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.intervals import covered_length
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.overhead import rank_overhead
from tracelab.analyses.core.rows import device_union
from tracelab.analyses.device.devices import DeviceRows
from tracelab.analyses.gaps.evidence import (
    _input_evidence,
    _InputEvidence,
    _os_evidence,
    _OsEvidence,
    _profiler_evidence,
    _ProfilerEvidence,
    longest_hole,
)
from tracelab.analyses.gaps.input_wait import INPUT_FRACTION
from tracelab.analyses.results import CAUSES
from tracelab.model import Timeline

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


class _Classified(msgspec.Struct, frozen=True):
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

    def take(self, m: np.ndarray) -> _Classified:
        """The classification of the intervals m (every column is per interval; each interval's cause and
        evidence depend on it alone, so this is what classifying those intervals alone gives)."""
        return _take(self, m)


def _take(x: object, m: np.ndarray) -> object:
    if isinstance(x, np.ndarray):
        return x[m]
    return type(x)(*(_take(getattr(x, f), m) for f in x.__struct_fields__))  # type: ignore[attr-defined]


class _Idle(msgspec.Struct, frozen=True):
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


class _Launch(msgspec.Struct, frozen=True):
    """Per gap, the host API call that launched the GPU op ending it."""

    found: np.ndarray  # the launch is in the trace
    lic: np.ndarray  # its index into host.api_* (0 when not found)
    start: np.ndarray
    tid: np.ndarray  # its thread (-1 when not found)
    queued: np.ndarray  # it returned before the gap began: the op was queued already


def _next_launch(timeline: Timeline, host: HostView, idle: _Idle) -> _Launch:
    """The launch of the GPU op that ends each gap."""
    a = idle.a
    li = host.launch_index(column(timeline, "correlation")[idle.nxt])
    found = li >= 0
    lic = np.maximum(li, 0)
    has_api = host.api_start.size > 0
    l_start = np.where(found, host.api_start[lic] if has_api else 0, 0)
    l_end = np.where(found, host.api_end[lic] if has_api else 0, 0)
    l_tid = np.where(found, host.api_tid[lic] if has_api else -1, -1).astype(_I64)
    return _Launch(found, lic, l_start, l_tid, found & (l_end <= a))


class _ThreadEvidence(msgspec.Struct, frozen=True):
    """Per gap, what the launching thread's waits (and waits on the device), recorded activity, OS calls and
    input waits say, read thread by thread."""

    inprog: np.ndarray  # a wait was in progress at the gap start
    w_inprog: np.ndarray  # that wait (index into host.wait_*)
    w_cover: np.ndarray  # the wait that covers most recently
    w_back: np.ndarray  # when the wait in progress at the gap start returned (the gap start: none)
    cov: np.ndarray  # share of the gap the waits cover
    act: np.ndarray  # host_active
    idle_frac: np.ndarray
    idle_len: np.ndarray
    absent: np.ndarray  # the launching thread was not recorded before its launch
    os: _OsEvidence
    inp: _InputEvidence


def _thread_evidence(host: HostView, device: int, a: np.ndarray, b: np.ndarray, ln: _Launch,
                     details: bool) -> _ThreadEvidence:
    """Per launching thread: its waits (and waits on this device), its recorded activity, its input waits."""
    n = a.size
    dur = b - a
    ev = _ThreadEvidence(
        np.zeros(n, dtype=bool), np.zeros(n, dtype=_I64), np.zeros(n, dtype=_I64), a.copy(), np.zeros(n),
        np.zeros(n), np.zeros(n), np.zeros(n, dtype=_I64), np.zeros(n, dtype=bool),
        _OsEvidence.empty(n), _InputEvidence.empty(n),
    )
    win_end = np.where(ln.found & (ln.start > a), np.minimum(ln.start, b), b)
    for t in distinct(ln.tid).tolist():
        q = np.flatnonzero(ln.tid == t)
        aq, bq = a[q], b[q]
        ws = host.waits_for(int(t), device)
        if ws.start.size:
            wi = np.searchsorted(ws.start, aq, side="right") - 1
            wic = np.maximum(wi, 0)
            ev.inprog[q] = (wi >= 0) & (ws.runmax[wic] >= aq - CLOCK_TOLERANCE_NS)
            ev.w_back[q] = np.where(ev.inprog[q], np.maximum(ws.runmax[wic], aq), aq)
            ev.cov[q] = covered_length(ws.us, ws.ue, aq, bq) / dur[q]
            if details:
                ev.w_inprog[q] = ws.arg[wic]
                wj = np.searchsorted(ws.start, bq, side="left") - 1
                ev.w_cover[q] = ws.arg[np.maximum(wj, 0)]
        # the time after a wait in progress at the gap start returned is classified on its own
        a0 = np.minimum(ev.w_back[q], win_end[q])
        if t >= 0:
            tu, te = host.thread_activity(int(t))
            ev.act[q] = covered_length(tu, te, a0, win_end[q]) / np.maximum(win_end[q] - a0, 1)
            pid = int(host.api_pid[ln.lic[q[0]]]) if host.api_pid.size else 0
            if host.has_op_events and not host.os_data:
                pu, pe = host.process_activity(pid, int(t))
                ev.idle_len[q] = longest_hole(pu, pe, a0, win_end[q])
                ev.idle_frac[q] = ev.idle_len[q] / np.maximum(win_end[q] - a0, 1)
            # the launching thread was not recorded at all before its launch (no CUDA call, CPU op, NVTX range
            # or OS call): it was absent
            ev.absent[q] = host.thread_first(int(t)) >= ln.start[q] - CLOCK_TOLERANCE_NS
            if host.os_data:
                _os_evidence(host, int(t), pid, q, a0, win_end[q], ev.os, details)
            _input_evidence(host, int(t), q, a0, win_end[q], ev.inp, details)
        elif details:
            ev.act[q] = covered_length(host.act_us, host.act_ue, a0, win_end[q]) / np.maximum(win_end[q] - a0, 1)
    return ev


def _stream_wait_before(host: HostView, l_start: np.ndarray, a: np.ndarray,
                        dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evidence of a queued dependency: a stream-wait (event) record issued shortly before the launch
    (whether there is one, its time and name)."""
    if host.swait_start.size:
        si = np.searchsorted(host.swait_start, l_start, side="right") - 1
        sic = np.maximum(si, 0)
        s_ok = (si >= 0) & (host.swait_start[sic] >= a - dur - 1_000_000)
        return s_ok, host.swait_start[sic], host.swait_name[sic]
    s_time = s_name = np.zeros(a.size, dtype=_I64)
    return np.zeros(a.size, dtype=bool), s_time, s_name


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
    dur = b - a
    ln = _next_launch(timeline, host, idle)
    found, queued = ln.found, ln.queued
    th = _thread_evidence(host, dr.device, a, b, ln, details)
    os_ev, inp = th.os, th.inp
    covered = th.cov >= HOST_SYNC_COVERAGE
    s_ok, s_time, s_name = _stream_wait_before(host, ln.start, a, dur)
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
    host_idle = found & (th.idle_frac > HOST_IDLE_FRACTION) & (th.idle_len >= HOST_IDLE_MIN_NS)
    # the profiler's own work (nsys PROFILER_OVERHEAD: buffer flushes, CUPTI set-up) on the rank's processes
    # covers at least half of the gap: the profiler's doing, not a host cause (unless the next op was queued
    # before the gap began: then the host did not hold it back)
    prof = _profiler_evidence(rank_overhead(timeline, host), a, b, details)
    profiler = prof.frac >= PROFILER_COVERAGE
    cause = np.select(
        [dep, queued, profiler, covered, input_wait, os_blocked, ~found, th.absent, host_idle],
        [_DEP, _UNKNOWN, _PROFILER, _HOST_SYNC, _INPUT, _NO_WORK, _UNKNOWN, _NO_WORK, _NO_WORK],
        default=_LAUNCH,
    ).astype(np.int8)
    os_ev.blocked[:] = os_blocked & (cause == _NO_WORK)
    idle = host_idle & (cause == _NO_WORK) & ~os_ev.blocked & ~th.absent
    inprog = th.inprog
    return _Classified(
        a, b, nxt, cause, found, ln.lic, ln.start, ln.tid, covered, th.cov, th.w_cover, th.w_inprog,
        inprog & ~covered, th.w_back, inprog & ~covered & ~queued & ((cause == _LAUNCH) | (cause == _UNKNOWN)),
        th.act, idle & (th.idle_frac > 0), th.idle_frac, s_ok, s_time, s_name, os_ev, inp, prof,
    )
