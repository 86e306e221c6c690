"""The gap table rows of one device's classified gaps and their structured evidence (GapDetails columns)."""

from __future__ import annotations

import numpy as np

from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.memo import column
from tracelab.analyses.device.devices import DeviceRows
from tracelab.analyses.gaps.causes import _DEP, _HOST_SYNC, _LAUNCH, _Classified
from tracelab.analyses.results import HOST_DATA, GapTable
from tracelab.model import Flag, Timeline

_I64 = np.int64


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
