"""The set-up (what ran before each rank's first step; tracelab.analyses.steps.setup_phase) in one sentence, as
`analyze`, the reports and the dashboard say it (plain text: callers escape it for their medium)."""

from __future__ import annotations

from tracelab.analyses.results import Analysis
from tracelab.text_format import fmt_ns, fmt_offset


def setup_sentence(analysis: Analysis, origin: int) -> str | None:
    """None without steps or set-up."""
    setups = analysis.setup
    if not setups:
        return None
    span = max(s.span_ns for s in setups)
    idle = sum(s.idle_ns for s in setups)
    total = sum(s.span_ns for s in setups)
    gaps = sum(s.gaps for s in setups)
    top = max(setups, key=lambda s: s.top_gap_ns)
    share = f"{100.0 * idle / total:.1f}%" if total else "0.0%"
    text = (
        f"{fmt_ns(span)}{' (longest rank)' if len(setups) > 1 else ''}, GPU idle {share}, {gaps} gaps"
    )
    if top.top_gap_ns:
        text += (
            f", longest {fmt_ns(top.top_gap_ns)} {top.top_gap_cause} at {fmt_offset(top.top_gap_start_ns, origin)}"
            f" on rank {top.rank}"
        )
    setup_findings = [f.rule for f in analysis.findings if f.scope == "setup"]
    if setup_findings:
        text += f"; findings only in the set-up: {', '.join(setup_findings)}"
    return text + "; not in the step figures"
