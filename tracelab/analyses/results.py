"""Typed, frozen analysis results. `to_document` turns an `Analysis` into the `analyze --json`
document (schema 2, DESIGN.md); everything renders from these types, never from raw events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .step_table import StepRow

SCHEMA_VERSION = 2

GapCause = Literal["host_sync", "launch_latency", "dependency_wait", "no_work", "unknown"]
Severity = Literal["info", "warning", "critical"]
SmSource = Literal["measured", "estimated", "none"]

StepSource = Literal["marked", "inferred"]


@dataclass(frozen=True)
class AnalysisOptions:
    gap_threshold_ns: int = 10_000
    # Drop GPU events whose correlation matches no host launch before analysing (TraceLens does).
    exclude_orphans: bool = False


@dataclass(frozen=True)
class Overlap:
    compute_compute_ns: int = 0
    compute_copy_ns: int = 0
    compute_comm_ns: int = 0
    copy_copy_ns: int = 0


@dataclass(frozen=True)
class StreamSummary:
    stream: int
    context: int | None
    green_context: int | None
    busy_ns: int
    kernels: int
    memcpys: int
    memsets: int = 0


@dataclass(frozen=True)
class SmPartition:
    green_context: int | None  # None = the part of the device outside every green context
    sm_count: int
    busy_fraction: float


@dataclass(frozen=True)
class SmSummary:
    source: SmSource = "none"
    busy_fraction: float = 0.0
    partitions: tuple[SmPartition, ...] = ()


@dataclass(frozen=True)
class DeviceSummary:
    rank: int
    device: int
    name: str
    sm_count: int
    start_ns: int
    end_ns: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    kernel_ns: int  # union of kernel intervals (comm kernels included)
    memcpy_ns: int  # union of memcpy intervals
    memset_ns: int  # union of memset intervals
    comm_ns: int  # union of communication-kernel intervals
    overlap: Overlap
    streams: tuple[StreamSummary, ...]
    sm: SmSummary = SmSummary()
    kernels: int = 0
    memcpys: int = 0
    memsets: int = 0


@dataclass(frozen=True)
class Gap:
    rank: int
    device: int
    start_ns: int
    end_ns: int
    duration_ns: int
    cause: GapCause
    evidence: str
    host_data: str = ""  # which host data the rank's trace had: "cpu_ops", "cuda_api", "none"
    launch_start_ns: int = -1  # start of the next op's launch call (-1: not in the trace)
    launch_tid: int = -1  # thread of that call
    host_active: float = 0.0  # share of [gap start, next launch) the launching thread's recorded activity covers


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    count: int
    wasted_ns: int
    message: str = ""  # prose, filled by tracelab.render.findings (api.analyze does it)
    where: str = ""  # prose, filled with the message
    # structured details, documented per rule (DESIGN.md "Findings"): numbers, places, windows
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepInfo:
    """One training step of a rank (tracelab.analyses.steps.Step, as the analysis reports it)."""

    rank: int
    index: int
    start_ns: int
    end_ns: int
    source: StepSource


@dataclass(frozen=True)
class TraceInfo:
    source: str
    format: str
    ranks: tuple[int, ...]
    # the run start: first event of any kind (the one time origin of every rendered offset); None unknown
    start_ns: int | None = None


@dataclass(frozen=True)
class Analysis:
    trace: TraceInfo
    devices: tuple[DeviceSummary, ...]
    gaps: tuple[Gap, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    options: AnalysisOptions = AnalysisOptions()
    steps: tuple[StepInfo, ...] = ()
    step_rows: tuple[StepRow, ...] = ()  # the per-step table (tracelab.analyses.step_table)


def gap_doc(g: Gap) -> dict[str, Any]:
    """One gap as the document lists it."""
    launched = g.launch_start_ns >= 0
    return {
        "rank": g.rank,
        "device": g.device,
        "start_ns": g.start_ns,
        "end_ns": g.end_ns,
        "duration_ns": g.duration_ns,
        "cause": g.cause,
        "evidence": g.evidence,
        "host_data": g.host_data,
        "details": {
            "launch_start_ns": g.launch_start_ns if launched else None,
            "launch_tid": g.launch_tid if launched else None,
            "host_active_fraction": g.host_active,
        },
    }


def to_document(analysis: Analysis, gaps: bool = True) -> dict[str, Any]:
    """The `analyze --json` document, schema 2 (DESIGN.md): schema 1 plus `steps`, `notes`,
    `findings[].data` and each gap's `host_data` and `details`. `gaps=False`: the gaps list left empty
    (write_document streams it)."""

    def device_doc(d: DeviceSummary) -> dict[str, Any]:
        return {
            "rank": d.rank,
            "device": d.device,
            "name": d.name,
            "sm_count": d.sm_count,
            "span_ns": d.span_ns,
            "busy_ns": d.busy_ns,
            "idle_ns": d.idle_ns,
            "kernel_ns": d.kernel_ns,
            "memcpy_ns": d.memcpy_ns,
            "memset_ns": d.memset_ns,
            "comm_ns": d.comm_ns,
            "overlap": asdict(d.overlap),
            "streams": [
                {
                    "stream": s.stream,
                    "context": s.context,
                    "green_context": s.green_context,
                    "busy_ns": s.busy_ns,
                    "kernels": s.kernels,
                    "memcpys": s.memcpys,
                }
                for s in d.streams
            ],
            "sm": {
                "source": d.sm.source,
                "busy_fraction": d.sm.busy_fraction,
                "partitions": [asdict(p) for p in d.sm.partitions],
            },
        }

    rows = {(r.rank, r.index): r for r in analysis.step_rows}

    def step_doc(s: StepInfo) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "rank": s.rank, "index": s.index, "start_ns": s.start_ns, "end_ns": s.end_ns, "source": s.source
        }
        r = rows.get((s.rank, s.index))
        if r is not None:
            doc.update(
                duration_ns=r.duration_ns,
                gpu_busy_ns=r.gpu_busy_ns,
                gpu_idle_ns=r.gpu_idle_ns,
                idle_by_cause=dict(r.idle_by_cause),
                blocking_syncs=r.blocking_syncs,
                kernels=r.kernels,
                warmup=r.warmup,
                outlier=r.outlier,
            )
        return doc

    return {
        "schema": SCHEMA_VERSION,
        "trace": {
            "source": analysis.trace.source,
            "format": analysis.trace.format,
            "ranks": list(analysis.trace.ranks),
        },
        "devices": [device_doc(d) for d in analysis.devices],
        "steps": [step_doc(s) for s in analysis.steps],
        "gaps": [gap_doc(g) for g in analysis.gaps] if gaps else [],
        "findings": [
            {
                "rule": f.rule,
                "severity": f.severity,
                "count": f.count,
                "wasted_ns": f.wasted_ns,
                "message": f.message,
                "where": f.where,
                "data": f.data,
            }
            for f in analysis.findings
        ],
        "notes": list(analysis.notes),
    }


_GAPS_EMPTY = b'\n  "gaps": [],\n'


def write_document(
    analysis: Analysis, write: Callable[[bytes], Any], extra: dict[str, Any] | None = None, chunk: int = 4096
) -> None:
    """Write `{**to_document(analysis), **extra}` as indented JSON (orjson, 2 spaces, a final newline)
    through `write`, byte for byte what one `orjson.dumps` of the whole document gives, but with the
    gaps encoded `chunk` at a time: no dict per gap for the whole list at once, no copy of the whole
    text in memory."""
    import orjson

    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    head = orjson.dumps({**to_document(analysis, gaps=False), **(extra or {})}, option=options)
    gaps = analysis.gaps
    if not gaps:
        write(head + b"\n")
        return
    cut = head.index(_GAPS_EMPTY)  # the key is top-level: its line is unique (strings hold no newline)
    write(head[:cut] + b'\n  "gaps": [')
    for i in range(0, len(gaps), chunk):
        body = orjson.dumps([gap_doc(g) for g in gaps[i : i + chunk]], option=options)
        # '[\n  {...},\n  {...}\n]' -> the items one level deeper: '\n    {...},\n    {...}'
        write((b"," if i else b"") + body[1:-2].replace(b"\n", b"\n  "))
    write(b"\n  ],\n" + head[cut + len(_GAPS_EMPTY) :] + b"\n")
