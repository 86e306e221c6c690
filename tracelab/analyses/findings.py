"""Findings: the rules of `tracelab.analyses.rules` (one module per rule) run over a Timeline plus its
gaps. One Finding per rule for the whole run (all ranks and devices); `data` holds the details (typed
by the rule's TypedDict), the prose is written by the rule's own `describe` (dispatched by
`tracelab.render.text.findings`). This module keeps the entry points other code imports
(`find_all`, `FindingContext`); steps are in `tracelab.analyses.steps.infer`."""

from __future__ import annotations

from tracelab.analyses.results import Finding
from tracelab.analyses.rules import FindingContext, NotEvaluated, evaluate_all
from tracelab.analyses.rules.pageable_memcpy import RULE as _PAGEABLE

__all__ = ["PAGEABLE_MIN_BYTES", "FindingContext", "NotEvaluated", "find_all", "finding_notes"]

PAGEABLE_MIN_BYTES: int = int(_PAGEABLE.options["min_bytes"])


def find_all(ctx: FindingContext) -> tuple[Finding, ...]:
    """Every rule that fires, most severe first, then by GPU time wasted."""
    return evaluate_all(ctx)[0]


def finding_notes(skipped: tuple[NotEvaluated, ...]) -> list[str]:
    """The rules that were not evaluated, in words (for Analysis.notes)."""
    return [f"{s.rule} not evaluated: {s.reason}" for s in skipped]
