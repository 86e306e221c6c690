"""Trace health: what the trace can and cannot support, said before the analysis.

Checks (each a `HealthCheck`, status "ok" | "warn" | "n/a"):
- dropped: events the profiler says it lost (nsys DIAGNOSTIC_EVENT messages about lost / dropped records or
  full buffers; "not all ... might have been collected" is counted as `incomplete`, a weaker warning nsys
  prints on most runs). Kineto: its own log, the top-level "WARNING" / "ERROR" arrays that builds without
  glog wrote until kineto#1460 ("Dropped N activity records": `dropped_records`; "Exceeded max GPU buffer
  count ... terminating tracing"); a trace without them: "n/a".
- profiler_overhead: nsys PROFILER_OVERHEAD intervals (buffer flushes, CUPTI initialisation) on the
  application's threads, or Kineto's CUPTI "overhead" events ("Buffer Flush", "Activity Buffer Request");
  the GPU gaps of cause `profiler` (the overhead covers at least half of them: tracelab.analyses.gaps.idle) are
  counted (`gaps_covered`, their idle time): those gaps are the profiler's doing, not a host cause.
- graphs: CUDA graph launches whose GPU work is not in the trace (graph-level tracing: no node kernels).
- correlation: launch calls without a correlation id, launches whose correlation matches no GPU op, and GPU
  ops whose correlation matches no launch (`orphan_gpu_events`: launched before the capture window).
- clocks: collectives matched across ranks whose kernels do not all overlap (one rank's kernel ends before
  another's starts: the ranks' clocks disagree, or the match is wrong).
- window: NVTX ranges never ended, and GPU time before the first step / after the last step (steps cut by
  the capture window).

`weakened`: the findings a warning weakens (every finding when events were dropped or clocks disagree; the
host-cause and launch findings when profiler overhead covers gaps), said in the text and the JSON.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
import numpy as np

from tracelab.analyses.core.intervals import merge
from tracelab.analyses.core.overhead import overhead_table
from tracelab.analyses.results import CAUSES, Analysis, GapTable
from tracelab.model.grouping import any_of, member, sorted_unique
from tracelab.model.kinds import EventKind, Flag
from tracelab.model.timeline import Timeline

Status = Literal["ok", "warn", "n/a"]
GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
LOG_KEYS = ("WARNING", "ERROR")  # Kineto's log arrays (tracelab.io.kineto.kinds.LOG_KEYS)
# Kineto's messages about lost CUPTI records (libkineto CuptiActivityApi.cpp): "Dropped N activity records",
# "Exceeded max GPU buffer count (N >= M) - terminating tracing"
KINETO_LOST = re.compile(r"dropped \d+ activity records|exceeded max gpu buffer count|terminating tracing|"
                         r"records? (were |was )?(lost|dropped)|buffer overflow", re.IGNORECASE)
KINETO_DROPPED_N = re.compile(r"dropped (\d+) activity records", re.IGNORECASE)
HOST_CAUSE_RULES = ("launch_bound", "excessive_sync", "sync_per_iteration", "sync_memcpy", "waits", "idle_partition")


class HealthCheck(msgspec.Struct, frozen=True):
    name: str
    status: Status
    summary: str
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class Health(msgspec.Struct, frozen=True):
    checks: tuple[HealthCheck, ...]
    weakened: tuple[tuple[str, str], ...]  # (finding rule, why)

    @property
    def ok(self) -> bool:
        return all(c.status != "warn" for c in self.checks)

    def check(self, name: str) -> HealthCheck:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [msgspec.structs.asdict(c) for c in self.checks],
                "weakened_findings": [{"rule": r, "why": w} for r, w in self.weakened]}


def _records(tl: Timeline) -> list[dict[str, Any]]:
    """The parsers' health records of the run's trace files: meta.extra["health"] of a one-file run, each rank
    file's in meta.extra["rank_extra"] of a run merged from rank files (tracelab.io.nsys.health; the
    Kineto parser writes "log" and "overhead")."""
    extra = tl.meta.extra if isinstance(tl.meta.extra, dict) else {}
    out = [extra["health"]] if isinstance(extra.get("health"), dict) else []
    return out + [e["health"] for e in (extra.get("rank_extra") or {}).values()
                  if isinstance(e, dict) and isinstance(e.get("health"), dict)]


def _lines(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def _dropped(tl: Timeline) -> HealthCheck:
    recs = _records(tl)
    nsys = "nsys" in tl.meta.format
    msgs = [m for h in recs for m in h.get("diagnostics", ())]
    logs = [h["log"] for h in recs if isinstance(h.get("log"), dict)]
    if not any("diagnostics" in h for h in recs) and not logs:
        if nsys and not recs:
            return HealthCheck("dropped", "n/a", "not read at import (a run imported by an older tracelab: re-import it)")
        why = ("no DIAGNOSTIC_EVENT table" if nsys else
               "the trace carries no profiler log: Kineto writes its warnings (where lost CUPTI records are "
               "reported) as top-level WARNING / ERROR arrays only in builds without glog, before kineto#1460")
        return HealthCheck("dropped", "n/a", why)
    dropped = _lines([m["text"] for m in msgs if m.get("dropped")])
    incomplete = _lines([m["text"] for m in msgs if m.get("incomplete")])
    produced = _lines([m["text"] for m in msgs if "CUPTI events" in m["text"]])
    warnings = _lines([m["text"] for m in msgs if m.get("severity") in ("warning", "error")])
    data: dict[str, Any] = {"dropped": dropped, "incomplete": incomplete, "cupti": produced, "warnings": warnings}
    if logs:  # Kineto: its log lines about lost records
        lines = _lines([str(x) for lg in logs for k in LOG_KEYS for x in lg.get(k, ())])
        lost = [x for x in lines if KINETO_LOST.search(x)]
        data["dropped"] = dropped = dropped + lost
        data["dropped_records"] = sum(int(m.group(1)) for x in lost for m in [KINETO_DROPPED_N.search(x)] if m)
        data["warnings"] = warnings + _lines([str(x) for lg in logs for x in lg.get("WARNING", ())])
        data["errors"] = _lines([str(x) for lg in logs for x in lg.get("ERROR", ())])
    if dropped:
        n = data.get("dropped_records")
        count = f" ({n} records)" if n else ""
        return HealthCheck("dropped", "warn", f"the profiler reports lost events{count}: {dropped[0]}", data)
    if incomplete:
        return HealthCheck("dropped", "ok", f"no lost events reported ({len(incomplete)} generic 'not all events "
                           "might have been collected' notices)", data)
    if logs:
        n = len(data["warnings"]) + len(data["errors"])
        return HealthCheck("dropped", "ok", f"no lost events reported (Kineto's log: {n} warnings / errors)", data)
    return HealthCheck("dropped", "ok", "no lost events reported", data)


def _overhead(tl: Timeline, an: Analysis | None) -> HealthCheck:
    recs = _records(tl)
    nsys_table = any("PROFILER_OVERHEAD" in h.get("tables", ()) for h in recs)
    t = overhead_table(tl)
    if t is None and not nsys_table:
        why = ("the trace records no profiler overhead" if "nsys" in tl.meta.format else
               "the trace has no CUPTI overhead events (Kineto category \"overhead\")")
        return HealthCheck("profiler_overhead", "n/a", why)
    if t is None or t[2].size == 0:
        return HealthCheck("profiler_overhead", "ok", "no profiler overhead recorded", {"intervals": 0, "total_ns": 0})
    _rank, _pid, s, e, code, names = t
    dur = np.bincount(code, weights=(e - s).astype(np.float64), minlength=len(names))
    by_name = {str(n): int(d) for n, d in zip(names.tolist(), dur.tolist(), strict=True)}
    us, ue = merge(s, e)
    covered_n, covered_ns = 0, 0
    if an is not None and len(an.gaps):
        # the gaps of cause `profiler` (tracelab.analyses.gaps.idle: the overhead covers >= half of the gap)
        table = GapTable.of(an.gaps)  # columns: no Gap object per gap
        gs, ge = table.column("start").astype(np.int64), table.column("end").astype(np.int64)
        hit = table.column("cause") == CAUSES.index("profiler")
        covered_n, covered_ns = int(hit.sum()), int((ge - gs)[hit].sum())
    source = "nsys PROFILER_OVERHEAD" if nsys_table else "Kineto CUPTI overhead events"
    data = {"intervals": int(s.size), "total_ns": int((ue - us).sum()), "by_name": by_name, "source": source,
            "gaps_covered": covered_n, "gaps_covered_ns": covered_ns,
            "windows": [[int(a), int(b)] for a, b in zip(us.tolist(), ue.tolist(), strict=True)][:50]}
    summary = f"{s.size} profiler-overhead intervals ({source}), {int((ue - us).sum()) / 1e6:.3f} ms"
    if covered_n:
        summary += f"; they cover {covered_n} GPU gaps ({covered_ns / 1e6:.3f} ms of idle): cause profiler, not the host"
    return HealthCheck("profiler_overhead", "warn" if covered_n else "ok", summary, data)


def _correlation_and_graphs(tl: Timeline) -> tuple[HealthCheck, HealthCheck]:
    kind = tl.col("kind")
    lr = np.flatnonzero(any_of(kind, (EventKind.RUNTIME, EventKind.DRIVER)) & ((tl.col("flags") & Flag.LAUNCH) != 0))
    gr = np.flatnonzero(any_of(kind, GPU_KINDS))
    corr = tl.col("correlation")
    rank = tl.col("rank")  # a broadcast column of a one-rank trace: no int64 copy of every event
    lc = corr[lr]
    no_corr = int((lc < 0).sum())
    gkey = sorted_unique((rank[gr].astype(np.int64) << 40) | (corr[gr] & ((1 << 40) - 1)))
    lkey = (rank[lr].astype(np.int64) << 40) | (lc & ((1 << 40) - 1))
    found = member(lkey, gkey) & (lc >= 0)
    unmatched = (~found) & (lc >= 0)
    orphans = int(tl.meta.stats.get("orphan_gpu_events", 0))
    graph_name = np.array(["GraphLaunch" in s for s in tl.strings] + [False], dtype=bool)  # per string, not per call
    nid = tl.col("name")[lr]
    is_graph = graph_name[np.where((nid >= 0) & (nid < len(tl.strings)), nid, len(tl.strings))]
    graph_launches = int(is_graph.sum())
    graph_unmatched = int((is_graph & unmatched).sum())
    graph_ops = int(((tl.col("flags")[gr] & Flag.GRAPH) != 0).sum())
    cdata = {"launches": int(lr.size), "without_correlation": no_corr, "without_gpu_op": int(unmatched.sum()),
             "orphan_gpu_ops": orphans}
    bad = no_corr or orphans
    n_unmatched = cdata["without_gpu_op"]
    parts = [text for n, text in ((no_corr, f"{no_corr} launch calls carry no correlation id"),
                                  (orphans, f"{orphans} GPU ops match no launch (launched before the capture window?)"),
                                  (n_unmatched, f"{n_unmatched} launches have no GPU op in the trace")) if n]
    corr_check = HealthCheck("correlation", "warn" if bad else "ok",
                             "; ".join(parts) or f"all {lr.size} launches and their GPU ops are linked", cdata)
    gdata = {"graph_launches": graph_launches, "without_node_kernels": graph_unmatched, "graph_gpu_ops": graph_ops}
    if not graph_launches:
        graphs = HealthCheck("graphs", "n/a", "no CUDA graph launches", gdata)
    elif graph_unmatched:
        graphs = HealthCheck("graphs", "warn", f"{graph_unmatched} of {graph_launches} CUDA graph launches have no "
                             "node-level kernels in the trace (graph-level tracing): their GPU time is not seen", gdata)
    else:
        graphs = HealthCheck("graphs", "ok", f"{graph_launches} CUDA graph launches, traced at node level", gdata)
    return corr_check, graphs


def _clocks(tl: Timeline) -> HealthCheck:
    if len(tl.meta.ranks or ()) < 2:
        return HealthCheck("clocks", "n/a", "one rank")
    from tracelab.analyses.ranks.collectives import match_collectives

    c = match_collectives(tl)
    n = len(c.calls)
    if not n:
        return HealthCheck("clocks", "n/a", "no collectives matched across ranks", {"matched": 0})
    data = {"matched": n, "inconsistent": c.inconsistent}
    if c.inconsistent:
        return HealthCheck("clocks", "warn", f"{c.inconsistent} of {n} matched collectives end on one rank before they "
                           "start on another: the ranks' clocks disagree", data)
    return HealthCheck("clocks", "ok", f"{n} matched collectives overlap on every rank", data)


def _window(tl: Timeline, an: Analysis | None) -> HealthCheck:
    open_ranges = int(tl.meta.stats.get("unterminated_nvtx_ranges", 0))
    data: dict[str, Any] = {"unterminated_ranges": open_ranges}
    parts = []
    if open_ranges:
        parts.append(f"{open_ranges} NVTX ranges never ended (cut by the capture window)")
    if an is not None and an.steps:
        g = any_of(tl.col("kind"), GPU_KINDS)
        s, e = tl.col("start")[g], tl.col("end")[g]
        first = min(x.start_ns for x in an.steps)
        last = max(x.end_ns for x in an.steps)
        before = int(np.clip(np.minimum(e, first) - s, 0, None).sum())
        after = int(np.clip(e - np.maximum(s, last), 0, None).sum())
        total = int((e - s).sum())
        data.update(gpu_ns_before_first_step=before, gpu_ns_after_last_step=after, gpu_ns=total)
        if total and (before + after) > 0.05 * total:
            parts.append(f"{(before + after) / total:.0%} of the GPU time lies outside the steps (partial steps at the "
                         "window's edges)")
    return HealthCheck("window", "warn" if parts else "ok", "; ".join(parts) or "the steps lie inside the capture window",
                       data)


def trace_health(tl: Timeline, analysis: Analysis | None = None) -> Health:
    """The health section of `tl` (the analysis gives the gaps and steps some checks need)."""
    dropped = _dropped(tl)
    overhead = _overhead(tl, analysis)
    corr, graphs = _correlation_and_graphs(tl)
    checks = (dropped, overhead, graphs, corr, _clocks(tl), _window(tl, analysis))
    weakened: list[tuple[str, str]] = []
    if analysis is not None:
        for f in analysis.findings:
            if dropped.status == "warn":
                weakened.append((f.rule, "the profiler lost events"))
            elif checks[4].status == "warn":
                weakened.append((f.rule, "the ranks' clocks disagree"))
            elif overhead.status == "warn" and f.rule in HOST_CAUSE_RULES:
                weakened.append((f.rule, "profiler overhead covers some of the idle time"))
            elif graphs.status == "warn":
                weakened.append((f.rule, "CUDA graph kernels are not in the trace"))
    return Health(checks=checks, weakened=tuple(weakened))
