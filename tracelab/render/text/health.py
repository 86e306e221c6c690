"""The trace health section (tracelab/analyses/health.py) as text: one line per check, then the findings a
warning weakens."""

from __future__ import annotations

import textwrap

from tracelab.analyses.health import Health
from tracelab.render.text.compare import term_safe

_MARK = {"ok": "ok  ", "warn": "WARN", "n/a": "n/a "}


def health_lines(h: Health, width: int = 100) -> list[str]:
    out = ["Trace health" + ("" if h.ok else " (read the warnings before the figures)")]
    for c in h.checks:
        body = textwrap.wrap(term_safe(c.summary), max(20, width - 28)) or [""]
        out.append(f"  {_MARK[c.status]}  {c.name:<18} {body[0]}")
        out += [" " * 27 + b for b in body[1:]]
    for rule, why in h.weakened:
        out += textwrap.wrap(term_safe(f"finding {rule} is weakened: {why}"), max(20, width - 2),
                             initial_indent="  ", subsequent_indent="    ")
    return out
