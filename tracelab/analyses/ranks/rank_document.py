"""The `ranks` and `collectives` parts of the `analyze --json` document (schema 2), from the cross-rank
view (`view.rank_analysis`)."""

from __future__ import annotations

from typing import Any

import msgspec

from tracelab.analyses.ranks.view import RankAnalysis

_COLLECTIVE_KEYS = ("name", "seq", "count", "start_ns", "skew_ns", "last_rank", "wait_ns", "group", "bytes", "dtype",
                    "group_size", "transfer_ns", "algbw_gbps", "busbw_gbps")


def rank_document_of(ra: RankAnalysis) -> dict[str, Any]:
    """`ranks` and `collectives` for the `analyze --json` document (schema 2)."""
    return {
        # a RankSummary's fields, in order (its idle by cause as a mapping)
        "ranks": [{k if k != "idle_by_cause" else "idle_by_cause_ns": v if k != "idle_by_cause" else dict(v)
                   for k, v in msgspec.structs.asdict(r).items()} for r in ra.ranks],
        "collectives": [{**{k: getattr(c, k) for k in _COLLECTIVE_KEYS},
                         "per_rank": [{"rank": r, "device": d, "start_ns": s0, "wait_ns": w, "transfer_ns": t}
                                      for r, d, s0, w, t in c.per_rank]}
                        for c in ra.collectives.calls],
        "stragglers": [
            {"rank": s.rank, "times_last": s.times_last, "caused_wait_ns": s.caused_wait_ns, **_cause_doc(ra, s.rank),
             # why it is late: its own GPU idle's main cause (issue 29: a rank starved by its loader)
             "idle_cause": (ra.idle_cause(s.rank) or (None, 0))[0],
             "idle_cause_ns": (ra.idle_cause(s.rank) or (None, 0))[1]}
            for s in ra.collectives.stragglers
        ],
        "comm_by_step": [{"rank": x.rank, "step": x.step, "comm_ns": x.comm_ns, "exposed_comm_ns": x.exposed_comm_ns,
                          "wait_ns": x.wait_ns} for x in ra.step_comm],
    }


def _cause_doc(ra: RankAnalysis, rank: int) -> dict[str, Any]:
    """A straggler's own cause (comm_steps.StragglerCause) for its `stragglers` entry; {} when not explained."""
    from tracelab.text_format import fmt_ns

    for c in ra.straggler_causes:
        if c.rank == rank:
            keys = ("late_ns", "steps_late", "steps", "idle_before_ns", "cause", "cause_ns", "idle_ns")
            return {**{k: getattr(c, k) for k in keys}, "explanation": c.sentence(fmt_ns)}
    return {}
