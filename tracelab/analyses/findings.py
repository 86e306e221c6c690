"""Findings: the rules of `tracelab.analyses.rules` (one module per rule) run over a Timeline plus its
gaps. One Finding per rule for the whole run (all ranks and devices); `data` holds the details (typed
by the rule's TypedDict), the prose is written by the rule's own `describe` (dispatched by
`tracelab.render.text.findings`). This module words the rules that were not evaluated
(`finding_notes`); steps are in `tracelab.analyses.steps.infer`."""

from __future__ import annotations

from tracelab.analyses.rules import NotEvaluated


def finding_notes(skipped: tuple[NotEvaluated, ...]) -> list[str]:
    """The rules that were not evaluated, in words (for Analysis.notes)."""
    return [f"{s.rule} not evaluated: {s.reason}" for s in skipped]
