"""The rule contract, checked on every finding of an `analyze --json` document that a golden test
produces: its data has exactly the keys of its rule's TypedDicts (a renamed or dropped key fails here
instead of printing a default), and its rule's own prose, rebuilt from the document's data alone, is
the document's message and where."""

from __future__ import annotations

from typing import Any

from tracelab.analyses import rules
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import check_data
from tracelab.render.text.findings import describe

SETUP = "In the set-up, before the first step (not counted in the steps' figures): "


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
