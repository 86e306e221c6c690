"""Issue 14's figures (queue delay per stream and per kernel name, overlap inside CUDA graphs, fusion
figures) on a hand-made program written as Kineto JSON and as nsys SQLite; numbers worked out here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from trace_builder import Program

from tracelab.analyses.device.fusion import fusion_figures
from tracelab.analyses.device.queue_delay import graph_overlap, kernel_latency, stream_delays
from tracelab.io import load_trace

US = 1000


def _program() -> Program:
    p = Program()
    p.step(0, 500)
    # eager kernels: queue delay = start - launch call start
    p.kernel(100, 50, launch=(10, 5), stream=7, name="long_kernel")  # 90 µs
    p.kernel(200, 10, launch=(20, 5), stream=7, name="latency_kernel")  # 180 µs
    p.kernel(50, 10, launch=(40, 5), stream=13, name="latency_kernel")  # 10 µs
    # two kernels of one graph replay on two streams, overlapping 50 µs
    p.kernel(300, 100, launch=(290, 5, "cudaGraphLaunch"), stream=7, name="node_a")
    p.kernel(350, 100, launch=(291, 5, "cudaGraphLaunch"), stream=21, name="node_b")
    return p


@pytest.fixture(params=["kineto", "nsys"])
def timeline(request, tmp_path):
    p = _program()
    path = p.kineto(tmp_path / "t.json") if request.param == "kineto" else p.nsys(tmp_path / "t.sqlite")
    return load_trace(path)


def test_queue_delay_per_stream_and_per_kernel(timeline) -> None:
    by_stream = {s.stream: s.stats for s in stream_delays(timeline)}
    # graph kernels share a launch: left out of the per-stream figures
    assert set(by_stream) == {7, 13}
    assert by_stream[7].count == 2 and by_stream[7].median_ns == 135 * US and by_stream[7].max_ns == 180 * US
    assert by_stream[13].count == 1 and by_stream[13].median_ns == 10 * US
    lat = kernel_latency(timeline, "latency_kernel")
    assert lat.delay.count == 2 and (lat.delay.median_ns, lat.delay.max_ns) == (95 * US, 180 * US)
    assert lat.duration.median_ns == 10 * US


def test_graph_overlap(timeline) -> None:
    g = graph_overlap(timeline)
    assert (g.kernels, g.streams) == (2, 2)
    assert (g.sum_ns, g.union_ns, g.concurrent_ns) == (200 * US, 150 * US, 50 * US)
    assert g.overlap_fraction == pytest.approx(0.25)


def test_fusion_figures_with_the_facts_bytes(timeline) -> None:
    assert fusion_figures(timeline).bytes_per_step is None  # no facts: unknown
    extra = {**(timeline.meta.extra or {}), "run": {"facts": {"bytes_per_step": 1_000_000}}}
    f = fusion_figures(timeline.with_meta(extra=extra))
    # one step range; 5 kernels, 50 + 10 + 10 + 100 + 100 = 270 µs
    assert (f.steps, f.kernels, f.kernel_ns_per_step) == (1, 5, 270 * US)
    assert f.bandwidth_gb_s == pytest.approx(1e6 / 270e3)
