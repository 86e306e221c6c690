"""The issue-27 sections of the reports (trace health, GPU time by range, GPU memory), computed from the
timeline by the analyses: the same figures as `analyze --json`'s `health`, `ranges` and `memory`."""

from __future__ import annotations

from typing import Any

import msgspec

from tracelab.analyses.device.gpu_memory import MemoryTimeline, memory_timeline
from tracelab.analyses.device.range_projection import RangeProjection, project_ranges
from tracelab.analyses.health import Health, trace_health
from tracelab.analyses.results import Analysis
from tracelab.model.timeline import Timeline

TOP_RANGES = 15


def projection(timeline: Timeline, analysis: Analysis) -> RangeProjection:
    ref = sum(s.end_ns - s.start_ns for s in analysis.steps)
    return project_ranges(timeline, ref, "steps" if ref else "gpu span")


def extras(timeline: Timeline, analysis: Analysis) -> tuple[Health, RangeProjection, MemoryTimeline | None]:
    return trace_health(timeline, analysis), projection(timeline, analysis), memory_timeline(timeline, analysis)


def ranges_doc(p: RangeProjection) -> dict[str, Any]:
    return {"reference": p.reference, "reference_ns": p.reference_ns, "nested_subtracted": False, "instances": p.n,
            "unlaunched_gpu_ops": p.unlaunched_ops, "names": len(p.stats), "ranges": [msgspec.structs.asdict(s) for s in p.stats]}

