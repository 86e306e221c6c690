"""The host side of one rank, as sorted arrays that gap causes and findings look things up in:
CUDA API calls and what they launched, the waits for the GPU (calls that really block), stream-wait
records, recorded host activity per thread (API calls, CPU ops, NVTX ranges), the CPU ops, and the
OS runtime calls (nsys --trace=osrt) with what they say about threads blocked in the OS.

All lookups are vectorized (searchsorted over sorted arrays); loops run only over host threads.
"""

from __future__ import annotations

import itertools
from typing import Literal

import numpy as np

from tracelab.analyses.core.distinct import FirstPosition, distinct, distinct_codes
from tracelab.analyses.core.host_sets import InputSpans, OsCalls, WaitSet
from tracelab.analyses.core.host_threads import FirstSeen, os_call_rows
from tracelab.analyses.core.intervals import complement_all, intersect, merge, running_max_index, subtract
from tracelab.analyses.core.memo import column
from tracelab.analyses.core.rows import names_matching, ranks_of, rows_of
from tracelab.analyses.core.step_names import PROFILER_STEP_NAME, STEP_LIKE_NAME
from tracelab.analyses.gaps.input_wait import DATALOADER, DEFAULT_INPUT_WORDS, INPUT_OS_CALLS, words_pattern
from tracelab.model import GPU_ACTIVITY_KINDS, CopyKind, EventKind, Flag, MemKind, SyncKind, Timeline
from tracelab.model.grouping import member, sorted_unique, stable_order
from tracelab.model.kinds import HOST_API_KINDS

# OS calls that wait for another thread of the same program, and the calls that wake such a waiter. A
# wait counts as blocked only until the last wake-up call made in the process while it waited (the
# thread is runnable from then on: the time to its return is the host's own latency, e.g. PyTorch's
# autograd thread woken by the main thread's loss.backward()).
THREAD_WAITS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "sem_wait", "sem_timedwait",
    "sem_clockwait", "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock", "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock", "pthread_join",
    "pthread_barrier_wait", "pthread_spin_lock",
})
WAKE_CALLS = frozenset({"pthread_cond_signal", "pthread_cond_broadcast", "sem_post", "pthread_mutex_unlock",
                        "pthread_rwlock_unlock", "pthread_barrier_wait"})

_I64 = np.int64
_NARROW = 1 << 31  # positions below this are kept as int32


def _narrow(rows: np.ndarray, n: int) -> np.ndarray:
    """Row positions (below n) as int32 when every one fits."""
    return rows.astype(np.int32) if n < _NARROW else rows


HostData = Literal["cpu_ops", "cuda_api", "none"]


def _non_blocking_copies(timeline: Timeline, rank: int) -> np.ndarray:
    """Correlation ids (repeats allowed) of the rank's GPU copies / memsets whose synchronous API call does not block the
    host (CUDA runtime docs, "API synchronization behavior"): device-to-device memcpys ("no host-side
    synchronization is performed") and memsets to device memory ("asynchronous with respect to the
    host except when the target memory is pinned host memory")."""
    mc = rows_of(timeline, rank, (EventKind.MEMCPY,))
    ck = column(timeline, "copy_kind")[mc]
    ms = rows_of(timeline, rank, (EventKind.MEMSET,))
    dst = column(timeline, "dst_mem")[ms]
    rows = np.concatenate([
        mc[(ck == int(CopyKind.DTOD)) | (ck == int(CopyKind.PTOP))],
        ms[(dst != int(MemKind.PINNED)) & (dst != int(MemKind.PAGEABLE))],
    ])
    corr = column(timeline, "correlation")[rows]
    return corr[corr >= 0]  # repeats allowed: only looked up with np.isin


def _count_distinct(values: np.ndarray) -> int:
    if values.size == 0:
        return 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 1 << 16:
        return int(np.count_nonzero(np.bincount(values.astype(_I64) - lo)))
    return int(distinct(values).size)


class HostView:
    """Sorted host-side arrays of one rank that gap causes and findings look things up in."""

    def __init__(self, timeline: Timeline, rank: int, first_seen: FirstSeen | None = None,
                 input_words: tuple[str, ...] = DEFAULT_INPUT_WORDS) -> None:
        self.rank = rank
        self._first_seen = first_seen or {}
        # the rank's events come grouped by kind (tracelab.analyses.core.rows.kind_rows, once per timeline):
        # nothing here masks every event of the timeline
        self._flags = column(timeline, "flags")
        api = rows_of(timeline, rank, HOST_API_KINDS)  # host API calls (RUNTIME / DRIVER), in start order
        sync_rows = rows_of(timeline, rank, (EventKind.SYNC,))
        ranges = rows_of(timeline, rank, (EventKind.CPU_OP, EventKind.NVTX_RANGE))
        self._read_api_calls(timeline, api)
        self._read_waits(timeline, api, sync_rows)
        self._read_stream_waits(timeline, api, sync_rows)
        cpu = self._read_activity(timeline, api)
        self._read_os_calls(timeline)
        self._read_threads(timeline, api, ranges)
        self._read_input_ranges(timeline, ranges, input_words)
        self._read_cpu_ops(timeline, cpu)

    def _read_api_calls(self, timeline: Timeline, api: np.ndarray) -> None:
        """The host API calls, the device of the GPU op each launched and whether each really blocks."""
        start, end, names = column(timeline, "start"), column(timeline, "end"), column(timeline, "name")
        corr, device = column(timeline, "correlation"), column(timeline, "device")
        self.api_rows = api
        self.api_start = start[api]
        self.api_end = end[api]
        self.api_tid = column(timeline, "tid")[api]
        self.api_name = names[api]
        self.api_flags = self._flags[api]
        self.api_sync = column(timeline, "sync_kind")[api]
        api_corr = corr[api]
        has = api_corr >= 0
        self._corr_pos = np.flatnonzero(has)  # index into the api_* arrays
        self._corr_first = FirstPosition(api_corr[has])

        # GPU op correlated with each API call (for its device and what it really did)
        gpu = rows_of(timeline, self.rank, GPU_ACTIVITY_KINDS)
        self.api_device = np.where(device[api] >= 0, device[api], -1).astype(_I64)
        gi = self.launch_index(corr[gpu])
        ok = gi >= 0
        self.api_device[gi[ok]] = device[gpu[ok]]
        self.n_devices = _count_distinct(device[gpu])
        # A call blocks when its name says so (BLOCKING flag) unless its correlated copy shows it did not:
        # a device-to-device memcpy or a memset to device memory returns without waiting.
        # (looked up for the calls named blocking only: the others' copies change nothing)
        named = np.flatnonzero(((self.api_flags & Flag.BLOCKING) != 0) & has)
        non_blocking = np.zeros(api.size, dtype=bool)
        if named.size:
            non_blocking[named] = member(api_corr[named], sorted_unique(_non_blocking_copies(timeline, self.rank)))
        self.api_blocking = ((self.api_flags & Flag.BLOCKING) != 0) & ~non_blocking
        self.api_nonblocking_sync = ((self.api_flags & Flag.BLOCKING) != 0) & non_blocking

    def _read_waits(self, timeline: Timeline, api: np.ndarray, sync_rows: np.ndarray) -> None:
        """The intervals during which the host waited for the GPU (wait_* arrays, in start order)."""
        start, end, names = column(timeline, "start"), column(timeline, "end"), column(timeline, "name")
        tid, corr, device = column(timeline, "tid"), column(timeline, "correlation"), column(timeline, "device")
        blocking = api[self.api_blocking]
        sk = column(timeline, "sync_kind")[sync_rows]
        sync_ev = sync_rows[(sk != int(SyncKind.STREAM_WAIT_EVENT)) & (sk != int(SyncKind.EVENT_QUERY))]
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
        mc = rows_of(timeline, self.rank, (EventKind.MEMCPY,))
        mc = mc[(column(timeline, "copy_kind")[mc] == int(CopyKind.DTOH))
                & (column(timeline, "dst_mem")[mc] == int(MemKind.PAGEABLE))]
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

    def _read_stream_waits(self, timeline: Timeline, api: np.ndarray, sync_rows: np.ndarray) -> None:
        """GPU-side dependencies issued from the host: cudaStreamWaitEvent calls and sync records."""
        start, kind = column(timeline, "start"), column(timeline, "kind")
        sk = column(timeline, "sync_kind")[sync_rows]
        swe = int(SyncKind.STREAM_WAIT_EVENT)  # the few such rows of both, not every call and record merged
        sw = np.sort(np.concatenate([api[self.api_sync == swe], sync_rows[sk == swe]]), kind="stable")
        is_api = kind[sw] != int(EventKind.SYNC)
        order = np.lexsort((is_api, start[sw]))  # on ties the API call (a readable name) comes last
        self.swait_start = start[sw][order]
        self.swait_name = column(timeline, "name")[sw][order]

    def _read_activity(self, timeline: Timeline, api: np.ndarray) -> np.ndarray:
        """Any recorded host activity, per thread: API calls, CPU ops and NVTX ranges (nsys
        --pytorch=autograd-nvtx, record_function): host work between CUDA calls; step annotations excluded.
        Returns those CPU op / NVTX rows."""
        start, end, tid = column(timeline, "start"), column(timeline, "end"), column(timeline, "tid")
        cpu = rows_of(timeline, self.rank, (EventKind.CPU_OP, EventKind.NVTX_RANGE))
        if cpu.size:
            cpu = cpu[~names_matching(timeline, PROFILER_STEP_NAME, STEP_LIKE_NAME)[column(timeline, "name")[cpu]]]
        self.has_cpu_ops = bool(cpu.size)
        # torch.profiler's CPU ops (Kineto cpu_op): between them and the CUDA calls the thread ran no op
        self.has_op_events = bool(rows_of(timeline, self.rank, (EventKind.CPU_OP,)).size)
        if cpu.size:
            act = np.sort(np.concatenate([cpu, api]), kind="stable")
            self.act_us, self.act_ue = merge(start[act], end[act], assume_sorted=True)
        else:  # the API calls alone: their columns are gathered already
            act = api
            self.act_us, self.act_ue = merge(self.api_start, self.api_end, assume_sorted=True)
        # the activity's rows (narrow when they fit), not its columns: a thread's part is gathered when asked for
        self._act_rows = _narrow(act, timeline.n_events)
        self._cols = (start, end, tid)
        self._act_by_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.host_data: HostData = "cpu_ops" if self.has_cpu_ops else ("cuda_api" if api.size else "none")
        return cpu

    def _read_os_calls(self, timeline: Timeline) -> None:
        """OS runtime calls (nsys --trace=osrt; `os_calls` in the run's stats means they were traced), per
        thread in (thread, start) order, the thread waits among them and the wake-up calls per process."""
        start, end, names, tid = (column(timeline, c) for c in ("start", "end", "name", "tid"))
        self.os_data = "os_calls" in timeline.meta.stats
        os_rows = os_call_rows(timeline, self.rank)
        os_rows = os_rows[np.lexsort((start[os_rows], tid[os_rows]))]
        self._os_tid, self._os_start = tid[os_rows].astype(_I64), start[os_rows]
        self._os_end, self._os_name = end[os_rows], names[os_rows]
        self._os_pid = column(timeline, "pid")[os_rows].astype(_I64)
        os_names = distinct(self._os_name)
        kinds = [timeline.name(int(i)) for i in os_names.tolist()]  # a few dozen distinct calls
        self._thread_wait_ids = os_names[[k in THREAD_WAITS for k in kinds]] if kinds else os_names
        self._input_os_ids = os_names[[k in INPUT_OS_CALLS for k in kinds]] if kinds else os_names
        wake = np.isin(self._os_name, os_names[[k in WAKE_CALLS for k in kinds]] if kinds else os_names)
        order = np.lexsort((self._os_start[wake], self._os_pid[wake]))
        self._wake_pid, self._wake_start = self._os_pid[wake][order], self._os_start[wake][order]
        self._os_by_tid: dict[int, OsCalls] = {}
        self._waits_for: dict[tuple[int, int], WaitSet] = {}
        self._blocked_by_pid: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self._activity_by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _read_threads(self, timeline: Timeline, api: np.ndarray, ranges: np.ndarray) -> None:
        """The threads that launch GPU work, per process, and what each host thread's life span is read from."""
        self.api_pid = column(timeline, "pid")[api].astype(_I64)
        lt = (self.api_flags & Flag.LAUNCH) != 0
        pairs = distinct((self.api_pid[lt] << 32) | (self.api_tid[lt].astype(_I64) & 0xFFFFFFFF))
        self._launchers: dict[int, list[int]] = {}
        for k in pairs.tolist():
            self._launchers.setdefault(k >> 32, []).append(k & 0xFFFFFFFF)
        # each host thread's recorded life span, found when asked for (the launching threads only): the
        # (tid, start, end) columns of its API calls, CPU ops and NVTX ranges (step ranges included; their rows,
        # gathered when asked for), OS calls
        self._host_parts = ((self.api_tid, self.api_start, self.api_end), None,
                            (self._os_tid, self._os_start, self._os_end))
        self._range_rows = ranges
        self._life: dict[int, tuple[int, int] | None] = {}

    def _read_input_ranges(self, timeline: Timeline, ranges: np.ndarray, input_words: tuple[str, ...]) -> None:
        """Data-loading ranges (DataLoader iterator ops, user ranges named for data / batch / load:
        tracelab.analyses.gaps.input_wait), per thread in (thread, start) order."""
        start, end, names, tid = (column(timeline, c) for c in ("start", "end", "name", "tid"))
        inp = np.zeros(ranges.size, dtype=bool)
        if ranges.size:
            inp = names_matching(timeline, DATALOADER)[names[ranges]]
            wp = words_pattern(tuple(input_words))
            if wp is not None:
                inp |= ((column(timeline, "kind")[ranges] == int(EventKind.NVTX_RANGE))
                        & names_matching(timeline, wp)[names[ranges]])
        inp_rows = ranges[inp]
        inp_rows = inp_rows[np.lexsort((start[inp_rows], tid[inp_rows]))]
        self._in_tid, self._in_start = tid[inp_rows].astype(_I64), start[inp_rows]
        self._in_end, self._in_name = end[inp_rows], names[inp_rows]
        self._input_by_tid: dict[int, InputSpans] = {}

    def _read_cpu_ops(self, timeline: Timeline, cpu: np.ndarray) -> None:
        """CPU ops per thread, for "what was the launching thread doing": sorted by (thread, start)
        (the rows are in start order already: a stable sort by thread alone, of small codes, by radix)."""
        tid = column(timeline, "tid")
        threads, thread_code = distinct_codes(tid[cpu])
        order = stable_order(thread_code)
        # the ops of thread threads[k] are op_*[op_bounds[k]:op_bounds[k + 1]]
        self.op_threads = threads
        self.op_bounds = np.searchsorted(thread_code[order], np.arange(threads.size + 1))
        del thread_code
        ops = cpu[order]
        del order
        self.op_start = column(timeline, "start")[ops]
        op_end = column(timeline, "end")[ops]
        self.op_name = column(timeline, "name")[ops]
        del ops
        # segmented running maximum of the ends (per thread): the outermost op that started by t
        self.op_reach = np.empty(op_end.size, dtype=_I64)
        self.op_arg = np.empty(op_end.size, dtype=np.int32 if op_end.size < _NARROW else _I64)
        for lo, hi in itertools.pairwise(self.op_bounds.tolist()):  # one per host thread
            r, g = running_max_index(op_end[lo:hi])
            self.op_reach[lo:hi] = r
            self.op_arg[lo:hi] = g + lo

    def flags_of(self, rows: np.ndarray) -> np.ndarray:
        """The flags column at event rows."""
        return self._flags[rows]

    def first_seen(self, tid: int) -> int:
        """When the thread was first recorded in the whole trace (before any scope), if known."""
        return self._first_seen.get((self.rank, tid), np.iinfo(np.int64).max)

    def thread_first(self, tid: int) -> int:
        """When the thread was first recorded (any host event: CUDA call, CPU op, NVTX range, OS call), in
        this timeline or, before a scope clipped it, in the whole trace."""
        life = self._life_of(tid)
        return min(life[0] if life else np.iinfo(np.int64).max, self.first_seen(tid))

    def _life_of(self, tid: int) -> tuple[int, int] | None:
        """(first start, last end) of the thread's host events in this timeline; None without any."""
        if tid not in self._life:
            lo, hi = [], []
            for part in self._host_parts:
                if part is None:  # the CPU ops and NVTX ranges
                    start, end, tids = self._cols
                    rows = self._range_rows[tids[self._range_rows] == tid]
                    part = (np.full(rows.size, tid), start[rows], end[rows])
                t, s, e = part
                m = t == tid
                if m.any():
                    lo.append(int(s[m].min()))
                    hi.append(int(e[m].max()))
            self._life[tid] = (min(lo), max(hi)) if lo else None
        return self._life[tid]

    def thread_activity(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """Merged recorded activity (CUDA API calls and CPU ops) of one host thread."""
        if tid not in self._act_by_tid:
            start, end, tids = self._cols
            m = tids[self._act_rows] == tid
            rows = self._act_rows[m]
            # one thread has all the activity (a single-threaded program): its union is the rank's, merged already
            self._act_by_tid[tid] = (
                (self.act_us, self.act_ue) if m.all() else merge(start[rows], end[rows], assume_sorted=True)
            )
        return self._act_by_tid[tid]

    def os_calls(self, tid: int) -> OsCalls:
        """One thread's OS runtime calls, and the time it was blocked in them outside its CUDA API calls
        (a CUDA call that enters the OS, e.g. an ioctl inside cudaMalloc, is time in the CUDA call)."""
        got = self._os_by_tid.get(tid)
        if got is None:
            lo = int(np.searchsorted(self._os_tid, tid, side="left"))
            hi = int(np.searchsorted(self._os_tid, tid, side="right"))
            s, e, n = self._os_start[lo:hi], self._os_end[lo:hi], self._os_name[lo:hi]
            runmax, arg = running_max_index(e)
            woken = self._woken_at(s, e, n, self._os_pid[lo:hi])
            in_os = merge(s, woken, assume_sorted=True)
            in_api = self._api_union(tid)
            bs, be = subtract(*in_os, *in_api)
            m = np.isin(n, self._input_os_ids)
            ins, ine = subtract(*merge(s[m], woken[m], assume_sorted=True), *in_api)
            got = self._os_by_tid[tid] = OsCalls(s, runmax, arg, np.sort(e), n, e, bs, be, ins, ine, m)
        return got

    def input_spans(self, tid: int) -> InputSpans:
        """One thread's data-loading ranges (sorted by start, with the running maximum of their ends and
        which range holds it) and the union of the time it waited for input: inside those ranges, or
        blocked in an OS wait for data (INPUT_OS_CALLS, when OS calls were traced)."""
        got = self._input_by_tid.get(tid)
        if got is None:
            lo = int(np.searchsorted(self._in_tid, tid, side="left"))
            hi = int(np.searchsorted(self._in_tid, tid, side="right"))
            s, e, n = self._in_start[lo:hi], self._in_end[lo:hi], self._in_name[lo:hi]
            runmax, arg = running_max_index(e)
            us, ue = merge(s, e, assume_sorted=True)
            if self.os_data:
                oc = self.os_calls(tid)
                us, ue = merge(np.concatenate([us, oc.input_start]), np.concatenate([ue, oc.input_end]))
            got = self._input_by_tid[tid] = InputSpans(s, runmax, arg, n, e, us, ue)
        return got

    def input_ops(self) -> dict[int, tuple[int, int]]:
        """The rank's data-loading ranges by name id: (how many, their total time)."""
        if self._in_name.size == 0:
            return {}
        names, inv = np.unique(self._in_name, return_inverse=True)
        counts = np.bincount(inv)
        totals = np.bincount(inv, weights=(self._in_end - self._in_start).astype(np.float64))
        return {int(n): (int(c), int(t)) for n, c, t in zip(names.tolist(), counts.tolist(), totals.tolist())}

    def _woken_at(self, s: np.ndarray, e: np.ndarray, names: np.ndarray, pid: np.ndarray) -> np.ndarray:
        """The end of each OS call as blocked time: a wait for another thread ends at the last wake-up
        call (signal, broadcast, sem_post, unlock) made in its process while it waited, if any."""
        waits = np.flatnonzero(np.isin(names, self._thread_wait_ids))
        if waits.size == 0 or self._wake_start.size == 0:
            return e
        # one sorted key space for (process, time): wakes of other processes never fall inside a wait
        pids, code = np.unique(self._wake_pid, return_inverse=True)  # a handful of processes
        base = int(min(self._wake_start.min(), s.min()))
        width = int(max(self._wake_start.max(), e.max())) - base + 1  # < 2^53: DECISIONS "Limits"
        key = code.astype(_I64) * width + (self._wake_start - base)
        pi = np.minimum(np.searchsorted(pids, pid[waits]), pids.size - 1)
        known = pids[pi] == pid[waits]
        j = np.searchsorted(key, pi * width + (e[waits] - base), side="left") - 1
        jc = np.maximum(j, 0)
        woke = known & (j >= 0) & (key[jc] > pi * width + (s[waits] - base))
        out = e.copy()
        out[waits[woke]] = self._wake_start[jc[woke]]
        return out

    def _api_union(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.has_cpu_ops:  # the recorded activity is the API calls: that union is merged already
            return self.thread_activity(tid)
        m = self.api_tid == tid
        return merge(self.api_start[m], self.api_end[m], assume_sorted=True)

    def launching_threads(self, pid: int, tid: int) -> list[int]:
        """The threads of process `pid` that launch GPU work in this trace (with `tid` among them)."""
        threads = list(self._launchers.get(pid, []))
        return threads if tid in threads else [*threads, tid]

    def host_blocked(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray, int]:
        """When no launching thread of process `pid` was running: each was blocked in an OS call (outside
        its CUDA calls), waiting for the GPU (a blocking CUDA call) or outside its recorded life span. The
        union of those times (intersected over the threads) and how many launching threads there are."""
        key = (pid << 32) | tid
        got = self._blocked_by_pid.get(key)
        if got is None:
            threads = self.launching_threads(pid, tid)
            us: np.ndarray | None = None
            ue = us
            for t in threads:  # a handful
                oc = self.os_calls(t)
                w = self.wait_tid == t
                ws, we = merge(np.concatenate([oc.blocked_start, self.wait_start[w]]),
                               np.concatenate([oc.blocked_end, self.wait_end[w]]))
                first, last = self._life_of(t) or (0, 0)
                first = min(first, self.first_seen(t))
                outside = complement_all(np.array([first], dtype=_I64), np.array([last], dtype=_I64))
                ts, te = merge(np.concatenate([ws, outside[0]]), np.concatenate([we, outside[1]]))
                us, ue = (ts, te) if us is None else intersect(us, ue, ts, te)
            got = self._blocked_by_pid[key] = (us, ue, len(threads))
        return got

    def process_activity(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The merged recorded activity (CUDA calls, CPU ops, NVTX ranges) of every launching thread of
        process `pid` (with `tid` among them): a hole in it is a time no launching thread ran an op."""
        key = (pid << 32) | tid
        got = self._activity_by_pid.get(key)
        if got is None:
            parts = [self.thread_activity(t) for t in self.launching_threads(pid, tid)]
            got = self._activity_by_pid[key] = (parts[0] if len(parts) == 1 else
                                                merge(np.concatenate([p[0] for p in parts]),
                                                      np.concatenate([p[1] for p in parts])))
        return got

    def waits_for(self, tid: int, device: int) -> WaitSet:
        """The host waits that can explain an idle gap on `device` whose next op thread `tid`
        launches: waits by that thread, or waits on that device (whichever thread made them; a wait
        whose device the trace does not give counts as on it when the rank has one GPU)."""
        key = (tid, device)
        got = self._waits_for.get(key)
        if got is not None:
            return got
        got = self._waits_for[key] = self._waits(tid, device)
        return got

    def _waits(self, tid: int, device: int) -> WaitSet:
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
        k = np.minimum(np.searchsorted(self.op_threads, tid), self.op_threads.size - 1)
        known = self.op_threads[k] == tid
        lo = np.where(known, self.op_bounds[k], 0)
        hi = np.where(known, self.op_bounds[k + 1], 0)
        for th in distinct(tid[hi > lo]).tolist():  # one searchsorted per host thread
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
        i = self._corr_first.find(c)
        return np.where(i >= 0, self._corr_pos[np.maximum(i, 0)] if self._corr_pos.size else -1, -1)


def host_views(timeline: Timeline, first_seen: FirstSeen | None = None,
               input_words: tuple[str, ...] = DEFAULT_INPUT_WORDS) -> dict[int, HostView]:
    return {r: HostView(timeline, r, first_seen, input_words) for r in ranks_of(timeline)}
