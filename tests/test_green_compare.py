"""The green-context explanation surfaced wherever runs are compared: `compare()`, terminal text,
JSON, Markdown and HTML reports, the CLI and the dashboard's compare page. Real data: the bundled
demo runs recorded on an H200 (green_contexts workload, nsys)."""

from __future__ import annotations

import html
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from test_reports import HOSTILE, analysis_of, assert_html_safe

from tracelab import demo
from tracelab.analyses.compare import compare, uses_green_contexts
from tracelab.api import report as write_report
from tracelab.model import GPU_ACTIVITY_KINDS, EventKind
from tracelab.render.export.comparison import comparison_document
from tracelab.render.reports.markdown import md_escape
from tracelab.render.text.compare import format_comparison
from tracelab.render.text.green import green_context_message

GREEN, SEQ, STREAMS = (f"green_contexts-{v}-nsys" for v in ("green_ctx", "sequential", "streams"))
HAVE_DEMO = {a.name.removesuffix(".tar.xz") for a in demo.demo_archives()} >= {GREEN, SEQ, STREAMS}
assert HAVE_DEMO, "green_contexts demo runs missing from tracelab/demo_runs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (run dir, timeline, analysis)."""
    from tracelab.io import load_trace

    cache = tmp_path_factory.mktemp("demo-cache")
    out = {}
    for name in (GREEN, SEQ, STREAMS):
        path = demo.demo_run(name, cache=cache)
        tl = load_trace(path)
        out[name] = (path, tl, analysis_of(tl))
    return out


def _gpu_span(tl) -> int:
    ev = tl.events
    gpu = np.isin(ev["kind"].to_numpy(), [int(k) for k in GPU_ACTIVITY_KINDS])
    return int(ev["end"].to_numpy()[gpu].max() - ev["start"].to_numpy()[gpu].min())


def _kernel_ns(tl, pattern: str) -> int:
    k = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
    names = tl.names(k["name"])
    sel = np.array([pattern in n for n in names], dtype=bool)
    return int((k["end"] - k["start"]).to_numpy()[sel].sum())


def _green_vs_seq(runs, reverse: bool = False):
    _, tg, ag = runs[GREEN]
    _, ts, as_ = runs[SEQ]
    return compare(ag, as_, tg, ts) if reverse else compare(as_, ag, ts, tg)


def test_comparison_carries_the_explanation(runs):
    _, tg, _ = runs[GREEN]
    _, ts, _ = runs[SEQ]
    assert uses_green_contexts(tg) and not uses_green_contexts(ts)
    c = _green_vs_seq(runs)
    ex = c.green_contexts
    assert ex is not None and c.green_contexts_run == "b"
    assert (ex.variant, ex.baseline) == ("green_ctx", "sequential")
    # the slowdown factor is the GPU span ratio of the two runs (and the compared device spans agree)
    assert ex.variant_span_ns == _gpu_span(tg) and ex.sequential_span_ns == _gpu_span(ts)
    assert ex.ratio == pytest.approx(_gpu_span(tg) / _gpu_span(ts))
    assert ex.ratio == pytest.approx(c.devices[0].span_ns.b / c.devices[0].span_ns.a, rel=1e-3)
    assert ex.ratio > 1 and ex.verdict == "slowdown"
    # partitions: 16 + 116 SMs = the H200's 132; the matmul runs on the large one, 132 SMs in sequential
    device_sms = tg.devices[0].sm_count
    assert device_sms == 132
    assert (ex.small_sm_count, ex.large_sm_count) == (16, 116)
    assert ex.small_sm_count + ex.large_sm_count == device_sms
    assert (ex.matmul_sms_variant, ex.matmul_sms_sequential) == (116, device_sms)
    assert ex.sm_ratio == pytest.approx(116 / 132)
    # the matmul runs longer on fewer SMs: its time is the GEMM kernels' total in each trace
    assert ex.matmul_ns_variant == _kernel_ns(tg, ex.matmul_name) > 0
    assert ex.matmul_ns_sequential == _kernel_ns(ts, ex.matmul_name) > 0
    assert ex.matmul_ratio == pytest.approx(ex.matmul_ns_variant / ex.matmul_ns_sequential)
    assert ex.matmul_ratio > 1 and ex.matmul_waves_variant > ex.matmul_waves_sequential >= 1
    # the small partition is the busier one and sets the pace; the large one idles more
    assert ex.small_busy_fraction > ex.large_busy_fraction
    assert ex.starving_green_context == ex.small_green_context
    assert ex.large_idle_sm_ns > ex.small_idle_sm_ns > 0
    assert ex.small_idle_sm_ns == pytest.approx(
        ex.small_sm_count * ex.variant_span_ns * (1 - ex.small_busy_fraction), abs=2
    )
    assert ex.elementwise_ratio > 1
    assert green_context_message(ex).startswith(f"green_ctx takes {ex.ratio:.2f}x the sequential time")


def test_green_run_as_baseline(runs):
    c = _green_vs_seq(runs, reverse=True)
    forward = _green_vs_seq(runs).green_contexts
    assert c.green_contexts_run == "a" and c.green_contexts == forward
    text = format_comparison(c)
    assert "== green contexts: A (green_ctx) against B (sequential)" in text
    # the partition rows are on A's side: "<label>  <value>  -"
    line = next(x for x in text.splitlines() if x.startswith("small partition") and "busy" in x)
    assert line.split()[-1] == "-" and line.split()[-2] == f"{100 * forward.small_busy_fraction:.1f}%"


def test_no_explanation_without_exactly_one_green_run(runs):
    _, ts, as_ = runs[SEQ]
    _, tt, at = runs[STREAMS]
    _, tg, ag = runs[GREEN]
    for c in (compare(as_, at, ts, tt), compare(ag, ag, tg, tg), compare(as_, ag)):
        assert c.green_contexts is None and c.green_contexts_run is None
        assert comparison_document(c)["green_contexts"] is None
        assert "green contexts" not in format_comparison(c)


def test_against_streams_names_the_baseline(runs):
    _, tt, at = runs[STREAMS]
    _, tg, ag = runs[GREEN]
    ex = compare(at, ag, tt, tg).green_contexts
    assert ex is not None and ex.baseline == "streams"
    assert "the streams time" in green_context_message(ex) and "sequential" not in green_context_message(ex)


def test_text_and_json(runs):
    c = _green_vs_seq(runs)
    ex = c.green_contexts
    text = format_comparison(c)
    assert "== green contexts: B (green_ctx) against A (sequential)" in text
    flat = " ".join(text.split())
    assert green_context_message(ex) in flat  # wrapped over lines
    span_row = next(x for x in text.splitlines() if x.startswith("span ") and x.endswith("x"))
    assert span_row.split()[-1] == f"{ex.ratio:.2f}x"
    assert any(x.startswith("matmul SMs") and x.split()[-3:-1] == ["132", "116"] for x in text.splitlines())
    doc = orjson.loads(orjson.dumps(comparison_document(c)))
    g = doc["green_contexts"]
    assert g["run"] == "b" and g["variant"] == "green_ctx" and g["baseline"] == "sequential"
    assert g["ratio"] == pytest.approx(ex.ratio) and g["verdict"] == "slowdown"
    assert (g["small_sm_count"], g["large_sm_count"], g["matmul_sms_sequential"]) == (16, 116, 132)
    assert g["variant_span_ns"] == ex.variant_span_ns and g["message"] == green_context_message(ex)


def test_reports_show_it(runs, tmp_path: Path):
    _, ts, as_ = runs[SEQ]
    _, tg, ag = runs[GREEN]
    ex = _green_vs_seq(runs).green_contexts
    md = tmp_path / "r.md"
    write_report(md, ag, tg, against=(as_, ts))
    text = md.read_text()
    assert "### Green contexts: B (green\\_ctx) against A (sequential)" in text
    assert md_escape(green_context_message(ex)) in text
    assert "| matmul SMs | 132 | 116 | 0.88x |" in text
    out = tmp_path / "r.html"
    write_report(out, ag, tg, against=(as_, ts))
    page = out.read_text()
    assert "<h3>Green contexts: B (green_ctx) against A (sequential)</h3>" in page
    assert html.escape(green_context_message(ex), quote=True) in page
    js = tmp_path / "r.json"
    write_report(js, ag, tg, against=(as_, ts))
    assert json.loads(js.read_text())["comparison"]["green_contexts"]["ratio"] == pytest.approx(ex.ratio)


def test_hostile_kernel_names_are_escaped(runs, tmp_path: Path):
    """The matmul's name is quoted in the explanation: a hostile one is escaped in every output."""
    _, ts, _ = runs[SEQ]
    _, tg, _ = runs[GREEN]
    evil = HOSTILE[0] + "gemm|x|\x1b[31m"  # short enough to be quoted whole

    def rename(tl):
        strings = tuple(evil if s.startswith("nvjet_") else s for s in tl.strings)
        return replace(tl, strings=strings)

    ts, tg = rename(ts), rename(tg)
    as_, ag = analysis_of(ts), analysis_of(tg)
    c = compare(as_, ag, ts, tg)
    assert c.green_contexts is not None and evil in green_context_message(c.green_contexts)
    assert "\x1b" not in format_comparison(c)
    out = tmp_path / "r.html"
    write_report(out, ag, tg, against=(as_, ts))
    assert_html_safe(out.read_text())
    md = tmp_path / "r.md"
    write_report(md, ag, tg, against=(as_, ts))
    section = md.read_text().split("### Green contexts")[1].split("###")[0]
    assert "<script>" not in section and "<img" not in section and "&lt;script&gt;" in section
    assert "\\|x\\|" in section


def test_cli_compare_and_report(runs, tmp_path: Path, monkeypatch):
    from tracelab.cli import main

    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "store.db"))
    seq_dir, green_dir = str(runs[SEQ][0]), str(runs[GREEN][0])
    r = CliRunner().invoke(main, ["compare", seq_dir, green_dir, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    g = doc["comparison"]["green_contexts"]
    assert g["run"] == "b" and g["small_sm_count"] == 16 and g["ratio"] > 1
    # imported runs: the store keeps green contexts and probe data
    for path, name in ((seq_dir, "seq"), (green_dir, "green")):
        r = CliRunner().invoke(main, ["import", path, "--name", name], catch_exceptions=False)
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["compare", "seq", "green"], catch_exceptions=False)
    assert r.exit_code == 0 and "== green contexts: B (green_ctx) against A (sequential)" in r.stdout
    assert f"green_ctx takes {g['ratio']:.2f}x the sequential time" in r.stdout
    out = tmp_path / "rep.md"
    r = CliRunner().invoke(main, ["report", "green", "--against", "seq", "-o", str(out)], catch_exceptions=False)
    assert r.exit_code == 0 and "### Green contexts" in out.read_text()


def test_compare_page_shows_it(runs, tmp_path: Path):
    from test_app_callbacks import as_json, find

    from app.pages import compare as page
    from app.state import AppState
    from tracelab.store import Store

    store = Store(tmp_path / "store.db")
    ids = {}
    for name in (SEQ, GREEN, STREAMS):
        path, tl, _ = runs[name]
        ids[name] = store.import_timeline(tl, source_path=str(path), fingerprint=name.ljust(64, "0"), name=name)
    state = AppState(store=store, import_dir=tmp_path / "imports", max_upload_bytes=1 << 20)
    content = page.compare_content(state, ids[SEQ], ids[GREEN])
    section = find(content, "compare-green-contexts")
    assert section is not None
    text = as_json(section)
    ex = _green_vs_seq(runs).green_contexts
    assert json.dumps(green_context_message(ex)) in text  # the message as one text child
    assert "B (green_ctx) against A (sequential)" in text and '"116"' in text and '"132"' in text
    table = find(section, "compare-green-table")
    rows = table.children[1].children
    assert len(rows) >= 7 and rows[0].children[0].children == "span"
    # no green-context run on either side: no section
    assert find(page.compare_content(state, ids[SEQ], ids[STREAMS]), "compare-green-contexts") is None
