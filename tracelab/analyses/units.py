"""Numbers for people: kept as a thin alias of `tracelab.render.format`, the one formatter.

Analyses build evidence strings with these names; `render.format` imports nothing from tracelab, so
this import does not reverse the one-way flow in practice (docs/DECISIONS.md). The `specs` argument of
`fmt_ns` is accepted for old callers and ignored: every duration now reads the same everywhere.
"""

from __future__ import annotations

from tracelab.render.format import fmt_bytes, fmt_rel, fmt_rel_many
from tracelab.render.format import fmt_ns as _fmt_ns

# old format-spec names (ignored by fmt_ns; kept so imports keep working)
FIXED = (".1f", ".2f", ".3f")
FIXED_MS3 = FIXED
SIG4 = FIXED

__all__ = ["FIXED", "FIXED_MS3", "SIG4", "fmt_bytes", "fmt_ns", "fmt_rel", "fmt_rel_many"]


def fmt_ns(ns: float, specs: tuple[str, str, str] | None = None) -> str:
    """A duration in its most readable unit (see `tracelab.render.format.fmt_ns`)."""
    return _fmt_ns(ns)
