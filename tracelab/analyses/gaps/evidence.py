"""The evidence of an idle gap, one kind at a time: what the launching thread's OS runtime calls say, its
input waits (tracelab.analyses.gaps.input_wait), the profiler's own work inside the gap, and the longest
stretch without recorded host activity. Each fills its columns for many gaps at once (vectorized)."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.host_sets import InputSpans, OsCalls
from tracelab.analyses.core.intervals import covered_length, running_max_index
from tracelab.analyses.core.overhead import Overhead

_I64 = np.int64


class _OsEvidence(msgspec.Struct, frozen=True):
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


class _InputEvidence(msgspec.Struct, frozen=True):
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


class _ProfilerEvidence(msgspec.Struct, frozen=True):
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
    _, out.name[q], out.start[q], out.end[q] = _naming_interval(oc, a, w)  # the call that names it


def _naming_interval(
    iv: OsCalls | InputSpans, a: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window [a, w), the interval of `iv` (sorted by start, with the running maximum of the ends) that
    names it: the one running halfway through the window, else the last one starting in it. Returns whether
    there is one overlapping the window, and its name (-1: none), start and end (0: none)."""
    mid = a + (w - a) // 2
    i = np.searchsorted(iv.start, mid, side="right") - 1
    ic = np.maximum(i, 0)
    j = np.where((i >= 0) & (iv.runmax[ic] > mid), iv.arg[ic], np.searchsorted(iv.start, w, side="left") - 1)
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (iv.end[jc] > a) & (iv.start[jc] < w)
    return ok, np.where(ok, iv.name[jc], -1), np.where(ok, iv.start[jc], 0), np.where(ok, iv.end[jc], 0)


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
        ok, name, st, en = _naming_interval(sp, a, w)
        at_mid = ok & (st <= mid) & (en > mid)
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
