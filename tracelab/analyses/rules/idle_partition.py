"""idle_partition: a green-context SM partition busy less than half of the device's span (warning), or
less than three quarters of it (info) (per-SM analysis, tracelab.analyses.sm.summary)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tracelab.analyses.results import Finding
from tracelab.analyses.rules.base import FindingContext, Prose, Rule, Window, join_places
from tracelab.analyses.sm.lanes import IDLE_PARTITION_INFO, IDLE_PARTITION_THRESHOLD, idle_partition_findings
from tracelab.text_format import fmt_ns

_ORDER = {"critical": 0, "warning": 1, "info": 2}


class Partition(Window):
    """One mostly idle partition (`sm_time.idle_partition_findings`; its window is the device's span)."""

    green_context: int
    sm_count: int
    device_sm_count: int
    busy_fraction: float
    idle_sm_ns: int
    span_ns: int
    source: str  # where the SM use comes from (sm_time's source)
    excluded_wait_ns: int  # the leading wait for other ranks left out of the span (sm_excluded_wait), 0 when none


class IdlePartitionData(Window):
    partitions: list[Partition]
    worst: Partition  # the most severe, then most wasted


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    per_partition = idle_partition_findings(ctx.timeline)
    if not per_partition:
        return None
    worst = min(per_partition, key=lambda f: (_ORDER[f.severity], -f.wasted_ns))
    parts = [cast(Partition, f.data) for f in per_partition]
    w = cast(Partition, worst.data)
    data: IdlePartitionData = {"partitions": parts, "start_ns": w["start_ns"], "end_ns": w["end_ns"], "worst": w}
    return Finding(rule=RULE.id, severity=worst.severity, count=len(per_partition),
                   wasted_ns=sum(f.wasted_ns for f in per_partition), data=dict(data))


def describe(f: Finding) -> Prose:
    parts = cast(IdlePartitionData, f.data)["partitions"]
    texts = []
    for p in parts:
        span = max(p["span_ns"], 1)
        dev_sms = max(p["device_sm_count"], 1)
        texts.append(
            f"green-context partition {p['green_context']} ({p['sm_count']} of {p['device_sm_count']} SMs) is busy "
            f"{p['busy_fraction']:.0%} of the {fmt_ns(span)} span ({p['source']}): "
            f"{p['idle_sm_ns'] / 1e6:,.1f} SM-ms idle, {p['idle_sm_ns'] / (dev_sms * span):.0%} of the device's "
            "SM-time"
        )
    msg = "; ".join(texts) + ". Give it fewer SMs or more work."
    where = join_places([f"green context {p['green_context']}" for p in parts])
    return msg, where


RULE = Rule(
    id="idle_partition", title="a green-context SM partition is mostly idle",
    evaluate=evaluate, describe=describe, data=IdlePartitionData,
    fires_when=(
        "a green-context partition busy < busy_threshold of the span (SM-time), or < info_threshold as info "
        "(green_ctx's 116-SM partition at 70% leaves a quarter of the GPU's SM-time idle while the whole GPU "
        "idles 0.7% of the span)"
    ),
    severity="the worst partition's: critical busy < 10%, warning < busy_threshold, else info",
    counts="partitions / idle SM-time as device time",
    options={"busy_threshold": IDLE_PARTITION_THRESHOLD, "info_threshold": IDLE_PARTITION_INFO},
    source='CUDA Driver API, "Green Contexts" (SM partitions); SM-time as in DESIGN.md "Per-SM lanes"',
)
