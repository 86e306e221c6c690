"""The trace health section (tracelab/analyses/health.py) as text: one line per check, then the findings a
warning weakens."""

from __future__ import annotations

from ..analyses.health import Health
from .compare_text import term_safe

_MARK = {"ok": "ok  ", "warn": "WARN", "n/a": "n/a "}


def health_lines(h: Health) -> list[str]:
    out = ["Trace health" + ("" if h.ok else " (read the warnings before the figures)")]
    for c in h.checks:
        out.append(f"  {_MARK[c.status]}  {c.name:<18} {term_safe(c.summary, 200)}")
    for rule, why in h.weakened:
        out.append(f"  finding {term_safe(rule)} is weakened: {term_safe(why)}")
    return out
