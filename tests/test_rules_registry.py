"""The rules registry: one module per rule (detection, data TypedDict, prose, declaration), discovered
automatically; the contract of every rule; DESIGN.md's rule table generated from the declarations;
adding a rule is one new file (plus its golden test and the regenerated table), nothing else."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints, is_typeddict

import pytest

from tracelab.analyses import rules
from tracelab.analyses.results import Finding
from tracelab.analyses.rules import __main__ as rules_main
from tracelab.analyses.rules.base import FindingContext, NotEvaluated, Rule, Window
from tracelab.render.text.findings import describe, with_prose

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from rule_contract import check_data

ROOT = Path(__file__).resolve().parents[1]
HELPERS = {"base", "waits", "__main__"}  # modules of the package that are not rules


def test_every_rule_module_is_discovered_with_its_contract():
    modules = {m.name for m in pkgutil.iter_modules(rules.__path__)} - HELPERS
    assert {r.id for r in rules.RULES} == modules  # one module per rule, named by its id, all registered
    assert len(rules.RULES) == len(modules) >= 11
    for r in rules.RULES:
        assert isinstance(r, Rule) and r.source
        for text in (r.title, r.fires_when, r.severity, r.counts):
            assert text and "\n" not in text and "|" not in text
        assert callable(r.evaluate) and callable(r.describe) and all(isinstance(k, str) for k in r.options)
        # its data is a TypedDict holding the window every finding points at
        assert is_typeddict(r.data) and set(get_type_hints(Window)) <= set(get_type_hints(r.data))
        assert r.describe.__module__ == r.evaluate.__module__ == f"tracelab.analyses.rules.{r.id}"  # one file


def test_design_table_is_generated_and_current():
    """DESIGN.md's table is the declarations' (stale: `python -m tracelab.analyses.rules --write-design
    docs/DESIGN.md`), and the command prints the same table."""
    table = rules.design_table()
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{r.id}`" for r in rules.RULES]
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    assert rules_main.with_table(design, table) == design, "docs/DESIGN.md's rule table is stale"
    out = subprocess.run(
        [sys.executable, "-m", "tracelab.analyses.rules", "--design-table"],
        capture_output=True, text=True, check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert out.stdout == table


def test_write_design_rewrites_only_the_table(tmp_path):
    doc = tmp_path / "DESIGN.md"
    doc.write_text(f"# before\n{rules_main.BEGIN}\n| old |\n{rules_main.END}\nafter\n", encoding="utf-8")
    assert rules_main.main(["--write-design", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == (
        f"# before\n{rules_main.BEGIN}\n{rules.design_table()}{rules_main.END}\nafter\n"
    )
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n", encoding="utf-8")
    assert rules_main.main(["--write-design", str(bare)]) == 2 and bare.read_text() == "no markers\n"


NEW_RULE = '''
"""always_one: a test rule, the whole of it in this file."""
from typing import TypedDict

from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import Rule, Window, join_places, window
from tracelab.text_format import fmt_ns


class Device(TypedDict):
    rank: int
    device: int


class AlwaysOneData(Window):
    n: int
    devices: list[Device]


def evaluate(ctx, opt):
    data: AlwaysOneData = {
        "n": opt["n"], "devices": [{"rank": d.rank, "device": d.device} for d in ctx.devices], **window(0, 1)
    }
    return Finding(rule="always_one", severity="info", count=opt["n"], wasted_ns=1500, data=dict(data))


def describe(f):
    msg = f"always {f.data['n']} ({fmt_ns(f.wasted_ns)})"
    return msg, join_places([f"rank {d['rank']} device {d['device']}" for d in f.data["devices"]])


RULE = Rule(
    id="always_one", title="a test rule", evaluate=evaluate, describe=describe, data=AlwaysOneData,
    fires_when="always", severity="info", counts="n / 1.5 µs", options={"n": 1}, source="test",
)
'''


def test_a_new_rule_is_one_file(tmp_path, monkeypatch):
    """Drop a module exporting RULE into the package path: the registry evaluates it, render writes its
    prose and the rule table lists it, with no other file edited."""
    (tmp_path / "always_one.py").write_text(NEW_RULE)
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
    ctx = _ctx(tb.build())
    findings, skipped = rules.collect([task() for task in rules.rule_tasks(ctx, {"always_one": {"n": 3}})])
    (f,) = [f for f in findings if f.rule == "always_one"]
    assert f.count == 3 and skipped == ()
    check_data(rules.rule_by_id("always_one"), f.data)
    assert describe(f) == ("always 3 (1.5 µs)", "rank 0 device 0")  # the module's own prose, dispatched
    from tracelab.analyses.results import Analysis, TraceInfo

    (filled,) = with_prose(Analysis(TraceInfo("x", "kineto", (0,)), (), (), (f,))).findings
    assert (filled.message, filled.where) == ("always 3 (1.5 µs)", "rank 0 device 0")
    row = [line for line in rules.design_table().splitlines() if line.startswith("| `always_one`")]
    assert row == ["| `always_one` | a test rule | always | info | n / 1.5 µs | n 1 | test |"]


def _ctx(tl) -> FindingContext:
    from tracelab.analyses.core.host import host_views
    from tracelab.analyses.device.devices import device_rows, device_summaries
    from tracelab.analyses.gaps.idle import Classification
    from tracelab.analyses.steps.infer import find_steps

    rows = device_rows(tl)
    hosts = host_views(tl)
    return FindingContext(tl, rows, hosts, device_summaries(tl, rows), Classification(tl, rows=rows, hosts=hosts).gaps()[0], find_steps(tl))


def _pageable() -> Finding:
    """A pageable_memcpy finding as its rule writes it (numbers chosen here)."""
    return Finding(
        rule="pageable_memcpy", severity="warning", count=3, wasted_ns=2_500_000,
        data={
            "bytes": 3 * (1 << 20), "by_kind": {"HTOD": 2, "DTOH": 1}, "copy_ns": 3_000_000,
            "places": [{"rank": 0, "device": 0, "stream": 7, "copies": 3}], "start_ns": 10, "end_ns": 20,
        },
    )


def test_typed_data_a_renamed_key_raises():
    f = _pageable()
    rule = rules.rule_by_id("pageable_memcpy")
    check_data(rule, f.data)
    assert describe(f) == (
        (
            "3 memcpys (3.0 MiB, 3.00 ms) use pageable host memory (2 HTOD, 1 DTOH); pin it (pin_memory=True, "
            "cudaHostAlloc) so copies run at full speed and can overlap with compute."
        ),
        "rank 0 device 0 stream 7: 3 pageable copies",
    )
    renamed = {("nbytes" if k == "bytes" else k): v for k, v in f.data.items()}
    with pytest.raises(KeyError, match="bytes"):
        check_data(rule, renamed)
    with pytest.raises(KeyError, match="bytes"):  # the prose never prints a default for it
        describe(Finding(f.rule, f.severity, f.count, f.wasted_ns, data=renamed))
    nested = {**f.data, "places": [{"rank": 0, "device": 0, "stream": 7, "n_copies": 3}]}
    with pytest.raises(KeyError, match="copies"):  # records inside the data are checked too
        check_data(rule, nested)
    with pytest.raises(KeyError, match="undeclared"):
        check_data(rule, {**f.data, "extra": 1})


def test_generic_prose_of_excessive_sync_and_of_an_unregistered_rule():
    data = {"syncs": 6, "steps": 3, "ranks": [{"rank": 0, "steps": 3, "syncs": 6, "idle_ns": 20_000}],
            "start_ns": 0, "end_ns": 5}
    f = Finding(rule="excessive_sync", severity="info", count=6, wasted_ns=20_000, data=data)
    check_data(rules.rule_by_id("excessive_sync"), f.data)
    msg, where = describe(f)
    assert msg == (
        "more blocking host syncs inside the training steps than steps: 6 occurrences, 20.0 µs of GPU time "
        "(syncs 6, steps 3)."
    )
    assert where == "rank 0: steps 3, syncs 6, idle 20.0 µs"
    gone = describe(Finding(rule="a_removed_rule", severity="info", count=1, wasted_ns=0, data={"x": 1}))
    assert gone == ("a_removed_rule: 1 occurrences, 0 ns of GPU time (x 1).", "")


def test_real_findings_keep_their_contract():
    """Findings of real analyses (the programs of tests/test_findings.py) have exactly their TypedDicts'
    keys, and their prose is their rule's describe()."""
    from test_findings import training

    from tracelab.api import analyze

    seen = set()
    for tl in (training(), training(pageable=False, side_stream=True)):
        for f in analyze(tl).findings:
            rule = rules.rule_by_id(f.rule)
            check_data(rule, f.data)
            assert (f.message, f.where) == rule.describe(f)
            seen.add(f.rule)
    assert {"sync_per_iteration", "pageable_memcpy", "serialized_copy_compute"} <= seen


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
