"""The "comparison" part of `tracelab compare --json` (and of the reports' data): the comparison's numbers, and the verdict in words."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from tracelab.analyses.comparison import Comparison, Delta, DeviceComparison, Verdict
from tracelab.analyses.sm.green_explain import WORDS_ONLY
from tracelab.render.text.comm import explain_comm_overlap
from tracelab.render.text.compare import verdict_detail, verdict_line
from tracelab.render.text.green import green_context_message


def _delta_doc(d: Delta) -> dict[str, Any]:
    return {"a": d.a, "b": d.b, "delta": d.delta, "pct": None if d.pct is None else round(d.pct, 3)}


def _doc(obj: Any, *fields: str) -> dict[str, Any]:
    """The named fields of `obj`, each Delta as {"a", "b", "delta", "pct"}."""
    return {f: _delta_doc(v) if isinstance(v := getattr(obj, f), Delta) else v for f in fields}


def _device_doc(d: DeviceComparison) -> dict[str, Any]:
    doc = _doc(d, "rank", "device", "b_rank", "b_device", "name_a", "name_b", "present")
    doc.update(_doc(d, *(f for f in DeviceComparison.__struct_fields__ if isinstance(getattr(d, f), Delta))))
    doc["busy_fraction"] = {"a": d.busy_fraction_a, "b": d.busy_fraction_b}
    doc["sm"] = {"a": {"source": d.sm_source_a, "busy_fraction": d.sm_busy_a},
                 "b": {"source": d.sm_source_b, "busy_fraction": d.sm_busy_b}}
    return doc


def green_context_document(comparison: Comparison) -> dict[str, Any] | None:
    """The green-context explanation as JSON: "run" ("a" or "b": the green-context run; the other one
    is "baseline") plus every field of `GreenContextExplanation` (*_sequential = the other run's
    figures; ratios are green run / other run; non-finite ratios are null). None without one."""
    g = comparison.green_contexts
    if g is None:
        return None
    doc: dict[str, Any] = {"run": comparison.green_contexts_run}
    for k, v in msgspec.structs.asdict(g).items():
        if k in WORDS_ONLY:
            continue
        if k == "baseline":
            doc["message"] = green_context_message(g)
        doc[k] = None if isinstance(v, float) and not math.isfinite(v) else v
    return doc


def verdict_document(v: Verdict | None) -> dict[str, Any] | None:
    """The verdict as JSON: basis ("gpu_step" | "step" | "span"), a_ns / b_ns (steady-state GPU step
    time, mean host step time or GPU span), spread_ns (interquartile ranges behind a gpu_step basis),
    warnings (step counts or definitions that differ),
    pct (B relative to A), step counts, GPU idle, the gap causes that moved, findings new / gone,
    and `text`: the sentence `compare` prints."""
    if v is None:
        return None
    return {
        "basis": v.basis, "a_ns": v.a_ns, "b_ns": v.b_ns, "pct": None if v.pct is None else round(v.pct, 3),
        "steps_a": v.steps_a, "steps_b": v.steps_b,
        "spread_ns": {"a": v.spread_a, "b": v.spread_b},
        "warnings": list(v.warnings),
        "idle_ns": _delta_doc(v.idle_ns),
        "idle_fraction": {"a": v.idle_fraction_a, "b": v.idle_fraction_b},
        "causes": [{"cause": g.cause, "total_ns": _delta_doc(g.total_ns)} for g in v.causes],
        "new_findings": list(v.new_findings),
        "gone_findings": list(v.gone_findings),
        "caveats": list(v.caveats),
        "text": verdict_line(v, None),
        "detail": verdict_detail(v),
    }


def comm_overlap_document(comparison: Comparison) -> dict[str, Any] | None:
    """B's compute/communication explanation against A as JSON (ratios are B / A; non-finite ones
    are null), with the paragraph the terminal shows under "message". None unless both runs
    communicate."""
    e = comparison.comm_overlap
    if e is None:
        return None
    doc = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in msgspec.structs.asdict(e).items()}
    doc["message"] = explain_comm_overlap(e)
    return doc


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    """The "comparison" part of `compare --json` / a `.json` report written with --against.
    Every figure is {"a", "b", "delta" (= b - a), "pct" (relative to a, null when a is 0)}."""
    c = comparison
    return {
        "a": {"source": c.a.source, "format": c.a.format, "ranks": list(c.a.ranks)},
        "b": {"source": c.b.source, "format": c.b.format, "ranks": list(c.b.ranks)},
        "verdict": verdict_document(c.verdict),
        "notes": list(c.notes),
        "devices": [_device_doc(d) for d in c.devices],
        "totals": None if c.totals is None else _device_doc(c.totals),
        "gaps_by_cause": [_doc(g, "cause", "count", "total_ns") for g in c.gaps],
        "findings": {
            "new": c.new_findings,
            "gone": c.gone_findings,
            "changed": c.changed_findings,
            "wasted_ns": _delta_doc(c.wasted_ns),
            "rules": [_doc(f, "rule", "status", "severity_a", "severity_b", "count", "wasted_ns", "message_a", "message_b")
                      for f in c.findings],
        },
        "green_contexts": green_context_document(c),
        "comm_overlap": comm_overlap_document(c),
        "kernels_compared": c.kernels_compared,
        "kernels": [_doc(k, "name", "status", "calls", "total_ns", "mean_ns_a", "mean_ns_b") for k in c.kernels],
    }
