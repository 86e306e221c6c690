"""The finding rules, one module per rule (`<id>.py` exporting `RULE`: detection, data TypedDict, prose
and declaration), found automatically: adding a rule is one new file here plus its golden test, no
registry, render or docs edit (DESIGN.md's rule table is generated: `python -m tracelab.analyses.rules
--design-table`). See `base.py` for the contract."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, NotEvaluated, Rule

__all__ = ["RULES", "FindingContext", "NotEvaluated", "Rule", "collect", "design_table", "rule_by_id", "rule_tasks"]

_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _discover() -> tuple[Rule, ...]:
    found: list[Rule] = []
    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if mod.name == "base" or mod.name.startswith("_"):
            continue
        rule = getattr(importlib.import_module(f"{__name__}.{mod.name}"), "RULE", None)
        if isinstance(rule, Rule):
            if rule.id != mod.name:
                raise RuntimeError(f"rule module {mod.name}.py exports RULE with id {rule.id!r}")
            found.append(rule)
    return tuple(found)


RULES: tuple[Rule, ...] = _discover()


def rule_by_id(rule_id: str) -> Rule | None:
    """The registered rule of that id (None for a finding of a rule that is not registered)."""
    return next((r for r in RULES if r.id == rule_id), None)


def design_table(rules: Sequence[Rule] | None = None) -> str:
    """DESIGN.md's rule table (Markdown), from the rules' declarations, in registry order."""
    lines = ["| rule | detects | fires when | severity | count / wasted_ns | options (defaults) | source |",
             "|---|---|---|---|---|---|---|"]
    for r in RULES if rules is None else rules:
        options = ", ".join(f"{k} {v}" for k, v in r.options.items()) or "—"
        cells = (f"`{r.id}`", r.title, r.fires_when, r.severity, r.counts, options, r.source)
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def rule_tasks(ctx: FindingContext, overrides: Mapping[str, Mapping[str, Any]] | None = None,
               ) -> list[Callable[[], Finding | NotEvaluated | None]]:
    """One call per rule (in registry order) evaluating it on ctx: independent of each other, so a
    caller may run them on several threads (`analyses.parallel.run_each`) and `collect` the outcomes."""
    return [functools.partial(rule.evaluate, ctx, {**rule.options, **((overrides or {}).get(rule.id, {}))}) for rule in RULES]


def collect(outcomes: Sequence[Finding | NotEvaluated | None]) -> tuple[tuple[Finding, ...], tuple[NotEvaluated, ...]]:
    """The rules' outcomes (in registry order) as (findings, not evaluated): the findings most severe first,
    then by GPU time wasted; the rules that could not be evaluated with why."""
    findings = [out for out in outcomes if isinstance(out, Finding)]
    skipped = [out for out in outcomes if isinstance(out, NotEvaluated)]
    findings.sort(key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), -f.wasted_ns, f.rule))
    return tuple(findings), tuple(skipped)
