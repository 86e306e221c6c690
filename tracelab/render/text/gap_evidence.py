"""Gap evidence in words, from the structured evidence the analysis returns (`GapDetails`).

    gap_evidence(analysis)              every gap's evidence, in the order of analysis.gaps
    gap_evidence(analysis, some_gaps)   only those (the text output's top gaps, a report's table)
    evidence_texts(details)             the rows of a GapDetails table

Sentences are built column-wise: names and offsets are formatted once per distinct value, and the
pieces are joined with numpy object-array concatenation (runs in C), so the evidence of every gap of a
large trace (`analyze --json`) costs a few vectorized passes, not a Python format call per gap.
Points in time inside the evidence are said from the gap's start ("2.63 ms into the gap", "41 ns before
the gap"), never as a signed offset that could be read as one from the run start ("+8.27 ms", which is
how the gap's own start is written); the durations come from text_format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from tracelab.analyses.core.distinct import distinct_codes
from tracelab.analyses.core.names import short_name
from tracelab.analyses.results import CAUSES, HOST_DATA, Analysis, Gap, GapDetails, GapTable
from tracelab.model import EventKind
from tracelab.text_format import fmt_ns_many

__all__ = ["HOST_DATA_WORDS", "evidence_texts", "gap_evidence"]

HOST_DATA_WORDS = {
    "cpu_ops": "(host data: CPU ops / NVTX ranges + CUDA API)",
    "cuda_api": "(host data: CUDA API calls only)",
    "none": "(host data: none)",
    "cpu_ops+os_calls": "(host data: CPU ops / NVTX ranges + CUDA API + OS calls)",
    "cuda_api+os_calls": "(host data: CUDA API calls + OS calls)",
    "none+os_calls": "(host data: OS calls only)",
}
_CODE = {c: i for i, c in enumerate(CAUSES)}
# row h (index into HOST_DATA) + len(HOST_DATA) * os_data
_HOST_DATA_WORDS = np.array(
    [HOST_DATA_WORDS[h] for h in HOST_DATA] + [HOST_DATA_WORDS[h + "+os_calls"] for h in HOST_DATA], dtype=object
)


def gap_evidence(analysis: Analysis, gaps: Sequence[Gap] | None = None) -> list[str]:
    """The evidence text of each gap (default: every gap of the analysis, in its order); '' for a gap
    whose details the analysis does not hold."""
    gaps = analysis.gaps if gaps is None else gaps
    details = analysis.gap_details
    if details is None or not len(gaps):
        return [""] * len(gaps)
    rows = GapTable.of(gaps).column("detail")  # the details column: no Gap objects
    ok = (rows >= 0) & (rows < len(details))
    if ok.all() and rows.size == len(details) and (rows == np.arange(rows.size)).all():
        return evidence_texts(details)  # all of them, in table order: no copy
    out = np.full(rows.size, "", dtype=object)
    if ok.any():
        out[ok] = evidence_texts(details.take(rows[ok]))
    return out.tolist()


class _Words(msgspec.Struct, frozen=True):
    """What every cause's sentence is built from: the rows' columns, the names, and the pieces formatted once
    for every row (the next op, the launch call, times from the gap's start, what host data was recorded)."""

    d: GapDetails
    nm: Callable[[int], str]
    a: np.ndarray
    b: np.ndarray
    found: np.ndarray
    l_start: np.ndarray
    what: np.ndarray
    caller: np.ndarray
    rel_b: np.ndarray
    rel_l: np.ndarray
    recorded_all: np.ndarray

    def queued(self, m: np.ndarray) -> list[str]:
        """'<op> was already launched (<call>, t before the gap) but started only t into the gap'."""
        return [f"{w} was already launched ({c}, {t}) but started only {e}"
                for w, c, t, e in zip(self.what[m], self.caller[m], self.rel_l[m], self.rel_b[m])]

    def op_names(self, ids: np.ndarray) -> np.ndarray:
        return _labels(lambda x: short_name(self.nm(x), 60), ids)


def evidence_texts(d: GapDetails) -> list[str]:
    """One evidence sentence per row of `d` (docs/DESIGN.md, "Gap causes", for what each says)."""
    n = len(d)
    if n == 0:
        return []
    strings = d.strings
    nm = lambda sid: strings[sid] if 0 <= sid < len(strings) else "?"
    a, b = d.start, d.end
    found = d.launch_found
    l_start = np.where(found, d.launch_start, a)
    w = _Words(
        d, nm, a, b, found, l_start,
        what=_labels(lambda k, m, st: f"{_op_label(k, nm(m))} on stream {st}", d.next_kind, d.next_name, d.next_stream),
        caller=_labels(lambda x, t: f"{nm(x)} on thread {t}", d.launch_name, d.launch_tid),
        rel_b=_rel(b - a), rel_l=_rel(l_start - a),
        recorded_all=_HOST_DATA_WORDS[d.host_data.astype(np.int64) + len(HOST_DATA) * d.os_data],
    )
    out = np.full(n, "", dtype=object)
    # one sentence per cause; a wait in progress when the gap began is said last, before the sentence of the time
    # after it
    for say in (_dependency_wait, _host_sync, _input_wait, _host_idle, _thread_absent, _os_blocked,
                _launch_latency, _profiler, _after_wait, _unknown):
        say(w, out)
    return out.tolist()


def _dependency_wait(w: _Words, out: np.ndarray) -> None:
    d, a = w.d, w.a
    m = d.cause == _CODE["dependency_wait"]
    if m.any():
        txt = np.array(w.queued(m), dtype=object)
        k = d.dep_name[m] >= 0
        if k.any():
            names, at = _labels(w.nm, d.dep_name[m][k]), _rel(d.dep_start[m][k] - a[m][k])
            txt[k] = [f"{t}; last {x} {wh}" for t, x, wh in zip(txt[k], names, at)]
        out[m] = txt


def _host_sync(w: _Words, out: np.ndarray) -> None:
    d, a, nm, found = w.d, w.a, w.nm, w.found
    sync = d.cause == _CODE["host_sync"]
    if not sync.any():
        return
    who = np.zeros(len(d), dtype=object)
    who[sync] = _labels(lambda x, t: f"{nm(x)} on thread {t}", d.wait_name[sync], d.wait_tid[sync])
    m = sync & d.wait_covers
    if m.any():
        out[m] = [f"{wh} from {t} covers {p}% of the gap"
                  for wh, t, p in zip(who[m], _rel(d.wait_start[m] - a[m]), _pct(d.wait_fraction[m]))]
    m = sync & ~d.wait_covers
    if m.any():
        op = d.host_op[m]
        host = np.full(op.size, "", dtype=object)
        k = found[m] & (op >= 0)
        if k.any():
            host[k] = " (host in " + w.op_names(op[k]) + ")"
        out[m] = [
            f"{wh} was waiting when the GPU went idle and returned {r}; "
            + (f"next launch only {tl} ({c}){h}" if f else f"next {x} {tb}")
            for wh, r, f, tl, c, h, x, tb in zip(
                who[m], _rel(d.wait_end[m] - a[m]), found[m].tolist(), w.rel_l[m], w.caller[m], host, w.what[m],
                w.rel_b[m]
            )
        ]


def _input_wait(w: _Words, out: np.ndarray) -> None:
    d, a, nm = w.d, w.a, w.nm
    m = d.cause == _CODE["input_wait"]
    if m.any():
        named = d.input_name[m] >= 0
        src = np.full(int(m.sum()), "", dtype=object)
        if named.any():
            kind = np.where(d.input_os[m][named], "OS call ", "")
            src[named] = ("; " + kind + _labels(lambda x: short_name(nm(x), 100), d.input_name[m][named]) + " from "
                          + _rel(d.input_start[m][named] - a[m][named]) + " to " + _rel(d.input_end[m][named] - a[m][named]))
        out[m] = [
            f"{wh} launched only {t} by {c}, which was waiting for input data {p}% of the time up to then "
            f"(data-loading ranges / OS waits for data{s}) {r}"
            for wh, t, c, p, s, r in zip(w.what[m], w.rel_l[m], w.caller[m], _pct(d.input_fraction[m]), src,
                                         w.recorded_all[m])
        ]


def _host_idle(w: _Words, out: np.ndarray) -> None:
    d = w.d
    m = (d.cause == _CODE["no_work"]) & d.host_idle
    if m.any():
        out[m] = [
            f"{wh} launched only {t} by {c}, which, like every launching thread of its process, ran no recorded CPU op or CUDA call for {p}% of "
            f"the time up to then in one stretch: the host was idle {r}"
            for wh, t, c, p, r in zip(w.what[m], w.rel_l[m], w.caller[m], _pct(d.idle_fraction[m]), w.recorded_all[m])
        ]


def _thread_absent(w: _Words, out: np.ndarray) -> None:
    d = w.d
    m = (d.cause == _CODE["no_work"]) & ~d.os_blocked & ~d.host_idle
    if m.any():
        out[m] = [f"{c} has no recorded activity before its launch {t} ({wh}): the launching thread was absent"
                  for c, t, wh in zip(w.caller[m], w.rel_l[m], w.what[m])]


def _os_blocked(w: _Words, out: np.ndarray) -> None:
    d, a, nm = w.d, w.a, w.nm
    m = (d.cause == _CODE["no_work"]) & d.os_blocked
    if m.any():
        call = _labels(lambda x: nm(x), d.os_name[m])
        more = np.where(d.os_calls[m] > 1, _labels(lambda k: f", {k} calls", d.os_calls[m]), "")
        threads = _labels(lambda k: "1 launching thread" if k == 1 else f"{k} launching threads", d.os_threads[m])
        out[m] = [
            f"{wh} launched only {t} by {c}, which was blocked in OS calls {ps}% of the time up to "
            f"then ({x} from {s} to {e}{k}); no launching thread of the process ran for {pa}% of it ({th}) {r}"
            for wh, t, c, ps, x, s, e, k, pa, th, r in zip(
                w.what[m], w.rel_l[m], w.caller[m], _pct(d.os_self[m]), call, _rel(d.os_start[m] - a[m]),
                _rel(d.os_end[m] - a[m]), more, _pct(d.os_all[m]), threads, w.recorded_all[m],
            )
        ]


def _launch_latency(w: _Words, out: np.ndarray) -> None:
    d, a = w.d, w.a
    m = d.cause == _CODE["launch_latency"]
    if m.any():
        recorded = w.recorded_all[m]
        op = d.host_op[m]
        inside = np.full(op.size, "", dtype=object)
        k = op >= 0
        if k.any():
            inside[k] = " (in " + w.op_names(op[k]) + ")"
        # a launch call that began before the gap and returned inside it: the GPU waited for the call itself
        inflight = (w.l_start[m] < a[m]).tolist()
        out[m] = [
            (f"{wh} was still being launched when the GPU went idle ({c} began {t}), which was not waiting for "
             if f else f"{wh} launched only {t} by {c}, which was not waiting for ")
            + f"the GPU; host busy {p}% of the time up to the next launch {r}{i}"
            for wh, t, c, p, r, i, f in zip(
                w.what[m], w.rel_l[m], w.caller[m], _pct(d.host_active[m]), recorded, inside, inflight
            )
        ]


def _profiler(w: _Words, out: np.ndarray) -> None:
    d, a, nm = w.d, w.a, w.nm
    m = d.cause == _CODE["profiler"]
    if m.any():
        named = d.profiler_name[m] >= 0
        src = np.full(int(m.sum()), "", dtype=object)
        if named.any():
            src[named] = (" (" + _labels(lambda x: short_name(nm(x), 80), d.profiler_name[m][named]) + " from "
                          + _rel(d.profiler_start[m][named] - a[m][named]) + " to "
                          + _rel(d.profiler_end[m][named] - a[m][named]) + ")")
        nxt = np.where(w.found[m], "next launch " + w.rel_l[m] + " (" + w.caller[m] + ")",
                       "next " + w.what[m] + " " + w.rel_b[m])
        out[m] = [
            f"profiler overhead{s} covers {p}% of the gap: the host was held up by the profiler, not by the "
            f"program; {x}"
            for s, p, x in zip(src, _pct(d.profiler_fraction[m]), nxt)
        ]


def _after_wait(w: _Words, out: np.ndarray) -> None:
    """A wait was in progress when the gap began but did not cover it: the cause is that of the time after it."""
    d, a, b, nm = w.d, w.a, w.b, w.nm
    m = d.after_wait & (d.cause != _CODE["host_sync"]) & (d.wait_name >= 0)
    if m.any():
        who = _labels(lambda x, t: f"{nm(x)} on thread {t}", d.wait_name[m], d.wait_tid[m])
        out[m] = [f"{wh} returned at {r}, covering {p}% of the gap; after it: {x}" for wh, r, p, x in zip(
            who, _rel(np.maximum(d.wait_end[m], a[m]) - a[m]), _pct(np.minimum(np.maximum(d.wait_end[m], a[m]) - a[m],
                                                                               b[m] - a[m]) / np.maximum(b[m] - a[m], 1)),
            out[m])]


def _unknown(w: _Words, out: np.ndarray) -> None:
    d, found = w.d, w.found
    unknown = d.cause == _CODE["unknown"]
    m = unknown & ~found
    if m.any():
        out[m] = [f"next {wh} {t}; its launch is not in the trace" for wh, t in zip(w.what[m], w.rel_b[m])]
    m = unknown & found
    if m.any():
        graph = d.next_graph[m].tolist()
        out[m] = [
            f"{q}; no stream-wait or event record shows what it waited for"
            + (" (a CUDA graph node: its dependencies inside the graph are not in the trace)" if g else "")
            for q, g in zip(w.queued(m), graph)
        ]


# ---- column-wise formatting ---------------------------------------------------------------------
def _labels(fmt: Callable[..., str], *cols: np.ndarray) -> np.ndarray:
    """An object array of fmt(*values) per row, formatted once per distinct combination of cols."""
    if len(cols[0]) == 0:
        return np.zeros(0, dtype=object)
    codes, first = _factorize(*cols)
    table = np.array([fmt(*(int(c[j]) for c in cols)) for j in first.tolist()], dtype=object)
    return table[codes]


def _factorize(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group ids of the rows by the given integer columns, and the first row of each group."""
    codes = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:  # fold one column at a time into a dense code (hashed when pandas is loaded or n is big)
        uniq, sub = distinct_codes(np.asarray(c))
        codes = distinct_codes(codes * max(len(uniq), 1) + sub)[1]
    first = np.unique(codes, return_index=True)[1]
    return codes, first


def _rel(ns: np.ndarray) -> np.ndarray:
    """A time from the gap's start, per element: '12.3 µs into the gap', '41 ns before the gap' (durations
    from text_format), formatted once per distinct value."""
    ns = np.asarray(ns, dtype=np.int64)
    uniq, inverse = np.unique(ns, return_inverse=True)
    words = [f"{t} before the gap" if v < 0 else f"{t} into the gap"
             for v, t in zip(uniq.tolist(), fmt_ns_many(np.abs(uniq)))]
    return np.array(words, dtype=object)[inverse]


_PERCENT = np.array([str(i) for i in range(101)], dtype=object)


def _pct(x: np.ndarray) -> np.ndarray:
    """A fraction (0..1) as a whole percentage, '0'..'100'."""
    return _PERCENT[np.clip(np.round(np.asarray(x, dtype=np.float64) * 100), 0, 100).astype(np.int64)]


def _op_label(kind: int, name: str) -> str:
    if kind == int(EventKind.KERNEL):
        return f"kernel {short_name(name)}"
    if kind == int(EventKind.MEMCPY):
        return f"copy '{name[:60]}'"
    return f"memset '{name[:60]}'"
