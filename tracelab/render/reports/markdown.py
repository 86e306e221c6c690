"""Markdown report: tables and a short narrative fit for a pull request or an issue.

Every piece of untrusted text (kernel names, sources, metadata, evidence) goes through `md_escape`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from tracelab.analyses.comparison import Comparison
from tracelab.analyses.results import Analysis, DeviceSummary, cause_totals
from tracelab.model import Timeline
from tracelab.render.format import run_origin
from tracelab.render.reports.meta import metadata_rows, report_title
from tracelab.render.text.compare import (
    compared_devices,
    device_label,
    device_rows,
    finding_rows,
    gap_rows,
    green_context_rows,
    green_context_title,
    kernel_rows,
    shorten,
    side_label,
    verdict_detail,
    verdict_line,
)
from tracelab.render.text.gap_evidence import gap_evidence
from tracelab.render.text.green import green_context_message
from tracelab.text_format import fmt_fraction, fmt_ns, fmt_offset, fmt_pct

TOP_GAPS = 10
TOP_FINDINGS = 30
TOP_KERNELS = 20
NAME_LIMIT = 120

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#!~])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def md_escape(text: object, limit: int | None = None, *, middle: bool = False) -> str:
    """Untrusted text for a Markdown table cell or sentence: newlines and control characters become
    one space, `&` `<` `>` become entities, and Markdown punctuation (| ` * _ [ ] # ! ~ \\) is
    backslash-escaped, so a name can neither break a table nor inject HTML, links or images.
    Text longer than `limit` is cut at the end (in the middle with `middle`, for kernel names)."""
    s = _CONTROL.sub(" ", str(text)).strip()
    if middle:
        s = shorten(s, limit)
    elif limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def md_code(text: object) -> str:
    """An identifier (rule id, gap cause) as inline code. Code spans show text literally, so only
    identifier characters are kept: anything else becomes '?'."""
    return "`" + re.sub(r"[^A-Za-z0-9_.:/-]", "?", str(text))[:80] + "`"


def md_table(header: list[str], rows: Iterable[list[str]], align: str | None = None) -> str:
    """A GitHub table; cells must already be escaped. `align`: one of 'l'/'r' per column."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _device_name(d: DeviceSummary) -> str:
    return md_escape(d.name or "unknown GPU", 60)


def _narrative(analysis: Analysis) -> list[str]:
    out = []
    for d in analysis.devices:
        frac = d.busy_ns / d.span_ns if d.span_ns else 0.0
        gaps = [g for g in analysis.gaps if (g.rank, g.device) == (d.rank, d.device)]
        by_cause: dict[str, int] = {}
        for g in gaps:
            by_cause[g.cause] = by_cause.get(g.cause, 0) + int(g.duration_ns)
        line = (
            f"- **r{d.rank}/d{d.device}** ({_device_name(d)}) was busy **{fmt_fraction(frac)}** of its "
            f"{fmt_ns(d.span_ns)} span ({fmt_ns(d.idle_ns)} idle)"
        )
        if gaps:
            top = max(by_cause, key=by_cause.__getitem__)
            line += (
                f"; {len(gaps)} gaps of at least {fmt_ns(analysis.options.gap_threshold_ns)} total "
                f"{fmt_ns(sum(by_cause.values()))}, mostly {md_code(top)} ({fmt_ns(by_cause[top])})"
            )
        out.append(line + ".")
    if analysis.findings:
        worst = sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))[:3]
        out.append(
            f"- {len(analysis.findings)} finding(s); the costliest: "
            + "; ".join(f"{md_code(f.rule)} ({fmt_ns(f.wasted_ns)}): {md_escape(f.message, 200).rstrip('.')}" for f in worst)
            + "."
        )
    else:
        out.append("- No findings.")
    return out


def _devices_table(analysis: Analysis) -> str:
    rows = [
        [f"r{d.rank}/d{d.device}", _device_name(d), str(d.sm_count or "?"), fmt_ns(d.span_ns), fmt_ns(d.busy_ns),
         fmt_ns(d.idle_ns), fmt_fraction(d.busy_ns / d.span_ns if d.span_ns else 0), fmt_ns(d.kernel_ns),
         fmt_ns(d.memcpy_ns), fmt_ns(d.memset_ns), fmt_ns(d.comm_ns)]
        for d in analysis.devices
    ]
    return md_table(["device", "GPU", "SMs", "span", "busy", "idle", "busy %", "kernels", "memcpy", "memset", "comm"],
                    rows, "ll" + "r" * 9)


def _overlap_table(analysis: Analysis) -> str:
    rows = [
        [f"r{d.rank}/d{d.device}", fmt_ns(d.overlap.compute_compute_ns), fmt_ns(d.overlap.compute_copy_ns),
         fmt_ns(d.overlap.compute_comm_ns), fmt_ns(d.overlap.copy_copy_ns)]
        for d in analysis.devices
    ]
    return md_table(["device", "compute / compute", "compute / copy", "compute / comm", "copy / copy"], rows)


def _streams_table(analysis: Analysis) -> str:
    rows = []
    for d in analysis.devices:
        for s in d.streams:
            rows.append(
                [f"r{d.rank}/d{d.device}", str(s.stream), "-" if s.context is None else str(s.context),
                 "-" if s.green_context is None else str(s.green_context), fmt_ns(s.busy_ns),
                 fmt_fraction(s.busy_ns / d.span_ns if d.span_ns else 0), str(s.kernels), str(s.memcpys),
                 str(s.memsets)]
            )
    return md_table(["device", "stream", "context", "green ctx", "busy", "% of span", "kernels", "memcpys", "memsets"],
                    rows, "l" + "r" * 8)


def _sm_table(analysis: Analysis) -> str:
    rows = []
    for d in analysis.devices:
        rows.append([f"r{d.rank}/d{d.device}", "whole device", str(d.sm_count or "?"), md_escape(d.sm.source),
                     fmt_fraction(d.sm.busy_fraction)])
        for p in d.sm.partitions:
            gc = "rest of device" if p.green_context is None else f"green context {p.green_context}"
            rows.append([f"r{d.rank}/d{d.device}", gc, str(p.sm_count), md_escape(d.sm.source),
                         fmt_fraction(p.busy_fraction)])
    return md_table(["device", "partition", "SMs", "source", "SM busy"], rows, "lllrr")


def _findings_table(analysis: Analysis) -> str:
    ranked = sorted(analysis.findings, key=lambda f: -int(f.wasted_ns))
    rows = [
        [md_escape(f.severity), md_code(f.rule), str(f.count), fmt_ns(f.wasted_ns), md_escape(f.message, 300),
         md_escape(f.where, 200)]
        for f in ranked[:TOP_FINDINGS]
    ]
    table = md_table(["severity", "rule", "count", "wasted", "what", "where (evidence)"], rows, "llrrll")
    hidden = len(ranked) - TOP_FINDINGS
    return table + (f"\n\n{hidden} more findings in the .json report." if hidden > 0 else "")


def _gaps_table(analysis: Analysis) -> str:
    top = sorted(analysis.gaps, key=lambda g: -int(g.duration_ns))[:TOP_GAPS]
    origin = run_origin(analysis)
    rows = [
        [f"r{g.rank}/d{g.device}", fmt_offset(g.start_ns, origin),
         fmt_ns(g.duration_ns), md_code(g.cause), md_escape(evidence, 200)]
        for g, evidence in zip(top, gap_evidence(analysis, top))
    ]
    return md_table(["device", "at (from the run start)", "duration", "cause", "evidence"], rows,
                    "lrrll")


def _gap_causes_table(analysis: Analysis) -> str:
    rows = [[md_code(c), str(n), fmt_ns(t)] for c, n, t in cause_totals(analysis.gaps, ties="table")]
    return md_table(["cause", "gaps", "total"], rows)


def _kernels_table(kernels: pd.DataFrame) -> str:
    rows = [
        [str(i + 1), md_escape(r.name or "(unnamed)", NAME_LIMIT, middle=True) + (" (comm)" if r.comm else ""), str(r.calls),
         fmt_ns(r.total_ns), fmt_ns(r.mean_ns), fmt_ns(r.min_ns), fmt_ns(r.max_ns), fmt_fraction(r.share)]
        for i, r in enumerate(kernels.head(TOP_KERNELS).itertuples(index=False))
    ]
    return md_table(["#", "kernel", "calls", "total", "mean", "min", "max", "share"], rows, "rl" + "r" * 6)


def comparison_markdown(c: Comparison, labels: tuple[str, str] | None = None) -> str:
    """The comparison section (also usable on its own, e.g. for `compare` output in a PR). `labels` name
    A and B (run titles; default: the trace file names); the full sources are in the run metadata."""
    la, lb = labels or (side_label(c.a), side_label(c.b))
    out = [
        "## Comparison",
        "",
        (f"Baseline **A**: {md_escape(la, 200)} ({md_escape(c.a.source, 200)}) · "
         f"variant **B**: {md_escape(lb, 200)} ({md_escape(c.b.source, 200)}). "
        "Deltas are B − A; percentages are relative to A."),
        "",
    ]
    if c.verdict is not None:
        out += [f"**{md_escape(verdict_line(c.verdict, None))}** ({md_escape(verdict_detail(c.verdict))})", ""]
    out += [f"> note: {md_escape(n, 300)}" for n in c.notes]
    w = c.wasted_ns
    out += [
        "",
        (f"Findings: **{c.new_findings} new**, **{c.gone_findings} gone**, **{c.changed_findings} changed**; "
        f"time wasted by findings {fmt_ns(w.a)} → {fmt_ns(w.b)} ({fmt_pct(w.pct)})."),
        "",
    ]
    for d in compared_devices(c):
        present = {"both": "", "a": " (only in A)", "b": " (only in B)"}[d.present]
        names = md_escape(d.name_a or d.name_b or "unknown GPU", 60) if d.rank >= 0 else "all matched devices"
        out += [f"### Device {md_escape(device_label(d))}: {names}{present}", ""]
        out += [md_table(["", "A", "B", "Δ", "%"], [[md_escape(x) for x in r] for r in device_rows(d)]), ""]
    if c.green_contexts is not None:
        rows = [[md_escape(x) for x in r] for r in green_context_rows(c)]
        out += [f"### Green contexts: {md_escape(green_context_title(c))}", "",
                md_escape(green_context_message(c.green_contexts)), "", md_table(["", "A", "B", "B / A"], rows, "lrrr"), ""]
    gaps = gap_rows(c, md_code)
    out += ["### Gaps by cause", "", md_table(["cause", "count A", "count B", "time A", "time B", "Δ", "%"], gaps), ""]
    if c.findings:
        rows = finding_rows(c, rule=md_code, severity=md_escape)
        out += ["### Findings", "",
                md_table(["rule", "status", "severity A", "severity B", "count A", "count B", "wasted A", "wasted B"],
                         rows, "llllrrrr"), ""]
    if c.kernels_compared:
        rows = kernel_rows(c, lambda n: md_escape(n or "(unnamed)", NAME_LIMIT, middle=True))
        out += ["### Top kernels", "",
                md_table(["kernel", "calls A", "calls B", "total A", "total B", "Δ", "%"], rows, "lrrrrrr"), ""]
    return "\n".join(out)


def render_markdown(
    analysis: Analysis,
    timeline: Timeline | None,
    kernels: pd.DataFrame | None = None,
    comparison: Comparison | None = None,
    labels: tuple[str, str] | None = None,
    extras: tuple | None = None,
    critical_path: Any = None,
) -> str:
    """The whole Markdown report. `kernels` is `kernel_summary(timeline)`, `extras` (health, range
    projection, memory) and `critical_path` are computed by the caller (`tracelab.api.report_parts`)."""
    src = md_escape(report_title(analysis, timeline), 160)
    out = [f"# tracelab report: {src}", "", "## Summary", "", *_narrative(analysis), ""]
    extra = extras
    if extra is not None:
        h = extra[0]
        out += ["## Trace health", "", md_table(["status", "check", ""], [[c.status, c.name, md_escape(c.summary, 300)]
                                                                           for c in h.checks], "lll"), ""]
        out += [f"- finding {md_code(r)} is weakened: {md_escape(w)}" for r, w in h.weakened]
        out += [""] if h.weakened else []
    meta = [[md_escape(k, 80), md_escape(v, 300)] for k, v in metadata_rows(analysis, timeline)]
    out += ["## Run", "", md_table(["", ""], meta, "ll"), ""]
    out += ["## Devices", "", _devices_table(analysis), ""]
    from tracelab.render.text.setup import setup_sentence

    setup = setup_sentence(analysis, run_origin(analysis))
    if setup is not None:
        out += ["## Set-up (before the first step)", "", md_escape(setup, 600), ""]
    out += ["## Findings", ""]
    out += [_findings_table(analysis) if analysis.findings else "No findings.", ""]
    out += [f"## Top gaps (≥ {fmt_ns(analysis.options.gap_threshold_ns)})", ""]
    if analysis.gaps:
        out += [_gap_causes_table(analysis), "", _gaps_table(analysis), ""]
    else:
        out += ["No gaps.", ""]
    from tracelab.render.text.critical_path import critical_path_table

    cpath = critical_path
    if cpath is not None:
        header, rows = critical_path_table(cpath)
        out += ["## Critical path", "", "What sets each step's length (share of the path in each category).", ""]
        cells = [[md_escape(c, 120, middle=True) for c in r] for r in rows]
        out += [md_table([md_escape(h, 40) for h in header], cells, "l" + "r" * (len(header) - 2) + "l"), ""]
    out += ["## Overlap", "", _overlap_table(analysis), ""]
    out += ["## Per-stream utilization", "", _streams_table(analysis), ""]
    out += ["## Per-SM utilization", "", _sm_table(analysis), ""]
    if kernels is not None:
        out += ["## Top kernels by total time", ""]
        out += [_kernels_table(kernels) if len(kernels) else "No kernels.", ""]
    if extra is not None:
        out += _ranges_and_memory_md(extra[1], extra[2], analysis)
    if comparison is not None:
        out += [comparison_markdown(comparison, labels), ""]
    out += ["---", ("Generated by tracelab. Times are on the trace's own clock; busy = union of kernel, memcpy and "
            "memset intervals; idle = span − busy."), ""]
    return "\n".join(out)


def _ranges_and_memory_md(p, mem, analysis: Analysis) -> list[str]:
    """GPU time by range (top names) and GPU memory (peaks, per step), as `analyze` prints them."""
    from tracelab.render.reports.extras import TOP_RANGES

    out: list[str] = []
    if p.stats:
        rows = [[md_escape(s.name, 120), s.kind, str(s.calls), fmt_ns(s.gpu_ns), fmt_ns(s.kernel_ns), fmt_ns(s.span_ns),
                 f"{s.share:.1%}"] for s in p.stats[:TOP_RANGES]]
        out += ["## GPU time by range", "",
                (f"GPU ops launched inside each range on its thread; nested ranges are not subtracted; share of the "
                f"{p.reference}. Top {min(TOP_RANGES, len(p.stats))} of {len(p.stats)} names (the .json report has all)."),
                "", md_table(["range", "kind", "calls", "GPU time", "kernels", "span", "share"], rows, "llrrrrr"), ""]
    if mem is not None:
        from tracelab.text_format import fmt_bytes

        rows = [[f"r{q.rank}/d{q.device}", fmt_bytes(q.peak_bytes), fmt_offset(q.at_ns, run_origin(analysis)),
                 fmt_bytes(q.allocation_bytes), md_escape(q.op, 120),
                 fmt_bytes(q.reserved_peak_bytes) if q.reserved_peak_bytes >= 0 else "n/a"] for q in mem.peaks]
        out += ["## GPU memory", "", md_escape(mem.source), "",
                md_table(["device", "peak allocated", "at", "allocation", "in op", "reserved peak"], rows, "lrrrlr"), ""]
        if mem.steps:
            out += [md_table(["step", "peak", "at start"], [[f"r{s.rank}/d{s.device} #{s.index}", fmt_bytes(s.peak_bytes),
                                                           fmt_bytes(s.start_bytes)] for s in mem.steps[:40]], "lrr"), ""]
    return out
