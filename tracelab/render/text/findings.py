"""Finding prose: each rule writes its own (`Rule.describe` in its module under
`tracelab.analyses.rules`); this module only dispatches a Finding to its rule and fills the analysis in.
A finding whose rule is not registered gets the generic prose (its id, count, GPU time wasted and the
data's scalar values). Pure: Finding in, strings out."""

from __future__ import annotations

import msgspec

from tracelab.analyses import rules
from tracelab.analyses.results import Analysis, Finding
from tracelab.analyses.rules.base import Prose, generic_prose

__all__ = ["Prose", "describe", "with_prose"]


def describe(f: Finding) -> Prose:
    """(message, where) of a finding."""
    rule = rules.rule_by_id(f.rule)
    return rule.describe(f) if rule is not None else generic_prose(f, f.rule)


def with_prose(analysis: Analysis) -> Analysis:
    """The analysis with every finding's message and where filled in (those already set are kept)."""
    out = []
    for f in analysis.findings:
        if f.message:
            out.append(f)
            continue
        msg, where = describe(f)
        if f.scope == "setup":
            msg = f"In the set-up, before the first step (not counted in the steps' figures): {msg}"
        out.append(msgspec.structs.replace(f, message=msg, where=f.where or where))
    return msgspec.structs.replace(analysis, findings=tuple(out))
