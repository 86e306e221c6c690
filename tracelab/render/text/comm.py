"""Words for `tracelab.analyses.ranks.comm_partition`: the compute/comm explanation."""

from __future__ import annotations

from tracelab.analyses.ranks.comm_partition import CommOverlapExplanation
from tracelab.text_format import fmt_ns


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _times(x: float) -> str:
    return f"{x:.2f}×"


def explain_comm_overlap(e: CommOverlapExplanation) -> str:
    """One paragraph: is the variant faster, does the partition pay for itself, who sets the pace."""
    head = {
        "slowdown": f"{e.variant} is {_times(e.ratio)} slower than {e.baseline}",
        "speedup": f"{e.variant} is {_times(1 / e.ratio)} faster than {e.baseline}",
        "same": f"{e.variant} takes as long as {e.baseline} ({_times(e.ratio)})",
    }[e.verdict]
    parts = [
        f"{head} ({fmt_ns(e.variant_span_ns)} vs {fmt_ns(e.baseline_span_ns)} on the slowest rank).",
        f"Communication overlapped with compute: {_pct(e.variant_overlap)} vs {_pct(e.baseline_overlap)}.",
        (
            f"Compute kernels take {_times(e.compute_ratio)} and communication kernels"
            f" {_times(e.comm_ratio)} their time in {e.baseline}."
        ),
    ]
    if e.partitioned:
        pays = "pays for itself" if e.verdict == "speedup" else "does not pay for itself"
        parts.append(
            f"The split ({e.variant_compute_partition_sms} SMs compute / {e.variant_comm_partition_sms} SMs"
            f" communication) {pays}: NCCL occupies {e.variant_comm_sms} SMs"
            f" (vs {e.baseline_comm_sms} in {e.baseline})."
        )
    if e.pace != "shared":
        parts.append(
            f"The {e.pace} side sets the pace: its kernels cover {_pct(e.pace_busy_fraction)} of the span,"
            f" the other side {_pct(e.other_busy_fraction)}."
        )
    if e.variant_skew_ns or e.baseline_skew_ns:
        parts.append(
            f"Collectives start {fmt_ns(e.variant_skew_ns)} apart across ranks on average"
            f" ({fmt_ns(e.baseline_skew_ns)} in {e.baseline})."
        )
    return " ".join(parts)

