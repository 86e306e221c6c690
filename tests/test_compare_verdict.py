"""`compare` answers: the verdict's numbers (analyses.compare.Verdict) recomputed independently from
the bundled H200 runs, its wording, and the CLI naming runs by their names within 100 columns."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner
from msgspec.structs import replace

from tracelab.analyses.compare import compare
from tracelab.analyses.verdict import verdict
from tracelab.api import analyze
from tracelab.cli import main
from tracelab.model import EventKind
from tracelab.render.text.compare import format_comparison, verdict_line

STEP = re.compile(r"^step \d+$")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tracelab.demo import demo_archives, demo_run
    from tracelab.io.detect import load_run_dir

    if not demo_archives():
        pytest.skip("no bundled demo runs")
    cache = tmp_path_factory.mktemp("demo")
    out = {}
    for name in ("sync_pitfalls-item_every_step-torch", "sync_pitfalls-deferred_sync-torch"):
        path = demo_run(name, cache)
        tl = load_run_dir(path)
        out[name] = (path, tl, analyze(tl))
    return out


def _mean_step_ns(tl) -> float:
    """Top-level NVTX ranges named 'step N' (the workloads mark each step so), by hand."""
    ev = tl.events
    names = tl.names(ev["name"].to_numpy())
    mask = (ev["kind"].to_numpy() == int(EventKind.NVTX_RANGE)) & np.array([bool(STEP.match(n)) for n in names])
    dur = (ev["end"].to_numpy() - ev["start"].to_numpy())[mask]
    assert dur.size == 20
    return float(dur.mean())


def test_verdict_per_step(runs):
    """The verdict compares the steady-state GPU step time (issue 24): the median GPU window of the
    steps after warm-up, computed here from the raw Kineto files (tests/raw_steps.py)."""
    from raw_steps import kineto_step_windows, steady

    path_a, tl_a, an_a = runs["sync_pitfalls-item_every_step-torch"]
    path_b, tl_b, an_b = runs["sync_pitfalls-deferred_sync-torch"]
    v = compare(an_a, an_b, tl_a, tl_b).verdict
    assert v is not None and v.basis == "gpu_step" and not v.warnings
    a = steady(kineto_step_windows(path_a / "trace.json.gz")) * 1e3
    b = steady(kineto_step_windows(path_b / "trace.json.gz")) * 1e3
    assert (v.steps_a, v.steps_b) == (20, 20)
    assert v.a_ns == pytest.approx(a, abs=2_000) and v.b_ns == pytest.approx(b, abs=2_000)
    assert v.pct == pytest.approx(100 * (v.b_ns - v.a_ns) / v.a_ns)
    idle_a = sum(d.idle_ns for d in an_a.devices)
    idle_b = sum(d.idle_ns for d in an_b.devices)
    assert v.idle_ns.delta == idle_b - idle_a
    # causes: the gap causes whose total time moved most, tallied here from the gaps
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for side, an in enumerate((an_a, an_b)):
        for g in an.gaps:
            tally[g.cause][side] += g.duration_ns
    expected = sorted((c for c in tally if tally[c][1] != tally[c][0]), key=lambda c: -abs(tally[c][1] - tally[c][0]))
    assert [g.cause for g in v.causes] == expected[:3]
    assert v.causes[0].cause == "launch_latency" and v.causes[0].total_ns.delta > 0
    rules_a, rules_b = {f.rule for f in an_a.findings}, {f.rule for f in an_b.findings}
    assert set(v.gone_findings) == rules_a - rules_b and "sync_per_iteration" in v.gone_findings
    assert set(v.new_findings) == rules_b - rules_a
    line = verdict_line(v, 100)
    assert line.startswith(f"B is {abs(v.pct):.1f}% {'slower' if v.pct > 0 else 'faster'} per step; GPU idle +")
    assert "causes: launch_latency +" in line and len(line) <= 100


def test_verdict_on_span_without_steps(runs):
    _, tl_a, an_a = runs["sync_pitfalls-item_every_step-torch"]
    _, tl_b, an_b = runs["sync_pitfalls-deferred_sync-torch"]
    an_a, an_b = replace(an_a, steps=()), replace(an_b, steps=())
    c = compare(an_a, an_b)  # no steps: the GPU span decides
    v = c.verdict
    assert v is not None and v.basis == "span"

    def gpu_span(tl) -> int:
        ev = tl.events
        gpu = ev["kind"].isin([int(EventKind.KERNEL), int(EventKind.MEMCPY), int(EventKind.MEMSET)])
        return int(ev["end"][gpu].max() - ev["start"][gpu].min())

    assert (v.a_ns, v.b_ns) == (gpu_span(tl_a), gpu_span(tl_b))
    assert verdict_line(v).startswith(f"B is {100 * (v.b_ns - v.a_ns) / v.a_ns:.1f}% slower in GPU span")
    none = np.zeros(0, dtype=np.int64)
    same = verdict(an_a, an_a, list(compare(an_a, an_a).devices), c.gaps[:0], (), none, none)
    assert same is not None and verdict_line(same) == "B takes the same time in GPU span; GPU idle 0"


def test_verdict_keeps_to_the_width(runs):
    _, tl_a, an_a = runs["sync_pitfalls-item_every_step-torch"]
    _, tl_b, an_b = runs["sync_pitfalls-deferred_sync-torch"]
    v = compare(an_a, an_b, tl_a, tl_b).verdict
    full = verdict_line(v, None)
    # (issue 24 item 7: the .item() gaps are launch_latency after the wait now, so one cause moved here)
    assert len(v.causes) >= 1 and full.count(",") == len(v.causes) - 1  # every cause that moved
    narrow = verdict_line(v, 80)
    first = v.causes[0]
    delta_ms = first.total_ns.delta / 1e6  # tens of ms here: two decimals, by hand
    assert narrow == full.split("; causes: ")[0] + f"; causes: {first.cause} +{delta_ms:.2f} ms"
    assert len(narrow) <= 80


def test_text_and_json_carry_the_verdict(runs):
    from tracelab.render.export.comparison import comparison_document

    _, tl_a, an_a = runs["sync_pitfalls-item_every_step-torch"]
    _, tl_b, an_b = runs["sync_pitfalls-deferred_sync-torch"]
    c = compare(an_a, an_b, tl_a, tl_b)
    text = format_comparison(c, labels=("item", "deferred"), width=100)
    lines = text.splitlines()
    assert lines[0] == verdict_line(c.verdict, 100)
    assert "A (baseline): item  [kineto, rank 0]" in lines  # one rank, never "ranks 0" (issue 28)
    assert max(len(x) for x in lines) <= 100
    doc = comparison_document(c)["verdict"]
    assert doc["basis"] == "gpu_step" and doc["steps_a"] == 20 and doc["text"] == verdict_line(c.verdict, None)
    assert doc["pct"] == pytest.approx(c.verdict.pct, abs=1e-3)


def test_cli_compare_names_runs_and_fits_100_columns(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "s.db"))
    cli = CliRunner()
    for path, _, _ in runs.values():
        assert cli.invoke(main, ["import", str(path)]).exit_code == 0
    r = cli.invoke(main, ["compare", "sync_pitfalls/item_every_step/torch", "sync_pitfalls/deferred_sync/torch"],
                   env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    v = compare(*[runs[n][2] for n in ("sync_pitfalls-item_every_step-torch", "sync_pitfalls-deferred_sync-torch")],
                *[runs[n][1] for n in ("sync_pitfalls-item_every_step-torch", "sync_pitfalls-deferred_sync-torch")]).verdict
    assert lines[0].startswith(f"B is {abs(v.pct):.1f}% ") and "per step; GPU idle +" in lines[0]
    assert any(x.startswith("A (baseline): sync_pitfalls/item_every_step/torch") for x in lines)
    assert any(x.startswith("B (variant):  sync_pitfalls/deferred_sync/torch") for x in lines)
    assert "demo" not in r.stdout  # no cache paths
    assert max(len(x) for x in lines) <= 100


def test_reports_with_a_baseline_open_with_the_verdict(runs, tmp_path):
    from tracelab.api import report as write_report

    _, tl_a, an_a = runs["sync_pitfalls-item_every_step-torch"]
    _, tl_b, an_b = runs["sync_pitfalls-deferred_sync-torch"]
    sentence = verdict_line(compare(an_a, an_b, tl_a, tl_b).verdict, None)
    for suffix in ("md", "html"):
        out = write_report(tmp_path / f"r.{suffix}", an_b, tl_b, against=(an_a, tl_a))
        text = out.read_text()
        shown = sentence.replace("_", "\\_") if suffix == "md" else sentence  # Markdown escapes _
        assert shown in text, suffix
        # A and B by their run titles (workload · variant (backend, GPU)), not by cache paths
        a_title = "sync_pitfalls · item_every_step (torch, NVIDIA H200)"
        b_title = "sync_pitfalls · deferred_sync (torch, NVIDIA H200)"
        if suffix == "md":
            assert f"Baseline **A**: {a_title.replace('_', chr(92) + '_')} (" in text
        else:
            assert f">{a_title}</span>" in text and f">{b_title}</span>" in text
