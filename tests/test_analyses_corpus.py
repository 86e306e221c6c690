"""Smoke test of `analyze` over real corpus traces: the DESIGN.md invariants hold on data this project
did not produce (skipped when the corpus is absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelab.analyses import AnalysisOptions
from tracelab.analyses.rules import RULES
from tracelab.api import analyze  # findings with their prose
from tracelab.render.export.document import to_document
from tracelab.render.text.gap_evidence import gap_evidence

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="corpus not present")]

TRACES = [
    "hta/critical_path__cuda_event_sync__event_sync_trace.json.gz",  # cuda_sync events, .item()
    "hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",  # 3 streams, wait events
    "hta/negative_queue_length_values_check__rank0.json.gz",  # 6 streams, NCCL, orphans, DLRM steps
    "hta/trace_diff__control__control.json.gz",  # NCCL overlap with compute
    "kineto_tb_plugin/samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",  # 2021 schema
    "tracelens/b200__eager_trace.json.gz",  # same-stream overlaps (PDL) on Blackwell
    "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # orphans
    "tracelens/inference__vllm_decode_full__graph_execution.json.gz",  # AMD, graph replay
]
CAUSES = {"host_sync", "input_wait", "launch_latency", "dependency_wait", "no_work", "profiler", "unknown"}


def _load(rel: str):
    from tracelab.io import load_trace

    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the corpus")
    return load_trace(path)


@pytest.mark.parametrize("rel", TRACES)
def test_invariants_on_real_traces(rel):
    tl = _load(rel)
    for options in (AnalysisOptions(), AnalysisOptions(exclude_orphans=True, gap_threshold_ns=50_000)):
        a = analyze(tl, options)
        assert a.devices, rel
        for d in a.devices:
            assert 0 < d.busy_ns <= d.span_ns and d.idle_ns == d.span_ns - d.busy_ns
            assert d.end_ns - d.start_ns == d.span_ns
            assert (
                max(d.kernel_ns, d.memcpy_ns, d.memset_ns)
                <= d.busy_ns
                <= d.kernel_ns + d.memcpy_ns + d.memset_ns
            )
            assert d.comm_ns <= d.kernel_ns
            o = d.overlap
            assert o.compute_compute_ns <= d.kernel_ns - d.comm_ns + o.compute_comm_ns
            assert o.compute_copy_ns <= min(d.kernel_ns, d.memcpy_ns + d.memset_ns)
            assert o.compute_comm_ns <= d.comm_ns
            assert o.copy_copy_ns <= d.memcpy_ns + d.memset_ns
            assert all(s.busy_ns <= d.busy_ns for s in d.streams)
            assert sum(s.kernels for s in d.streams) == d.kernels
            dev_gaps = [g for g in a.gaps if (g.rank, g.device) == (d.rank, d.device)]
            assert sum(g.duration_ns for g in dev_gaps) <= d.idle_ns
            assert all(d.start_ns <= g.start_ns < g.end_ns <= d.end_ns for g in dev_gaps)
            starts = [g.start_ns for g in dev_gaps]
            assert starts == sorted(starts)
        for g, evidence in zip(a.gaps, gap_evidence(a), strict=True):
            assert g.duration_ns >= options.gap_threshold_ns and g.cause in CAUSES and evidence
        for f in a.findings:
            assert f.rule in {r.id for r in RULES} and f.count > 0 and f.wasted_ns >= 0 and f.message
        json.dumps(to_document(a))


def test_known_findings_on_real_traces():
    # B200 MoE inference: 74 kernels overlap their predecessor on one stream (PDL), ~70 µs in all
    b200 = {f.rule: f for f in analyze(_load("tracelens/b200__eager_trace.json.gz")).findings}
    assert b200["pdl"].count == 74 and 50_000 < b200["pdl"].data["overlap_ns"] < 100_000
    # the AMD trace's same-stream overlaps are not PDL
    vllm = analyze(_load("tracelens/inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"))
    assert "pdl" not in {f.rule for f in vllm.findings}
    # HTA's .item() micro-benchmark: the gap after the pageable DtoH copy begins while the copy's call waits;
    # the call returns 9 µs into the 100 µs gap and the host runs Python up to the next launch: launch_latency
    # after the wait (issue 24 item 7: it used to be host_sync)
    a = analyze(_load("hta/critical_path__cuda_event_sync__event_sync_trace.json.gz"))
    item_gap = max(a.gaps, key=lambda g: g.duration_ns)
    ev = gap_evidence(a, [item_gap])[0]
    assert item_gap.cause == "launch_latency" and ev.startswith("cudaMemcpyAsync on thread 948300 returned at 9.0 µs into the gap")
