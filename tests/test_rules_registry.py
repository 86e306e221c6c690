"""The rules registry: one module per rule, discovered automatically; the contract of every rule; the
generic renderer for rules without their own; adding a rule is one new file."""

from __future__ import annotations

import pkgutil
import sys

import pytest

from tracelab.analyses import rules
from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, NotEvaluated, Rule
from tracelab.render.findings import RENDERERS, describe

EXPECTED = {
    "excessive_sync", "idle_partition", "launch_bound", "pageable_memcpy", "pdl", "serialized_copy_compute",
    "sync_memcpy", "sync_per_iteration",
    "implicit_default_stream_sync", "unfused_elementwise",  # issue 14's rules: one file each, no registry edit
    "input_bound",  # issue 29
}


def test_every_rule_module_is_discovered_with_its_contract():
    assert set(rules.rule_ids()) == EXPECTED
    modules = {m.name for m in pkgutil.iter_modules(rules.__path__)} - {"base", "waits"}
    assert modules == EXPECTED  # one module per rule, named by its id
    for r in rules.RULES:
        assert isinstance(r, Rule) and r.title and "\n" not in r.title and r.source
        assert callable(r.evaluate) and all(isinstance(k, str) for k in r.options)


def test_a_new_rule_is_one_file(tmp_path, monkeypatch):
    """Drop a module exporting RULE into the package path: it is evaluated, no registry edit."""
    (tmp_path / "always_one.py").write_text(
        "from tracelab.analyses.results import Finding\n"
        "from tracelab.analyses.rules.base import Rule\n"
        "def evaluate(ctx, opt):\n"
        "    return Finding(rule='always_one', severity='info', count=opt['n'], wasted_ns=0, data={'n': opt['n']})\n"
        "RULE = Rule(id='always_one', title='a test rule', evaluate=evaluate, options={'n': 1}, source='test')\n"
    )
    monkeypatch.setattr(rules, "__path__", [*rules.__path__, str(tmp_path)])
    try:
        found = rules._discover()
    finally:
        sys.modules.pop("tracelab.analyses.rules.always_one", None)
    assert "always_one" in {r.id for r in found}
    monkeypatch.setattr(rules, "RULES", found)
    from test_analyses_builder import TB

    tb = TB()
    tb.kernel(0, 10, launch_at=-5)
    ctx_findings, skipped = rules.evaluate_all(_ctx(tb.build()), {"always_one": {"n": 3}})
    (f,) = [f for f in ctx_findings if f.rule == "always_one"]
    assert f.count == 3 and skipped == ()


def _ctx(tl) -> FindingContext:
    from tracelab.analyses.devices import device_rows, device_summaries
    from tracelab.analyses.gaps import find_gaps, host_views
    from tracelab.analyses.steps import find_steps

    rows = device_rows(tl)
    hosts = host_views(tl)
    return FindingContext(tl, rows, hosts, device_summaries(tl, rows), find_gaps(tl, rows=rows, hosts=hosts), find_steps(tl))


def test_generic_renderer_for_a_rule_without_one():
    assert "excessive_sync" not in RENDERERS  # rendered generically: adding it touched no render code
    f = Finding(
        rule="excessive_sync", severity="info", count=6, wasted_ns=20_000,
        data={"syncs": 6, "steps": 3, "ranks": [{"rank": 0, "steps": 3, "syncs": 6, "idle_ns": 20_000}]},
    )
    msg, where = describe(f)
    assert msg == (
        "more blocking host syncs inside the training steps than steps: 6 occurrences, 20.0 µs of GPU time "
        "(syncs 6, steps 3)."
    )
    assert where == "rank 0: steps 3, syncs 6, idle 20.0 µs"


def test_not_evaluated_is_reported_not_raised():
    from test_analyses_builder import Sim

    from tracelab.api import analyze

    sim = Sim()  # no markers, and no repeating launch sequence to infer steps from
    for i in range(4):
        for j in range(i + 1):
            sim.kernel(200, name=f"k{i}_{j}")
        sim.item()
    a = analyze(sim.build())
    (note,) = [n for n in a.notes if n.startswith("sync_per_iteration not evaluated")]
    assert "4 blocking host syncs" in note or "no training steps" in note
    assert NotEvaluated("x", "y").reason == "y"


@pytest.mark.parametrize("rule", sorted(EXPECTED - {"excessive_sync"}))
def test_every_rule_but_the_demo_has_its_own_renderer(rule):
    assert rule in RENDERERS
