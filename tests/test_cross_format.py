"""Issue 3: the same program recorded once under nsys and once under torch.profiler (separate
processes, on a real H200: the bundled demo runs) gives the same kernels per stream and the same busy
time within 5 %, through two different parsers."""

from __future__ import annotations

from collections import Counter

import pytest

from tracelab.analyses import analyze
from tracelab.demo import demo_archives, demo_run
from tracelab.io import load_trace
from tracelab.model import EventKind


def _pairs() -> list[tuple[str, str]]:
    names = {a.name[: -len(".tar.xz")] for a in demo_archives()}
    pairs = []
    for nsys in sorted(n for n in names if "-nsys" in n):
        torch = nsys.replace("-nsys", "-torch")
        if torch in names:
            pairs.append((nsys, torch))
    return pairs


PAIRS = _pairs()


def test_every_workload_variant_has_both_backends():
    # 5 workloads with 4 + 4 + 2 + 3 + 3 variants, plus green_ctx with the instrumented Triton matmul;
    # issue 14: fusion 5, default_stream 3, priorities 2, graphs 2 more
    # issue 25: comm_overlap (3 variants, two H200s); issue 29: input_pipeline (2); issue 27: sync_pitfalls keep_outputs
    assert len(PAIRS) == 17 + 12 + 3 + 2 + 1


@pytest.mark.parametrize(("nsys_run", "torch_run"), PAIRS, ids=[p[0].replace("-nsys", "") for p in PAIRS])
def test_same_program_same_numbers_in_both_formats(nsys_run, torch_run, tmp_path):
    summaries = []
    for name in (nsys_run, torch_run):
        tl = load_trace(demo_run(name, tmp_path))
        assert tl.meta.format == ("nsys" if "-nsys" in name else "kineto")
        kernels = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
        # per rank: each process numbers its own streams (nsys and Kineto may number them apart), so a
        # multi-rank run compares each rank's kernel counts per stream, not the stream ids
        keys = zip(kernels["rank"].tolist(), kernels["stream"].tolist(), kernels["green_context"].tolist())
        counts = Counter(keys)
        ranks = sorted({k[0] for k in counts})
        per_stream = (
            Counter({(s, g): n for (r, s, g), n in counts.items()})
            if len(ranks) == 1
            else {r: sorted(n for (rr, _, g), n in counts.items() if rr == r) for r in ranks}
        )
        # a multi-rank run's set-up holds the ranks' profiler starts lined up by a barrier (hundreds of ms
        # of NCCL kernel waiting under torch.profiler, little under nsys): compare the steps
        if len(ranks) > 1:
            from tracelab.analyses.scope import steps_span_timeline

            tl = steps_span_timeline(tl, analyze(tl).step_rows)
        summaries.append((per_stream, analyze(tl).devices[0]))
    (nsys_streams, nsys_dev), (torch_streams, torch_dev) = summaries
    assert nsys_streams == torch_streams
    assert nsys_streams
    assert torch_dev.busy_ns == pytest.approx(nsys_dev.busy_ns, rel=0.05)
    assert torch_dev.kernel_ns == pytest.approx(nsys_dev.kernel_ns, rel=0.05)


# ---- the same gap causes from both formats (issue 10) ------------------------------------------
CAUSES = ("dependency_wait", "host_sync", "input_wait", "launch_latency", "no_work", "unknown")
MIN_IDLE_FRACTION = 0.01  # below 1% of the span idle in gaps (after the first step) there is nothing to compare
# Every pair, no exception. The sync_pitfalls pairs were re-recorded on 2026-11-25 in one H200 session with
# today's `tracelab record` (nsys: --pytorch=autograd-nvtx and osrt; tests/data/README.md): the pairs bundled
# before came from executions whose hosts ran at different speeds (nsys steady step 1.68 ms, torch 2.85 ms
# for item_every_step), which moves idle time between host_sync and launch_latency when the host is about as
# fast as the GPU (docs/DECISIONS.md, "The same causes from both profilers"). Before / after, worst cause:
# item_every_step 23.3 -> 4.0 pp, synchronize_in_loop 13.3 -> 3.5 pp.


def _cause_shares(name: str, cache) -> tuple[dict[str, float], float]:
    """Per-cause share (%) of the idle time in gaps after the first step, and that idle time as a
    fraction of the span after the first step."""
    from tracelab.api import analyze as api_analyze

    a = api_analyze(load_trace(demo_run(name, cache)))
    first_end = min((s.end_ns for s in a.steps if s.index == 0), default=None)
    assert first_end is not None, f"{name}: no steps"
    total = dict.fromkeys(CAUSES, 0)
    for g in a.gaps:
        if g.start_ns >= first_end:
            total[g.cause] += g.duration_ns
    idle = sum(total.values())
    span = sum(max(d.end_ns - max(d.start_ns, first_end), 1) for d in a.devices)
    return {c: 100.0 * v / max(idle, 1) for c, v in total.items()}, idle / span


# input_pipeline/slow_loader was re-recorded on 2026-11-28 (21:04 UTC, two H200s, both backends back to back
# with the final code): input_wait 71.9% / 72.6%, launch_latency 23.8% / 27.4%, no_work 4.3% / 0 (4.3 points).
# The pair bundled before came from two executions whose loaders ran at different speeds (raw fetch idle
# 75.0% vs 67.6% of the steps' idle; now 68.6% vs 69.5%): test_slow_loader_pair_from_the_raw_traces.
CAUSE_XFAIL: dict[str, str] = {}


@pytest.mark.parametrize(
    ("nsys_run", "torch_run"),
    [pytest.param(*p, marks=pytest.mark.xfail(strict=True, reason=CAUSE_XFAIL[p[0]])) if p[0] in CAUSE_XFAIL else p
     for p in PAIRS],
    ids=[p[0].replace("-nsys", "") for p in PAIRS],
)
def test_same_gap_causes_in_both_formats(nsys_run, torch_run, tmp_path):
    """Per-cause share of the idle time after the first step agrees within 10 percentage points (issue 10:
    a launching thread between CUDA calls is busy on the host whichever profiler recorded it)."""
    (sa, fa), (sb, fb) = _cause_shares(nsys_run, tmp_path), _cause_shares(torch_run, tmp_path)
    if fa < MIN_IDLE_FRACTION or fb < MIN_IDLE_FRACTION:
        assert max(fa, fb) < 5 * MIN_IDLE_FRACTION, (fa, fb)  # little idle in one: both small
        return
    worst = max(abs(sa[c] - sb[c]) for c in CAUSES)
    assert worst <= 10.0, {c: (round(sa[c]), round(sb[c])) for c in CAUSES}


@pytest.mark.parametrize("run", ["sync_pitfalls-item_every_step-nsys", "overlap-streams_pageable-torch"])
def test_gap_threshold_changes_no_finding_on_recorded_runs(run, tmp_path):
    """--gap-threshold-us is a display knob (issue 10: with 1000 µs a critical 3.19 ms finding used to
    become info / 0): every finding keeps its wasted_ns and severity."""
    from tracelab.analyses.results import AnalysisOptions
    from tracelab.api import analyze as api_analyze

    tl = load_trace(demo_run(run, tmp_path))
    seen = []
    for us in (1, 10, 1000):
        a = api_analyze(tl, AnalysisOptions(gap_threshold_ns=us * 1000))
        seen.append({f.rule: (f.count, f.wasted_ns, f.severity) for f in a.findings})
    assert seen[0] == seen[1] == seen[2] and "sync_per_iteration" in seen[0]


def _raw_fetch_idle(run) -> tuple[float, float]:
    """From the raw trace of an input_pipeline run, over its `step N` markers after the first: the GPU idle
    time (ns, the steps' span minus the union of kernels, copies and memsets) and the part of it spent
    while the main thread was in the batch fetch (its `load batch` range)."""
    import gzip
    import json
    import re
    import sqlite3

    step = re.compile(r"^step \d+$")
    if (run / "trace.sqlite").exists():
        con = sqlite3.connect(f"file:{run / 'trace.sqlite'}?mode=ro", uri=True)
        nvtx = con.execute("SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                           "ON s.id = n.textId WHERE n.end IS NOT NULL").fetchall()
        gpu = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end FROM "
                          "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
        con.close()
    else:
        with gzip.open(run / "trace.json.gz", "rt") as fh:
            xs = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
        ns = lambda x: round(x * 1000)
        nvtx = [(ns(e["ts"]), ns(e["ts"] + e["dur"]), str(e.get("name"))) for e in xs if e.get("cat") in ("user_annotation", "cpu_op")]
        gpu = [(ns(e["ts"]), ns(e["ts"] + e["dur"])) for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    steps = sorted((a, b) for a, b, t in nvtx if t and step.match(t))[1:]
    loads = [(a, b) for a, b, t in nvtx if t == "load batch"]

    def idle(a: int, b: int) -> int:  # GPU idle in [a, b)
        busy, reach = 0, a
        for s, e in sorted(gpu):
            s, e = max(s, reach), min(e, b)
            if e > s:
                busy += e - s
                reach = e
        return (b - a) - busy

    total = sum(idle(a, b) for a, b in steps)
    fetch = sum(idle(max(a, s), min(b, e)) for a, b in steps for s, e in loads if min(b, e) > max(a, s))
    return total, fetch


def test_slow_loader_pair_from_the_raw_traces(tmp_path):
    """input_pipeline/slow_loader: each format's input_wait share agrees with its own raw trace (the GPU idle
    while the main thread was in the batch fetch, within 4 points), and the two formats within 10 points."""
    shares = {}
    for name in ("input_pipeline-slow_loader-nsys", "input_pipeline-slow_loader-torch"):
        total, fetch = _raw_fetch_idle(demo_run(name, tmp_path))
        raw = 100.0 * fetch / total
        got, _ = _cause_shares(name, tmp_path)
        assert abs(got["input_wait"] - raw) <= 4.0, (name, got, raw)
        shares[name] = got["input_wait"]
    assert abs(shares["input_pipeline-slow_loader-nsys"] - shares["input_pipeline-slow_loader-torch"]) <= 10.0, shares
