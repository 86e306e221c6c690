"""The rule contract, checked on every finding of an `analyze --json` document that a golden test
produces: its data has exactly the keys of its rule's TypedDicts (a renamed or dropped key fails here
instead of printing a default), and its rule's own prose, rebuilt from the document's data alone, is
the document's message and where."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

from tracelab.analyses import rules
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import Rule
from tracelab.render.text.findings import describe

SETUP = "In the set-up, before the first step (not counted in the steps' figures): "


def _check(where: str, value: Any, hint: Any) -> None:
    """Raise KeyError where value (read from JSON or built by a rule) lacks a key of the TypedDict hint,
    or has one it does not declare; lists and dict values are checked item by item."""
    if is_typeddict(hint):
        if not isinstance(value, Mapping):
            raise KeyError(f"{where}: expected a mapping, got {type(value).__name__}")
        hints = get_type_hints(hint)
        want, have = frozenset(hints), frozenset(value)
        if want != have:
            raise KeyError(f"{where}: keys missing {sorted(want - have)}, undeclared {sorted(have - want)}")
        for k, h in hints.items():
            _check(f"{where}.{k}", value[k], h)
    elif get_origin(hint) is list and isinstance(value, list):
        for i, item in enumerate(value):
            _check(f"{where}[{i}]", item, get_args(hint)[0])
    elif get_origin(hint) is dict and isinstance(value, Mapping):
        for k, item in value.items():
            _check(f"{where}[{k!r}]", item, get_args(hint)[1])


def check_data(rule: Rule, data: Mapping[str, Any]) -> None:
    """Raise KeyError when a finding's data (or a record inside it) lacks a key of the rule's TypedDicts
    or has one they do not declare (tests run every rule's findings through it: a renamed key fails,
    never prints 0)."""
    _check(rule.id, data, rule.data)


def check_findings(findings: list[dict[str, Any]]) -> None:
    for doc in findings:
        rule = rules.rule_by_id(doc["rule"])
        assert rule is not None, f"{doc['rule']} is not a registered rule"
        check_data(rule, doc["data"])
        f = Finding(
            rule=doc["rule"], severity=doc["severity"], count=doc["count"], wasted_ns=doc["wasted_ns"],
            where=doc["where"], data=doc["data"], scope=doc["scope"],
        )
        msg, where = describe(f)
        assert doc["message"] == (SETUP if doc["scope"] == "setup" else "") + msg
        assert doc["where"] == where
