"""The profiler's own work (nsys PROFILER_OVERHEAD, Kineto "overhead" events) per rank: the intervals a gap
cause `profiler` rests on, read from the parsers' health records (tracelab.io.nsys.health)."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct
from tracelab.analyses.core.host import HostView
from tracelab.analyses.core.intervals import merge, running_max_index
from tracelab.analyses.core.memo import memo
from tracelab.analyses.core.rows import ranks_of
from tracelab.model import Timeline
from tracelab.model.grouping import member, sorted_unique

_I64 = np.int64


class Overhead(msgspec.Struct, frozen=True):
    """The profiler-overhead intervals of one rank's processes, in start order: name (index into
    `overhead_names(timeline)`), running maximum of the ends (for "the interval running at t") and their union."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    runmax: np.ndarray
    arg: np.ndarray
    us: np.ndarray
    ue: np.ndarray

    @staticmethod
    def empty() -> Overhead:
        e = np.zeros(0, dtype=_I64)
        return Overhead(e, e, e, e, e, e, e)


def _overhead_parts(timeline: Timeline) -> list[tuple[int | None, dict]]:
    """(rank or None for "every rank of the file", the parser's overhead record) per trace file: a one-file run
    keeps it in meta.extra["health"], a run merged from rank files in meta.extra["rank_extra"][rank]["health"]
    (tracelab.io.nsys.health)."""
    extra = timeline.meta.extra if isinstance(timeline.meta.extra, dict) else {}
    out: list[tuple[int | None, dict]] = []
    h = extra.get("health")
    if isinstance(h, dict) and isinstance(h.get("overhead"), dict):
        out.append((None, h["overhead"]))
    for r, e in (extra.get("rank_extra") or {}).items():
        h = e.get("health") if isinstance(e, dict) else None
        if isinstance(h, dict) and isinstance(h.get("overhead"), dict) and str(r).lstrip("-").isdigit():
            out.append((int(r), h["overhead"]))
    return out


def _overhead_table(timeline: Timeline) -> tuple[np.ndarray, ...] | None:
    """Every profiler-overhead interval of the run: (rank or -1, pid or -1, start, end, name code) and the names."""
    parts = _overhead_parts(timeline)
    if not parts:
        return None
    names: dict[str, int] = {}
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    for rank, o in parts:
        s = np.asarray(o.get("start", ()), dtype=_I64)
        n = s.size
        cols[0].append(np.full(n, -1 if rank is None else rank, dtype=_I64))
        cols[1].append(np.asarray(o.get("pid", [-1] * n), dtype=_I64))
        cols[2].append(s)
        cols[3].append(np.maximum(np.asarray(o.get("end", ()), dtype=_I64), s))
        cols[4].append(np.array([names.setdefault(str(x), len(names)) for x in o.get("name", [""] * n)], dtype=_I64))
    table = tuple(np.concatenate(c) for c in cols)
    return (*table, np.array(list(names), dtype=object))


def overhead_table(timeline: Timeline) -> tuple[np.ndarray, ...] | None:
    """Every profiler-overhead interval of the run (nsys PROFILER_OVERHEAD, Kineto "overhead" events), as
    columns: rank (-1: the file holds every rank), pid (-1: unknown), start, end, name code, then the names;
    None when no trace file of the run records overhead."""
    return memo(timeline, "profiler_overhead", lambda: _overhead_table(timeline))


def overhead_names(timeline: Timeline) -> tuple[str, ...]:
    """The names of the run's profiler-overhead intervals ("CUPTI Buffer flush", ...): Overhead.name indexes them."""
    t = overhead_table(timeline)
    return () if t is None else tuple(t[5].tolist())


def rank_overhead(timeline: Timeline, host: HostView) -> Overhead:
    """The profiler-overhead intervals of `host`'s rank: those of its own file in a run merged from rank files,
    else those of its processes (the processes of its CUDA calls; every process when the run has one rank).
    Memoized per rank."""
    return memo(timeline, ("profiler_overhead", host.rank), lambda: _rank_overhead(
        timeline, host.rank, distinct(host.api_pid) if host.api_pid.size else np.zeros(0, dtype=_I64)))


def _rank_overhead(timeline: Timeline, rank: int, pids: np.ndarray) -> Overhead:
    t = overhead_table(timeline)
    if t is None or t[2].size == 0:
        return Overhead.empty()
    r, pid, s, e, name = t[:5]
    one_rank = len(ranks_of(timeline)) <= 1
    mine = (r == rank) | ((r < 0) & (one_rank | (pid < 0) | member(pid, sorted_unique(np.asarray(pids, dtype=_I64)))))
    k = np.flatnonzero(mine)
    if not k.size:
        return Overhead.empty()
    k = k[np.argsort(s[k], kind="stable")]
    runmax, arg = running_max_index(e[k])
    us, ue = merge(s[k], e[k])
    return Overhead(s[k], e[k], name[k], runmax, arg, us, ue)
