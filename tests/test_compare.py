"""compare(): deltas per device, gaps by cause, findings, top kernels; terminal text and JSON."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import orjson
import pytest
from msgspec.structs import replace
from test_reports import CORPUS, HOSTILE, analysis_of, hostile_analysis, synthetic_timeline

from tracelab.analyses.compare import compare
from tracelab.analyses.comparison import Delta
from tracelab.analyses.device.kernels import KERNEL_SUMMARY_COLUMNS, kernel_summary
from tracelab.analyses.results import Finding
from tracelab.model import EventKind, Flag, RunMeta, StringInterner, build_timeline
from tracelab.render.export.comparison import comparison_document
from tracelab.render.text.compare import format_comparison, term_safe


def test_delta():
    d = Delta(200, 150)
    assert (d.delta, d.pct) == (-50, -25.0)
    assert Delta(0, 10).pct is None and Delta(0, 0).delta == 0


def test_kernel_summary_matches_a_plain_count():
    tl = synthetic_timeline(iterations=7, names=("a", "b<T>", "c", "a2"))
    ks = kernel_summary(tl)
    assert list(ks.columns) == list(KERNEL_SUMMARY_COLUMNS)
    expected: dict[str, list[int]] = defaultdict(list)
    ev = tl.events
    for kind, s, e, n in zip(ev["kind"], ev["start"], ev["end"], ev["name"]):
        if kind == EventKind.KERNEL:
            expected[tl.strings[n]].append(int(e - s))
    assert set(ks["name"]) == set(expected)
    for r in ks.itertuples(index=False):
        durs = expected[r.name]
        assert (r.calls, r.total_ns, r.min_ns, r.max_ns) == (len(durs), sum(durs), min(durs), max(durs))
        assert r.mean_ns == pytest.approx(sum(durs) / len(durs))
    assert ks["total_ns"].is_monotonic_decreasing
    assert ks["share"].sum() == pytest.approx(1.0)
    # filters
    assert kernel_summary(tl, rank=0, device=0).equals(ks)
    assert kernel_summary(tl, device=3).empty


def test_kernel_summary_comm_flag_and_empty():
    s = StringInterner()
    ids = s.intern_array(["ncclKernel_AllReduce", "gemm"])
    tl = build_timeline(
        {"kind": [0, 0, 0], "start": [0, 10, 30], "end": [5, 20, 31], "device": [0, 0, 0], "stream": [1, 2, 1],
         "name": [ids[0], ids[1], ids[1]], "flags": [Flag.COMM, 0, 0]},
        s.strings, RunMeta(source="x", format="kineto"),
    )
    ks = kernel_summary(tl).set_index("name")
    assert bool(ks.loc["ncclKernel_AllReduce", "comm"]) and not bool(ks.loc["gemm", "comm"])
    assert ks.loc["gemm", "calls"] == 2 and ks.loc["gemm", "total_ns"] == 11
    empty = kernel_summary(build_timeline({}, [], RunMeta(source="e", format="kineto")))
    assert empty.empty and list(empty.columns) == list(KERNEL_SUMMARY_COLUMNS)


def test_compare_identical_runs_has_no_differences():
    tl = synthetic_timeline()
    a = hostile_analysis(tl)
    c = compare(a, a, tl, tl)
    assert c.notes == ()
    d = c.devices[0]
    assert d.present == "both"
    for f in ("span_ns", "busy_ns", "idle_ns", "kernel_ns", "compute_copy_ns", "gaps", "gap_ns"):
        assert getattr(d, f).delta == 0 and getattr(d, f).a == getattr(d, f).b
    assert d.span_ns.a == a.devices[0].span_ns and d.gaps.a == len(a.gaps)
    assert {f.status for f in c.findings} == {"same"}
    assert (c.new_findings, c.gone_findings, c.changed_findings) == (0, 0, 0)
    assert c.kernels_compared and all(k.status == "both" and k.total_ns.delta == 0 for k in c.kernels)


def test_compare_baseline_vs_variant():
    base = synthetic_timeline(gap_us=80, source="base.json")
    var = synthetic_timeline(gap_us=20, source="var.json", names=(*HOSTILE[:3], "fresh_kernel"))
    a, b = analysis_of(base), analysis_of(var)
    c = compare(a, b, base, var)
    d = c.devices[0]
    assert (d.idle_ns.a, d.idle_ns.b) == (a.devices[0].idle_ns, b.devices[0].idle_ns)
    assert d.idle_ns.delta == b.devices[0].idle_ns - a.devices[0].idle_ns < 0
    assert d.span_ns.pct == pytest.approx(100 * (b.devices[0].span_ns - a.devices[0].span_ns) / a.devices[0].span_ns)
    # gaps by cause tally the analyses' gaps
    for g in c.gaps:
        assert g.count.a == sum(x.cause == g.cause for x in a.gaps)
        assert g.total_ns.b == sum(x.duration_ns for x in b.gaps if x.cause == g.cause)
    assert sum(g.count.a for g in c.gaps) == len(a.gaps)
    kernels = {k.name: k for k in c.kernels}
    assert kernels["fresh_kernel"].status == "b" and kernels["fresh_kernel"].calls.a == 0
    assert kernels[HOSTILE[3]].status == "a" and kernels[HOSTILE[3]].calls == Delta(20, 0)
    ranked = [max(k.total_ns.a, k.total_ns.b) for k in c.kernels]
    assert ranked == sorted(ranked, reverse=True)


def test_sm_busy_compared():
    base = synthetic_timeline(gap_us=80, source="base.json", gpu_name="NVIDIA H100")
    var = synthetic_timeline(gap_us=20, source="var.json", gpu_name="NVIDIA H100")
    a, b = analysis_of(base), analysis_of(var)
    d = compare(a, b, base, var).devices[0]
    assert (d.sm_source_a, d.sm_source_b) == (a.devices[0].sm.source, b.devices[0].sm.source) != ("none", "none")
    assert (d.sm_busy_a, d.sm_busy_b) == (a.devices[0].sm.busy_fraction, b.devices[0].sm.busy_fraction)
    assert d.sm_busy_b > d.sm_busy_a > 0  # same work, shorter gaps: the SMs are busier
    text = format_comparison(compare(a, b, base, var))
    assert f"SM busy ({d.sm_source_a} / {d.sm_source_b})" in text


def test_findings_new_gone_changed():
    tl = synthetic_timeline(iterations=3)
    base = analysis_of(tl)
    fa = (Finding("pageable_memcpy", "warning", 5, 1000, "m", "w"), Finding("launch_bound", "info", 2, 50, "m", "w"),
          Finding("pdl", "info", 1, 0, "m", "w"))
    fb = (Finding("launch_bound", "warning", 9, 400, "m", "w"), Finding("sync_per_iteration", "critical", 10, 9000, "m", "w"),
          Finding("pdl", "info", 1, 0, "m", "w"))
    c = compare(replace(base, findings=fa), replace(base, findings=fb))
    status = {f.rule: f.status for f in c.findings}
    assert status == {"pageable_memcpy": "gone", "launch_bound": "changed", "sync_per_iteration": "new", "pdl": "same"}
    assert (c.new_findings, c.gone_findings, c.changed_findings) == (1, 1, 1)
    assert (c.wasted_ns.a, c.wasted_ns.b) == (1050, 9400)
    assert [f.status for f in c.findings] == ["new", "changed", "gone", "same"]
    lb = next(f for f in c.findings if f.rule == "launch_bound")
    assert (lb.severity_a, lb.severity_b, lb.count.delta) == ("info", "warning", 7)
    assert not c.kernels_compared and c.kernels == () and any("kernels not compared" in n for n in c.notes)


def test_compare_empty_runs():
    empty = build_timeline({}, [], RunMeta(source="e.json", format="kineto"))
    a = analysis_of(empty)
    c = compare(a, a, empty, empty)
    assert c.devices == () and c.totals is None and c.kernels == ()
    text = format_comparison(c)
    assert "(no gaps)" in text and "(no kernels)" in text
    assert comparison_document(c)["devices"] == []


def test_device_matching():
    tl = synthetic_timeline(iterations=3)
    a = analysis_of(tl)
    d0 = a.devices[0]
    other_rank = replace(a, devices=(replace(d0, rank=3),), gaps=tuple(replace(g, rank=3) for g in a.gaps))
    c = compare(a, other_rank)
    assert len(c.devices) == 1 and c.devices[0].present == "both"
    assert (c.devices[0].b_rank, c.devices[0].gaps.b) == (3, len(a.gaps))
    assert any("paired in order" in n for n in c.notes)
    two = replace(a, devices=(d0, replace(d0, device=1, busy_ns=1)))
    c2 = compare(a, two)
    assert [d.present for d in c2.devices] == ["both", "b"]
    assert c2.devices[1].busy_ns == Delta(0, 1) and any("only in B" in n for n in c2.notes)
    assert c2.totals is not None and c2.totals.span_ns == Delta(d0.span_ns, d0.span_ns)


def test_text_and_json_output():
    base = synthetic_timeline(gap_us=60, source="base\x1b[31m.json")
    names = ("evil\x1b[2J\x1b[31mred", "bidi\u202etxt.exe", *HOSTILE)
    var = synthetic_timeline(gap_us=20, source="var.json", names=names)
    # A without findings (its loop now gets inferred steps and a real sync_per_iteration): both of B's
    # hostile findings are new
    c = compare(replace(analysis_of(base), findings=()), hostile_analysis(var), base, var)
    text = format_comparison(c)
    assert "\x1b" not in text and "\u202e" not in text and "line?break" in text
    assert "== device r0/d0" in text and "== gaps by cause" in text and "2 new" in text
    assert "new sync_per_iteration: sync after |pipe|" in text  # what appeared in B, in words
    for label in ("span", "busy", "idle", "overlap compute/copy"):
        assert any(line.startswith(label) for line in text.splitlines())
    idle = c.devices[0].idle_ns
    assert f"{idle.pct:+.1f}%" in text
    doc = comparison_document(c)
    round_trip = json.loads(orjson.dumps(doc))
    dev = round_trip["devices"][0]
    assert dev["idle_ns"] == {"a": idle.a, "b": idle.b, "delta": idle.delta, "pct": round(idle.pct, 3)}
    assert round_trip["findings"]["new"] == 2 and round_trip["kernels_compared"] is True
    assert {k["name"] for k in round_trip["kernels"]} >= set(names)  # JSON keeps names verbatim (as data)
    assert term_safe("a\nb\x9bc", 10) == "a?b?c"


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus absent")
def test_compare_corpus_pair():
    from tracelab import io as parsers

    pa, pb = CORPUS / "hta/trace_compare__base__base.json.gz", CORPUS / "hta/trace_compare__test__test.json.gz"
    ta, tb = parsers.load_trace(pa), parsers.load_trace(pb)
    a, b = analysis_of(ta), analysis_of(tb)
    c = compare(a, b, ta, tb)
    assert [d.present for d in c.devices] == ["both"] * len(c.devices) and c.devices
    ka, kb = kernel_summary(ta), kernel_summary(tb)
    assert sum(k.calls.a for k in c.kernels) == int(ka["calls"].sum())  # fewer than 20 names: all listed
    assert sum(k.calls.b for k in c.kernels) == int(kb["calls"].sum())
    assert c.devices[0].busy_ns == Delta(a.devices[0].busy_ns, b.devices[0].busy_ns)
    text = format_comparison(c)
    assert "== device" in text
    assert json.loads(orjson.dumps(comparison_document(c)))["a"]["source"] == a.trace.source


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus absent")
def test_compare_corpus_different_ranks_and_gpus():
    """HTA's trace_diff pair: rank 3 on an A100 against rank 1 on a V100 -> devices paired in order."""
    from tracelab import io as parsers

    pa, pb = CORPUS / "hta/trace_diff__control__control.json.gz", CORPUS / "hta/trace_diff__test__test.json.gz"
    ta, tb = parsers.load_trace(pa), parsers.load_trace(pb)
    a, b = analysis_of(ta), analysis_of(tb)
    c = compare(a, b, ta, tb)
    assert len(c.devices) == 1 and c.devices[0].present == "both"
    d = c.devices[0]
    assert (d.rank, d.b_rank) == (a.devices[0].rank, b.devices[0].rank) and d.rank != d.b_rank
    assert "A100" in d.name_a and "V100" in d.name_b
    assert any("paired in order" in n for n in c.notes)
    assert d.kernels == Delta(a.devices[0].kernels, b.devices[0].kernels)
    text = format_comparison(c)
    assert f"r{d.rank}/d{d.device} ~ r{d.b_rank}/d{d.b_device}" in text


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus absent")
def test_compare_corpus_nsys_before_after():
    """nsys-ai's before/after pair (nsys SQLite, 2 GPUs): devices matched by (rank, device), totals add up."""
    from tracelab import io as parsers

    pa = CORPUS / "nsys_ai/tests__fixtures__mfu_2gpu_before.sqlite"
    pb = CORPUS / "nsys_ai/tests__fixtures__mfu_2gpu_after.sqlite"
    ta, tb = parsers.load_trace(pa), parsers.load_trace(pb)
    a, b = analysis_of(ta), analysis_of(tb)
    c = compare(a, b, ta, tb)
    assert len(c.devices) == 2 and all(d.present == "both" for d in c.devices)
    assert not any("paired" in n for n in c.notes)
    for d, da, db in zip(c.devices, a.devices, b.devices):
        assert (d.rank, d.device) == (da.rank, da.device) == (db.rank, db.device)
        assert d.busy_ns == Delta(da.busy_ns, db.busy_ns) and d.comm_ns == Delta(da.comm_ns, db.comm_ns)
    assert c.totals.busy_ns.a == sum(d.busy_ns for d in a.devices)
    assert sum(g.count.b for g in c.gaps) == len(b.gaps)
    top = kernel_summary(ta)["total_ns"].iloc[0]
    assert max(k.total_ns.a for k in c.kernels) == top


def test_compare_is_fast_on_large_runs():
    """Kernel comparison is one groupby per run: 300k kernels compare in well under a second or two."""
    import time

    n = 300_000
    rng = np.random.default_rng(3)
    s = StringInterner()
    ids = s.intern_array([f"k{i % 3000}" for i in range(n)])
    start = np.cumsum(rng.integers(100, 5000, n))
    tl = build_timeline({"kind": np.zeros(n), "start": start, "end": start + 90, "device": np.zeros(n),
                         "stream": np.ones(n), "name": ids}, s.strings, RunMeta(source="big", format="kineto"))
    a = analysis_of(tl)
    t0 = time.perf_counter()
    c = compare(a, a, tl, tl)
    took = time.perf_counter() - t0
    assert len(c.kernels) == 20 and took < 5.0, took


def test_kernel_names_that_differ_in_the_middle_get_distinct_labels():
    """`compare` cuts long kernel names in the middle; two names that differ only there once gave two
    identical rows (issue 28). Labels stay within the width, distinct names get distinct labels, and a
    label shows the part where its name differs."""
    from tracelab.render.text.compare import shorten_distinct

    a = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_kernel__5x_cublas"
    b = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma_aligna4_kernel__5x_cublas"
    la, lb, lc = shorten_distinct([a, b, "short"], 45)
    assert la != lb and len(la) <= 45 and len(lb) <= 45 and lc == "short"
    assert "_tn_" in la and "_nn_" in lb
    rng = np.random.default_rng(3)
    for _ in range(200):
        stem = "".join(rng.choice(list("abcdefgh_<>:"), 30))
        names = [stem + "".join(rng.choice(list("xyz"), int(rng.integers(0, 6)))) + stem for _ in range(6)]
        width = int(rng.integers(12, 60))
        labels = shorten_distinct(names, width)
        assert all(len(x) <= width for x in labels), (labels, width)
        assert len(set(labels)) == len(set(names)), (names, labels, width)
        for n, x in zip(names, labels):  # the same name, the same label
            assert labels[names.index(n)] == x
