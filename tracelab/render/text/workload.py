"""The figures a built-in workload exists to show, in words, for `tracelab analyze` of its runs:
fusion (kernels, kernel time and bytes per step, bandwidth), priorities (launch→start delay of the
latency-critical kernel and of each stream) and graphs' multi-stream variants (overlap kept inside the
graph). Runs of other workloads, and plain traces, get nothing."""

from __future__ import annotations

from tracelab.analyses.device.fusion import fusion_figures
from tracelab.analyses.device.queue_delay import graph_overlap, kernel_latency, stream_delays
from tracelab.model import Timeline
from tracelab.text_format import fmt_ns


def workload_lines(timeline: Timeline) -> list[str]:
    """Lines (≤ 100 characters) for a recorded run of fusion, priorities or graphs/multi_stream_*."""
    w, v = timeline.meta.workload, timeline.meta.variant
    out: list[str] = []
    if w == "fusion":
        f = fusion_figures(timeline)
        out.append(
            f"fusion/{v}: {f.kernels_per_step:.1f} kernels a step, kernel time {fmt_ns(f.kernel_ns_per_step)} a step"
        )
        if f.bytes_per_step is not None and f.bandwidth_gb_s is not None:
            out.append(
                f"  {f.bytes_per_step / 1e6:,.0f} MB moved a step (tensor sizes) at {f.bandwidth_gb_s / 1000:.2f} TB/s"
            )
    elif w == "priorities":
        lat = kernel_latency(timeline, "latency_kernel")
        d = lat.delay
        out.append(f"priorities/{v}: the latency-critical kernel's launch→start delay (n={d.count})")
        out.append(f"  median {fmt_ns(d.median_ns)}, p90 {fmt_ns(d.p90_ns)}, max {fmt_ns(d.max_ns)}")
        for s in stream_delays(timeline):
            out.append(
                f"  stream {s.stream}: {s.stats.count} kernels, launch→start median {fmt_ns(s.stats.median_ns)},"
                f" max {fmt_ns(s.stats.max_ns)}"
            )
    elif w == "graphs" and v.startswith("multi_stream"):
        g = graph_overlap(timeline)
        if g.kernels:
            share = g.concurrent_ns / g.union_ns if g.union_ns else 0.0
            out.append(
                f"graphs/{v}: {g.kernels} graph kernels on {g.streams} streams, ≥ 2 at once "
                f"{fmt_ns(g.concurrent_ns)} of {fmt_ns(g.union_ns)} ({100 * share:.0f}%)"
            )
    return [line if len(line) <= 100 else line[:99] + "…" for line in out]
