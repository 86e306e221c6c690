"""Data the pages need that is not an analysis result: the compare tables, finding windows. Pure
functions over Timeline / Analysis / Comparison."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tracelab.api.types import Finding


def finding_window(finding: Finding) -> tuple[int, int] | None:
    """The time window a finding points at, when its data says (start_ns/end_ns, or the first of
    `windows` / `intervals` / `stretches` / any list of {start_ns, end_ns} or [start, end]); None
    otherwise (the link then opens the whole run)."""
    d: dict[str, Any] = dict(finding.data or {})
    if "start_ns" in d and "end_ns" in d:
        return int(d["start_ns"]), int(d["end_ns"])
    for key in ("windows", "intervals", "examples", "stretches", *d.keys()):
        v = d.get(key)
        if isinstance(v, (list, tuple)) and v:
            first = v[0]
            if isinstance(first, dict) and "start_ns" in first and "end_ns" in first:
                return int(first["start_ns"]), int(first["end_ns"])
            if isinstance(first, (list, tuple)) and len(first) == 2 and all(isinstance(x, int) for x in first):
                return int(first[0]), int(first[1])
    return None


FINDING_FIELDS = ("rule", "severity", "count", "wasted_ns", "message", "where")  # as in `analyze --json`


# ---- compare --------------------------------------------------------------------------------------

_DEVICE_METRICS = (
    ("span", "span_ns"), ("busy", "busy_ns"), ("idle", "idle_ns"), ("kernels (time)", "kernel_ns"),
    ("memcpy (time)", "memcpy_ns"), ("memset (time)", "memset_ns"), ("comm (time)", "comm_ns"),
    ("compute ∩ compute", "compute_compute_ns"), ("compute ∩ copy", "compute_copy_ns"),
    ("compute ∩ comm", "compute_comm_ns"), ("copy ∩ copy", "copy_copy_ns"), ("kernels (count)", "kernels"),
    ("memcpys (count)", "memcpys"), ("gaps (count)", "gaps"), ("gap time", "gap_ns"),
)


def _pct(p: float | None) -> str:
    from tracelab.text_format import fmt_pct

    return "" if p is None else fmt_pct(p)


def _ab(prefix: str, d: Any, delta: bool = True, pct: bool = False) -> dict[str, Any]:
    """{prefix_a, prefix_b[, prefix_delta][, prefix_delta_pct]} of a Delta."""
    out = {f"{prefix}_a": d.a, f"{prefix}_b": d.b}
    if delta:
        out[f"{prefix}_delta"] = d.delta
    if pct:
        out[f"{prefix}_delta_pct"] = _pct(d.pct)
    return out


def comparison_tables(cmp) -> dict[str, pd.DataFrame]:
    """Flat tables (metric, baseline, variant, delta, delta %) for the compare page."""
    dev_rows = []
    parts = ([("all devices", cmp.totals)] if cmp.totals is not None and len(cmp.devices) > 1 else []) + [
        (f"rank {d.rank} · GPU {d.device}" + ("" if d.present == "both" else f" (only in {d.present.upper()})"), d)
        for d in cmp.devices
    ]
    for label, d in parts:
        for metric, attr in _DEVICE_METRICS:
            delta = getattr(d, attr)
            dev_rows.append({"device": label, "metric": metric, "baseline": delta.a, "variant": delta.b,
                             "delta": delta.delta, "delta_pct": _pct(delta.pct),
                             "unit": "ns" if attr.endswith("_ns") else "count"})
    gaps = [{"cause": g.cause, **_ab("count", g.count), **_ab("time", g.total_ns, pct=True)} for g in cmp.gaps]
    findings = [{"rule": f.rule, "status": f.status, "severity_a": f.severity_a or "", "severity_b": f.severity_b or "",
                 **_ab("count", f.count, delta=False), **_ab("wasted", f.wasted_ns)} for f in cmp.findings]
    kernels = [{"name": k.name, "status": k.status, **_ab("calls", k.calls, delta=False),
                **_ab("total", k.total_ns, pct=True)} for k in cmp.kernels]
    return {
        "devices": pd.DataFrame(dev_rows, columns=["device", "metric", "baseline", "variant", "delta", "delta_pct", "unit"]),
        "gaps": pd.DataFrame(gaps),
        "findings": pd.DataFrame(findings),
        "kernels": pd.DataFrame(kernels),
    }

