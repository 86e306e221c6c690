"""idle_partition: a green-context SM partition busy less than half of the device's span (warning), or
less than three quarters of it (info) (per-SM analysis, tracelab.analyses.sm)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..results import Finding
from ..sm_time import IDLE_PARTITION_INFO, IDLE_PARTITION_THRESHOLD, idle_partition_findings
from .base import FindingContext, Rule

_ORDER = {"critical": 0, "warning": 1, "info": 2}


def evaluate(ctx: FindingContext, opt: Mapping[str, Any]) -> Finding | None:
    per_partition = idle_partition_findings(ctx.timeline)
    if not per_partition:
        return None
    worst = min(per_partition, key=lambda f: (_ORDER[f.severity], -f.wasted_ns))
    parts = [f.data for f in per_partition]
    return Finding(
        rule=RULE.id,
        severity=worst.severity,
        count=len(per_partition),
        wasted_ns=sum(f.wasted_ns for f in per_partition),
        data={
            "partitions": parts,
            **{k: v for k, v in worst.data.items() if k in ("start_ns", "end_ns")},
            "worst": worst.data,
        },
    )


RULE = Rule(
    id="idle_partition",
    title="a green-context SM partition is mostly idle",
    evaluate=evaluate,
    options={"busy_threshold": IDLE_PARTITION_THRESHOLD, "info_threshold": IDLE_PARTITION_INFO},
    source='CUDA Driver API, "Green Contexts" (SM partitions); SM-time as in DESIGN.md "Per-SM lanes"',
)
