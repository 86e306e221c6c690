"""The `ranks` and `collectives` parts of the `analyze --json` document (schema 2), from the cross-rank
view (`view.rank_analysis`)."""

from __future__ import annotations

from typing import Any

from tracelab.analyses.ranks.view import RankAnalysis


def rank_document_of(ra: RankAnalysis) -> dict[str, Any]:
    """`ranks` and `collectives` for the `analyze --json` document (schema 2)."""
    return {
        "ranks": [
            {
                "rank": r.rank,
                "devices": r.devices,
                "span_ns": r.span_ns,
                "busy_ns": r.busy_ns,
                "idle_ns": r.idle_ns,
                "idle_by_cause_ns": dict(r.idle_by_cause),
                "comm_ns": r.comm_ns,
                "compute_comm_overlap_ns": r.compute_comm_overlap_ns,
                "collectives": r.collectives,
                "collective_wait_ns": r.collective_wait_ns,
                "times_last": r.times_last,
                "scope": r.scope,
                "whole_collective_wait_ns": r.whole_collective_wait_ns,
            }
            for r in ra.ranks
        ],
        "collectives": [
            {
                "name": c.name,
                "seq": c.seq,
                "count": c.count,
                "start_ns": c.start_ns,
                "skew_ns": c.skew_ns,
                "last_rank": c.last_rank,
                "wait_ns": c.wait_ns,
                "group": c.group,
                "bytes": c.bytes,
                "dtype": c.dtype,
                "group_size": c.group_size,
                "transfer_ns": c.transfer_ns,
                "algbw_gbps": c.algbw_gbps,
                "busbw_gbps": c.busbw_gbps,
                "per_rank": [
                    {"rank": r, "device": d, "start_ns": s0, "wait_ns": w, "transfer_ns": t}
                    for r, d, s0, w, t in c.per_rank
                ],
            }
            for c in ra.collectives.calls
        ],
        "stragglers": [
            {"rank": s.rank, "times_last": s.times_last, "caused_wait_ns": s.caused_wait_ns, **_cause_doc(ra, s.rank),
             # why it is late: its own GPU idle's main cause (issue 29: a rank starved by its loader)
             "idle_cause": (ra.idle_cause(s.rank) or (None, 0))[0],
             "idle_cause_ns": (ra.idle_cause(s.rank) or (None, 0))[1]}
            for s in ra.collectives.stragglers
        ],
        "comm_by_step": [
            {
                "rank": x.rank,
                "step": x.step,
                "comm_ns": x.comm_ns,
                "exposed_comm_ns": x.exposed_comm_ns,
                "wait_ns": x.wait_ns,
            }
            for x in ra.step_comm
        ],
    }


def _cause_doc(ra: RankAnalysis, rank: int) -> dict[str, Any]:
    """A straggler's own cause (comm_steps.StragglerCause) for its `stragglers` entry; {} when not explained."""
    from tracelab.text_format import fmt_ns

    for c in ra.straggler_causes:
        if c.rank == rank:
            return {
                "late_ns": c.late_ns,
                "steps_late": c.steps_late,
                "steps": c.steps,
                "idle_before_ns": c.idle_before_ns,
                "cause": c.cause,
                "cause_ns": c.cause_ns,
                "idle_ns": c.idle_ns,
                "explanation": c.sentence(fmt_ns),
            }
    return {}
