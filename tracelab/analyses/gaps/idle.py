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

import itertools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from tracelab.analyses.core.host import HostView, host_views
from tracelab.analyses.core.overhead import overhead_names
from tracelab.analyses.device.devices import DeviceRows, device_rows
from tracelab.analyses.gaps.causes import _HOST_SYNC, _Classified, _classify, _Idle, _idle_of
from tracelab.analyses.gaps.details import _details, _device_gaps
from tracelab.analyses.parallel import run_each, threads_for
from tracelab.analyses.results import GapDetails, GapTable
from tracelab.model import Timeline

__all__ = ["Classification", "IdleIntervals", "idle_intervals"]

_I64 = np.int64
R = TypeVar("R")
# a device with at most this many idle intervals has them all classified in one pass (with the gaps' details)
ONE_PASS_MAX = 1 << 14
# intervals classified in parts side by side (a big timeline, `threads_for`) when each part has at least this many
PART_MIN = 1 << 15
# at most this many intervals are classified in one pass (their columns and temporaries at once)
BLOCK = 1 << 16


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

    def sync_caused_of(self, m: np.ndarray) -> np.ndarray:
        """Whether each interval m (a boolean mask) is the GPU idle a host sync caused: host_sync (a wait
        covers most of it), or it began while the host waited and the host was only relaunching after the
        wait returned (the sync drained the queue; issue 24 item 7 gives it the cause of that time)."""
        sync = self.causes_of(m) == _HOST_SYNC
        if self._drained is None:
            return sync
        d = self._drained[m] if isinstance(self._drained, np.ndarray) else self._drained(m)
        return sync | d


def idle_intervals(timeline: Timeline, dr: DeviceRows, host: HostView) -> IdleIntervals:
    """All idle intervals (> 0 ns) of a device with their causes, no details."""
    idle = _idle_of(timeline, dr)
    c = _classify(timeline, dr, host, idle, details=False) if idle is not None else None
    if c is None:
        e = np.zeros(0, dtype=_I64)
        return IdleIntervals(dr.rank, dr.device, e, e, np.zeros(0, dtype=np.int8))
    return IdleIntervals(dr.rank, dr.device, c.a, c.b, c.cause, drained=c.drained)


# ---- gaps ------------------------------------------------------------------------------------
def _in_blocks(timeline: Timeline, dr: DeviceRows, host: HostView, idle: _Idle, rows: np.ndarray, details: bool,
               reduce: Callable[[_Classified, int], R]) -> list[R]:
    """`reduce(classification, first)` of consecutive runs of the intervals `rows` (indices into `idle`,
    ascending; `first`: where the run begins in `rows`), in order. Each run holds at most BLOCK intervals (the
    classification's columns and temporaries are bounded: each run's is reduced, then freed), and the runs
    go side by side on up to `threads_for` threads when there are many intervals (each interval's cause and
    evidence depend on it alone, so the runs give what one pass gives)."""
    n = rows.size
    if n == 0:
        return []
    threads = max(1, min(threads_for(timeline.n_events), n // PART_MIN))
    cuts = np.linspace(0, n, max(threads, -(-n // BLOCK)) + 1).astype(np.int64).tolist()

    def run(lo: int, hi: int) -> R:
        c = _classify(timeline, dr, host, idle.take(rows[lo:hi]), details)
        assert c is not None
        return reduce(c, lo)

    return run_each([lambda lo=lo, hi=hi: run(lo, hi) for lo, hi in itertools.pairwise(cuts)], threads)


def _causes(c: _Classified, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """What the lazy causes keep of a classification: the causes and which intervals a sync drained.
    (`first`, the block's first row, is not needed: the signature is `_in_blocks`'s per-block call.)"""
    return c.cause, c.drained


def _joined_causes(got: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])


class Classification:
    """The idle intervals of every device, the causes of the gaps (those of at least the threshold)
    classified once, and the causes of the shorter intervals classified on first use (`idle`, what the
    findings' wasted_ns is computed from): no interval is classified twice. The gaps' table rows and evidence
    are made as their classification goes (a block of gaps at a time); only the causes are kept."""

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
        # per device: its idle intervals, which of them are gaps, the gaps' (causes, drained)
        self._parts: list[tuple[DeviceRows, _Idle | None, np.ndarray, tuple[np.ndarray, np.ndarray] | None]] = []
        self._whole: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # devices classified whole
        self._tables: list[GapTable] = []
        self._details: list[dict[str, np.ndarray]] = []
        self._gaps: tuple[GapTable, GapDetails] | None = None
        row = 0  # the next device's first gap's row in the table
        for dr in self.rows:
            idle = _idle_of(timeline, dr)
            if idle is None:
                self._parts.append((dr, None, np.zeros(0, dtype=bool), None))
                continue
            sel = (idle.b - idle.a) >= max(int(threshold_ns), 1)
            host = self.hosts[dr.rank]

            def gap_rows(c: _Classified, first: int, dr: DeviceRows = dr, host: HostView = host, row: int = row
                         ) -> tuple[GapTable, dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
                return _device_gaps(dr, host, c, row + first), _details(timeline, host, c), _causes(c)

            if idle.a.size <= ONE_PASS_MAX:
                # a small device: every interval at once (the findings ask for the short ones' causes too),
                # one classification instead of two (many devices: the fixed cost of each pass is most of it)
                whole = _classify(timeline, dr, host, idle)
                assert whole is not None
                self._whole[(dr.rank, dr.device)] = _causes(whole)
                got = [gap_rows(whole.take(sel), 0)] if sel.any() else []
            else:
                got = _in_blocks(timeline, dr, host, idle, np.flatnonzero(sel), True, gap_rows)
            self._tables.extend(g[0] for g in got)
            row += sum(g[0].column("start").size for g in got)
            self._details.extend(g[1] for g in got)
            gap_causes = _joined_causes([g[2] for g in got]) if got else None
            self._parts.append((dr, idle, sel, gap_causes))
        self._idle: dict[tuple[int, int], IdleIntervals] | None = None

    def gaps(self) -> tuple[GapTable, GapDetails]:
        """The gaps (in time order per device, devices in the order of `rows`) and their evidence."""
        if self._gaps is None:
            # profiler-overhead names follow the timeline's strings (GapDetails.profiler_name)
            strings = self.timeline.strings + overhead_names(self.timeline)
            parts, self._details = self._details, []
            self._gaps = GapTable.concat(self._tables), GapDetails.concat(strings, parts)
            self._tables = []
        return self._gaps

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

    def _classifier(self, dr: DeviceRows, idle: _Idle, sel: np.ndarray, c: tuple[np.ndarray, np.ndarray] | None
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        known = np.full(idle.a.size, -1, dtype=np.int8)  # the causes classified already (the gaps' first)
        drained = np.zeros(idle.a.size, dtype=bool)
        whole = self._whole.get((dr.rank, dr.device))
        if whole is not None:
            known, drained = whole[0].copy(), whole[1].copy()
        elif c is not None:
            known[sel] = c[0]
            drained[sel] = c[1]
        # the closures hold what they need, not self: self holds them (through `_idle`), and a reference cycle
        # would keep the host views and the classifications alive until the garbage collector's next full pass
        timeline, host = self.timeline, self.hosts[dr.rank]

        def classify(m: np.ndarray) -> np.ndarray:
            out = known[m]
            todo = out < 0
            if todo.any():
                rows = np.flatnonzero(m)[todo]
                cause, rest_drained = _joined_causes(_in_blocks(timeline, dr, host, idle, rows, False, _causes))
                out[todo] = known[rows] = cause
                drained[rows] = rest_drained
            return out

        def drained_of(m: np.ndarray) -> np.ndarray:
            classify(m)
            return drained[m]

        return classify, drained_of
